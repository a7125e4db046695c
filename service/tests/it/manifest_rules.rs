//! Agreement between the manifest rules in Rust (`validate_reactions`) and in
//! the database (`kind_reactions_violation`, the wrapper over the rules in
//! migrations/functions/kinds.sql, behind the
//! `kind_manifest` CHECK constraint), on a real migrated database.

// Set-up helpers outside #[test] functions may panic too.
#![allow(clippy::expect_used)]

use converge_service::domain::manifest::{Emit, Reaction, Trigger, validate_reactions};
use converge_service::testing::TestDatabase;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// A connection to a fresh migrated database of the named test.
async fn setup(_test: &'static str) -> PgConnection {
    let db = TestDatabase::new().await.expect("test database");
    let options = db.connect_options().expect("connect options");
    PgConnection::connect_with(&options).await.expect("connect")
}

async fn teardown(conn: PgConnection, _test: &'static str) {
    conn.close().await.expect("close");
}

/// The SQL verdict: `None` = legal, `Some(message)` = illegal.
async fn sql_verdict(
    conn: &mut PgConnection,
    reactions: Option<&Value>,
    finalizer_name: Option<&str>,
) -> Option<String> {
    sqlx::query_scalar::<_, Option<String>>("SELECT kind_reactions_violation($1, $2)")
        .bind(reactions)
        .bind(finalizer_name)
        .fetch_one(conn)
        .await
        .expect("call kind_reactions_violation")
}

use Emit::*;
use Trigger::*;

fn r(name: &str, trigger: Trigger, emits: &[Emit]) -> Reaction {
    Reaction {
        name: name.into(),
        trigger,
        emits: emits.to_vec(),
        verb: None,
        finalizer: None,
        input_schema: None,
    }
}

fn with_verb(reaction: Reaction, verb: &str) -> Reaction {
    Reaction {
        verb: Some(verb.into()),
        ..reaction
    }
}

fn with_finalizer(reaction: Reaction, finalizer: &str) -> Reaction {
    Reaction {
        finalizer: Some(finalizer.into()),
        ..reaction
    }
}

fn op(name: &str, verb: &str) -> Reaction {
    with_verb(r(name, Operation, &[OperationOutput]), verb)
}

struct Case {
    label: &'static str,
    reactions: Vec<Reaction>,
    finalizer_name: Option<String>,
    /// `None` = legal; `Some("R6")` = illegal, with R6 the first rule the SQL must name.
    broken: Option<&'static str>,
}

fn case(
    label: &'static str,
    reactions: Vec<Reaction>,
    finalizer_name: Option<&str>,
    broken: Option<&'static str>,
) -> Case {
    Case {
        label,
        reactions,
        finalizer_name: finalizer_name.map(str::to_owned),
        broken,
    }
}

