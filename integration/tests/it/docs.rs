//! The documents and packages say what is true: the licence the packages
//! declare is in the repository, the error reasons the docs and clients name
//! exist, request bodies shown in the docs are valid, and a method the docs
//! say answers UNIMPLEMENTED really does (asked of a real server).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use converge_integration::TestServer;
use tonic::Code;

fn repo() -> PathBuf {
    converge_integration::processes::repository_root()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Hand-written files with one of `extensions`: no generated code, no
/// dependencies, no build output, no experiment history.
fn sources(extensions: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                // Generated code lives in `gen/` in every language.
                let skipped = ["node_modules", "target", "gen", "dist", "perf-log", "venv"];
                if !(name.starts_with('.') || skipped.contains(&name.as_str())) {
                    walk(&path, extensions, out);
                }
            } else if extensions.iter().any(|e| name.ends_with(e)) && !name.contains("_pb") && !name.contains(".pb.") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo(), extensions, &mut out);
    out
}

/// The reasons catalogued in docs/errors.md (rows that start with a
/// backquoted UPPER_SNAKE reason).
fn catalogued_reasons() -> BTreeSet<String> {
    read(&repo().join("docs/errors.md"))
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(reason, _)| reason.to_owned()))
        .filter(|reason| reason.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect()
}

#[test]
fn the_declared_licence_is_in_the_repository() {
    let licence = read(&repo().join("LICENSE"));
    assert!(
        licence.contains("Apache License") && licence.contains("Version 2.0"),
        "LICENSE must hold the Apache License 2.0 text"
    );
    let workspace = read(&repo().join("Cargo.toml"));
    assert!(
        workspace.contains("license = \"Apache-2.0\""),
        "the crates declare Apache-2.0"
    );
    let ts = read(&repo().join("sdk-gen/ts/package.json"));
    assert!(
        ts.contains("\"license\": \"Apache-2.0\""),
        "sdk-gen/ts/package.json declares Apache-2.0"
    );
    let python = read(&repo().join("sdk-gen/python/pyproject.toml"));
    assert!(
        python.contains("license = \"Apache-2.0\""),
        "sdk-gen/python/pyproject.toml declares Apache-2.0"
    );
}

