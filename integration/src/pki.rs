//! Certificates made in the test: CAs, server certificates for loopback and
//! client certificates with SPIFFE IDs, written the way a secret mount
//! rotates them (a new file renamed over the old).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
    /// The certificate, DER (to compare with what a peer presented).
    pub der: Vec<u8>,
}

impl TestCa {
    /// A new self-signed CA called `name`.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server(&self) -> anyhow::Result<Leaf> {
        let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "converge test server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate whose URI SAN is `spiffe_id` (none when None).
    pub fn client(&self, spiffe_id: Option<&str>) -> anyhow::Result<Leaf> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "converge test client");
        if let Some(id) = spiffe_id {
            params.subject_alt_names.push(SanType::URI(id.try_into()?));
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> anyhow::Result<Leaf> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        })
    }
}

impl Leaf {
    /// Writes `dir/name.crt` and `dir/name.key` (each replaced atomically)
    /// and returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        replace(&key, &self.key_pem)?;
        replace(&cert, &self.cert_pem)?;
        Ok((cert, key))
    }
}

/// Replaces `path` with `contents` in one rename, as secret mounts do.
pub fn replace(path: &Path, contents: &str) -> anyhow::Result<()> {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, contents)?;
    std::fs::rename(&staged, path)?;
    Ok(())
}
