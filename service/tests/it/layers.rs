//! The code's layers, kept true: every `crate::` (and `converge_service::`)
//! path in `service/src` is read and checked against the layer each
//! top-level module sits in. A module may use the modules of lower layers
//! only; two files of one folder may not use each other (one of them is
//! below the other). The diagram in docs/architecture.md is rendered from
//! [`LAYERS`]; regenerate it with
//!
//! ```text
//! CONVERGE_UPDATE_LAYERS=1 cargo test -p converge-service --test it layers::
//! ```
//!
//! What is read: the code outside a trailing `#[cfg(test)] mod tests` block
//! (tests may use the test harness and whatever they check), without
//! comments. `testing` (the harness behind the `test-support` feature) is
//! for tests only and is not in a layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use the modules of any lower
/// layer, and none of its own layer or above.
const LAYERS: &[&[&str]] = &[
    &["domain", "version"],
    &["config"],
    &["telemetry"],
    &["db"],
    &["store"],
    &["catalog", "cluster"],
    &["contract"],
    &["engine", "broker", "watch"],
    &["api"],
    &["server"],
    // The binary: the command line, the demo built on it, and main.
    &["cli"],
    &["dev"],
    &["main"],
];

/// Modules outside the layers.
const UNLAYERED: &[&str] = &["testing", "lib"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path (`api/resource/mod.rs` is `["api", "resource"]`).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// One source line that names a path into the crate.
struct Use {
    line: usize,
    text: String,
    /// The path's segments after `crate::`/`converge_service::`, or after
    /// the module that `super::`/`self::` stand for.
    target: Vec<String>,
}

/// The code of `text` that is checked: up to a trailing test module,
/// comments removed (line by line).
fn checked_lines(text: &str) -> Vec<(usize, String)> {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or_default().to_owned()))
        .collect()
}

/// The segments of the path that starts at `at` in `line`: `a::b::f(x)`
/// yields `a`, `b`, `f`; a group (`a::{b, c}`) ends it.
fn segments(line: &str, at: usize) -> Vec<String> {
    let mut out = Vec::new();
    for part in line[at..].split("::") {
        let word: String = part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if word.is_empty() {
            break;
        }
        let whole = word.len() == part.len();
        out.push(word);
        if !whole {
            break;
        }
    }
    out
}

/// Every path into the crate on the checked lines of a file whose module
/// is `module`.
fn uses(module: &[String], text: &str) -> Vec<Use> {
    let mut found = Vec::new();
    for (line, code) in checked_lines(text) {
        for prefix in ["crate::", "converge_service::", "super::", "self::"] {
            let mut from = 0;
            while let Some(i) = code[from..].find(prefix).map(|i| i + from) {
                from = i + prefix.len();
                let before = code[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = segments(&code, from);
                let target = match prefix {
                    "super::" => {
                        // `super::super::x` climbs twice.
                        let mut base = module.to_vec();
                        base.pop();
                        let mut rest = rest.into_iter().peekable();
                        while rest.peek().is_some_and(|s| s == "super") {
                            rest.next();
                            base.pop();
                        }
                        base.extend(rest);
                        base
                    }
                    "self::" => module.iter().cloned().chain(rest).collect(),
                    _ => rest,
                };
                found.push(Use {
                    line,
                    text: code.trim().to_owned(),
                    target,
                });
            }
        }
    }
    found
}

/// A module path, `["api", "resource"]`.
type Module = Vec<String>;

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The files of `service/src`, each with its module path and text.
fn sources() -> Vec<(PathBuf, Vec<String>, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(src()).unwrap_or(&path).to_path_buf();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            (relative.clone(), module_of(&relative), text)
        })
        .collect()
}

#[test]
fn no_module_uses_one_of_its_own_layer_or_above() {
    let mut wrong = Vec::new();
    for (relative, module, text) in sources() {
        let Some(top) = module.first() else { continue };
        if UNLAYERED.contains(&top.as_str()) {
            continue;
        }
        let Some(own) = layer_of(top) else {
            wrong.push(format!(
                "{}: module `{top}` is in no layer of LAYERS",
                relative.display()
            ));
            continue;
        };
        for u in uses(&module, &text) {
            let Some(target) = u.target.first() else { continue };
            if target == top {
                continue;
            }
            match layer_of(target) {
                Some(layer) if layer < own => {}
                _ => wrong.push(format!(
                    "{}:{}: `{top}` uses `{target}` (layer {}), not below it: {}",
                    relative.display(),
                    u.line,
                    layer_of(target).map_or("none".to_owned(), |l| l.to_string()),
                    u.text
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_files_of_a_folder_use_each_other() {
    let files = sources();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(_, m, _)| m.clone()).collect();
    // The module each path lands in: its longest prefix that is a file.
    let resolve = |target: &[String]| {
        (1..=target.len())
            .rev()
            .map(|n| target[..n].to_vec())
            .find(|prefix| modules.contains(prefix))
    };
    // (user, used) -> the first line where it uses it.
    let mut edges: BTreeMap<(Module, Module), (PathBuf, usize, String)> = BTreeMap::new();
    for (relative, module, text) in &files {
        for u in uses(module, text) {
            if let Some(target) = resolve(&u.target)
                && target != *module
            {
                edges
                    .entry((module.clone(), target))
                    .or_insert((relative.clone(), u.line, u.text));
            }
        }
    }
    let nested = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut wrong = Vec::new();
    for ((from, to), (file, line, text)) in &edges {
        if from < to
            && !nested(from, to)
            && let Some((back_file, back_line, back_text)) = edges.get(&(to.clone(), from.clone()))
        {
            wrong.push(format!(
                "{} and {} use each other:\n  {}:{line}: {text}\n  {}:{back_line}: {back_text}",
                from.join("::"),
                to.join("::"),
                file.display(),
                back_file.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The diagram of [`LAYERS`] as docs/architecture.md shows it.
fn diagram() -> String {
    let line: Vec<String> = LAYERS.iter().map(|layer| layer.join(", ")).collect();
    format!(
        "<!-- layers: generated by service/tests/it/layers.rs -->\n```\n{}\n```\n<!-- layers: end -->",
        line.join("  ←  ")
    )
}

#[test]
fn the_architecture_page_shows_the_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let begin = text.find("<!-- layers: generated");
    let end = text
        .find("<!-- layers: end -->")
        .map(|i| i + "<!-- layers: end -->".len());
    let (Some(begin), Some(end)) = (begin, end) else {
        panic!("docs/architecture.md has no generated layers block");
    };
    let want = diagram();
    if std::env::var_os("CONVERGE_UPDATE_LAYERS").is_some() {
        let updated = format!("{}{want}{}", &text[..begin], &text[end..]);
        assert!(
            std::fs::write(&path, updated).is_ok(),
            "cannot write {}",
            path.display()
        );
        return;
    }
    assert_eq!(
        &text[begin..end],
        want,
        "the diagram differs from LAYERS; regenerate it with \
         CONVERGE_UPDATE_LAYERS=1 cargo test -p converge-service --test it layers::"
    );
}
