//! `converge check-policy`: checks an authorization policy file offline,
//! with the server's own parser, and answers "may this identity do that?"
//! (ADR 47; docs/security.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::error::CliError;
use super::output::print;
use converge_service::domain::authz::{Access, Object, Policy, ResourceAction, Scope, Verb};

/// Examples shown under `--help`.
pub const EXAMPLES: &str = "Examples:
  converge check-policy policy.yaml
  converge check-policy policy.yaml --as spiffe://prod.example/ns/payments/sa/ci --verb apply --kind app -l team=payments
  converge check-policy policy.yaml --as spiffe://prod.example/ns/workers/sa/aws --verb serve --kind vpc@2
  converge check-policy policy.yaml --as spiffe://prod.example/ns/audit/sa/a --verb write --object kinds";

/// Arguments of `converge check-policy`.
#[derive(Debug, clap::Args)]
pub struct CheckPolicyArgs {
    /// The policy file (YAML or JSON).
    pub file: PathBuf,
    /// Ask about this identity (a SPIFFE ID).
    #[arg(long = "as", requires = "verb")]
    pub identity: Option<String>,
    /// The verb asked about (`get`, `apply`, `serve`, …; `read`/`write` with --object).
    #[arg(long, requires = "identity")]
    pub verb: Option<String>,
    /// The kind asked about: KIND, KIND@VERSION, or * for every kind.
    #[arg(long, conflicts_with = "object")]
    pub kind: Option<String>,
    /// The object asked about: kinds, provider-configs, reactor-bindings or cluster.
    #[arg(long)]
    pub object: Option<String>,
    /// The labels of the resource asked about (k=v,k=v).
    #[arg(short = 'l', long, default_value = "")]
    pub labels: String,
}

/// Checks the file; with `--as`, prints the decision and exits 1 when refused.
pub fn run(args: &CheckPolicyArgs) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| CliError::Invalid(format!("cannot read {}: {e}", args.file.display())))?;
    let policy = Policy::parse(&text).map_err(|problems| {
        let lines: Vec<String> = problems
            .iter()
            .map(|v| {
                format!(
                    "  {}: {}",
                    if v.field.is_empty() { "/" } else { &v.field },
                    v.description
                )
            })
            .collect();
        CliError::Invalid(format!(
            "{} is not a valid policy:\n{}",
            args.file.display(),
            lines.join("\n")
        ))
    })?;
    let (Some(identity), Some(verb)) = (&args.identity, &args.verb) else {
        return print(&format!(
            "{}: valid, {} bindings\n",
            args.file.display(),
            policy.bindings()
        ));
    };
    let allowed = match (&args.object, &args.kind) {
        (Some(object), _) => {
            let object = Object::ALL
                .into_iter()
                .find(|o| o.as_str() == object)
                .ok_or_else(|| CliError::Invalid(format!("unknown object {object:?}")))?;
            let access = match verb.as_str() {
                "read" => Access::Read,
                "write" => Access::Write,
                _ => return Err(CliError::Invalid("the verbs on objects are read and write".into())),
            };
            policy.allows_object(identity, object, access)
        }
        (None, Some(kind)) => {
            let verb = Verb::ALL
                .into_iter()
                .find(|v| v.as_str() == verb)
                .ok_or_else(|| CliError::Invalid(format!("unknown verb {verb:?}")))?;
            let (kind, version) = match kind.split_once('@') {
                Some((kind, version)) => (
                    kind,
                    Some(
                        version
                            .parse::<i32>()
                            .map_err(|_| CliError::Invalid(format!("bad version in {kind:?}")))?,
                    ),
                ),
                None => (kind.as_str(), None),
            };
            let labels = parse_labels(&args.labels)?;
            let action = ResourceAction {
                verb,
                kind,
                kind_version: version,
                operation: None,
            };
            match policy.scope(identity, action) {
                Scope::None => false,
                Scope::All => true,
                scope @ Scope::AnyOf(_) => scope.admits(&labels),
            }
        }
        (None, None) => return Err(CliError::Invalid("--as needs --kind or --object".into())),
    };
    if allowed {
        print("allowed\n")
    } else {
        Err(CliError::Failed("refused".into()))
    }
}

fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, CliError> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| CliError::Invalid(format!("a label is key=value, not {pair:?}")))
        })
        .collect()
}
