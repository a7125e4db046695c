//! One version for everything scripts/release builds (docs/releasing.md):
//! `[workspace.package] version` in the root Cargo.toml. Every other place
//! that states it must agree, or the artifacts would disagree about what they
//! are; and the CHANGELOG must have a section for it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    converge_integration::processes::repository_root()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The source of truth: the first `version = "…"` line of the root
/// Cargo.toml, in `[workspace.package]` (the line scripts/release and
/// deploy/image/build read).
fn version() -> String {
    let manifest = read("Cargo.toml");
    let section = manifest
        .split_once("[workspace.package]")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("Cargo.toml has no [workspace.package]"));
    let first = manifest.lines().find(|l| l.starts_with("version = \""));
    let ours = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find(|l| l.starts_with("version = \""));
    assert_eq!(
        first, ours,
        "the first version line of Cargo.toml is [workspace.package]'s"
    );
    let value = quoted(ours.unwrap_or_else(|| panic!("[workspace.package] has no version")));
    let parts: Vec<&str> = value.split('.').collect();
    assert!(
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
        "the workspace version {value:?} is MAJOR.MINOR.PATCH"
    );
    value
}

/// The text between the first pair of double quotes of `line`, or the line
/// itself, trimmed, when it has none (an unquoted YAML scalar).
fn quoted(line: &str) -> String {
    match line.split('"').nth(1) {
        Some(inner) => inner.to_owned(),
        None => line.trim().to_owned(),
    }
}

/// The quoted value on the line of `path` that starts with `prefix` (after
/// indentation), or why there is none.
fn stated(path: &str, prefix: &str) -> Result<String, String> {
    let text = read(path);
    let mut found = text.lines().map(str::trim_start).filter(|l| l.starts_with(prefix));
    match (found.next(), found.next()) {
        (Some(line), None) => Ok(quoted(line.strip_prefix(prefix).unwrap_or(line))),
        (None, _) => Err(format!("no line starting with `{prefix}`")),
        (Some(_), Some(_)) => Err(format!("more than one line starting with `{prefix}`")),
    }
}

fn json(path: &str) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn cargo_metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1"])
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cargo metadata: {e}"));
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("cargo metadata's output: {e}"))
}

/// Each mismatch as "where: found …", for one assertion listing them all.
fn mismatches(want: &str, places: Vec<(String, Result<String, String>)>) -> Vec<String> {
    places
        .into_iter()
        .filter_map(|(place, found)| match found {
            Ok(v) if v == want => None,
            Ok(v) => Some(format!("{place}: {v:?}")),
            Err(why) => Some(format!("{place}: {why}")),
        })
        .collect()
}

