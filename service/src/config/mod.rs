//! Process configuration: command-line flags with environment fallbacks.
//!
//! Every value is parsed and validated before anything starts, so a bad value
//! fails fast at boot with a message naming the flag and its variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use converge_tls::ServerTlsFiles;

use crate::domain::identity::IdentityPattern;

/// The `converge` command line.
#[derive(Debug, Parser)]
#[command(name = "converge", version = crate::version::VERSION, about = "Declarative control plane on PostgreSQL, served over gRPC.")]
pub struct Cli {
    /// What to run; `serve` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Options shared by every command.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Options of the server (also accepted without the `serve` word).
    #[command(flatten)]
    pub serve: ServeArgs,

    /// Retention of event runs, the change log and idempotency records.
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// The subcommands of `converge`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane (the default).
    Serve,
    /// Run the control plane with the example kinds and their workers
    /// in-process, apply a demo BOM and show its tree reconciling.
    Dev(DevArgs),
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the build version and exit.
    Version,
}

/// Options every command understands.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// PostgreSQL URL. When unset, converge runs a private embedded cluster in `--data-dir`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// PostgreSQL URL of a streaming replica of `DATABASE_URL` for reads that
    /// tolerate staleness (GetResource, ListResources, ListResourceEvents,
    /// GetResourceGraph, ListSpecRevisions). Everything else stays on the
    /// primary; while the replica is unreachable those reads fall back to it.
    #[arg(long, env = "DATABASE_READ_URL", global = true, hide_env_values = true)]
    pub database_read_url: Option<String>,

    /// Authenticate to PostgreSQL (RDS, Aurora) with IAM authentication
    /// tokens instead of the URL's password: signed with the credentials of
    /// the standard AWS chain (environment, web identity for IRSA, profile,
    /// container or instance role) in `AWS_REGION`, fresh for new
    /// connections. The URL still names host, port, user and database, and
    /// should ask for `sslmode=require`.
    #[arg(long, env = "DB_IAM_AUTH", global = true, default_value_t = false,
          action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub db_iam_auth: bool,

    /// A file holding the database password (a mounted Secret), read for
    /// new connections instead of the URL's password, so a rotated
    /// password needs no restart.
    #[arg(long, env = "DATABASE_PASSWORD_FILE", global = true)]
    pub database_password_file: Option<PathBuf>,

    /// Directory of the embedded PostgreSQL cluster (used only without `DATABASE_URL`).
    /// Defaults to `/var/lib/converge` as root, else `$XDG_DATA_HOME/converge`
    /// (or `~/.local/share/converge`).
    #[arg(long, env = "CONVERGE_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,

    /// Maximum connections in the database pool. Notifications are received
    /// over one more connection of their own. More connections than the
    /// database has cores to run them mostly add contention: on a 2-core
    /// machine 5, 8 and 11 ran the 100k load alike and 16 about 15% slower.
    #[arg(long, env = "DATABASE_MAX_CONNECTIONS", default_value_t = 8, global = true,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub database_max_connections: u32,

    /// Log output format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter: a level (`error`, `warn`, `info`, `debug`, `trace`) or
    /// `tracing` directives such as `info,converge_service=debug`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", global = true,
          value_parser = parse_log_filter)]
    pub log_level: String,
}

/// How a connection to `DATABASE_URL` authenticates (db::auth supplies
/// the passwords).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DatabaseAuth {
    /// The password in the URL (or none).
    #[default]
    Url,
    /// The contents of this file, read for new connections
    /// (`DATABASE_PASSWORD_FILE`).
    PasswordFile(PathBuf),
    /// An RDS IAM authentication token (`DB_IAM_AUTH`).
    Iam,
}

impl CommonArgs {
    /// How connections to `DATABASE_URL` (and `DATABASE_READ_URL`)
    /// authenticate, or the line saying which options contradict each other.
    pub fn database_auth(&self) -> Result<DatabaseAuth, String> {
        let external = self.database_url.as_deref().is_some_and(|u| !u.trim().is_empty());
        match (self.db_iam_auth, &self.database_password_file) {
            (true, Some(_)) => Err("DB_IAM_AUTH and DATABASE_PASSWORD_FILE exclude each other".into()),
            (true, None) if !external => {
                Err("DB_IAM_AUTH needs DATABASE_URL (the embedded database has no IAM)".into())
            }
            (true, None) => Ok(DatabaseAuth::Iam),
            (false, Some(_)) if !external => Err("DATABASE_PASSWORD_FILE needs DATABASE_URL".into()),
            (false, Some(path)) => Ok(DatabaseAuth::PasswordFile(path.clone())),
            (false, None) => Ok(DatabaseAuth::Url),
        }
    }
}

