//! A check of CBOR from outside before it is decoded: no header may declare
//! more than the rest of the input could hold.
//!
//! serde preallocates a `Vec` for the number of elements a CBOR array
//! declares, up to 1 MiB per vector, before any element is read; so a
//! 10-byte frame declaring an array of 2^32 elements made the decoder
//! allocate a mebibyte (per nesting level) before it found the input short.
//! An array element, a map entry's key or value, and a string's byte each
//! take at least one byte of input, so an input that passes this check
//! makes serde preallocate at most (element size × input length) per
//! vector. ciborium itself grows strings as their bytes arrive.

/// A header declares more items or bytes than the input has left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a CBOR header at byte {at} declares {declared} items or bytes, more than the {left} bytes after it"
)]
pub struct LengthError {
    /// Where the header starts.
    pub at: usize,
    /// What it declares.
    pub declared: u64,
    /// The bytes after it.
    pub left: usize,
}

/// Checks every header of `bytes`, in one pass without recursion: a byte
/// or text string's length, an array's element count and twice a map's
/// entry count must each be at most the bytes that follow the header.
/// Malformed or truncated input passes as far as this check goes (the
/// decoder reports it; a header cut short declares nothing).
pub fn check_lengths(bytes: &[u8]) -> Result<(), LengthError> {
    let mut p = 0;
    while let Some(&first) = bytes.get(p) {
        let (major, info) = (first >> 5, first & 0x1f);
        let arg_len = match info {
            0..=23 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            // Indefinite lengths and "break": no count to check.
            31 => {
                p += 1;
                continue;
            }
            // Reserved: the decoder fails here.
            _ => return Ok(()),
        };
        let Some(arg_bytes) = bytes.get(p + 1..p + 1 + arg_len) else {
            return Ok(());
        };
        let arg = if arg_len == 0 {
            u64::from(info)
        } else {
            arg_bytes
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        let at = p;
        p += 1 + arg_len;
        let left = bytes.len() - p;
        let needed = match major {
            2 | 3 => Some(arg),
            4 => Some(arg),
            5 => Some(arg.saturating_mul(2)),
            _ => None,
        };
        if let Some(needed) = needed {
            if needed > left as u64 {
                return Err(LengthError {
                    at,
                    declared: arg,
                    left,
                });
            }
            if major == 2 || major == 3 {
                // A string's bytes are not headers.
                p += arg as usize;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded<T: serde::Serialize>(value: &T) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).unwrap();
        out
    }

    #[test]
    fn honest_encodings_pass() {
        check_lengths(&encoded(&(vec![1u32, 2, 3], "text", vec![vec![0u8; 5000]]))).unwrap();
        let map: std::collections::BTreeMap<u32, String> =
            (0..100).map(|i| (i, "x".repeat(i as usize))).collect();
        check_lengths(&encoded(&map)).unwrap();
        check_lengths(&encoded(&serde_bytes::ByteBuf::from(vec![7u8; 70_000]))).unwrap();
        check_lengths(&[]).unwrap();
        // Indefinite lengths: [_ 1, 2] and (_ h'00' h'0102').
        check_lengths(&[0x9f, 0x01, 0x02, 0xff]).unwrap();
        check_lengths(&[0x5f, 0x41, 0x00, 0x42, 0x01, 0x02, 0xff]).unwrap();
    }

    #[test]
    fn declared_lengths_beyond_the_input_fail() {
        // An array of 2^32 - 1 elements, a map of 2^64 - 1 entries, a byte
        // string of 2^32 bytes, a text of 10 bytes with 9 left.
        let cases: [&[u8]; 5] = [
            &[0x9a, 0xff, 0xff, 0xff, 0xff, 0x00],
            &[0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0x5b, 0, 0, 0, 1, 0, 0, 0, 0],
            &[0x6a, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', b'i'],
            // Inside an honest array: [1, [<2^20 elements>]].
            &[0x82, 0x01, 0x9a, 0x00, 0x10, 0x00, 0x00],
        ];
        for bytes in cases {
            assert!(check_lengths(bytes).is_err(), "{bytes:02x?}");
        }
        // A map of 2 entries needs 4 items.
        assert!(check_lengths(&[0xa2, 0x01, 0x02, 0x03]).is_err());
        assert!(check_lengths(&[0xa2, 0x01, 0x02, 0x03, 0x04]).is_ok());
    }

    #[test]
    fn a_string_s_bytes_are_not_read_as_headers() {
        // h'9bffffffffffffffff': bytes that would be a huge array header.
        let mut bytes = vec![0x49, 0x9b];
        bytes.extend([0xff; 8]);
        check_lengths(&bytes).unwrap();
    }
}
