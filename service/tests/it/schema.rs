//! The migrated schema, rendered from the catalog, against a committed
//! snapshot (`migrations/schema.snapshot`).
//!
//! The snapshot pins what `migrate::run` builds on a fresh database: tables
//! (persistence, storage options, per-column statistics targets), columns,
//! constraints, indexes, sequences, types, functions, triggers and seed rows.
//! A change to the migrations that changes the schema must change the snapshot
//! in the same commit. Regenerate it with
//!
//! ```text
//! CONVERGE_UPDATE_SCHEMA_SNAPSHOT=1 cargo test -p converge-service --test it schema::
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;

use converge_service::db::quote_ident;
use converge_service::testing::TestDatabase;
use sqlx::{AssertSqlSafe, PgPool};

/// Tables whose rows are bookkeeping of the migration runner, not schema.
const BOOKKEEPING: [&str; 2] = ["_sqlx_migrations", "schema_functions"];

/// One catalog query per section; each returns one text column, already ordered.
const SECTIONS: [(&str, &str); 11] = [
    (
        "extensions",
        "SELECT 'extension ' || extname FROM pg_extension ORDER BY extname",
    ),
    (
        "types",
        "SELECT format('type %s kind=%s%s%s', t.typname, t.typtype,
                CASE WHEN t.typtype = 'e' THEN ' labels=' ||
                    (SELECT string_agg(quote_literal(e.enumlabel), ',' ORDER BY e.enumsortorder)
                     FROM pg_enum e WHERE e.enumtypid = t.oid) ELSE '' END,
                CASE WHEN t.typtype = 'd' THEN ' base=' || format_type(t.typbasetype, t.typtypmod)
                    || coalesce(' default=' || t.typdefault, '')
                    || CASE WHEN t.typnotnull THEN ' not null' ELSE '' END ELSE '' END)
         FROM pg_type t
         LEFT JOIN pg_class c ON c.oid = t.typrelid
         WHERE t.typnamespace = 'public'::regnamespace
           AND (t.typrelid = 0 OR c.relkind = 'c')
           AND NOT EXISTS (SELECT 1 FROM pg_type a WHERE a.typarray = t.oid)
         ORDER BY t.typname",
    ),
    (
        "relations",
        "SELECT format('relation %s kind=%s persistence=%s options=[%s] toast_options=[%s] acl=%s rls=%s replica_identity=%s',
                c.relname, c.relkind, c.relpersistence,
                (SELECT string_agg(o, ',' ORDER BY o) FROM unnest(c.reloptions) o),
                (SELECT string_agg(o, ',' ORDER BY o) FROM unnest(tc.reloptions) o),
                coalesce(c.relacl::text, '-'), c.relrowsecurity, c.relreplident)
         FROM pg_class c
         LEFT JOIN pg_class tc ON tc.oid = c.reltoastrelid
         WHERE c.relnamespace = 'public'::regnamespace
           AND c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
           AND c.relname <> '_sqlx_migrations'
         ORDER BY c.relname",
    ),
    (
        "columns",
        "SELECT format('column %s.%s %s%s%s%s%s%s%s%s%s', c.relname, a.attname,
                format_type(a.atttypid, a.atttypmod),
                CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                CASE WHEN a.attgenerated = 's' THEN ' generated always as ' || pg_get_expr(d.adbin, d.adrelid) || ' stored'
                     WHEN d.adbin IS NOT NULL THEN ' default ' || pg_get_expr(d.adbin, d.adrelid)
                     ELSE '' END,
                CASE WHEN a.attidentity <> '' THEN ' identity=' || a.attidentity::text ELSE '' END,
                CASE WHEN a.attstattarget <> -1 THEN ' statistics=' || a.attstattarget ELSE '' END,
                CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                     THEN ' collate=' || (SELECT collname FROM pg_collation WHERE oid = a.attcollation) ELSE '' END,
                CASE WHEN a.attstorage <> t.typstorage THEN ' storage=' || a.attstorage::text ELSE '' END,
                CASE WHEN a.attcompression <> '' THEN ' compression=' || a.attcompression::text ELSE '' END,
                CASE WHEN a.attacl IS NOT NULL THEN ' acl=' || a.attacl::text ELSE '' END,
                CASE WHEN a.attoptions IS NOT NULL THEN ' options=' || a.attoptions::text ELSE '' END)
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         JOIN pg_type t ON t.oid = a.atttypid
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'public'::regnamespace
           AND c.relkind IN ('r', 'p', 'v', 'm', 'c', 'f')
           AND c.relname <> '_sqlx_migrations'
           AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY c.relname, a.attnum",
    ),
    (
        "constraints",
        "SELECT format('constraint %s %s %s', coalesce(c.relname, 'domain ' || t.typname), con.conname,
                pg_get_constraintdef(con.oid, true))
         FROM pg_constraint con
         LEFT JOIN pg_class c ON c.oid = con.conrelid
         LEFT JOIN pg_type t ON t.oid = con.contypid
         WHERE con.connamespace = 'public'::regnamespace
           AND coalesce(c.relname, '') <> '_sqlx_migrations'
         ORDER BY 1",
    ),
    (
        "indexes",
        "SELECT format('index %s%s%s', pg_get_indexdef(i.indexrelid),
                CASE WHEN i.indisclustered THEN ' clustered' ELSE '' END,
                CASE WHEN NOT i.indisvalid THEN ' invalid' ELSE '' END)
         FROM pg_index i
         JOIN pg_class ic ON ic.oid = i.indexrelid
         JOIN pg_class c ON c.oid = i.indrelid
         WHERE c.relnamespace = 'public'::regnamespace AND c.relname <> '_sqlx_migrations'
         ORDER BY ic.relname",
    ),
    (
        "index statistics",
        "SELECT format('index statistics %s column %s statistics=%s', ic.relname, a.attnum, a.attstattarget)
         FROM pg_attribute a
         JOIN pg_class ic ON ic.oid = a.attrelid
         WHERE ic.relnamespace = 'public'::regnamespace AND ic.relkind = 'i' AND a.attstattarget <> -1
         ORDER BY ic.relname, a.attnum",
    ),
    (
        "sequences",
        "SELECT format('sequence %s as %s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
                c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
                s.seqcache, s.seqcycle,
                coalesce((SELECT dc.relname || '.' || da.attname
                          FROM pg_depend dep
                          JOIN pg_class dc ON dc.oid = dep.refobjid
                          JOIN pg_attribute da ON da.attrelid = dep.refobjid AND da.attnum = dep.refobjsubid
                          WHERE dep.classid = 'pg_class'::regclass AND dep.objid = c.oid
                            AND dep.refclassid = 'pg_class'::regclass AND dep.deptype IN ('a', 'i')), '-'))
         FROM pg_sequence s
         JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = 'public'::regnamespace AND c.relname NOT LIKE '\\_sqlx%'
         ORDER BY c.relname",
    ),
    (
        "functions",
        "SELECT format(E'function %s(%s)%s\\n%s', p.proname, pg_get_function_identity_arguments(p.oid),
                CASE WHEN p.proacl IS NOT NULL THEN ' acl=' || p.proacl::text ELSE '' END,
                CASE WHEN p.prokind = 'a' THEN '(aggregate)' ELSE rtrim(pg_get_functiondef(p.oid), E'\\n') END)
         FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace
         ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)",
    ),
    (
        "triggers",
        "SELECT format('trigger %s%s', pg_get_triggerdef(t.oid),
                CASE WHEN t.tgenabled <> 'O' THEN ' enabled=' || t.tgenabled::text ELSE '' END)
         FROM pg_trigger t
         JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
         ORDER BY c.relname, t.tgname",
    ),
    (
        "comments",
        "SELECT format('comment on %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
         FROM pg_description d
         WHERE (pg_identify_object(d.classoid, d.objoid, d.objsubid)).schema = 'public'
         ORDER BY 1",
    ),
];