#[test]
fn every_reason_the_docs_and_clients_compare_with_exists() {
    let mut known = catalogued_reasons();
    assert!(known.contains("RESOURCE_NOT_FOUND"), "docs/errors.md lists the reasons");
    // The value names of the proto enum converge.v1.ErrorReason (the reason
    // with its prefix), the prefix itself and the zero value.
    let prefixed: Vec<String> = known.iter().map(|r| format!("ERROR_REASON_{r}")).collect();
    known.extend(prefixed);
    known.extend(["ERROR_REASON_".to_owned(), "ERROR_REASON_UNSPECIFIED".to_owned()]);
    let mut unknown = Vec::new();
    for path in sources(&[".md", ".go", ".py", ".ts", ".rs"]) {
        for (n, line) in read(&path).lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            // The UPPER_SNAKE literals quoted just after each "reason" on the
            // line: `GetReason() == "X"`, `info.reason, "X"`, `"reason": "X"`.
            for (at, _) in lower.match_indices("reason") {
                let window: String = line[at..].chars().take(40).collect();
                for (i, token) in window.split('"').enumerate() {
                    let closed = window.split('"').count() > i + 1;
                    let reason_like = token.len() > 3
                        && token.contains('_')
                        && token
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
                    if i > 0 && closed && reason_like && !known.contains(token) {
                        unknown.push(format!("{}:{}: {token}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "reasons not in docs/errors.md:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn request_bodies_in_the_docs_are_valid_json_with_object_update_masks() {
    let mut problems = Vec::new();
    for path in sources(&[".md"]) {
        let text = read(&path);
        for (i, body) in text.split(" -d '").enumerate().skip(1) {
            let Some((json, _)) = body.split_once('\'') else {
                continue;
            };
            let json = json.replace("\\\n", "");
            let at = format!("{} (body {i})", path.display());
            match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(value) => {
                    if let Some(mask) = value.get("update_mask").or_else(|| value.get("updateMask")) {
                        let paths = mask.get("paths").and_then(serde_json::Value::as_array);
                        if !paths.is_some_and(|p| p.iter().all(serde_json::Value::is_string)) {
                            problems.push(format!("{at}: update_mask must be {{\"paths\": [...]}}, got {mask}"));
                        }
                    }
                }
                Err(e) => problems.push(format!("{at}: not JSON ({e}): {json:.80}")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The contract's methods by service, read from the proto files.
fn contract_methods() -> BTreeMap<String, Vec<String>> {
    let mut methods: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (dir, package) in [
        ("proto/converge/v1", "converge.v1"),
        ("proto/converge/worker/v1", "converge.worker.v1"),
    ] {
        let Ok(entries) = std::fs::read_dir(repo().join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let mut service = None;
            for line in read(&entry.path()).lines() {
                let line = line.trim();
                if let Some(rest) = line.strip_prefix("service ") {
                    service = rest.split_whitespace().next().map(|s| format!("{package}.{s}"));
                } else if let (Some(rest), Some(service)) = (line.strip_prefix("rpc "), &service)
                    && let Some((name, _)) = rest.split_once('(')
                {
                    methods.entry(service.clone()).or_default().push(name.trim().to_owned());
                }
            }
        }
    }
    methods
}

/// The code a method answers to an empty request.
async fn answer(channel: tonic::transport::Channel, service: &str, method: &str) -> Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    if grpc.ready().await.is_err() {
        return Code::Unavailable;
    }
    let Ok(path) = format!("/{service}/{method}").parse::<tonic::codegen::http::uri::PathAndQuery>() else {
        return Code::InvalidArgument;
    };
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let call = grpc.unary(tonic::Request::new(()), path, codec);
    match tokio::time::timeout(std::time::Duration::from_secs(5), call).await {
        Ok(Ok(_)) => Code::Ok,
        Ok(Err(status)) => status.code(),
        // A streaming method keeps the call open: it is served.
        Err(_) => Code::Ok,
    }
}

#[tokio::test]
async fn methods_the_docs_call_unimplemented_are() -> anyhow::Result<()> {
    let methods = contract_methods();
    assert!(methods.len() >= 7, "{methods:?}");
    let server = TestServer::start().await?;
    let channel = server.client().await?.channel();
    let mut wrong = Vec::new();
    for path in sources(&[".md"]) {
        let text = read(&path).replace('\n', " ");
        for sentence in text.split(". ").filter(|s| s.contains("UNIMPLEMENTED")) {
            // A sentence about what happens in a role that does not serve a
            // service is about the transport, not the capability.
            if sentence.contains("role") {
                continue;
            }
            for (service, names) in &methods {
                let short = service.rsplit('.').next().unwrap_or(service);
                let named: Vec<&String> = names
                    .iter()
                    .filter(|m| {
                        sentence.contains(&format!("{short}.{m}")) || sentence.contains(&format!("{short}/{m}"))
                    })
                    .collect();
                // A service named alone stands for all its methods.
                let whole = named.is_empty()
                    && sentence
                        .split(|c: char| !c.is_ascii_alphanumeric())
                        .any(|word| word == short);
                let checked: Vec<&String> = if whole { names.iter().collect() } else { named };
                for method in checked {
                    let code = answer(channel.clone(), service, method).await;
                    if code != Code::Unimplemented {
                        wrong.push(format!(
                            "{}: says {short}.{method} answers UNIMPLEMENTED, but it answers {code:?}: {sentence:.160}",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    server.shutdown().await
}

/// One field of the contract as written: its message, name, leading comment
/// and the options in its brackets.
struct ProtoField {
    at: String,
    name: String,
    comment: String,
    options: String,
}

/// The fields of every message in `proto/converge`, read from the source
/// (the comments are the contract's prose; the generated descriptors drop
/// the options they would be compared with).
fn contract_fields() -> Vec<ProtoField> {
    let mut fields = Vec::new();
    for path in sources(&[".proto"]) {
        if !path.components().any(|c| c.as_os_str() == "converge") || path.starts_with(repo().join("sdk-gen")) {
            continue;
        }
        let text = read(&path);
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Block kinds (message, enum, oneof, service) from the outside in.
        let mut blocks: Vec<(String, String)> = Vec::new();
        let mut comment = String::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if let Some(text) = line.strip_prefix("//") {
                comment.push_str(text.trim());
                comment.push(' ');
                continue;
            }
            if let Some(head) = line.strip_suffix('{') {
                let mut words = head.split_whitespace();
                let kind = words.next().unwrap_or_default().to_owned();
                blocks.push((kind, words.next().unwrap_or_default().to_owned()));
            } else if line == "}" {
                blocks.pop();
            } else if blocks
                .last()
                .is_some_and(|(kind, _)| kind == "message" || kind == "oneof")
                && line.contains(" = ")
                && !line.starts_with("option ")
            {
                let mut declaration = line.to_owned();
                while !declaration.ends_with(';') {
                    let Some(next) = lines.next() else { break };
                    declaration.push(' ');
                    declaration.push_str(next.trim());
                }
                let (head, options) = declaration.split_once('[').unwrap_or((&declaration, ""));
                let name = head.split(" = ").next().unwrap_or_default().split_whitespace().last();
                let path: Vec<&str> = blocks
                    .iter()
                    .filter(|(k, _)| k == "message")
                    .map(|(_, n)| n.as_str())
                    .collect();
                fields.push(ProtoField {
                    at: format!("{file}: {}", path.join(".")),
                    name: name.unwrap_or_default().to_owned(),
                    comment: comment.trim().to_owned(),
                    options: options.to_owned(),
                });
            }
            comment.clear();
        }
    }
    fields
}

/// The contract's `google.api.field_behavior` and `field_info` annotations
/// say what its comments say, so generated code, linters and readers agree:
/// "Output only." ⇔ OUTPUT_ONLY, "Optional." ⇔ OPTIONAL, "Immutable" ⇔
/// IMMUTABLE, a comment opening "Required" ⇒ REQUIRED (and REQUIRED only
/// where the comment says required), and the lease tokens (random UUIDs)
/// are UUID4.
#[test]
fn field_annotations_match_the_contract_comments() {
    let fields = contract_fields();
    assert!(
        fields.len() > 200,
        "the contract's fields were not found ({})",
        fields.len()
    );
    let mut wrong = Vec::new();
    for field in &fields {
        let has = |behavior: &str| {
            field
                .options
                .contains(&format!("(google.api.field_behavior) = {behavior}"))
        };
        let says = |word: &str| field.comment.starts_with(word);
        let checks = [
            ("OUTPUT_ONLY", says("Output only"), has("OUTPUT_ONLY")),
            ("OPTIONAL", says("Optional"), has("OPTIONAL")),
            ("IMMUTABLE", field.comment.contains("Immutable"), has("IMMUTABLE")),
            (
                "UUID4",
                field.name == "lease_token",
                field.options.contains("(google.api.field_info).format = UUID4"),
            ),
        ];
        for (behavior, said, annotated) in checks {
            if said != annotated {
                wrong.push(format!(
                    "{} {}: comment {said}, {behavior} {annotated}",
                    field.at, field.name
                ));
            }
        }
        let required_said = field.comment.contains("Required") && !field.comment.contains("Required when");
        if (says("Required") && !has("REQUIRED")) || (has("REQUIRED") && !required_said) {
            wrong.push(format!(
                "{} {}: REQUIRED does not match \"{}\"",
                field.at, field.name, field.comment
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "annotations and comments disagree:\n{}",
        wrong.join("\n")
    );
}

/// The `converge` command lines of the shell blocks of the user docs:
/// every line of a ```sh block that runs `converge` (after an `echo ... |`
/// or a `PATH=` prefix too), as its words after `converge`.
fn documented_command_lines() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for name in ["README.md", "docs/quickstart.md", "docs/cli.md", "docs/deployment.md"] {
        let text = read(&repo().join(name));
        let mut in_sh = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            if !in_sh {
                continue;
            }
            let command = line.rsplit_once("| ").map_or(line, |(_, c)| c).trim_start();
            if let Some(rest) = command.strip_prefix("converge ") {
                found.push((name.to_owned(), rest.to_owned()));
            }
        }
    }
    found
}

#[tokio::test]
async fn the_documented_command_lines_and_documents_are_accepted() -> anyhow::Result<()> {
    use converge_integration::processes::binary;
    let converge = binary("converge")?;
    let lines = documented_command_lines();
    assert!(lines.len() >= 20, "{lines:?}");
    let mut wrong = Vec::new();
    // Every documented command word and its flags parse (`--help` would
    // skip the check of required arguments, so the words are checked alone).
    for (file, line) in &lines {
        let word = line.split_whitespace().next().unwrap_or_default();
        // `migrate KIND ...` is the kind migration (`migrate-kind`), `migrate`
        // alone the database command: the binary tells them by the kind.
        let kind = line
            .split_whitespace()
            .nth(1)
            .filter(|w| word == "migrate" && !w.starts_with('-'));
        let out = std::process::Command::new(&converge)
            .args([word].into_iter().chain(kind).chain(["--help"]))
            .output()?;
        if !out.status.success() {
            wrong.push(format!("{file}: `converge {line}`: `{word}` is no command"));
        }
        for flag in line.split_whitespace().filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap_or(flag);
            if !String::from_utf8_lossy(&out.stdout).contains(flag) {
                wrong.push(format!("{file}: `converge {line}`: {word} has no {flag}"));
            }
        }
    }
    // The quickstart's documents, applied in order to a real server, are
    // envelopes the command line reads (the server may still refuse one,
    // as the walkthrough shows).
    let server = TestServer::start().await?;
    let text = read(&repo().join("docs/quickstart.md"));
    let mut documents = 0;
    for block in text.split("<<'EOF'\n").skip(1) {
        let Some((body, _)) = block.split_once("\nEOF\n") else {
            continue;
        };
        documents += 1;
        // Not a blocking wait: the server runs on this test's runtime.
        let mut child = tokio::process::Command::new(&converge)
            .args(["apply", "-f", "-", "--server", &server.address()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt as _;
            stdin.write_all(body.as_bytes()).await?;
        }
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output()).await??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refused_by_server = stderr.starts_with("converge: INVALID_ARGUMENT: ");
        if !out.status.success() && !refused_by_server {
            wrong.push(format!("docs/quickstart.md document {documents}: {stderr}"));
        }
    }
    assert!(documents >= 4, "the quickstart's heredocs were not found");
    // The documents the help and docs/cli.md apply as their first example.
    let out = tokio::process::Command::new(&converge)
        .args(["apply", "-f", "examples/cli/", "--server", &server.address()])
        .current_dir(repo())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out).await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("Resource/noop/hello ") || !stdout.contains("Resource/noop/world ") {
        wrong.push(format!(
            "converge apply -f examples/cli/: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    server.shutdown().await
}