fn cases() -> Vec<Case> {
    let name63 = format!("A-z_0.9:{}", "x".repeat(55));
    let name64 = "n".repeat(64);
    assert_eq!(name63.len(), 63);
    let fin253 = format!("a{}z", "-./b".repeat(62) + "cde");
    let fin254 = "f".repeat(254);
    assert_eq!(fin253.len(), 253);
    let composite = vec![
        r("compose", SpecChange, &[Children, Edges, Configs, Status]),
        r("rollup", ChildrenSettled, &[Status, Conditions]),
        r("teardown", DeleteRequested, &[Finalizer]),
        op("operate:enable_flow_logs", "enable_flow_logs"),
        op("operate:rotate", "rotate"),
        r("drift", Resync, &[Status, Conditions]),
    ];
    vec![
        // Legal.
        case("worker", vec![r("work", SpecChange, &[Status])], None, None),
        case("reactor kind", vec![r("react", Reactor, &[SideEffect])], None, None),
        case(
            "full composite kind",
            composite.clone(),
            Some("converge.io/teardown"),
            None,
        ),
        case(
            "composer with conditions only",
            vec![r("c", SpecChange, &[Children, Conditions])],
            None,
            None,
        ),
        case(
            "teardown with own finalizer",
            vec![with_finalizer(r("t", DeleteRequested, &[Finalizer]), "fin")],
            None,
            None,
        ),
        case(
            "two teardowns with own finalizers",
            vec![
                with_finalizer(r("t1", DeleteRequested, &[Finalizer]), "a.example/one"),
                with_finalizer(r("t2", DeleteRequested, &[Finalizer, Status]), "a.example/two"),
            ],
            None,
            None,
        ),
        case(
            "empty verb off operation",
            vec![with_verb(r("w", SpecChange, &[Status]), "")],
            None,
            None,
        ),
        case(
            "empty finalizer off teardown",
            vec![with_finalizer(r("w", Resync, &[Status]), "")],
            None,
            None,
        ),
        case(
            "empty finalizer_name without teardown",
            vec![r("w", SpecChange, &[Status])],
            Some(""),
            None,
        ),
        case(
            "finalizer_name without teardown",
            vec![r("w", SpecChange, &[Status])],
            Some("example.com/fin"),
            None,
        ),
        case("63-character name", vec![r(&name63, SpecChange, &[Status])], None, None),
        case(
            "253-character finalizer_name",
            vec![r("t", DeleteRequested, &[Finalizer])],
            Some(&fin253),
            None,
        ),
        case(
            "one-character finalizer",
            vec![with_finalizer(r("t", DeleteRequested, &[Finalizer]), "a")],
            None,
            None,
        ),
        case(
            "two childrenSettled, one emitting status",
            vec![
                r("a", ChildrenSettled, &[Status]),
                r("b", ChildrenSettled, &[Conditions, Edges]),
            ],
            None,
            None,
        ),
        case(
            "resync emitting children beside the composer",
            vec![
                r("c", SpecChange, &[Children, Status]),
                r("d", Resync, &[Children, SideEffect]),
            ],
            None,
            None,
        ),
        case(
            "specChange side effect without children",
            vec![r("w", SpecChange, &[SideEffect, Status])],
            None,
            None,
        ),
        case(
            "operation verb with ':' and '.'",
            vec![op("op", "v1.enable:now")],
            None,
            None,
        ),
        case(
            "same verb text as a name",
            vec![op("x", "x"), r("y", SpecChange, &[Status])],
            None,
            None,
        ),
        // R1: no reactions is a data-only kind, without a finalizer.
        case("no reactions (data only)", vec![], None, None),
        case(
            "no reactions, a finalizer_name",
            vec![],
            Some("converge.dev/x"),
            Some("R1"),
        ),
        case("no reactions, bad finalizer_name", vec![], Some("BAD"), Some("R1")),
        // R2
        case("empty name", vec![r("", SpecChange, &[Status])], None, Some("R2")),
        case(
            "name with a space",
            vec![r("has space", SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "name with a slash",
            vec![r("a/b", SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "64-character name",
            vec![r(&name64, SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "non-ASCII letter in name",
            vec![r("é", SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "titlecase letter in name",
            vec![r("ǅ", SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "trailing newline in name",
            vec![r("abc\n", SpecChange, &[Status])],
            None,
            Some("R2"),
        ),
        case(
            "duplicate names",
            vec![r("w", SpecChange, &[Status]), r("w", Resync, &[Status])],
            None,
            Some("R2"),
        ),
        // R3
        case("no emits", vec![r("w", SpecChange, &[])], None, Some("R3")),
        case(
            "duplicate emit",
            vec![r("w", SpecChange, &[Status, Edges, Status])],
            None,
            Some("R3"),
        ),
        case(
            "reactor emitting sideEffect twice",
            vec![r("x", Reactor, &[SideEffect, SideEffect])],
            None,
            Some("R3"),
        ),
        // R4
        case(
            "operation without verb",
            vec![r("o", Operation, &[OperationOutput])],
            None,
            Some("R4"),
        ),
        case("operation with empty verb", vec![op("o", "")], None, Some("R4")),
        case(
            "operation with malformed verb",
            vec![op("o", "bad verb")],
            None,
            Some("R4"),
        ),
        case(
            "operation with 64-character verb",
            vec![op("o", &name64)],
            None,
            Some("R4"),
        ),
        case("duplicate verbs", vec![op("a", "x"), op("b", "x")], None, Some("R4")),
        case(
            "verb on specChange",
            vec![with_verb(r("w", SpecChange, &[Status]), "x")],
            None,
            Some("R4"),
        ),
        case(
            "verb on reactor",
            vec![with_verb(r("x", Reactor, &[SideEffect]), "go")],
            None,
            Some("R4"),
        ),
        // R5
        case(
            "finalizer on specChange",
            vec![with_finalizer(r("w", SpecChange, &[Status]), "fin")],
            None,
            Some("R5"),
        ),
        case(
            "finalizer on operation",
            vec![with_finalizer(op("o", "v"), "fin")],
            Some("fin"),
            Some("R5"),
        ),
        // R6
        case(
            "composer without status",
            vec![r("c", SpecChange, &[Children, Edges])],
            None,
            Some("R6"),
        ),
        case(
            "composer with sideEffect",
            vec![r("c", SpecChange, &[Children, Status, SideEffect])],
            None,
            Some("R6"),
        ),
        case(
            "two composers",
            vec![
                r("a", SpecChange, &[Children, Status]),
                r("b", SpecChange, &[Children, Conditions]),
            ],
            None,
            Some("R6"),
        ),
        // R7
        case(
            "two rollups",
            vec![
                r("a", ChildrenSettled, &[Status]),
                r("b", ChildrenSettled, &[Conditions, Status]),
            ],
            None,
            Some("R7"),
        ),
        // R8
        case(
            "reactor with status",
            vec![r("x", Reactor, &[SideEffect, Status])],
            None,
            Some("R8"),
        ),
        case(
            "reactor without sideEffect",
            vec![r("x", Reactor, &[Status])],
            None,
            Some("R8"),
        ),
        case(
            "two reactors",
            vec![r("a", Reactor, &[SideEffect]), r("b", Reactor, &[SideEffect])],
            None,
            Some("R8"),
        ),
        case(
            "reactor beside a worker",
            vec![r("w", SpecChange, &[Status]), r("x", Reactor, &[SideEffect])],
            None,
            Some("R8"),
        ),
        case(
            "reactor beside a resync",
            vec![r("x", Reactor, &[SideEffect]), r("d", Resync, &[Status])],
            None,
            Some("R8"),
        ),
        // R9
        case(
            "teardown without finalizer",
            vec![r("t", DeleteRequested, &[Finalizer])],
            None,
            Some("R9"),
        ),
        case(
            "teardown with empty finalizers",
            vec![with_finalizer(r("t", DeleteRequested, &[Finalizer]), "")],
            Some(""),
            Some("R9"),
        ),
        case(
            "second teardown lacks a finalizer",
            vec![
                with_finalizer(r("t1", DeleteRequested, &[Finalizer]), "fin"),
                r("t2", DeleteRequested, &[Finalizer]),
            ],
            None,
            Some("R9"),
        ),
        // R10
        case(
            "upper-case finalizer_name",
            vec![r("w", SpecChange, &[Status])],
            Some("Fin"),
            Some("R10"),
        ),
        case(
            "finalizer_name starting with '-'",
            vec![r("t", DeleteRequested, &[Finalizer])],
            Some("-fin"),
            Some("R10"),
        ),
        case(
            "finalizer_name ending with '/'",
            vec![r("t", DeleteRequested, &[Finalizer])],
            Some("a.io/"),
            Some("R10"),
        ),
        case(
            "254-character finalizer_name",
            vec![r("t", DeleteRequested, &[Finalizer])],
            Some(&fin254),
            Some("R10"),
        ),
        case(
            "reaction finalizer with '_'",
            vec![with_finalizer(r("t", DeleteRequested, &[Finalizer]), "a_b")],
            Some("ok"),
            Some("R10"),
        ),
        case(
            "non-ASCII reaction finalizer",
            vec![with_finalizer(r("t", DeleteRequested, &[Finalizer]), "é")],
            None,
            Some("R10"),
        ),
        // Several rules at once: the SQL names the lowest.
        case(
            "many breaches",
            vec![
                r("", Operation, &[]),
                with_finalizer(r("b", Reactor, &[Status, Status]), "X"),
            ],
            Some("-"),
            Some("R2"),
        ),
    ]
}

#[tokio::test]
async fn rust_and_sql_agree_on_the_case_table() {
    const SCHEMA: &str = "manifest_rules_table";
    let mut conn = setup(SCHEMA).await;
    let cases = cases();
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for case in &cases {
        let rust = validate_reactions(&case.reactions, case.finalizer_name.as_deref());
        let json = serde_json::to_value(&case.reactions).expect("serialize");
        let sql = sql_verdict(&mut conn, Some(&json), case.finalizer_name.as_deref()).await;
        let expected_legal = case.broken.is_none();
        if rust.is_ok() != expected_legal || sql.is_none() != expected_legal {
            failures.push(format!(
                "{}: expected legal={expected_legal}, rust={rust:?}, sql={sql:?}",
                case.label
            ));
            continue;
        }
        if let (Some(rule), Some(message)) = (case.broken, &sql)
            && !message.starts_with(&format!("{rule}:"))
        {
            failures.push(format!("{}: SQL should name {rule}, said {message:?}", case.label));
        }
    }
    let legal = cases.iter().filter(|c| c.broken.is_none()).count();
    println!("{} cases: {legal} legal, {} illegal", cases.len(), cases.len() - legal);
    assert!(failures.is_empty(), "disagreements:\n{}", failures.join("\n"));
    teardown(conn, SCHEMA).await;
}

/// A small deterministic generator (xorshift64*), so failures are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// A random reaction set near the legal boundary: each reaction starts from a legal shape for its
/// trigger and is then broken in one place or another with a modest probability.
fn random_reactions(rng: &mut Rng) -> (Vec<Reaction>, Option<String>) {
    const TRIGGERS: [Trigger; 6] = [SpecChange, ChildrenSettled, DeleteRequested, Operation, Reactor, Resync];
    const EMITS: [Emit; 8] = [
        Children,
        Edges,
        Configs,
        Status,
        Conditions,
        Finalizer,
        OperationOutput,
        SideEffect,
    ];
    let count = if rng.below(12) == 0 { 0 } else { 1 + rng.below(3) };
    let mut reactions = Vec::new();
    for i in 0..count {
        // Reactors are drawn less often: they make every other reaction illegal.
        let trigger = if rng.below(3) == 0 {
            rng.pick(&TRIGGERS)
        } else {
            rng.pick(&TRIGGERS[..4])
        };
        let mut emits = match trigger {
            SpecChange => rng.pick(&[
                vec![Status],
                vec![Children, Status],
                vec![Children, Conditions, Edges, Configs],
            ]),
            ChildrenSettled => rng.pick(&[vec![Status], vec![Conditions], vec![Status, Conditions]]),
            DeleteRequested => vec![Finalizer],
            Operation => rng.pick(&[vec![OperationOutput], vec![OperationOutput, Status]]),
            Reactor => vec![SideEffect],
            Resync => rng.pick(&[vec![Status], vec![Children, SideEffect]]),
        };
        match rng.below(8) {
            0 => emits.push(rng.pick(&EMITS)),
            1 => emits.clear(),
            2 => emits = vec![rng.pick(&EMITS)],
            _ => {}
        }
        let name = match rng.below(16) {
            0 => String::new(),
            1 => "bad name".to_owned(),
            2 => "r0".to_owned(),
            _ => format!("r{i}"),
        };
        let verb = match (trigger, rng.below(10)) {
            (Operation, 0) => None,
            (Operation, 1) => Some(String::new()),
            (Operation, 2) => Some("bad verb".to_owned()),
            (Operation, 3) => Some("v".to_owned()),
            (Operation, _) => Some(format!("v{i}")),
            (_, 0) => Some(String::new()),
            (_, 1) => Some("v".to_owned()),
            _ => None,
        };
        let finalizer = match (trigger, rng.below(10)) {
            (_, 0) => Some(String::new()),
            (_, 1) => Some("Bad_fin".to_owned()),
            (DeleteRequested, 2..=5) => Some(format!("example.com/fin-{i}")),
            (_, 2) => Some("fin".to_owned()),
            _ => None,
        };
        reactions.push(Reaction {
            name,
            trigger,
            emits,
            verb,
            finalizer,
            input_schema: None,
        });
    }
    let finalizer_name = rng.pick(&[None, None, Some("example.com/fin"), Some("fin"), Some(""), Some("-fin")]);
    (reactions, finalizer_name.map(str::to_owned))
}

#[tokio::test]
async fn rust_and_sql_agree_on_random_reaction_sets() {
    const SCHEMA: &str = "manifest_rules_random";
    const ROUNDS: usize = 3000;
    let mut conn = setup(SCHEMA).await;
    let mut rng = Rng(0x5EED_2024_C0DE_F00D);
    let (mut legal, mut failures) = (0, Vec::new());
    let mut first_rules = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..ROUNDS {
        let (reactions, finalizer_name) = random_reactions(&mut rng);
        let rust = validate_reactions(&reactions, finalizer_name.as_deref());
        let json = serde_json::to_value(&reactions).expect("serialize");
        let sql = sql_verdict(&mut conn, Some(&json), finalizer_name.as_deref()).await;
        if rust.is_ok() != sql.is_none() {
            failures.push(format!(
                "round {round}: {json} / {finalizer_name:?}: rust={rust:?} sql={sql:?}"
            ));
        }
        legal += usize::from(rust.is_ok());
        if let Some(message) = &sql {
            let rule = message.split(':').next().unwrap_or_default().to_owned();
            *first_rules.entry(rule).or_default() += 1;
        }
    }
    println!(
        "{ROUNDS} random reaction sets: {legal} legal, {} illegal",
        ROUNDS - legal
    );
    println!("first broken rule named by SQL: {first_rules:?}");
    assert!(
        legal > ROUNDS / 10 && legal < ROUNDS * 9 / 10,
        "the generator should produce both legal and illegal sets ({legal} legal)"
    );
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    teardown(conn, SCHEMA).await;
}

/// (label, JSON (`None` = SQL NULL), finalizer_name, legal for SQL, whether serde's reading of the
/// JSON, when it has one, must get the same verdict from `validate_reactions`).
type RawCase = (&'static str, Option<Value>, Option<&'static str>, bool, bool);

#[tokio::test]
async fn sql_accepts_exactly_the_serde_shape() {
    const SCHEMA: &str = "manifest_rules_shape";
    let mut conn = setup(SCHEMA).await;
    let worker = json!({"name": "w", "trigger": "specChange", "emits": ["status"]});
    let raw: Vec<RawCase> = vec![
        ("SQL NULL", None, None, false, true),
        ("JSON null", Some(json!(null)), None, false, true),
        ("object instead of array", Some(json!({"name": "w"})), None, false, true),
        ("string instead of array", Some(json!("[]")), None, false, true),
        ("number element", Some(json!([1])), None, false, true),
        ("array element", Some(json!([[worker.clone()]])), None, false, true),
        (
            "missing name",
            Some(json!([{"trigger": "specChange", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "missing trigger",
            Some(json!([{"name": "w", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "missing emits",
            Some(json!([{"name": "w", "trigger": "specChange"}])),
            None,
            false,
            true,
        ),
        (
            "null name",
            Some(json!([{"name": null, "trigger": "specChange", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "numeric name",
            Some(json!([{"name": 5, "trigger": "specChange", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "PascalCase trigger",
            Some(json!([{"name": "w", "trigger": "SpecChange", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "proto enum trigger",
            Some(json!([{"name": "w", "trigger": "TRIGGER_SPEC_CHANGE", "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "numeric trigger",
            Some(json!([{"name": "w", "trigger": 1, "emits": ["status"]}])),
            None,
            false,
            true,
        ),
        (
            "emits as a string",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": "status"}])),
            None,
            false,
            true,
        ),
        (
            "unknown emit",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": ["state"]}])),
            None,
            false,
            true,
        ),
        (
            "null emit",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": [null]}])),
            None,
            false,
            true,
        ),
        (
            "null emits",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": null}])),
            None,
            false,
            true,
        ),
        (
            "numeric verb",
            Some(json!([{"name": "o", "trigger": "operation", "emits": ["status"], "verb": 5}])),
            None,
            false,
            true,
        ),
        (
            "boolean finalizer",
            Some(json!([{"name": "t", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": true}])),
            None,
            false,
            true,
        ),
        (
            "null verb and finalizer",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": ["status"], "verb": null, "finalizer": null}])),
            None,
            true,
            true,
        ),
        (
            "empty verb and finalizer",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": ["status"], "verb": "", "finalizer": ""}])),
            None,
            true,
            true,
        ),
        (
            "null finalizer, manifest finalizer",
            Some(json!([{"name": "t", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": null}])),
            Some("fin"),
            true,
            true,
        ),
        // serde ignores unknown members; the database refuses them, since serde never writes them.
        (
            "unknown member",
            Some(json!([{"name": "w", "trigger": "specChange", "emits": ["status"], "stage": "x"}])),
            None,
            false,
            false,
        ),
    ];
    let mut failures = Vec::new();
    for (label, value, finalizer_name, legal, serde_agrees) in &raw {
        let sql = sql_verdict(&mut conn, value.as_ref(), *finalizer_name).await;
        if sql.is_none() != *legal {
            failures.push(format!("{label}: expected SQL legal={legal}, got {sql:?}"));
        }
        let parsed = value
            .clone()
            .and_then(|v| serde_json::from_value::<Vec<Reaction>>(v).ok());
        match parsed {
            Some(reactions) if *serde_agrees => {
                let rust = validate_reactions(&reactions, *finalizer_name);
                if rust.is_ok() != sql.is_none() {
                    failures.push(format!("{label}: rust={rust:?} sql={sql:?}"));
                }
            }
            Some(_) => {}
            None if sql.is_none() => failures.push(format!("{label}: SQL accepts JSON that serde cannot read")),
            None => {}
        }
    }
    println!("{} raw JSON shapes checked", raw.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    teardown(conn, SCHEMA).await;
}

#[tokio::test]
async fn check_constraint_refuses_illegal_rows() {
    const SCHEMA: &str = "manifest_rules_check";
    let mut conn = setup(SCHEMA).await;
    sqlx::raw_sql(
        "CREATE TABLE manifest_probe (
             reactions jsonb NOT NULL,
             finalizer_name text,
             CHECK (kind_reactions_violation(reactions, finalizer_name) IS NULL)
         )",
    )
    .execute(&mut conn)
    .await
    .expect("create table");
    let insert = "INSERT INTO manifest_probe (reactions, finalizer_name) VALUES ($1, $2)";
    let legal = serde_json::to_value([r("teardown", DeleteRequested, &[Finalizer])]).expect("serialize");
    sqlx::query(insert)
        .bind(&legal)
        .bind("example.com/fin")
        .execute(&mut conn)
        .await
        .expect("legal row");
    let refused = sqlx::query(insert)
        .bind(&legal)
        .bind(None::<&str>)
        .execute(&mut conn)
        .await;
    let code = refused
        .err()
        .and_then(|e| e.as_database_error().and_then(|d| d.code().map(|c| c.into_owned())));
    assert_eq!(code.as_deref(), Some("23514"), "a check violation");
    // The function does not depend on the search_path (as during a pg_dump restore).
    let qualified = "SET search_path = ''; SELECT public.kind_reactions_violation('[]', NULL)".to_owned();
    sqlx::raw_sql(AssertSqlSafe(qualified))
        .execute(&mut conn)
        .await
        .expect("works with an empty search_path");
    let volatility: String = sqlx::query_scalar(
        "SELECT provolatile::text FROM pg_proc
             WHERE proname = 'kind_reactions_violation' AND pronamespace = 'public'::regnamespace",
    )
    .fetch_one(&mut conn)
    .await
    .expect("pg_proc");
    assert_eq!(volatility, "i");
    teardown(conn, SCHEMA).await;
}