/// The schema of the database behind `pool`, as deterministic text.
async fn render(pool: &PgPool) -> anyhow::Result<String> {
    let mut out = String::new();
    for (section, sql) in SECTIONS {
        writeln!(out, "-- {section}")?;
        let lines: Vec<String> = sqlx::query_scalar(sql).fetch_all(pool).await?;
        for line in lines {
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
    }
    // Seed rows: on a fresh database every row was written by a migration.
    writeln!(out, "-- rows")?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class
         WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
         ORDER BY relname",
    )
    .fetch_all(pool)
    .await?;
    for table in tables.iter().filter(|t| !BOOKKEEPING.contains(&t.as_str())) {
        let sql = format!(
            "SELECT row_to_json(t)::text AS r FROM public.{} t ORDER BY 1",
            quote_ident(table)
        );
        let rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(pool).await?;
        for row in rows {
            writeln!(out, "row {table} {row}")?;
        }
    }
    Ok(out)
}

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../migrations/schema.snapshot")
}

/// A line diff of `old` and `new` (longest common subsequence over the lines
/// between the common prefix and suffix), with a few lines of context.
fn line_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    // lcs[i][j]: the LCS length of ma[i..] and mb[j..].
    let mut lcs = vec![vec![0u32; mb.len() + 1]; ma.len() + 1];
    for i in (0..ma.len()).rev() {
        for j in (0..mb.len()).rev() {
            lcs[i][j] = if ma[i] == mb[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < ma.len() || j < mb.len() {
        if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
            ops.push((' ', ma[i]));
            i += 1;
            j += 1;
        } else if j < mb.len() && (i == ma.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', mb[j]));
            j += 1;
        } else {
            ops.push(('-', ma[i]));
            i += 1;
        }
    }
    const CONTEXT: usize = 3;
    let mut out = String::new();
    let before = &a[prefix.saturating_sub(CONTEXT)..prefix];
    let _ = writeln!(out, "@@ snapshot line {} @@", prefix.saturating_sub(CONTEXT) + 1);
    for line in before {
        let _ = writeln!(out, "  {line}");
    }
    let changed: Vec<bool> = ops.iter().map(|(op, _)| *op != ' ').collect();
    let mut skipping = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        let near = changed[k.saturating_sub(CONTEXT)..(k + CONTEXT + 1).min(changed.len())]
            .iter()
            .any(|c| *c);
        if near {
            let _ = writeln!(out, "{op} {line}");
            skipping = false;
        } else if !skipping {
            let _ = writeln!(out, "  ...");
            skipping = true;
        }
    }
    for line in a[a.len() - suffix..].iter().take(CONTEXT) {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[tokio::test]
async fn the_migrated_schema_matches_the_snapshot() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let actual = render(db.pool()).await?;
    let path = snapshot_path();
    if std::env::var_os("CONVERGE_UPDATE_SCHEMA_SNAPSHOT").is_some() {
        std::fs::write(&path, &actual)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "the migrated schema differs from {} (- snapshot, + database); if the change is \
         intended, regenerate with CONVERGE_UPDATE_SCHEMA_SNAPSHOT=1 cargo test -p \
         converge-service --test it schema::\n{}",
        path.display(),
        line_diff(&expected, &actual)
    );
    Ok(())
}

#[test]
fn the_line_diff_shows_changed_lines_with_context() {
    let diff = line_diff("a\nb\nc\nd\n", "a\nb\nx\nd\n");
    assert!(diff.contains("- c"), "{diff}");
    assert!(diff.contains("+ x"), "{diff}");
    assert!(diff.contains("  b"), "{diff}");
}
