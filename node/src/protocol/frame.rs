//! Framing of the client protocol: a 4-byte big-endian length, then that many
//! bytes of CBOR. A pure parser over a byte buffer (no IO), so malformed input
//! can be tested byte by byte.
//!
//! Two caps apply to what a node reads: [`HELLO_MAX_FRAME`] until the hello
//! is accepted (a stranger's frame), [`DEFAULT_MAX_FRAME`] after it. The
//! announced length is checked against the cap as soon as its four bytes
//! are in, before any of the frame is buffered.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest frame accepted or sent by default: 64 MiB, enough for a
/// module and its inputs in one submit.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// The largest frame a node reads before it has accepted the client's
/// hello: 4 KiB. A hello is tens of bytes plus the token and the client's
/// name, so this is ample, and a stranger cannot make the node buffer more.
pub const HELLO_MAX_FRAME: usize = 4 * 1024;

/// The length of the frame at the front of `buf` (its four length bytes
/// included), once those four bytes are in; not checked against any cap.
pub fn announced(buf: &[u8]) -> Option<usize> {
    let head = buf.get(..4)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    Some(len.saturating_add(4))
}

/// Why a frame could not be parsed or built.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The announced length is over the cap; the connection cannot resync.
    #[error("frame of {len} bytes exceeds the cap of {max} bytes")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// A whole frame arrived, but its bytes are not CBOR of the expected
    /// shape. The frame is skipped (`used` bytes), so the connection can
    /// go on with the next one.
    #[error("malformed frame: {reason}")]
    Malformed {
        /// The frame's bytes, its length prefix included.
        used: usize,
        /// What is wrong with it, in words.
        reason: String,
    },
    /// A value could not be encoded.
    #[error("cannot encode a frame: {0}")]
    Encode(String),
}

/// What is wrong with a frame's CBOR, in words (ciborium's errors print
/// as Rust debug output, `Semantic(None, "...")`).
fn describe(e: &ciborium::de::Error<std::io::Error>) -> String {
    use ciborium::de::Error;
    match e {
        Error::Io(_) => "its CBOR ends before the value does".to_string(),
        Error::Syntax(at) => format!("it is not valid CBOR (at byte {at})"),
        Error::Semantic(Some(at), what) => format!("{what} (at byte {at})"),
        Error::Semantic(None, what) => what.clone(),
        Error::RecursionLimitExceeded => "its values are nested too deeply".to_string(),
    }
}

/// Tries to take one frame off the front of `buf`. Returns `Ok(None)` when
/// more bytes are needed, and the decoded value with the number of bytes it
/// used otherwise.
pub fn parse<T: DeserializeOwned>(
    buf: &[u8],
    max: usize,
) -> Result<Option<(T, usize)>, FrameError> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    let used = 4 + len;
    zorilla_overlay::cbor::check_lengths(body).map_err(|e| FrameError::Malformed {
        used,
        reason: e.to_string(),
    })?;
    let value = ciborium::from_reader(body).map_err(|e| FrameError::Malformed {
        used,
        reason: describe(&e),
    })?;
    Ok(Some((value, used)))
}

/// Encodes `value` as one frame.
pub fn encode<T: Serialize>(value: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    ciborium::into_writer(value, &mut out).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = out.len() - 4;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Request, Response};

    #[test]
    fn round_trip_and_partial_input() {
        let frame = encode(&Request::List, 1024).unwrap();
        for cut in 0..frame.len() {
            assert!(parse::<Request>(&frame[..cut], 1024).unwrap().is_none());
        }
        let (req, used) = parse::<Request>(&frame, 1024).unwrap().unwrap();
        assert_eq!(req, Request::List);
        assert_eq!(used, frame.len());
    }

    /// The example bytes in docs/protocol.md.
    #[test]
    fn the_documented_bytes_are_what_we_send() {
        let hello = crate::protocol::Hello {
            version: 2,
            client: "python".into(),
            token: None,
        };
        let mut expected = vec![0, 0, 0, 0x1f, 0xa3, 0x67];
        expected.extend_from_slice(b"version");
        expected.extend_from_slice(&[0x02, 0x66]);
        expected.extend_from_slice(b"client");
        expected.push(0x66);
        expected.extend_from_slice(b"python");
        expected.push(0x65);
        expected.extend_from_slice(b"token");
        expected.push(0xf6);
        assert_eq!(encode(&hello, 1024).unwrap(), expected);
        assert_eq!(
            encode(&Request::List, 1024).unwrap(),
            [0, 0, 0, 5, 0x64, b'L', b'i', b's', b't']
        );
        // A client that leaves the token out is understood.
        let mut short = vec![0, 0, 0, 0x18, 0xa2, 0x67];
        short.extend_from_slice(b"version");
        short.extend_from_slice(&[0x01, 0x66]);
        short.extend_from_slice(b"client");
        short.push(0x66);
        short.extend_from_slice(b"python");
        let (parsed, _) = parse::<crate::protocol::Hello>(&short, 1024)
            .unwrap()
            .unwrap();
        assert_eq!(parsed.token, None);
    }

    #[test]
    fn oversized_and_malformed_frames_are_errors() {
        let huge = [0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            parse::<Request>(&huge, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let garbage = [0, 0, 0, 3, 0xff, 0x00, 0x13];
        assert!(matches!(
            parse::<Request>(&garbage, 1024),
            Err(FrameError::Malformed { used: 7, .. })
        ));
        // Valid CBOR of the wrong shape.
        let wrong = encode(&Response::Ok, 1024).unwrap();
        assert!(parse::<Request>(&wrong, 1024).is_err());
        assert!(matches!(
            encode(&Request::Cancel { job: 1 }, 2),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
