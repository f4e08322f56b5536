//! Who the rank data plane lets through: the peer a dialer names and
//! nobody else; at a listener, only peers it expects, refused in the
//! handshake otherwise (nothing handed on); a peer cut off loses its
//! connections at once.

use std::net::{Ipv4Addr, SocketAddr};

use futures::{AsyncReadExt, AsyncWriteExt};

use super::*;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn plane() -> (Keypair, Arc<DirectPlane>) {
    let key = Keypair::generate_ed25519();
    let plane = DirectPlane::start(&key, LOOPBACK, "direct-test")
        .await
        .unwrap();
    (key, plane)
}

fn addr(plane: &DirectPlane) -> SocketAddr {
    SocketAddr::new(LOOPBACK, plane.offer().port)
}

/// Two planes, `b` expecting `a`, and `a`'s connection to `b` at both
/// ends (dialed, accepted), with `b`'s queue of inbound connections.
struct Connected {
    a: Arc<DirectPlane>,
    b: Arc<DirectPlane>,
    a_id: PeerId,
    b_id: PeerId,
    dialed: DirectStream,
    accepted: DirectStream,
    inbound: mpsc::Receiver<DirectStream>,
}

async fn connected() -> Connected {
    let (a_key, a) = plane().await;
    let (b_key, b) = plane().await;
    let (a_id, b_id) = (a_key.public().to_peer_id(), b_key.public().to_peer_id());
    let mut inbound = b.accept(4);
    b.expect(a_id);
    let dialed = a.dial(b_id, addr(&b)).await.unwrap();
    let accepted = inbound.recv().await.unwrap();
    Connected {
        a,
        b,
        a_id,
        b_id,
        dialed,
        accepted,
        inbound,
    }
}

#[tokio::test]
async fn an_expected_peer_connects_with_aes_gcm_and_both_ends_know_each_other() {
    let Connected {
        a,
        b,
        a_id,
        b_id,
        mut dialed,
        mut accepted,
        ..
    } = connected().await;
    assert_eq!((dialed.peer, accepted.peer), (b_id, a_id));
    dialed.stream.write_all(b"ping").await.unwrap();
    dialed.stream.flush().await.unwrap();
    let mut got = [0; 4];
    accepted.stream.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    let suite = dialed
        .stream
        .get_ref()
        .get_ref()
        .1
        .negotiated_cipher_suite()
        .unwrap();
    assert!(
        matches!(
            suite.suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
                | rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
        ),
        "{suite:?}"
    );
    assert_eq!(b.stats().accepted, 1);
    assert_eq!(a.stats().dialed, 1);
}

#[tokio::test]
async fn a_dialer_refuses_a_listener_that_is_not_the_peer_it_names() {
    let (a_key, a) = plane().await;
    let (_, b) = plane().await;
    let mut inbound = b.accept(4);
    b.expect(a_key.public().to_peer_id());
    let someone_else = Keypair::generate_ed25519().public().to_peer_id();
    let err = a.dial(someone_else, addr(&b)).await.unwrap_err();
    assert!(matches!(err, DirectError::Handshake(_)), "{err:?}");
    assert_eq!(a.stats().dial_failed, 1);
    assert!(inbound.try_recv().is_err(), "nothing handed on");
}

/// A stranger (a valid libp2p identity this node never offered a
/// connection to) fails in the TLS handshake: the listener's certificate
/// check refuses it, and nothing reaches the node; an expected peer that
/// comes after it is the first connection handed on.
#[tokio::test]
async fn a_listener_refuses_a_peer_it_does_not_expect_in_the_handshake() {
    let (_, stranger) = plane().await;
    let (c_key, c) = plane().await;
    let (b_key, b) = plane().await;
    let b_id = b_key.public().to_peer_id();
    let mut inbound = b.accept(4);
    let err = stranger.dial(b_id, addr(&b)).await.unwrap_err();
    assert!(matches!(err, DirectError::Handshake(_)), "{err:?}");
    // b's own identity is not let in either.
    let b_twin = DirectPlane::start(&b_key, LOOPBACK, "direct-test")
        .await
        .unwrap();
    b.expect(b_id);
    assert!(b_twin.dial(b_id, addr(&b)).await.is_err());
    b.expect(c_key.public().to_peer_id());
    c.dial(b_id, addr(&b)).await.unwrap();
    let first = inbound.recv().await.unwrap();
    assert_eq!(first.peer, c_key.public().to_peer_id());
    assert_eq!(b.stats().accepted, 1);
}

#[tokio::test]
async fn a_closed_plane_refuses_dials() {
    let (a_key, a) = plane().await;
    let (b_key, b) = plane().await;
    b.expect(a_key.public().to_peer_id());
    b.close();
    let err = a
        .dial(b_key.public().to_peer_id(), addr(&b))
        .await
        .unwrap_err();
    assert!(matches!(err, DirectError::Connect(_)), "{err:?}");
}

/// A peer cut off (its membership revoked) loses the connection it has at
/// once, on both ends, even with a read waiting, and cannot connect again
/// however the node expects it.
#[tokio::test]
async fn a_peer_cut_off_loses_its_connection_at_once_and_cannot_come_back() {
    let Connected {
        a,
        b,
        a_id,
        b_id,
        mut dialed,
        mut accepted,
        mut inbound,
    } = connected().await;
    // b reads while a is cut off.
    let reading = tokio::spawn(async move {
        let mut buf = [0; 4];
        accepted.stream.read(&mut buf).await
    });
    b.cut(&a_id);
    let read = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the waiting read ended")
        .unwrap();
    let err = read.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionAborted, "{err}");
    // The other end sees its connection end (b's end dropped with the task).
    let mut buf = [0; 4];
    let end = tokio::time::timeout(Duration::from_secs(10), dialed.stream.read(&mut buf))
        .await
        .expect("a's read ended");
    assert!(matches!(end, Ok(0) | Err(_)), "{end:?}");
    // Expected again (as the node does after a connection breaks): refused.
    b.expect(a_id);
    let err = a.dial(b_id, addr(&b)).await.unwrap_err();
    assert!(matches!(err, DirectError::Handshake(_)), "{err:?}");
    assert!(inbound.try_recv().is_err(), "nothing handed on");
}

/// A lane is authenticated as a connection is, and says it is one; a
/// peer not expected gets no lane either.
#[tokio::test]
async fn a_lane_is_dialed_and_authenticated_as_a_connection_is() {
    let Connected {
        a,
        b,
        b_id,
        dialed,
        accepted,
        mut inbound,
        ..
    } = connected().await;
    assert_eq!((dialed.role, accepted.role), (Role::Primary, Role::Primary));
    let lane = a.dial_lane(b_id, addr(&b)).await.unwrap();
    let taken = inbound.recv().await.unwrap();
    assert_eq!((lane.role, taken.role), (Role::Lane, Role::Lane));
    assert_eq!(taken.peer, a.local);
    // A stranger's lane is refused in the handshake.
    let (_, c) = plane().await;
    assert!(c.dial_lane(b_id, addr(&b)).await.is_err());
    // The lanes a node opens are bounded.
    b.set_lanes(200);
    assert_eq!(b.lanes(), MAX_LANES);
}
