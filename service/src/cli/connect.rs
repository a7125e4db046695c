//! Which server the client commands talk to, and over what: plaintext, or
//! TLS (and mTLS) through the converge-tls client configuration the SDK
//! uses; and how long they wait for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use converge_sdk::Client;
use converge_sdk::tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL};
use tonic::transport::Endpoint;

use super::error::CliError;
use super::output::parse_duration;

/// How often an open connection is pinged (HTTP/2 keepalive), so that a
/// long `watch` notices a peer that went away without closing it.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the connection counts as dead.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The CA bundles of common systems, tried in order when an `https://`
/// server is given without `--ca-file` (after `SSL_CERT_FILE`): Debian and
/// Ubuntu, Fedora and RHEL, openSUSE, Alpine and macOS.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The server's address when none is given (where `converge` listens by
/// default).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

/// How to reach the server.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// The server: `http://HOST:PORT`, `https://HOST:PORT` (TLS) or
    /// `HOST:PORT` (plaintext unless --ca-file is given).
    #[arg(long, env = "CONVERGE_SERVER", default_value = DEFAULT_SERVER, global = true)]
    pub server: String,

    /// PEM bundle of the CAs the server's certificate is verified against;
    /// turns TLS on.
    #[arg(long, env = "CONVERGE_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,

    /// PEM client certificate chain for mTLS (with --key-file).
    #[arg(long, env = "CONVERGE_CERT_FILE", global = true, requires = "key_file")]
    pub cert_file: Option<PathBuf>,

    /// PEM private key of --cert-file.
    #[arg(long, env = "CONVERGE_KEY_FILE", global = true, requires = "cert_file")]
    pub key_file: Option<PathBuf>,

    /// Name the server's certificate must carry, when it differs from the
    /// host of --server (e.g. connecting by IP).
    #[arg(long, env = "CONVERGE_SERVER_NAME", global = true)]
    pub server_name: Option<String>,

    /// How long to wait for the connection (TCP and TLS handshake); exit
    /// code 4 when it runs out.
    #[arg(long, env = "CONVERGE_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration, global = true)]
    pub connect_timeout: Duration,

    /// How long each call may wait for the server's answer (a watch only
    /// until it is established; it then relies on keepalive pings); exit
    /// code 4 when it runs out. 0 waits forever.
    #[arg(long, env = "CONVERGE_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration, global = true)]
    pub request_timeout: Duration,
}

impl ConnectionArgs {
    /// The address with its scheme, and whether it is to be dialled over
    /// TLS.
    fn address(&self) -> Result<(String, bool), CliError> {
        let server = self.server.trim().trim_end_matches('/');
        let tls_asked = self.ca_file.is_some();
        if let Some(rest) = server.strip_prefix("https://") {
            return Ok((format!("https://{rest}"), true));
        }
        if let Some(rest) = server.strip_prefix("http://") {
            if tls_asked {
                return Err(CliError::Invalid(
                    "--ca-file turns TLS on, but the server is given as http://; use https://".to_owned(),
                ));
            }
            return Ok((format!("http://{rest}"), false));
        }
        if server.contains("://") || server.is_empty() {
            return Err(CliError::Invalid(
                "--server must be HOST:PORT, http://HOST:PORT or https://HOST:PORT".to_owned(),
            ));
        }
        let scheme = if tls_asked { "https" } else { "http" };
        Ok((format!("{scheme}://{server}"), tls_asked))
    }

    /// Connects (now, so an unreachable server is reported before anything
    /// is sent). The channel reconnects by itself after a disconnect.
    pub async fn connect(&self) -> Result<Client, CliError> {
        let (address, tls) = self.address()?;
        if !tls && (self.cert_file.is_some() || self.server_name.is_some()) {
            return Err(CliError::Invalid(
                "--cert-file, --key-file and --server-name need TLS: give --ca-file or an https:// server".to_owned(),
            ));
        }
        let mut endpoint = Endpoint::from_shared(address.clone())
            .map_err(|e| CliError::Invalid(format!("--server: invalid server address {address:?}: {e}")))?
            .connect_timeout(self.connect_timeout)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if !self.request_timeout.is_zero() {
            endpoint = endpoint.timeout(self.request_timeout);
        }
        let tls = if tls { Some(self.tls()?) } else { None };
        // The endpoint's connect timeout covers TCP and TLS; the HTTP/2
        // handshake after them is bounded here too.
        let bound = self.connect_timeout.saturating_mul(2);
        match tokio::time::timeout(bound, Client::connect_endpoint(endpoint, tls)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(CliError::Unavailable(error_chain(&e))),
            Err(_) => Err(CliError::Unavailable(format!(
                "cannot connect to {address}: no answer within {}s (--connect-timeout)",
                bound.as_secs()
            ))),
        }
    }

    fn tls(&self) -> Result<ClientTls, CliError> {
        let ca = match &self.ca_file {
            Some(ca) => ca.clone(),
            None => system_ca_bundle().ok_or_else(|| {
                CliError::Invalid(
                    "an https:// server is verified against --ca-file (CONVERGE_CA_FILE) or the system's CA \
                     bundle (SSL_CERT_FILE), and neither was found"
                        .to_owned(),
                )
            })?,
        };
        let identity = self.cert_file.clone().zip(self.key_file.clone());
        let tls = ClientTls::load(&ClientTlsFiles { ca, identity }, DEFAULT_RELOAD_INTERVAL)
            .map_err(|e| CliError::Invalid(format!("TLS files: {e}")))?;
        match &self.server_name {
            Some(name) => tls
                .with_server_name(name)
                .map_err(|e| CliError::Invalid(format!("--server-name: {e}"))),
            None => Ok(tls),
        }
    }
}

/// The system's CA bundle: `SSL_CERT_FILE` when set, else the first of
/// [`SYSTEM_CA_BUNDLES`] that exists.
fn system_ca_bundle() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE").filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(file));
    }
    SYSTEM_CA_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
}

/// An error and its causes on one line (transport errors hide the useful
/// part, "Connection refused", in their sources).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(server: &str, ca: bool) -> ConnectionArgs {
        ConnectionArgs {
            server: server.to_owned(),
            ca_file: ca.then(|| PathBuf::from("ca.pem")),
            cert_file: None,
            key_file: None,
            server_name: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_scheme_follows_the_address_and_the_ca() {
        assert_eq!(
            args("127.0.0.1:1", false).address().ok(),
            Some(("http://127.0.0.1:1".to_owned(), false))
        );
        assert_eq!(args("h:1", true).address().ok(), Some(("https://h:1".to_owned(), true)));
        assert_eq!(
            args("https://h:1/", true).address().ok(),
            Some(("https://h:1".to_owned(), true))
        );
        assert_eq!(
            args("https://h:1", false).address().ok(),
            Some(("https://h:1".to_owned(), true))
        );
        assert!(args("http://h:1", true).address().is_err());
        assert!(args("ftp://h:1", false).address().is_err());
    }
}
