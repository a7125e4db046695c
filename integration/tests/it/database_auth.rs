//! Database passwords that change while converge runs (`db::auth`).
//!
//! A PostgreSQL role's password is rotated under a running `converge`
//! process that reads it from `DATABASE_PASSWORD_FILE` (the stand-in for an
//! IAM token's renewal: both reach the pools through the same refresher):
//! once every connection is cut, the pool, the health probe and the
//! notification listener reconnect with the new password, and nothing fails
//! after that. `DB_IAM_AUTH` boots through the AWS credential chain
//! (credentials from the environment, a token per connection; the test
//! database trusts the role, so the token is not checked), and refuses to
//! boot in one line without a region or credentials.

use std::path::Path;
use std::time::{Duration, Instant};

use converge_integration::api::{apply, apply_manifest, work_kind};
use converge_integration::eventually;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{binary, connect_when_up, converge_process_with, free_local_addr, stop_cleanly};
use converge_sdk::Client;
use serde_json::json;
use sqlx::postgres::PgPool;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A private server where the role `app` owns the database `converge` and
/// must give its password over TCP; an admin pool.
async fn password_protected() -> anyhow::Result<(PrivateServer, PgPool)> {
    let database = PrivateServer::primary().await?;
    let admin = PgPool::connect_with(database.connect_options("postgres")?).await?;
    sqlx::query("CREATE ROLE app LOGIN PASSWORD 'first-secret'")
        .execute(&admin)
        .await?;
    sqlx::query("CREATE DATABASE converge OWNER app")
        .execute(&admin)
        .await?;
    // Before the cluster's trust rules: the first matching line decides.
    let hba = database.dir().join("pgdata/pg_hba.conf");
    let rules = std::fs::read_to_string(&hba)?;
    std::fs::write(&hba, format!("host all app 127.0.0.1/32 scram-sha-256\n{rules}"))?;
    sqlx::query("SELECT pg_reload_conf()").execute(&admin).await?;
    Ok((database, admin))
}

/// Applies `count` noop resources named `<prefix>-<i>`; the failures.
async fn applies(client: &Client, prefix: &str, count: usize) -> Vec<String> {
    let mut failed = Vec::new();
    for i in 0..count {
        let name = format!("{prefix}-{i}-{}", uuid::Uuid::new_v4().simple());
        if let Err(status) = client.resources().apply_resource(apply("noop", &name, json!({}))).await {
            failed.push(format!("{name}: {status}"));
        }
    }
    failed
}

async fn serving(client: &Client) -> bool {
    HealthClient::new(client.channel())
        .check(HealthCheckRequest { service: String::new() })
        .await
        .is_ok_and(|r| r.into_inner().status() == ServingStatus::Serving)
}

#[tokio::test]
async fn a_rotated_password_is_picked_up_without_a_restart() -> anyhow::Result<()> {
    let (database, admin) = password_protected().await?;
    let url = format!("postgres://app@127.0.0.1:{}/converge", database.port());
    let scratch = tempfile::tempdir()?;
    let password = scratch.path().join("password");
    std::fs::write(&password, "first-secret\n")?;
    let log = scratch.path().join("converge.log");
    let addr = free_local_addr()?;
    let file = password.to_string_lossy().into_owned();
    let mut server = converge_process_with(
        &url,
        &addr,
        &log,
        &[("DATABASE_PASSWORD_FILE", file.as_str()), ("LOG_LEVEL", "info")],
    )?;
    let client = connect_when_up(&format!("http://{addr}"))
        .await
        .map_err(|e| with_log(e, &log))?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    client
        .resources()
        .apply_resource(apply("noop", "before", json!({})))
        .await?;

    // The rotation: the role's new password, then the file (as a Secret's
    // update lands). Open connections are not affected: calls go on.
    sqlx::query("ALTER ROLE app PASSWORD 'second-secret'")
        .execute(&admin)
        .await?;
    std::fs::write(&password, "second-secret\n")?;
    let failed = applies(&client, "rotated", 10).await;
    assert!(failed.is_empty(), "calls failed after the rotation: {failed:?}");

    // Once the refresher has had its interval, every connection of the old
    // password is cut (as a database restart or a failover would): the pool,
    // the health probe and the listener must reconnect with the new one.
    tokio::time::sleep(converge_service::db::auth::REFRESH_INTERVAL + Duration::from_secs(1)).await;
    let rotated: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&admin).await?;
    sqlx::query("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE usename = 'app'")
        .execute(&admin)
        .await?;
    let began = Instant::now();
    // The cut is an outage while it lasts (calls fail UNAVAILABLE until the
    // health probe has reconnected, ADR 33); then everything succeeds.
    eventually(Duration::from_secs(30), || async {
        let ok = serving(&client).await && applies(&client, "probe", 1).await.is_empty();
        Ok(ok.then_some(()))
    })
    .await
    .map_err(|e| with_log(e, &log))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(serving(&client).await, "serving, and staying so");
    let failed = applies(&client, "after", 30).await;
    assert!(failed.is_empty(), "calls failed after reconnecting: {failed:?}");
    eprintln!("serving again {:?} after the connections were cut", began.elapsed());

    // The connections now open were made after the rotation, with the new
    // password (the old one is refused), and the listener is among them.
    let sessions: Vec<(String, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT application_name, backend_start FROM pg_stat_activity WHERE usename = 'app' ORDER BY 1")
            .fetch_all(&admin)
            .await?;
    assert!(!sessions.is_empty());
    assert!(sessions.iter().all(|(_, start)| *start > rotated), "{sessions:?}");
    let names: Vec<&str> = sessions.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        names.contains(&"converge") && names.contains(&"converge-probe"),
        "{names:?}"
    );
    let old = PgPool::connect(&format!(
        "postgres://app:first-secret@127.0.0.1:{}/converge",
        database.port()
    ))
    .await;
    assert!(old.is_err(), "the old password still works");
    stop_cleanly(&mut server).await?;
    Ok(())
}