/// Options of `converge serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on: `HOST:PORT`, or with a scheme,
    /// `http://HOST:PORT` (plaintext) or `https://HOST:PORT` (TLS; needs
    /// `--tls-cert-file` and `--tls-key-file`).
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:50051", global = true,
          value_parser = parse_listen_addr)]
    pub listen_addr: ListenAddr,

    /// Which duties this process runs.
    #[arg(long, env = "ROLE", value_enum, default_value_t = Role::All, global = true)]
    pub role: Role,

    /// Upper bound, in seconds, on graceful shutdown after SIGTERM/SIGINT:
    /// in-flight calls get this long to finish before they are cut. The
    /// process exits within this plus 5 s, whatever the database does.
    #[arg(long, env = "SHUTDOWN_TIMEOUT_SECS", default_value_t = 10, global = true,
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_timeout_secs: u64,

    /// Plain-HTTP probe listener (`HOST:PORT`): `/livez` and `/healthz`
    /// (the process runs; never asks the database) and `/readyz` (gRPC
    /// health is SERVING), plus `/metrics` when metrics are on. On by
    /// default; an empty value switches it off. Use `0.0.0.0:8081` in a pod.
    #[arg(long, env = "HEALTH_ADDR", default_value = DEFAULT_HEALTH_ADDR, global = true,
          value_parser = parse_optional_addr)]
    pub health_addr: OptionalAddr,

    /// Stable identity of this process across restarts (a pod name, say).
    /// A process joining under the identity of a registered member is its
    /// successor and takes its shards over at once; it must be unique among
    /// running processes. Default: the embedded data directory, when the
    /// database is embedded; none otherwise.
    #[arg(long, env = "MEMBER_IDENTITY", global = true, value_parser = parse_member_identity)]
    pub member_identity: Option<String>,

    /// TLS and workload identity of the gRPC listener.
    #[command(flatten)]
    pub tls: TlsArgs,

    /// Traces and metrics.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,

    /// Authorization policy.
    #[command(flatten)]
    pub authz: AuthzArgs,
}

/// Authorization options (ADR 47). Without a policy file every admitted
/// caller may do everything, as before.
#[derive(Debug, Clone, Args)]
pub struct AuthzArgs {
    /// Authorization policy (YAML or JSON: roles and bindings; see
    /// docs/security.md). Set, every API call and worker subscription is
    /// decided by it; re-read every `--authz-reload-interval-secs`. A file
    /// that does not check stops the server at start, and is ignored
    /// (logged, counted) on a reload.
    #[arg(long, env = "AUTHZ_POLICY_FILE", global = true)]
    pub authz_policy_file: Option<PathBuf>,

    /// The identity the policy gives callers without a verified client
    /// certificate (plaintext behind a mesh that terminates mTLS), a SPIFFE
    /// ID. Unset, such callers are anonymous and no binding names them.
    #[arg(long, env = "AUTHZ_PLAINTEXT_IDENTITY", global = true, value_parser = parse_spiffe_id)]
    pub authz_plaintext_identity: Option<String>,

    /// How often, in seconds, the policy file is re-read.
    #[arg(long, env = "AUTHZ_RELOAD_INTERVAL_SECS", default_value_t = 10, global = true,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub authz_reload_interval_secs: u64,
}

impl Default for AuthzArgs {
    fn default() -> Self {
        Self {
            authz_policy_file: None,
            authz_plaintext_identity: None,
            authz_reload_interval_secs: 10,
        }
    }
}

fn parse_spiffe_id(value: &str) -> Result<String, String> {
    match value.parse::<IdentityPattern>()? {
        IdentityPattern::Exact(id) => Ok(id),
        IdentityPattern::Below(_) => Err("a SPIFFE ID, not a pattern".into()),
    }
}

/// The probe listener's default address (`HEALTH_ADDR`): loopback, like the
/// gRPC listener's, on the fixed port the chart and the image use.
pub const DEFAULT_HEALTH_ADDR: &str = "127.0.0.1:8081";

