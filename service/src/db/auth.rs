//! Where the password of a new database connection comes from.
//!
//! - [`DatabaseAuth::Url`]: the password of `DATABASE_URL`, fixed.
//! - [`DatabaseAuth::PasswordFile`]: a file (a mounted Secret), re-read for
//!   new connections, so a rotated password needs no restart.
//! - [`DatabaseAuth::Iam`]: an IAM authentication token for RDS / Aurora
//!   PostgreSQL, presigned with SigV4 (`aws-sigv4`) from the standard AWS
//!   credential chain (`aws-config`: environment, web identity for IRSA,
//!   profile, container and instance roles); the URL's password is ignored.
//!
//! sqlx's pool opens connections with the options it holds and offers no
//! hook before a connect, so a refresher gives every pool fresh options
//! (a new token, the file's current contents) every [`REFRESH_INTERVAL`]:
//! a connection opened at any moment carries a token at most that old, far
//! inside its 15 minutes of validity (which bounds when a connection may
//! be opened with it; an open connection is not affected). The connections
//! converge opens outside the pools (the health probes, the notification
//! listener) take their pool's current options at each connect.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use sqlx::postgres::{PgConnectOptions, PgPool};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::config::DatabaseAuth;

/// How often the pools get fresh credentials.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// How long an IAM authentication token may be used to open a connection
/// (the longest RDS accepts).
pub const TOKEN_VALIDITY: Duration = Duration::from_secs(15 * 60);

/// What SigV4 leaves unescaped in a query value: letters, digits and `-._~`.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The signing name of RDS IAM authentication.
const RDS_SIGNING_NAME: &str = "rds-db";

/// Why no password could be had.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The password file could not be read.
    #[error("cannot read DATABASE_PASSWORD_FILE {path}: {source}")]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No AWS region is configured.
    #[error("DB_IAM_AUTH needs an AWS region: set AWS_REGION (or a profile's region)")]
    NoRegion,
    /// The credential chain found nothing, or failed.
    #[error(
        "DB_IAM_AUTH found no AWS credentials (environment, web identity, profile, container or instance role): {0}"
    )]
    NoCredentials(String),
    /// Signing the token failed.
    #[error("cannot sign the IAM authentication token: {0}")]
    Signing(String),
    /// The URL names no host to authenticate to.
    #[error("DB_IAM_AUTH needs DATABASE_URL to name a TCP host, not a Unix socket")]
    NoHost,
}

/// A source of passwords for new connections; cheap to clone.
#[derive(Clone)]
pub struct Credentials(Arc<Source>);

enum Source {
    File(PathBuf),
    Iam {
        provider: SharedCredentialsProvider,
        region: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0 {
            Source::File(path) => f.debug_tuple("Credentials::File").field(path).finish(),
            Source::Iam { region, .. } => f.debug_tuple("Credentials::Iam").field(region).finish(),
        }
    }
}

impl Credentials {
    /// The source `auth` names, checked once so that a missing file, region
    /// or credential fails the boot with one line; `None` for the URL's own
    /// password.
    pub async fn prepare(auth: &DatabaseAuth) -> Result<Option<Self>, AuthError> {
        let source = match auth {
            DatabaseAuth::Url => return Ok(None),
            DatabaseAuth::PasswordFile(path) => Source::File(path.clone()),
            DatabaseAuth::Iam => {
                let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .http_client(https_client())
                    .load()
                    .await;
                let region = config.region().ok_or(AuthError::NoRegion)?.to_string();
                let provider = config
                    .credentials_provider()
                    .ok_or_else(|| AuthError::NoCredentials("no credential provider is configured".into()))?;
                Source::Iam { provider, region }
            }
        };
        let credentials = Self(Arc::new(source));
        // One try now: the boot fails at once rather than at the first connect.
        credentials.password(&PgConnectOptions::new().host("localhost")).await?;
        Ok(Some(credentials))
    }

    /// A password for a connection opened now with `options`.
    async fn password(&self, options: &PgConnectOptions) -> Result<String, AuthError> {
        match &*self.0 {
            Source::File(path) => read_password(path),
            Source::Iam { provider, region } => {
                let identity = provider
                    .provide_credentials()
                    .await
                    .map_err(|e| AuthError::NoCredentials(e.to_string()))?;
                let host = options.get_host();
                if host.starts_with('/') || host.is_empty() {
                    return Err(AuthError::NoHost);
                }
                rds_auth_token(
                    host,
                    options.get_port(),
                    options.get_username(),
                    region,
                    &identity,
                    SystemTime::now(),
                )
            }
        }
    }

    /// `options` with a password for a connection opened now.
    pub async fn apply(&self, options: PgConnectOptions) -> Result<PgConnectOptions, AuthError> {
        let password = self.password(&options).await?;
        Ok(options.password(&password))
    }

