//! Which server the client commands talk to, and over what: plaintext, or
//! TLS (and mTLS) through the converge-tls client configuration the SDK
//! uses.

use std::path::PathBuf;

use clap::Args;
use converge_sdk::Client;
use converge_sdk::tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL};

use super::error::CliError;

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
}

impl ConnectionArgs {
    /// The address with its scheme, and whether it is to be dialled over
    /// TLS.
    fn address(&self) -> Result<(String, bool), CliError> {
        let server = self.server.trim().trim_end_matches('/');
        let tls_asked = self.ca_file.is_some();
        if let Some(rest) = server.strip_prefix("https://") {
            if !tls_asked {
                return Err(CliError::Invalid(
                    "an https:// server needs --ca-file (CONVERGE_CA_FILE) to verify it".to_owned(),
                ));
            }
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
        let connected = if tls {
            Client::connect_tls(address.clone(), self.tls()?).await
        } else {
            if self.cert_file.is_some() || self.server_name.is_some() {
                return Err(CliError::Invalid(
                    "--cert-file, --key-file and --server-name need TLS: give --ca-file".to_owned(),
                ));
            }
            Client::connect(address.clone()).await
        };
        connected.map_err(|e| match e {
            converge_sdk::ClientError::InvalidAddress { .. } => CliError::Invalid(format!("--server: {e}")),
            converge_sdk::ClientError::Connect { .. } => CliError::Unavailable(error_chain(&e)),
        })
    }

    fn tls(&self) -> Result<ClientTls, CliError> {
        let ca = self
            .ca_file
            .clone()
            .ok_or_else(|| CliError::Invalid("TLS needs --ca-file".to_owned()))?;
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
        assert!(args("https://h:1", false).address().is_err());
        assert!(args("http://h:1", true).address().is_err());
        assert!(args("ftp://h:1", false).address().is_err());
    }
}