/// The standard OpenTelemetry variables converge honours beyond its own
/// flags (read by the OpenTelemetry SDK and `telemetry`; docs/operations.md).
/// Deployment manifests may set these and the flags' variables, nothing else
/// (the Helm chart's test holds it to that).
pub const OTEL_VARIABLES: &[&str] = &[
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_QUEUE_SIZE",
];

/// The standard AWS variables converge honours with `DB_IAM_AUTH` (read by
/// the AWS credential chain, `aws-config`); deployment manifests may set
/// them too. (IRSA's webhook sets the web identity ones itself.)
pub const AWS_VARIABLES: &[&str] = &[
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_STS_REGIONAL_ENDPOINTS",
];

/// Telemetry options. Beyond these, the standard `OTEL_*` variables of
/// [`OTEL_VARIABLES`] are honoured (`OTEL_TRACES_EXPORTER=none`,
/// `OTEL_METRICS_EXPORTER=none` and `OTEL_SDK_DISABLED=true` switch signals off).
#[derive(Debug, Clone, Default, Args)]
pub struct TelemetryArgs {
    /// Plain-HTTP listener (`HOST:PORT`) serving Prometheus text metrics at
    /// `/metrics` (and the probes, as `HEALTH_ADDR` does); setting it turns
    /// metrics on. Off when unset. May equal `HEALTH_ADDR`: one listener
    /// then serves both.
    #[arg(long, env = "METRICS_ADDR", global = true, value_parser = parse_optional_addr)]
    pub metrics_addr: Option<OptionalAddr>,

    /// OTLP/gRPC collector endpoint (e.g. `http://otel-collector:4317`):
    /// traces, and metrics pushed every `OTEL_METRIC_EXPORT_INTERVAL` ms.
    /// Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", global = true)]
    pub otlp_endpoint: Option<String>,
}

/// An address that may be given as an empty value (meaning: off), so that
/// an environment can switch a listener off by setting its variable empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalAddr(pub Option<SocketAddr>);

fn parse_optional_addr(value: &str) -> Result<OptionalAddr, String> {
    if value.trim().is_empty() {
        return Ok(OptionalAddr(None));
    }
    value
        .parse::<SocketAddr>()
        .map(|addr| OptionalAddr(Some(addr)))
        .map_err(|_| "expected HOST:PORT with an IP host".to_owned())
}

impl TelemetryArgs {
    /// The metrics listener address, if one is configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr.and_then(|a| a.0)
    }

    /// The OTLP endpoint given as a flag or `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// if it is not empty.
    pub fn otlp_endpoint(&self) -> Option<&str> {
        self.otlp_endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty())
    }
}

/// Whether the listen address asked for a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenScheme {
    /// No scheme: TLS exactly when certificate files are given.
    Unspecified,
    /// `http://`: plaintext (TLS files are then a contradiction).
    Http,
    /// `https://`: TLS (the certificate files are required).
    Https,
}

/// The gRPC listen address (`LISTEN_ADDR`) and the scheme it was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr {
    /// The socket address.
    pub addr: SocketAddr,
    /// The scheme it was given with.
    pub scheme: ListenScheme,
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        Self {
            addr,
            scheme: ListenScheme::Unspecified,
        }
    }
}

fn parse_listen_addr(value: &str) -> Result<ListenAddr, String> {
    let (scheme, rest) = if let Some(rest) = value.strip_prefix("https://") {
        (ListenScheme::Https, rest)
    } else if let Some(rest) = value.strip_prefix("http://") {
        (ListenScheme::Http, rest)
    } else {
        (ListenScheme::Unspecified, value)
    };
    let addr = rest
        .trim_end_matches('/')
        .parse::<SocketAddr>()
        .map_err(|_| "expected HOST:PORT with an IP host, optionally after http:// or https://".to_owned())?;
    Ok(ListenAddr { addr, scheme })
}