    /// Gives each of `pools` its options (`base`, with a fresh password)
    /// every [`REFRESH_INTERVAL`] until `stop` flips. A failure keeps the
    /// last options and is logged; connections already open are untouched.
    pub fn spawn_refresher(
        self,
        pools: Vec<(PgPool, PgConnectOptions)>,
        mut stop: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFRESH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The pools start with fresh options: the first tick is now.
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tick.tick() => {}
                }
                for (pool, base) in &pools {
                    match self.apply(base.clone()).await {
                        Ok(options) => pool.set_connect_options(options),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot refresh the database credentials; new connections use the last ones")
                        }
                    }
                }
            }
        })
    }
}

fn read_password(path: &Path) -> Result<String, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::PasswordFile {
        path: path.to_path_buf(),
        source,
    })?;
    // A Secret written with `echo` ends in a newline that is no part of it.
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// The HTTP client of the credential chain (web identity and instance
/// metadata need one): hyper with rustls on the ring provider, which the
/// rest of converge already uses.
fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// An RDS IAM authentication token for `user` at `host:port` in `region`,
/// signed at `time` with `credentials`: the SigV4-presigned URL of the
/// `connect` action, without its scheme, valid for [`TOKEN_VALIDITY`].
pub fn rds_auth_token(
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    credentials: &aws_credential_types::Credentials,
    time: SystemTime,
) -> Result<String, AuthError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign};
    use aws_sigv4::sign::v4;

    let signing = |e: &dyn std::fmt::Display| AuthError::Signing(e.to_string());
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_VALIDITY);
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(RDS_SIGNING_NAME)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| signing(&e))?
        .into();
    let user = percent_encoding::utf8_percent_encode(user, QUERY_VALUE).to_string();
    let url = format!("https://{host}:{port}/?Action=connect&DBUser={user}");
    let request =
        SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[])).map_err(|e| signing(&e))?;
    let (instructions, _signature) = sign(request, &params).map_err(|e| signing(&e))?.into_parts();
    let mut signed = http::Request::builder()
        .method("GET")
        .uri(&url)
        .body(())
        .map_err(|e| signing(&e))?;
    instructions.apply_to_request_http1x(&mut signed);
    let uri = signed.uri().to_string();
    Ok(uri.strip_prefix("https://").unwrap_or(&uri).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-05T01:02:03Z.
    fn fixed_time() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_432_523)
    }

    const HOST: &str = "db.cluster-abc.eu-west-1.rds.amazonaws.com";

    /// The vectors were made independently of this code, by botocore 1.43.11's
    /// `generate_db_auth_token` with the same credentials, host, user,
    /// region and a clock fixed at 2026-12-05T01:02:03Z.
    #[test]
    fn tokens_match_an_independent_signer() {
        let credentials = aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let token = rds_auth_token(HOST, 5432, "converge", "eu-west-1", &credentials, fixed_time()).unwrap_or_default();
        assert_eq!(
            token,
            "db.cluster-abc.eu-west-1.rds.amazonaws.com:5432/?Action=connect&DBUser=converge\
             &X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIDEXAMPLE%2F20261205%2Feu-west-1%2Frds-db%2Faws4_request\
             &X-Amz-Date=20261205T010203Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=4887d3326db94a2626c194993f62ec6bd93782fd001e62ffbc4ada2a7508bedc"
        );

        let with_session = aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("SESSIONTOKEN/EXAMPLE+=".into()),
            None,
            "test",
        );
        let token =
            rds_auth_token(HOST, 5432, "converge", "eu-west-1", &with_session, fixed_time()).unwrap_or_default();
        // The same parameters and signature; aws-sigv4 appends the session
        // token after the signature, botocore before it (the order of query
        // parameters is no part of what is signed).
        assert_eq!(
            query_set(&token),
            query_set(
                "db.cluster-abc.eu-west-1.rds.amazonaws.com:5432/?Action=connect&DBUser=converge\
             &X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIDEXAMPLE%2F20261205%2Feu-west-1%2Frds-db%2Faws4_request\
             &X-Amz-Date=20261205T010203Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
             &X-Amz-Security-Token=SESSIONTOKEN%2FEXAMPLE%2B%3D\
             &X-Amz-Signature=20e5b5e22a6aa5dfb15fb07aba78e40e908c4541ba2f4e2448e722465a817cd0"
            )
        );
    }

    /// A token's address and its query parameters, in order.
    fn query_set(token: &str) -> (String, std::collections::BTreeSet<String>) {
        let (address, query) = token.split_once('?').unwrap_or((token, ""));
        (address.to_owned(), query.split('&').map(str::to_owned).collect())
    }

    #[test]
    fn a_password_file_loses_its_trailing_newline() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("converge-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("password");
        std::fs::write(&file, "s3cret\n")?;
        assert_eq!(read_password(&file)?, "s3cret");
        std::fs::remove_dir_all(&dir)?;
        let missing = read_password(&file).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.starts_with("cannot read DATABASE_PASSWORD_FILE"), "{missing}");
        Ok(())
    }
}
