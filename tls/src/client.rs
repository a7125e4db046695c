//! The client side: a rustls configuration whose trusted CAs and client
//! keypair follow their files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::reload::{self, Slot};
use crate::{ALPN_H2, TlsError, material};

/// Where a client's TLS material is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// PEM bundle of the CAs the server's certificate must chain to.
    pub ca: PathBuf,
    /// PEM certificate chain and private key to present (mTLS); both or
    /// neither.
    pub identity: Option<(PathBuf, PathBuf)>,
}

struct ClientMaterial {
    server: Arc<WebPkiServerVerifier>,
    key: Option<Arc<CertifiedKey>>,
}

/// A client TLS configuration kept current with its files. Cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Loads `files` now and re-reads them every `reload_interval` on the
    /// current tokio runtime for as long as the configuration is in use:
    /// connections made after a rotation present the new certificate.
    pub fn load(files: &ClientTlsFiles, reload_interval: Duration) -> Result<Self, TlsError> {
        let mut paths = vec![files.ca.clone()];
        if let Some((cert, key)) = &files.identity {
            paths.push(cert.clone());
            paths.push(key.clone());
        }
        let slot = reload::load("client certificate", paths, build, reload_interval)?;
        let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Refused {
                what: "the TLS protocol versions".into(),
                reason: e.to_string(),
            })?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CurrentServerRoots(slot.clone())));
        let mut config = builder.with_client_cert_resolver(Arc::new(CurrentKey(slot)));
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        // Every connection presents the current certificate (a resumed
        // session would stand on the one it first presented).
        config.resumption = rustls::client::Resumption::disabled();
        Ok(Self {
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// Verifies the server's certificate for `name` instead of the host of
    /// the address dialled (for an address that is an IP or a load balancer).
    pub fn with_server_name(mut self, name: &str) -> Result<Self, TlsError> {
        let name = ServerName::try_from(name.to_owned()).map_err(|e| TlsError::Refused {
            what: "the TLS server name".into(),
            reason: e.to_string(),
        })?;
        self.server_name = Some(name);
        Ok(self)
    }

    /// The name to verify the server as when dialling `host`.
    pub fn server_name_for(&self, host: &str) -> Result<ServerName<'static>, TlsError> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        // URIs bracket IPv6 literals; server names do not.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).map_err(|e| TlsError::Refused {
            what: "the TLS server name".into(),
            reason: e.to_string(),
        })
    }

    /// A connector for new connections (each handshake uses the material
    /// current at that moment).
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }
}

fn build(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<ClientMaterial, TlsError> {
    let (Some(ca_path), Some(ca)) = (paths.first(), contents.first()) else {
        return Err(TlsError::Refused {
            what: "the client TLS files".into(),
            reason: "a CA bundle is required".into(),
        });
    };
    let roots = material::roots(ca_path, ca)?;
    let server = WebPkiServerVerifier::builder_with_provider(roots, crate::provider())
        .build()
        .map_err(|e| TlsError::Refused {
            what: format!("the CA bundle {}", ca_path.display()),
            reason: e.to_string(),
        })?;
    let key = match (paths.get(1).zip(contents.get(1)), paths.get(2).zip(contents.get(2))) {
        (Some((cert_path, cert)), Some((key_path, key))) => {
            Some(material::certified_key(cert_path, cert, key_path, key)?)
        }
        _ => None,
    };
    Ok(ClientMaterial { server, key })
}

/// Presents the current client certificate.
#[derive(Debug)]
struct CurrentKey(Arc<Slot<ClientMaterial>>);

impl ResolvesClientCert for CurrentKey {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.get().key.clone()
    }

    fn has_certs(&self) -> bool {
        self.0.get().key.is_some()
    }
}

/// Verifies the server against the current CA bundle.
#[derive(Debug)]
struct CurrentServerRoots(Arc<Slot<ClientMaterial>>);

impl ServerCertVerifier for CurrentServerRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0
            .get()
            .server
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.get().server.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.get().server.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.get().server.supported_verify_schemes()
    }
}

impl std::fmt::Debug for ClientMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientMaterial")
            .field("has_identity", &self.key.is_some())
            .finish_non_exhaustive()
    }
}
