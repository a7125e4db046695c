//! SPIFFE identities (`spiffe://trust-domain/path`) from X.509 SVIDs.

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Longest SPIFFE ID accepted, in bytes (the SPIFFE specification's limit).
pub const MAX_SPIFFE_ID_BYTES: usize = 2048;

/// The SPIFFE ID of a certificate: its one `spiffe://` URI SAN. None when
/// it has none, more than one (an SVID carries exactly one), or one that is
/// malformed or too long.
pub fn spiffe_id(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let mut ids = san.value.general_names.iter().filter_map(|name| match name {
        GeneralName::URI(uri) if uri.len() >= 9 && uri[..9].eq_ignore_ascii_case("spiffe://") => Some(*uri),
        _ => None,
    });
    let id = ids.next()?;
    if ids.next().is_some() || !is_valid(id) {
        return None;
    }
    Some(id.to_owned())
}

/// Whether `id` is a well-formed SPIFFE ID: a lower-case trust domain of
/// letters, digits, `.`, `-` and `_`, then an optional path of non-empty
/// segments, no query or fragment.
pub(crate) fn is_valid(id: &str) -> bool {
    if id.len() > MAX_SPIFFE_ID_BYTES {
        return false;
    }
    let Some(rest) = id.strip_prefix("spiffe://") else {
        return false;
    };
    let (domain, path) = rest.split_once('/').map_or((rest, None), |(d, p)| (d, Some(p)));
    let domain_ok = !domain.is_empty()
        && domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_'));
    let path_ok = path.is_none_or(|p| {
        p.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        })
    });
    domain_ok && path_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated_as_the_specification_says() {
        assert!(is_valid("spiffe://example.org"));
        assert!(is_valid("spiffe://example.org/ns/prod/sa/worker"));
        assert!(!is_valid("spiffe://Example.org/a"));
        assert!(!is_valid("spiffe:///a"));
        assert!(!is_valid("spiffe://example.org/"));
        assert!(!is_valid("spiffe://example.org/a//b"));
        assert!(!is_valid("spiffe://example.org/a/../b"));
        assert!(!is_valid("spiffe://example.org/a?b"));
        assert!(!is_valid("https://example.org/a"));
        assert!(!is_valid(&format!(
            "spiffe://example.org/{}",
            "a".repeat(MAX_SPIFFE_ID_BYTES)
        )));
    }

    fn certificate(uris: &[&str]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        for uri in uris {
            params.subject_alt_names.push(rcgen::SanType::URI(
                rcgen::string::Ia5String::try_from(*uri).expect("ia5"),
            ));
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().clone()
    }

    #[test]
    fn the_one_spiffe_uri_san_is_the_identity() {
        let id = "spiffe://converge.test/worker/a";
        assert_eq!(spiffe_id(&certificate(&[id])).as_deref(), Some(id));
        assert_eq!(
            spiffe_id(&certificate(&["https://example.org/x", id])).as_deref(),
            Some(id)
        );
        assert_eq!(spiffe_id(&certificate(&[])), None);
        assert_eq!(spiffe_id(&certificate(&[id, "spiffe://converge.test/other"])), None);
        assert_eq!(spiffe_id(&certificate(&["spiffe://converge.test/a/../b"])), None);
        assert_eq!(spiffe_id(&CertificateDer::from(vec![1, 2, 3])), None);
    }
}