/// TLS options of the gRPC listener. Without them converge serves
/// plaintext, for a mesh sidecar to wrap in mTLS.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// PEM certificate chain (leaf first) the server presents; enables TLS.
    #[arg(long, env = "TLS_CERT_FILE", global = true)]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of the certificate.
    #[arg(long, env = "TLS_KEY_FILE", global = true)]
    pub tls_key_file: Option<PathBuf>,

    /// PEM bundle of CAs whose client certificates are accepted; enables
    /// mTLS (clients without such a certificate are refused at the
    /// handshake). The certificate's SPIFFE ID is the caller's identity.
    #[arg(long, env = "TLS_CLIENT_CA_FILE", global = true)]
    pub tls_client_ca_file: Option<PathBuf>,

    /// How often, in seconds, the certificate, key and CA files are re-read;
    /// changed files that parse replace the material for new connections.
    #[arg(long, env = "TLS_RELOAD_INTERVAL_SECS", default_value_t = 10, global = true,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub tls_reload_interval_secs: u64,

    /// SPIFFE IDs admitted to the control-plane API (`converge.v1`),
    /// comma-separated; `spiffe://td/path/*` admits everything below a
    /// path. Empty: every verified client. Needs `--tls-client-ca-file`.
    #[arg(long, env = "ALLOWED_API_IDENTITIES", value_delimiter = ',', global = true)]
    pub allowed_api_identities: Vec<IdentityPattern>,

    /// SPIFFE IDs admitted to the worker contract (`converge.worker.v1`),
    /// as for `--allowed-api-identities`.
    #[arg(long, env = "ALLOWED_WORKER_IDENTITIES", value_delimiter = ',', global = true)]
    pub allowed_worker_identities: Vec<IdentityPattern>,
}

impl Default for TlsArgs {
    fn default() -> Self {
        Self {
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            tls_reload_interval_secs: 10,
            allowed_api_identities: Vec::new(),
            allowed_worker_identities: Vec::new(),
        }
    }
}

/// The listener's TLS, once the options are known to fit together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Where the material is.
    pub files: ServerTlsFiles,
    /// How often it is re-read.
    pub reload_interval: Duration,
}

/// Who may call which services (empty lists admit every verified client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessSettings {
    /// Admitted to `converge.v1`.
    pub api: Vec<IdentityPattern>,
    /// Admitted to `converge.worker.v1`.
    pub workers: Vec<IdentityPattern>,
}

impl AccessSettings {
    /// Whether any allowlist is set.
    pub fn restricts(&self) -> bool {
        !self.api.is_empty() || !self.workers.is_empty()
    }
}

impl ServeArgs {
    /// The listener's TLS (None: plaintext) and access lists, or the one
    /// line saying which options contradict each other.
    pub fn transport(&self) -> Result<(Option<TlsSettings>, AccessSettings), String> {
        let tls = &self.tls;
        let files = match (&tls.tls_cert_file, &tls.tls_key_file) {
            (Some(cert), Some(key)) => Some(ServerTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: tls.tls_client_ca_file.clone(),
            }),
            (Some(_), None) => return Err("TLS_CERT_FILE is set but TLS_KEY_FILE is not; TLS needs both".into()),
            (None, Some(_)) => return Err("TLS_KEY_FILE is set but TLS_CERT_FILE is not; TLS needs both".into()),
            (None, None) => None,
        };
        match (self.listen_addr.scheme, &files) {
            (ListenScheme::Https, None) => {
                return Err("LISTEN_ADDR is https:// but TLS_CERT_FILE and TLS_KEY_FILE are not set".into());
            }
            (ListenScheme::Http, Some(_)) => {
                return Err(
                    "LISTEN_ADDR is http:// but TLS_CERT_FILE and TLS_KEY_FILE are set; use https:// or no scheme"
                        .into(),
                );
            }
            _ => {}
        }
        if files.is_none() && tls.tls_client_ca_file.is_some() {
            return Err("TLS_CLIENT_CA_FILE is set without TLS; set TLS_CERT_FILE and TLS_KEY_FILE too".into());
        }
        let access = AccessSettings {
            api: tls.allowed_api_identities.clone(),
            workers: tls.allowed_worker_identities.clone(),
        };
        if access.restricts() && tls.tls_client_ca_file.is_none() {
            return Err(
                "ALLOWED_API_IDENTITIES / ALLOWED_WORKER_IDENTITIES need TLS_CLIENT_CA_FILE: identities come from client certificates"
                    .into(),
            );
        }
        let settings = files.map(|files| TlsSettings {
            files,
            reload_interval: Duration::from_secs(tls.tls_reload_interval_secs),
        });
        Ok((settings, access))
    }
}