/// `converge serve` with `envs` and no AWS settings of the machine's:
/// its exit status and stderr.
async fn boot(envs: &[(&str, &str)], home: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let mut command = tokio::process::Command::new(binary("converge")?);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ] {
        command.env_remove(var);
    }
    command
        .env("HOME", home)
        // No instance metadata service to ask on a test machine.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("LISTEN_ADDR", free_local_addr()?)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .env("LOG_LEVEL", "warn")
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), command.output()).await??;
    Ok((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

#[tokio::test]
async fn iam_authentication_boots_from_the_credential_chain_or_refuses_in_one_line() -> anyhow::Result<()> {
    // The role `iam_app` is trusted over TCP: RDS would check the token, this
    // server takes any password.
    let database = PrivateServer::primary().await?;
    let admin = PgPool::connect_with(database.connect_options("postgres")?).await?;
    sqlx::query("CREATE ROLE iam_app LOGIN").execute(&admin).await?;
    sqlx::query("CREATE DATABASE converge OWNER iam_app")
        .execute(&admin)
        .await?;
    let hba = database.dir().join("pgdata/pg_hba.conf");
    let rules = std::fs::read_to_string(&hba)?;
    std::fs::write(&hba, format!("host all iam_app 127.0.0.1/32 trust\n{rules}"))?;
    sqlx::query("SELECT pg_reload_conf()").execute(&admin).await?;
    let url = format!("postgres://iam_app@127.0.0.1:{}/converge", database.port());
    let home = tempfile::tempdir()?;

    for (envs, expected) in [
        (
            vec![("DB_IAM_AUTH", "true"), ("DATABASE_URL", url.as_str())],
            "DB_IAM_AUTH needs an AWS region",
        ),
        (
            vec![
                ("DB_IAM_AUTH", "true"),
                ("DATABASE_URL", url.as_str()),
                ("AWS_REGION", "eu-west-1"),
            ],
            "DB_IAM_AUTH found no AWS credentials",
        ),
        (vec![("DB_IAM_AUTH", "true")], "DB_IAM_AUTH needs DATABASE_URL"),
        (
            vec![
                ("DB_IAM_AUTH", "true"),
                ("DATABASE_URL", url.as_str()),
                ("DATABASE_PASSWORD_FILE", "/p"),
            ],
            "exclude each other",
        ),
    ] {
        let (code, stderr) = boot(&envs, home.path()).await?;
        assert_eq!(code, Some(1), "{envs:?}: {stderr}");
        let line = stderr.trim();
        assert!(
            !line.contains('\n') && line.starts_with("converge: "),
            "{envs:?}: {line}"
        );
        assert!(line.contains(expected), "{envs:?}: {line}");
    }

    // With credentials in the environment the chain finds them and every
    // connection gets a token (which this trusting database does not check):
    // the server comes up and serves.
    let scratch = tempfile::tempdir()?;
    let log = scratch.path().join("converge.log");
    let addr = free_local_addr()?;
    let mut server = converge_process_with(
        &url,
        &addr,
        &log,
        &[
            ("DB_IAM_AUTH", "true"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("LOG_LEVEL", "info"),
        ],
    )?;
    let client = connect_when_up(&format!("http://{addr}"))
        .await
        .map_err(|e| with_log(e, &log))?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    assert!(serving(&client).await);
    stop_cleanly(&mut server).await?;
    Ok(())
}

fn with_log(error: anyhow::Error, log: &Path) -> anyhow::Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(30).collect();
    anyhow::anyhow!("{error}\nconverge log (newest first):\n{}", tail.join("\n"))
}
