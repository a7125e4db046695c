//! The conformance workers of the four SDKs (conformance/README.md): how to
//! build and start each language's, and the kinds they serve. The
//! conformance suite and the chaos soak both run them.

use std::path::Path;
use std::process::Stdio;

use converge_sdk::Client;
use tokio::process::Command;

use crate::processes::{binary, repository_root, run_checked};

/// A language and how to start its conformance worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `converge-conformance-worker` (sdk-rust).
    Rust,
    /// sdk-gen/go/cmd/conformance-worker, built with `go build`.
    Go,
    /// `python -m converge_sdk.conformance` in sdk-gen's venv.
    Python,
    /// sdk-gen/ts's `dist/conformance/worker.js` on node.
    TypeScript,
}

impl Language {
    /// The name the worker writes on its log lines.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Go => "go",
            Language::Python => "python",
            Language::TypeScript => "typescript",
        }
    }

    /// Builds what the worker needs (once per test process) and returns the
    /// command that starts it.
    pub async fn command(self, scratch: &Path) -> anyhow::Result<Command> {
        let root = repository_root();
        Ok(match self {
            Language::Rust => Command::new(binary("converge-conformance-worker")?),
            Language::Go => {
                let out = scratch.join("go-conformance-worker");
                // A module of its own (sdk-gen/go/README.md).
                run_checked(
                    Command::new("go")
                        .args(["build", "-o"])
                        .arg(&out)
                        .arg(".")
                        .current_dir(root.join("sdk-gen/go/cmd/conformance-worker")),
                )
                .await?;
                Command::new(out)
            }
            Language::Python => {
                let python = root.join("sdk-gen/.venv/bin/python");
                anyhow::ensure!(
                    python.exists(),
                    "{} is missing: run sdk-gen/generate --install-only",
                    python.display()
                );
                let mut command = Command::new(python);
                command
                    .args(["-m", "converge_sdk.conformance"])
                    .env("PYTHONPATH", root.join("sdk-gen/python/src"));
                command
            }
            Language::TypeScript => {
                let package = root.join("sdk-gen/ts");
                anyhow::ensure!(
                    package.join("node_modules").exists(),
                    "{} is missing: run sdk-gen/generate --install-only",
                    package.join("node_modules").display()
                );
                run_checked(
                    Command::new("npm")
                        .args(["run", "--silent", "build"])
                        .current_dir(&package),
                )
                .await?;
                let mut command = Command::new("node");
                command.arg(package.join("dist/conformance/worker.js"));
                command
            }
        })
    }
}

/// Every language, in the order the suites run them.
pub const ALL: [Language; 4] = [Language::Rust, Language::Go, Language::Python, Language::TypeScript];

impl std::str::FromStr for Language {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown language {s:?}: one of rust, go, python, typescript"))
    }
}

/// Applies the kinds of `conformance/kinds` (`conf-leaf`, `conf-composite`).
pub async fn apply_conformance_kinds(client: &Client) -> anyhow::Result<()> {
    for file in ["leaf.json", "composite.json"] {
        let path = repository_root().join("conformance/kinds").join(file);
        let request = converge_examples::manifest::parse_apply_request(file, &std::fs::read_to_string(path)?)?;
        client.kinds().apply_kind_manifest(request).await?;
    }
    Ok(())
}

/// A new command like `base` (its program, arguments, environment and
/// directory), to start the same worker again: stdin and stdout go to
/// /dev/null and the process is killed when dropped.
pub fn command_like(base: &Command) -> Command {
    let base = base.as_std();
    let mut command = Command::new(base.get_program());
    command.args(base.get_args());
    for (key, value) in base.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    if let Some(dir) = base.get_current_dir() {
        command.current_dir(dir);
    }
    command.stdin(Stdio::null()).stdout(Stdio::null()).kill_on_drop(true);
    command
}
