//! PEM files to rustls types.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

/// Reads a file whole.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn pem_error(path: &Path, error: &pem::Error) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        reason: error.to_string(),
    }
}

/// Every certificate in a PEM file, in order.
pub(crate) fn certificates(path: &Path, bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, &e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.to_path_buf(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub(crate) fn private_key(path: &Path, bytes: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::Empty {
            path: path.to_path_buf(),
            what: "PEM private key",
        },
        other => pem_error(path, &other),
    })
}

/// A certificate chain and its key, checked to belong together.
pub(crate) fn certified_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = certificates(cert_path, cert_pem)?;
    let key = private_key(key_path, key_pem)?;
    CertifiedKey::from_der(chain, key, &crate::provider())
        .map(Arc::new)
        .map_err(|e| TlsError::Refused {
            what: format!("{} with {}", cert_path.display(), key_path.display()),
            reason: e.to_string(),
        })
}

/// A trust store of every certificate in a CA bundle.
pub(crate) fn roots(path: &Path, bytes: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, bytes)? {
        store.add(cert).map_err(|e| TlsError::Refused {
            what: format!("a CA certificate in {}", path.display()),
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(store))
}
