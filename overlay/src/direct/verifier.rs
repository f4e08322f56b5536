//! Certificate checks of the rank data plane: libp2p's TLS certificates
//! (parsed and their signatures checked by [`libp2p::tls::certificate`]),
//! with the peer id a dialer means to reach, or one of the peers a
//! listener expects; TLS 1.3 with AES-GCM only.
//!
//! libp2p-tls's own configurations list ChaCha20-Poly1305 first (so two
//! of them negotiate it); the data plane wants AES-GCM, which runs at
//! several GB/s per core with AES-NI. Its verifier is not public, so this
//! one does what it does (one self-signed certificate, the libp2p
//! extension, TLS 1.3 signatures by the certificate's key) through the
//! same public functions, and adds the listener's check.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use libp2p::tls::certificate;
use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::cipher_suite::{TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ResolvesServerCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use tokio::time::Instant;

use super::EXPECT_KEPT;

/// rustls with aws-lc-rs, TLS 1.3's AES-GCM suites only.
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384];
    Arc::new(provider)
}

/// The peer id a libp2p TLS certificate proves (its extension's host key
/// signed the certificate's key), if it is one.
pub fn peer_of(cert: &CertificateDer<'_>) -> Result<PeerId, Error> {
    let parsed = certificate::parse(cert).map_err(|e| {
        Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(e))))
    })?;
    Ok(parsed.peer_id())
}

/// This node's certificate, shown to every peer. (rustls's own
/// `with_single_cert` checks a certificate with webpki, which refuses
/// libp2p's critical extension; a resolver takes it as it is.)
#[derive(Debug)]
pub struct OwnCert(Arc<CertifiedKey>);

impl OwnCert {
    /// `cert` with its private `key`.
    pub fn new(cert: CertificateDer<'static>, key: &PrivateKeyDer<'_>) -> Result<Self, Error> {
        let signer = rustls::crypto::aws_lc_rs::sign::any_ecdsa_type(key)?;
        Ok(OwnCert(Arc::new(CertifiedKey::new(vec![cert], signer))))
    }
}

impl ResolvesClientCert for OwnCert {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl ResolvesServerCert for OwnCert {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Who a verifier takes.
#[derive(Debug)]
enum Takes {
    /// The one peer a dialer means to reach.
    Only(PeerId),
    /// The peers a listener expects (offered a connection to, and when),
    /// never itself.
    Expected {
        local: PeerId,
        expected: Arc<Mutex<BTreeMap<PeerId, Instant>>>,
    },
}

/// Checks a peer's certificate: libp2p's, and of a peer it takes.
#[derive(Debug)]
pub struct PeerVerifier(Takes);

impl PeerVerifier {
    /// A dialer's: the server must prove to be `peer`.
    pub fn only(peer: PeerId) -> Self {
        PeerVerifier(Takes::Only(peer))
    }

    /// A listener's: the client must be a peer in `expected` for less
    /// than [`EXPECT_KEPT`], and not `local`.
    pub fn expected(local: PeerId, expected: Arc<Mutex<BTreeMap<PeerId, Instant>>>) -> Self {
        PeerVerifier(Takes::Expected { local, expected })
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<(), Error> {
        if !intermediates.is_empty() {
            return Err(Error::General("more than one certificate".into()));
        }
        let peer = peer_of(end_entity)?;
        let taken = match &self.0 {
            Takes::Only(want) => peer == *want,
            Takes::Expected { local, expected } => {
                peer != *local
                    && expected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&peer)
                        .is_some_and(|at| at.elapsed() < EXPECT_KEPT)
            }
        };
        if taken {
            Ok(())
        } else {
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn tls13(
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        let parsed = certificate::parse(cert).map_err(|e| {
            Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(e))))
        })?;
        parsed
            .verify_signature(dss.scheme, message, dss.signature())
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadSignature))?;
        Ok(HandshakeSignatureValid::assertion())
    }

    /// The schemes libp2p's certificates may sign with.
    fn schemes() -> Vec<SignatureScheme> {
        vec![
            SignatureScheme::ECDSA_NISTP384_SHA384,
            SignatureScheme::ECDSA_NISTP256_SHA256,
            SignatureScheme::ED25519,
            SignatureScheme::RSA_PSS_SHA512,
            SignatureScheme::RSA_PSS_SHA384,
            SignatureScheme::RSA_PSS_SHA256,
        ]
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.check(end_entity, intermediates)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        // Only TLS 1.3 is configured.
        Err(Error::General("TLS 1.2 is not used".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Self::tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        Self::schemes()
    }
}

impl ClientCertVerifier for PeerVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.check(end_entity, intermediates)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Err(Error::General("TLS 1.2 is not used".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        Self::tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        Self::schemes()
    }
}
