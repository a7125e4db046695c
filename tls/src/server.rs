//! The server side: a rustls configuration whose certificate and client CA
//! bundle follow their files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::DistinguishedName;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::reload::{self, Slot};
use crate::{ALPN_H2, TlsError, material};

/// Where a server's TLS material is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key of the leaf.
    pub key: PathBuf,
    /// PEM bundle of the CAs whose client certificates are accepted. When
    /// set, every client must present a certificate that chains to one of
    /// them (mTLS); when unset, clients are not asked for one.
    pub client_ca: Option<PathBuf>,
}

struct ServerMaterial {
    key: Arc<CertifiedKey>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
}

/// A server TLS configuration kept current with its files. Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    mutual: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mutual", &self.mutual)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads `files` now (an error names the file and what is wrong with it)
    /// and re-reads them every `reload_interval` on the current tokio
    /// runtime for as long as the configuration is in use.
    pub fn load(files: &ServerTlsFiles, reload_interval: Duration) -> Result<Self, TlsError> {
        let mut paths = vec![files.cert.clone(), files.key.clone()];
        paths.extend(files.client_ca.clone());
        let slot = reload::load("server certificate", paths, build, reload_interval)?;
        let mutual = files.client_ca.is_some();
        let builder = rustls::ServerConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Refused {
                what: "the TLS protocol versions".into(),
                reason: e.to_string(),
            })?;
        let builder = if mutual {
            builder.with_client_cert_verifier(Arc::new(CurrentClients(slot.clone())))
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_cert_resolver(Arc::new(CurrentKey(slot)));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        // No resumption: a resumed session would carry the identity and
        // the CA verdict of the certificate it first saw, past a rotation
        // or a CA's removal. gRPC connections are long-lived; a full
        // handshake per connection costs little.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        Ok(Self {
            config: Arc::new(config),
            mutual,
        })
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// An acceptor for new connections (each handshake uses the material
    /// current at that moment).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }
}

fn build(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<ServerMaterial, TlsError> {
    let (Some(cert), Some(key)) = (paths.first().zip(contents.first()), paths.get(1).zip(contents.get(1))) else {
        return Err(TlsError::Refused {
            what: "the server TLS files".into(),
            reason: "a certificate and a key are required".into(),
        });
    };
    let key = material::certified_key(cert.0, cert.1, key.0, key.1)?;
    let clients = match paths.get(2).zip(contents.get(2)) {
        Some((path, bytes)) => {
            let roots = material::roots(path, bytes)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, crate::provider())
                .build()
                .map_err(|e| TlsError::Refused {
                    what: format!("the client CA bundle {}", path.display()),
                    reason: e.to_string(),
                })?;
            Some(verifier)
        }
        None => None,
    };
    Ok(ServerMaterial { key, clients })
}

/// Serves the current certificate.
#[derive(Debug)]
struct CurrentKey(Arc<Slot<ServerMaterial>>);

impl ResolvesServerCert for CurrentKey {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get().key.clone())
    }
}

/// Verifies client certificates against the current CA bundle.
#[derive(Debug)]
struct CurrentClients(Arc<Slot<ServerMaterial>>);

impl CurrentClients {
    fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, rustls::Error> {
        self.0
            .get()
            .clients
            .clone()
            .ok_or_else(|| rustls::Error::General("no client CA bundle is loaded".into()))
    }
}

impl ClientCertVerifier for CurrentClients {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints would borrow from material that a reload may replace; they
        // are optional, and without them a client sends the one
        // certificate it has.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifier()?.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verifier()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier()
            .map(|v| v.supported_verify_schemes())
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for ServerMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMaterial")
            .field("mutual", &self.clients.is_some())
            .finish_non_exhaustive()
    }
}