/// Longest member identity accepted, in bytes.
pub const MAX_MEMBER_IDENTITY_BYTES: usize = 253;

fn parse_member_identity(value: &str) -> Result<String, String> {
    if value.is_empty() || value.len() > MAX_MEMBER_IDENTITY_BYTES {
        return Err(format!("must be 1 to {MAX_MEMBER_IDENTITY_BYTES} bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(value.to_owned())
}

/// The defaults of the command line, except that an in-process server (a
/// test, an embedding) binds no probe listener unless asked to: many of
/// them run side by side and none has a pod's prober.
impl Default for ServeArgs {
    fn default() -> Self {
        Self {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 50051)).into(),
            role: Role::All,
            shutdown_timeout_secs: 10,
            health_addr: OptionalAddr(None),
            member_identity: None,
            tls: TlsArgs::default(),
            telemetry: TelemetryArgs::default(),
            authz: AuthzArgs::default(),
        }
    }
}

impl ServeArgs {
    /// The plain-HTTP listeners to bind, each with the setting it comes
    /// from: `HEALTH_ADDR` (unless switched off) and `METRICS_ADDR` (when
    /// set to another address).
    pub fn http_listeners(&self) -> Vec<(SocketAddr, &'static str)> {
        let mut listeners = Vec::new();
        if let Some(addr) = self.health_addr.0 {
            listeners.push((addr, "HEALTH_ADDR"));
        }
        if let Some(addr) = self.telemetry.metrics_addr()
            && self.health_addr.0 != Some(addr)
        {
            listeners.push((addr, "METRICS_ADDR"));
        }
        listeners
    }

    /// The graceful-shutdown bound as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }
}

/// Options of `converge dev`. The server options (`--listen-addr`,
/// `--data-dir`, ...) apply as they do to `serve`.
#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Teams of the demo BOM, comma-separated (each gets an account, a VPC
    /// and a route).
    #[arg(long, env = "CONVERGE_DEV_TEAMS", value_delimiter = ',',
          default_values_t = ["payments".to_owned(), "search".to_owned(), "ledger".to_owned()])]
    pub teams: Vec<String>,

    /// Name of the demo BOM resource; its children are named after it.
    #[arg(long, env = "CONVERGE_DEV_BOM_NAME", default_value = "demo")]
    pub bom_name: String,

    /// Teams whose route fails on purpose, comma-separated (the BOM then
    /// settles Degraded, naming them).
    #[arg(long, env = "CONVERGE_DEV_FAIL_TEAMS", value_delimiter = ',')]
    pub fail_teams: Vec<String>,

    /// Simulated provider latency in milliseconds: each leaf task takes
    /// between half and one and a half times this; 0 = none.
    #[arg(long, env = "CONVERGE_DEV_DELAY_MS", default_value_t = 400,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub delay_ms: u64,

    /// Exit once the BOM has settled and the summary is printed: 0 when it
    /// is Ready, 1 when it is Degraded or Failed or not settled within
    /// `--timeout`.
    #[arg(long, env = "CONVERGE_DEV_EXIT_WHEN_READY")]
    pub exit_when_ready: bool,

    /// Demo kinds this process does not serve, comma-separated: workers in
    /// other processes serve them (the Python `account` and Go `vpc` ports
    /// in sdk-gen/*/examples; see examples/bom/README.md).
    #[arg(long, env = "CONVERGE_DEV_EXTERNAL_KINDS", value_delimiter = ',',
          value_parser = ["bom", "account", "tgw", "vpc", "route"])]
    pub external_kinds: Vec<String>,

    /// Apply the BOM as `bom-cel`, composed and rolled up by converge itself
    /// from the CEL of its manifest (ADR 49), instead of as `bom`, whose
    /// composer is a Rust worker: the same children either way.
    #[arg(long, env = "CONVERGE_DEV_CEL")]
    pub cel: bool,

    /// With `--exit-when-ready`: seconds to wait for the BOM to settle.
    #[arg(long = "timeout", env = "CONVERGE_DEV_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout_secs: u64,
}

