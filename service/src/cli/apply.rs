//! `converge apply -f FILE|DIR|-`: every document of every file, kinds
//! first, each printed as created, configured or unchanged.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use serde::Deserialize as _;
use serde_json::Value;

use super::envelope::{self, Object};
use super::error::CliError;
use super::output::print;

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge apply -f examples/cli/                 # every *.yaml, *.yml, *.json in name order
  converge apply -f kind.yaml -f resources.json   # several files; kinds are applied first
  converge get noop hello -o yaml | converge apply -f -
  converge apply -f changes.yaml --dry-run        # validated by the server, nothing written

Documents are the envelope of docs/cli.md:
  apiVersion: converge.dev/v1
  type: Resource        # or KindManifest, ProviderConfig, ReactorBinding, List
  kind: noop
  kindVersion: 1
  name: hello
  spec: {}";

/// Arguments of `converge apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A YAML or JSON file, a directory (its *.yaml, *.yml and *.json files
    /// in name order) or `-` for stdin. Repeatable; a file may hold several
    /// documents (YAML `---`, or JSON values one after another).
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE|DIR|-")]
    pub files: Vec<PathBuf>,

    /// Have the server validate every object (validate_only) without
    /// writing anything.
    #[arg(long)]
    pub dry_run: bool,
}

/// One object and where it came from.
#[derive(Debug)]
pub struct Document {
    /// `file` or `file#N` (the document's position in the file, from 1).
    pub source: String,
    /// What it says.
    pub object: Object,
}

/// Reads and parses every file named, in the order given; a bad file or
/// document is an invalid-input error naming it.
pub fn read(args: &ApplyArgs) -> Result<Vec<Document>, CliError> {
    read_files(&args.files)
}

/// Reads and parses every file (or directory, or `-`) of `files`, in order.
pub fn read_files(files: &[PathBuf]) -> Result<Vec<Document>, CliError> {
    let mut documents = Vec::new();
    for path in files {
        for file in expand(path)? {
            let (name, text) = if file == Path::new("-") {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(|e| CliError::Invalid(format!("stdin: {e}")))?;
                ("stdin".to_owned(), text)
            } else {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| CliError::Invalid(format!("{}: {e}", file.display())))?;
                (file.display().to_string(), text)
            };
            let json = file.extension().is_some_and(|e| e == "json");
            // Editors on Windows start UTF-8 files with a byte-order mark,
            // which neither parser skips.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            let values = split(text, json).map_err(|e| CliError::Invalid(format!("{name}: {e}")))?;
            let many = values.len() > 1;
            for (i, value) in values.into_iter().enumerate() {
                let source = if many {
                    format!("{name}#{}", i + 1)
                } else {
                    name.clone()
                };
                let objects = envelope::parse(value).map_err(|e| CliError::Invalid(format!("{source}: {e}")))?;
                documents.extend(objects.into_iter().map(|object| Document {
                    source: source.clone(),
                    object,
                }));
            }
        }
    }
    if documents.is_empty() {
        return Err(CliError::Invalid("no documents found in the files given".to_owned()));
    }
    Ok(documents)
}

/// A path as the files it stands for: a directory's YAML and JSON files in
/// name order (not recursing), else itself.
fn expand(path: &Path) -> Result<Vec<PathBuf>, CliError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let file = entry
            .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?
            .path();
        let wanted = file
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if wanted && file.is_file() {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

/// The documents of one file: a JSON stream (`.json` files, whose errors
/// name line and column in JSON terms) or YAML documents. Empty YAML
/// documents (a trailing `---`) are skipped.
fn split(text: &str, json: bool) -> Result<Vec<Value>, String> {
    if json {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string());
    }
    let mut values = Vec::new();
    for document in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(document).map_err(|e| e.to_string())?;
        if !value.is_null() {
            values.push(value);
        }
    }
    Ok(values)
}

/// What applying one object did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Configured => "configured",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// Applies the documents, kind manifests first, then provider configs,
/// resources and reactor bindings (each group in file order); stops at the
/// first refusal, after printing what was applied before it.
pub async fn run(client: &Client, args: &ApplyArgs, mut documents: Vec<Document>) -> Result<(), CliError> {
    documents.sort_by_key(|d| d.object.object_type());
    for document in documents {
        let name = document.object.display_name();
        let outcome = apply_one(client, document.object, args.dry_run)
            .await
            .map_err(|e| match e {
                CliError::Status(status) => CliError::Status(tonic::Status::with_details_and_metadata(
                    status.code(),
                    format!("{name} ({}): {}", document.source, status.message()),
                    status.details().to_vec().into(),
                    status.metadata().clone(),
                )),
                other => other,
            })?;
        let dry = if args.dry_run { " (dry run)" } else { "" };
        print(&format!("{name} {}{dry}\n", outcome.word()))?;
    }
    Ok(())
}

