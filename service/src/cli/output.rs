//! How client commands print: aligned tables (`table`, `wide`), the
//! envelope as JSON or YAML, or one name per line.

use std::io::Write as _;

use clap::ValueEnum;
use converge_sdk::proto::v1 as pb;
use serde_json::{Map, Value, json};

use super::envelope::API_VERSION;
use super::error::CliError;

/// `-o`: the output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// Aligned columns, more of them.
    Wide,
    /// The envelope as JSON (a `List` for several objects).
    Json,
    /// The envelope as YAML (a `List` for several objects).
    Yaml,
    /// One `Type/name` per line.
    Name,
}

/// Columns and rows, printed aligned with three spaces between columns.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The text, one line per row after the header; empty without rows.
    pub fn render(&self) -> String {
        if self.rows.is_empty() {
            return String::new();
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("   ");
                }
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `value` as YAML text that YAML 1.1 and 1.2 readers take back alike.
pub fn yaml(value: &Value) -> String {
    super::yaml::to_string(value)
}

/// Writes `text` to stdout. A closed pipe (`converge get ... | head`) is
/// [`CliError::StdoutClosed`], which ends the command quietly with success
/// as other Unix tools do.
pub fn print(text: &str) -> Result<(), CliError> {
    print_bytes(text.as_bytes())
}

/// [`print`] for bytes.
pub fn print_bytes(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::StdoutClosed
        } else {
            CliError::Failed(format!("cannot write to stdout: {e}"))
        }
    })
}

/// The keys a document starts with, in this order (the rest follow by
/// name): what identifies an object first, then what the user wrote.
const LEADING_KEYS: &[&str] = &[
    "apiVersion",
    "type",
    "kind",
    "kindVersion",
    "name",
    "labels",
    "spec",
    "providerConfig",
    "items",
];

/// An envelope's entries, [`LEADING_KEYS`] first, the rest by name.
fn leading_first(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let leading = LEADING_KEYS.iter().filter_map(|k| map.get_key_value(*k));
    let rest = map.iter().filter(|(k, _)| !LEADING_KEYS.contains(&k.as_str()));
    leading.chain(rest).collect()
}

/// An envelope printed with [`LEADING_KEYS`] first, at every level that is
/// a document (the top, and each item of a `List`).
struct Document<'a>(&'a Value);

impl serde::Serialize for Document<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let Value::Object(map) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut out = serializer.serialize_map(Some(map.len()))?;
        for (key, value) in leading_first(map) {
            match value {
                Value::Array(items) if key == "items" => {
                    let items: Vec<Document<'_>> = items.iter().map(Document).collect();
                    out.serialize_entry(key, &items)?;
                }
                _ => out.serialize_entry(key, value)?,
            }
        }
        out.end()
    }
}

/// Prints envelopes as JSON or YAML: one object as itself when `single`,
/// else a `List` of them.
pub fn print_documents(format: Format, items: Vec<Value>, single: bool) -> Result<(), CliError> {
    let value = match (single, items.len()) {
        (true, 1) => items.into_iter().next().unwrap_or(Value::Null),
        _ => json!({"apiVersion": API_VERSION, "type": "List", "items": items}),
    };
    let text = match format {
        Format::Json => {
            let mut text =
                serde_json::to_string_pretty(&Document(&value)).map_err(|e| CliError::Failed(e.to_string()))?;
            text.push('\n');
            text
        }
        _ => super::yaml::document(&value, leading_first),
    };
    print(&text)
}

/// How long ago `t` was, kubectl style: `45s`, `12m`, `3h`, `9d`.
pub fn age(t: Option<&prost_types::Timestamp>) -> String {
    let Some(t) = t else { return "-".to_owned() };
    let now = chrono::Utc::now().timestamp();
    let secs = (now - t.seconds).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A duration given as `90`, `90s`, `5m` or `1h`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| "expected a duration such as 30s, 5m or 1h".to_owned())?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err("expected a duration such as 30s, 5m or 1h".to_owned()),
    };
    Ok(std::time::Duration::from_secs(secs))
}

/// A phase given as `ready`, `Ready` or `PHASE_READY`.
pub fn parse_phase(text: &str) -> Result<pb::Phase, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = if upper.starts_with("PHASE_") {
        upper
    } else {
        format!("PHASE_{upper}")
    };
    pb::Phase::from_str_name(&name)
        .filter(|p| *p != pb::Phase::Unspecified)
        .ok_or_else(|| "expected ready, reconciling, degraded, failed, deleting, orphaned or quarantined".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_trim() {
        let mut t = Table::new(&["NAME", "PHASE"]);
        t.row(vec!["a".into(), "Ready".into()]);
        t.row(vec!["longer".into(), String::new()]);
        assert_eq!(t.render(), "NAME     PHASE\na        Ready\nlonger\n");
        assert_eq!(Table::new(&["X"]).render(), "");
    }

    #[test]
    fn documents_lead_with_what_identifies_them() {
        let value = json!({"apiVersion": API_VERSION, "type": "List", "items": [
            {"uid": "u", "spec": {"b": 1, "a": 2}, "name": "n", "type": "Resource", "apiVersion": API_VERSION, "kind": "k"}
        ]});
        let text = serde_json::to_string(&Document(&value)).unwrap();
        assert_eq!(
            text,
            r#"{"apiVersion":"converge.dev/v1","type":"List","items":[{"apiVersion":"converge.dev/v1","type":"Resource","kind":"k","name":"n","spec":{"a":2,"b":1},"uid":"u"}]}"#
        );
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("90").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("5m").unwrap().as_secs(), 300);
        assert_eq!(parse_duration("1h").unwrap().as_secs(), 3600);
        assert!(parse_duration("5 days").is_err());
        assert!(parse_duration("m").is_err());
    }
}