impl DevArgs {
    /// The `--timeout` bound as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

/// How long converge keeps history. Enforced by a sweeper on control pods
/// (and, for event timelines, as events are written).
#[derive(Debug, Clone, Copy, Args)]
pub struct RetentionArgs {
    /// Event runs kept per resource and category (newest first); 0 = no limit.
    #[arg(long, env = "EVENT_RETENTION_RUNS", default_value_t = 100, global = true,
          value_parser = clap::value_parser!(i32).range(0..=100_000))]
    pub event_runs_per_timeline: i32,

    /// Age in seconds after which an event run (by its latest event) is deleted; 0 = keep.
    #[arg(long, env = "EVENT_RETENTION_SECS", default_value_t = 7 * 24 * 3600, global = true,
          value_parser = clap::value_parser!(i64).range(0..=10 * 365 * 24 * 3600))]
    pub event_max_age_secs: i64,

    /// Age in seconds after which change-log entries are deleted (watch resume window).
    #[arg(long, env = "CHANGE_LOG_RETENTION_SECS", default_value_t = 24 * 3600, global = true,
          value_parser = clap::value_parser!(i64).range(60..=365 * 24 * 3600))]
    pub change_log_max_age_secs: i64,

    /// Age in seconds after which request ids are forgotten (idempotency window).
    #[arg(long, env = "REQUEST_ID_RETENTION_SECS", default_value_t = 24 * 3600, global = true,
          value_parser = clap::value_parser!(i64).range(60..=30 * 24 * 3600))]
    pub request_id_max_age_secs: i64,

    /// Age in seconds after which finished operations (succeeded or failed) are deleted.
    #[arg(long, env = "OPERATION_RETENTION_SECS", default_value_t = 7 * 24 * 3600, global = true,
          value_parser = clap::value_parser!(i64).range(60..=10 * 365 * 24 * 3600))]
    pub operation_max_age_secs: i64,
}

impl Default for RetentionArgs {
    fn default() -> Self {
        Self {
            event_runs_per_timeline: 100,
            event_max_age_secs: 7 * 24 * 3600,
            change_log_max_age_secs: 24 * 3600,
            request_id_max_age_secs: 24 * 3600,
            operation_max_age_secs: 7 * 24 * 3600,
        }
    }
}

/// The duties a process runs (`ROLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Everything: the API, the control sweepers and the worker broker.
    All,
    /// The API and the control sweepers.
    Control,
    /// The worker-facing broker only.
    Broker,
}

impl Role {
    /// Whether this role serves the control-plane API (`converge.v1`).
    pub fn serves_api(self) -> bool {
        matches!(self, Role::All | Role::Control)
    }

    /// Whether this role serves the worker contract (`converge.worker.v1`).
    pub fn serves_workers(self) -> bool {
        matches!(self, Role::All | Role::Broker)
    }

    /// The lower-case name used in config, logs and the cluster registry.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Control => "control",
            Role::Broker => "broker",
        }
    }
}

/// Log output format (`LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

fn parse_log_filter(value: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(value)
        .map(|_| value.to_owned())
        .map_err(|e| format!("not a valid log filter: {e}"))
}