#[test]
fn every_crate_has_the_workspace_version_and_publishable_ones_are_required_at_it() {
    let want = version();
    let metadata = cargo_metadata();
    let packages = metadata["packages"].as_array().expect("packages");
    // What scripts/release packages: the members without `publish = false`.
    let mut publishable: Vec<&str> = packages
        .iter()
        .filter(|p| p["publish"].is_null())
        .filter_map(|p| p["name"].as_str())
        .collect();
    publishable.sort_unstable();
    assert_eq!(
        publishable,
        ["converge-proto", "converge-sdk", "converge-tls"],
        "the publishable crates are the SDK and the crates it needs (docs/releasing.md)"
    );

    let mut places = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        places.push((
            format!("crate {name}"),
            Ok(package["version"].as_str().unwrap_or_default().to_owned()),
        ));
        // A dependency on a publishable crate must name the version it gets
        // from the registry once packaged: `version` on the path dependency.
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            if publishable.contains(&dep_name) && dep["path"].is_string() {
                let req = dep["req"].as_str().unwrap_or_default();
                let found = req
                    .strip_prefix('^')
                    .map(str::to_owned)
                    .ok_or(format!("requirement {req:?}"));
                places.push((
                    format!("{name}'s dependency on {dep_name} (workspace.dependencies)"),
                    found,
                ));
            }
        }
    }
    let wrong = mismatches(&want, places);
    assert!(
        wrong.is_empty(),
        "not the workspace version {want}:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_sdks_server_and_deployment_state_the_workspace_version() {
    let want = version();
    let package = json("sdk-gen/ts/package.json");
    let lock = json("sdk-gen/ts/package-lock.json");
    let text = |v: &Value| v.as_str().map(str::to_owned).ok_or_else(|| "absent".to_owned());
    let server = converge_service::version::VERSION;
    let places = vec![
        (
            "sdk-gen/python/src/converge_sdk/__init__.py __version__".to_owned(),
            stated("sdk-gen/python/src/converge_sdk/__init__.py", "__version__ = "),
        ),
        ("sdk-gen/ts/package.json version".to_owned(), text(&package["version"])),
        (
            "sdk-gen/ts/package-lock.json version".to_owned(),
            text(&lock["version"]),
        ),
        (
            "sdk-gen/ts/package-lock.json packages[\"\"].version".to_owned(),
            text(&lock["packages"][""]["version"]),
        ),
        (
            "sdk-gen/ts/src/worker/options.ts SDK_VERSION".to_owned(),
            stated("sdk-gen/ts/src/worker/options.ts", "export const SDK_VERSION = "),
        ),
        (
            "sdk-gen/go/converge/worker/options.go Version".to_owned(),
            stated("sdk-gen/go/converge/worker/options.go", "const Version = "),
        ),
        // The server's version is the crate's, plus `+<git describe>` from a checkout.
        (
            "converge_service::version::VERSION".to_owned(),
            Ok(server.split_once('+').map_or(server, |(v, _)| v).to_owned()),
        ),
        (
            "deploy/helm/converge/Chart.yaml version".to_owned(),
            stated("deploy/helm/converge/Chart.yaml", "version: "),
        ),
        (
            "deploy/helm/converge/Chart.yaml appVersion".to_owned(),
            stated("deploy/helm/converge/Chart.yaml", "appVersion: "),
        ),
    ];
    let mut wrong = mismatches(&want, places);

    // pyproject.toml states no version of its own.
    let pyproject = read("sdk-gen/python/pyproject.toml");
    if !pyproject.contains("dynamic = [\"version\"]")
        || !pyproject.contains("version = {attr = \"converge_sdk.__version__\"}")
    {
        wrong.push("sdk-gen/python/pyproject.toml: the version is not read from converge_sdk.__version__".into());
    }
    // The compose file's default images are this version's.
    for line in read("deploy/compose/compose.yaml").lines() {
        if let Some((_, tag)) = line.split_once("localhost/converge:") {
            let tag = tag.trim_end_matches('}');
            if tag != want && tag != format!("{want}-all-in-one") {
                wrong.push(format!("deploy/compose/compose.yaml: image tag {tag:?}"));
            }
        }
    }
    // What the SDK docs call the current version and the Go module's tag.
    let sdk_readme = read("sdk-gen/README.md");
    for claim in [format!("currently **{want}**"), format!("tag `sdk-gen/go/v{want}`")] {
        if !sdk_readme.contains(&claim) {
            wrong.push(format!("sdk-gen/README.md: does not say {claim}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not the workspace version {want}:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_changelog_has_a_section_for_the_version_below_unreleased() {
    let want = version();
    let changelog = read("CHANGELOG.md");
    let headings: Vec<&str> = changelog.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings.first().copied(),
        Some("## [Unreleased]"),
        "CHANGELOG.md starts with Unreleased"
    );
    // `## [0.1.0]`, and ` - YYYY-MM-DD` once it is tagged.
    let ours = format!("## [{want}]");
    assert!(
        headings
            .get(1)
            .is_some_and(|h| *h == ours || h.starts_with(&format!("{ours} - "))),
        "CHANGELOG.md's first version section is {want}'s: {headings:?}"
    );
}