fn not_found(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::NotFound
}

/// Applies one object. Whether it changed comes from the answer (kinds say
/// so; the others are created or not) and, for an existing object, from
/// its etag before and after: the etag moves exactly when the user-owned
/// part changes.
async fn apply_one(client: &Client, object: Object, dry_run: bool) -> Result<Outcome, CliError> {
    match object {
        Object::KindManifest(manifest) => {
            let answer = client
                .kinds()
                .apply_kind_manifest(pb::ApplyKindManifestRequest {
                    manifest: Some(manifest),
                    validate_only: dry_run,
                    request_id: String::new(),
                })
                .await?
                .into_inner();
            Ok(if answer.created {
                Outcome::Created
            } else if answer.unchanged {
                Outcome::Unchanged
            } else {
                Outcome::Configured
            })
        }
        Object::Resource(mut request) => {
            let before = match client
                .resources()
                .get_resource(pb::GetResourceRequest {
                    kind: request.kind.clone(),
                    name: request.name.clone(),
                })
                .await
            {
                Ok(r) => r.into_inner().resource,
                Err(status) if not_found(&status) => None,
                Err(status) => return Err(status.into()),
            };
            request.validate_only = dry_run;
            let answer = client.resources().apply_resource(request).await?.into_inner();
            let after = answer.resource.map(|r| r.etag);
            Ok(changed(answer.created, before.map(|r| r.etag), after, dry_run))
        }
        Object::ProviderConfig(config) => {
            let before = match client
                .provider_configs()
                .get_provider_config(pb::GetProviderConfigRequest {
                    name: config.name.clone(),
                })
                .await
            {
                Ok(r) => r.into_inner().provider_config,
                Err(status) if not_found(&status) => None,
                Err(status) => return Err(status.into()),
            };
            let answer = client
                .provider_configs()
                .apply_provider_config(pb::ApplyProviderConfigRequest {
                    provider_config: Some(config),
                    validate_only: dry_run,
                    request_id: String::new(),
                })
                .await?
                .into_inner();
            let after = answer.provider_config.map(|c| c.etag);
            Ok(changed(answer.created, before.map(|c| c.etag), after, dry_run))
        }
        Object::ReactorBinding(binding) => {
            let before = match client
                .reactor_bindings()
                .get_reactor_binding(pb::GetReactorBindingRequest {
                    name: binding.name.clone(),
                })
                .await
            {
                Ok(r) => r.into_inner().reactor_binding,
                Err(status) if not_found(&status) => None,
                Err(status) => return Err(status.into()),
            };
            let answer = client
                .reactor_bindings()
                .apply_reactor_binding(pb::ApplyReactorBindingRequest {
                    reactor_binding: Some(binding),
                    validate_only: dry_run,
                    request_id: String::new(),
                })
                .await?
                .into_inner();
            let after = answer.reactor_binding.map(|b| b.etag);
            Ok(changed(answer.created, before.map(|b| b.etag), after, dry_run))
        }
    }
}

/// The outcome from the answer's `created` and the etags around the call.
/// A dry run of an existing object says `configured` unless the returned
/// (would-be) etag equals the stored one.
fn changed(created: bool, before: Option<String>, after: Option<String>, dry_run: bool) -> Outcome {
    match (before, after) {
        _ if created => Outcome::Created,
        (None, _) if dry_run => Outcome::Created,
        (Some(b), Some(a)) if !b.is_empty() && a == b => Outcome::Unchanged,
        _ => Outcome::Configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_split_into_documents() {
        let yaml = "apiVersion: converge.dev/v1\ntype: List\nitems: []\n---\na: 1\n---\n";
        assert_eq!(split(yaml, false).unwrap().len(), 2);
        assert_eq!(split("{\"a\": 1} {\"b\": 2}\n", true).unwrap().len(), 2);
        assert!(split("a: [1", false).is_err());
        assert!(split("{\"a\": ", true).is_err());
    }

    #[test]
    fn outcomes_follow_created_and_the_etag() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(changed(true, None, s("a"), false), Outcome::Created);
        assert_eq!(changed(false, s("a"), s("a"), false), Outcome::Unchanged);
        assert_eq!(changed(false, s("a"), s("b"), false), Outcome::Configured);
        assert_eq!(changed(false, None, s("b"), true), Outcome::Created);
    }
}