/// The default embedded data directory for the current user.
pub fn default_data_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        // Root's home is not traversable by the `postgres` user the server runs as.
        return PathBuf::from("/var/lib/converge");
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("converge");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/converge"),
        None => PathBuf::from(".converge"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_role_is_rejected_with_a_clear_message() {
        let err = Cli::try_parse_from(["converge", "serve", "--role", "boss"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("invalid value 'boss'"), "{err}");
        assert!(err.contains("control"), "{err}");
    }

    #[test]
    fn bad_log_level_is_rejected() {
        let err = Cli::try_parse_from(["converge", "--log-level", "info,=[", "version"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a valid log filter"), "{err}");
    }

    #[test]
    fn serve_is_the_default_command_and_takes_its_flags_without_the_word() {
        let cli = Cli::try_parse_from(["converge", "--role", "broker"]).expect("parses");
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.role, Role::Broker);
    }

    #[test]
    fn dev_takes_its_flags_and_the_server_flags() {
        let cli = Cli::try_parse_from([
            "converge",
            "dev",
            "--teams",
            "a,b",
            "--fail-teams",
            "b",
            "--delay-ms",
            "0",
            "--exit-when-ready",
            "--timeout",
            "30",
            "--listen-addr",
            "127.0.0.1:0",
        ])
        .expect("parses");
        let Some(Command::Dev(dev)) = cli.command else {
            panic!("not dev: {:?}", cli.command);
        };
        assert_eq!(dev.teams, ["a", "b"]);
        assert_eq!(dev.fail_teams, ["b"]);
        assert_eq!(dev.bom_name, "demo");
        assert_eq!(dev.delay_ms, 0);
        assert!(dev.exit_when_ready);
        assert_eq!(dev.timeout(), Duration::from_secs(30));
        assert_eq!(cli.serve.listen_addr.addr.port(), 0);

        let cli = Cli::try_parse_from(["converge", "dev"]).expect("parses");
        let Some(Command::Dev(dev)) = cli.command else {
            panic!("not dev: {:?}", cli.command);
        };
        assert_eq!(dev.teams, ["payments", "search", "ledger"]);
        assert!(dev.fail_teams.is_empty() && !dev.exit_when_ready);
    }

    fn transport(args: &[&str]) -> Result<(Option<TlsSettings>, AccessSettings), String> {
        let mut argv = vec!["converge"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map_err(|e| e.to_string())?.serve.transport()
    }

    #[test]
    fn tls_options_must_fit_together() {
        let (tls, access) = transport(&[]).expect("plaintext");
        assert!(tls.is_none() && !access.restricts());
        let (tls, _) = transport(&["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"]).expect("tls");
        assert_eq!(tls.map(|t| t.files.client_ca), Some(None));
        let (tls, _) = transport(&[
            "--listen-addr",
            "https://0.0.0.0:443",
            "--tls-cert-file",
            "c.pem",
            "--tls-key-file",
            "k.pem",
            "--tls-client-ca-file",
            "ca.pem",
            "--allowed-worker-identities",
            "spiffe://prod/ns/workers/*,spiffe://prod/ci",
        ])
        .expect("mtls");
        assert!(tls.is_some_and(|t| t.files.client_ca.is_some()));
        for (args, expected) in [
            (&["--listen-addr", "https://127.0.0.1:1"][..], "LISTEN_ADDR is https://"),
            (&["--tls-cert-file", "c.pem"][..], "TLS needs both"),
            (&["--tls-key-file", "k.pem"][..], "TLS needs both"),
            (&["--tls-client-ca-file", "ca.pem"][..], "without TLS"),
            (
                &[
                    "--tls-cert-file",
                    "c",
                    "--tls-key-file",
                    "k",
                    "--allowed-api-identities",
                    "spiffe://a/b",
                ][..],
                "need TLS_CLIENT_CA_FILE",
            ),
            (
                &[
                    "--listen-addr",
                    "http://127.0.0.1:1",
                    "--tls-cert-file",
                    "c",
                    "--tls-key-file",
                    "k",
                ][..],
                "LISTEN_ADDR is http://",
            ),
            (&["--allowed-api-identities", "alice"][..], "SPIFFE ID"),
            (&["--listen-addr", "localhost:1"][..], "HOST:PORT"),
        ] {
            let err = transport(args).err().unwrap_or_default();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_probe_listener_is_on_by_default_and_shares_a_port_with_metrics() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["converge"];
            argv.extend_from_slice(args);
            Cli::try_parse_from(argv).map(|cli| cli.serve.http_listeners())
        };
        let health: SocketAddr = DEFAULT_HEALTH_ADDR.parse().expect("a socket address");
        assert_eq!(parse(&[]).ok(), Some(vec![(health, "HEALTH_ADDR")]));
        assert_eq!(parse(&["--health-addr", ""]).ok(), Some(vec![]));
        let metrics: SocketAddr = "0.0.0.0:9464".parse().expect("a socket address");
        assert_eq!(
            parse(&["--metrics-addr", "0.0.0.0:9464"]).ok(),
            Some(vec![(health, "HEALTH_ADDR"), (metrics, "METRICS_ADDR")])
        );
        assert_eq!(
            parse(&["--metrics-addr", "0.0.0.0:9464", "--health-addr", "0.0.0.0:9464"]).ok(),
            Some(vec![(metrics, "HEALTH_ADDR")])
        );
        assert!(parse(&["--health-addr", "localhost:8081"]).is_err());
        assert!(ServeArgs::default().http_listeners().is_empty());
    }

    #[test]
    fn roles_select_duties() {
        assert!(Role::All.serves_api() && Role::All.serves_workers());
        assert!(Role::Control.serves_api() && !Role::Control.serves_workers());
        assert!(!Role::Broker.serves_api() && Role::Broker.serves_workers());
    }
}
