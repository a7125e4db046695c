//! The HTTP probes of a real `converge` process (ADR 41): `/livez` and
//! `/healthz` answer from the moment the process starts until its drain is
//! over and never depend on the database; `/readyz` follows gRPC health
//! (SERVING), through a boot that waits for the database, an outage and a
//! drain.

use std::time::{Duration, Instant};

use converge_integration::eventually;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{
    binary, connect_when_up, converge_process_with, free_local_addr, http_get, signal,
};
use nix::sys::signal::Signal;

/// The status code of `GET path`, or 0 when nothing answers.
async fn status(addr: &str, path: &str) -> u16 {
    http_get(addr, path).await.map_or(0, |(code, _)| code)
}

/// Waits until `GET path` answers `code`.
async fn wait_status(addr: &str, path: &str, code: u16, within: Duration) -> anyhow::Result<()> {
    eventually(within, || async {
        Ok((status(addr, path).await == code).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{path} did not answer {code}: {e}"))
}

/// Liveness stays 200 for `period`, readiness stays `ready`, and the
/// process keeps running.
async fn holds(addr: &str, ready: u16, period: Duration, child: &mut tokio::process::Child) -> anyhow::Result<()> {
    let until = Instant::now() + period;
    while Instant::now() < until {
        assert_eq!(status(addr, "/livez").await, 200, "/livez");
        assert_eq!(status(addr, "/healthz").await, 200, "/healthz");
        assert_eq!(status(addr, "/readyz").await, ready, "/readyz");
        anyhow::ensure!(child.try_wait()?.is_none(), "converge exited");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test]
async fn liveness_ignores_the_database_and_readiness_follows_serving() -> anyhow::Result<()> {
    let mut database = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
    let url = database.url("converge")?;
    let scratch = tempfile::tempdir()?;
    let log = scratch.path().join("converge.log");
    let addr = free_local_addr()?;
    let health = free_local_addr()?;

    // Boot while the database is down: the probes answer at once, alive but
    // not ready, and the boot goes on once the database is back (within
    // the pool's 10 s connect timeout).
    database.stop().await?;
    let env = [
        ("HEALTH_ADDR", health.as_str()),
        ("SHUTDOWN_TIMEOUT_SECS", "5"),
        ("LOG_LEVEL", "info"),
    ];
    let mut child = converge_process_with(&url, &addr, &log, &env)?;
    wait_status(&health, "/livez", 200, Duration::from_secs(10)).await?;
    holds(&health, 503, Duration::from_secs(1), &mut child).await?;
    database.start().await?;
    let _client = connect_when_up(&format!("http://{addr}")).await?;
    wait_status(&health, "/readyz", 200, Duration::from_secs(5)).await?;
    let (code, body) = http_get(&health, "/metrics").await?;
    assert_eq!(
        (code, body.as_str()),
        (404, "metrics are off\n"),
        "metrics are off without METRICS_ADDR"
    );
    assert_eq!(status(&health, "/nothing").await, 404);

    // An outage: not ready within the health probe's second or so, alive
    // throughout (a pod would not be restarted), ready again once it is back.
    database.stop().await?;
    wait_status(&health, "/readyz", 503, Duration::from_secs(5)).await?;
    holds(&health, 503, Duration::from_secs(3), &mut child).await?;
    database.start().await?;
    wait_status(&health, "/readyz", 200, Duration::from_secs(10)).await?;

    // A drain with the database gone: its steps wait out their limits, and
    // meanwhile the probes say alive, not ready; then the process exits 0
    // within the shutdown timeout plus 5 s.
    database.stop().await?;
    wait_status(&health, "/readyz", 503, Duration::from_secs(5)).await?;
    let began = Instant::now();
    signal(&child, Signal::SIGTERM)?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(status(&health, "/livez").await, 200, "/livez during the drain");
    assert_eq!(status(&health, "/readyz").await, 503, "/readyz during the drain");
    let bound = Duration::from_secs(5) + converge_service::server::SHUTDOWN_CLEANUP + Duration::from_secs(2);
    let exit = tokio::time::timeout(bound, child.wait()).await??;
    assert!(exit.success(), "exited with {exit}");
    eprintln!("drained in {:?}", began.elapsed());
    assert_eq!(status(&health, "/livez").await, 0, "the probes end with the process");
    Ok(())
}

#[tokio::test]
async fn a_taken_probe_port_fails_the_boot_with_one_line() -> anyhow::Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let taken_addr = taken.local_addr()?.to_string();
    // The probe port is bound before the database is opened: this URL is
    // never dialled.
    let out = tokio::process::Command::new(binary("converge")?)
        .env("DATABASE_URL", "postgres://converge@127.0.0.1:1/converge")
        .env("LISTEN_ADDR", free_local_addr()?)
        .env("HEALTH_ADDR", &taken_addr)
        .env("LOG_LEVEL", "error")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(10), out).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = stderr.trim();
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.contains(&format!("cannot listen on {taken_addr} (HEALTH_ADDR)")),
        "{line}"
    );
    drop(taken);
    Ok(())
}
