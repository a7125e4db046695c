//! Is the database there? A cheap check on a connection of its own, and the
//! shared answer the API and the health service read.
//!
//! The check runs on its own connection, outside the query pool, so a busy
//! pool (every connection taken by a load) never makes a healthy database
//! look unreachable, and an unreachable one is seen within one check instead
//! of the pool's acquire timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

/// Whether the primary database counts as reachable (the health probe's
/// verdict, see `server::health`); cheap to clone and to read on every
/// request.
#[derive(Debug, Clone)]
pub struct DatabaseStatus(Arc<AtomicBool>);

impl DatabaseStatus {
    /// A status that starts as reachable (the server has just connected).
    pub fn reachable() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// Whether the database counts as reachable.
    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Records a check's outcome; returns whether it changed the status.
    pub fn set(&self, up: bool) -> bool {
        self.0.swap(up, Ordering::Relaxed) != up
    }
}

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The database answered.
    Answered,
    /// Connecting or the query failed: the server refused or dropped the
    /// connection, or said it is shutting down.
    Failed,
    /// No answer within the check's time limit: the database is slow or
    /// cut off.
    TimedOut,
}

impl Answer {
    /// Whether the database answered.
    pub fn answered(self) -> bool {
        self == Answer::Answered
    }
}

/// A `SELECT 1` on a connection of its own, reopened after any failure.
#[derive(Debug)]
pub struct Probe {
    target: Target,
    connection: Option<PgConnection>,
}

/// Where a probe connects.
#[derive(Debug)]
enum Target {
    /// Always these options.
    Fixed(Box<PgConnectOptions>),
    /// The pool's options at the time of each connect (their password may
    /// be renewed, `db::auth`), under an application name of its own.
    Pool(sqlx::PgPool, String),
}

impl Probe {
    /// A probe of the database `options` point at; connects on first use.
    /// `application_name` tells its session apart in `pg_stat_activity`.
    pub fn new(options: PgConnectOptions, application_name: &str) -> Self {
        Self {
            target: Target::Fixed(Box::new(options.application_name(application_name))),
            connection: None,
        }
    }

    /// A probe of the database behind `pool`, connecting with the pool's
    /// current options (so with its current password) whenever it connects.
    pub fn following(pool: sqlx::PgPool, application_name: &str) -> Self {
        Self {
            target: Target::Pool(pool, application_name.to_owned()),
            connection: None,
        }
    }

    fn options(&self) -> PgConnectOptions {
        match &self.target {
            Target::Fixed(options) => (**options).clone(),
            Target::Pool(pool, name) => (*pool.connect_options()).clone().application_name(name),
        }
    }

    /// Whether the database answers (connecting first if need be) within
    /// `limit`. After a failure or a timeout the connection is closed and
    /// the next check opens a new one.
    pub async fn check(&mut self, limit: Duration) -> Answer {
        let answered = tokio::time::timeout(limit, self.round_trip()).await;
        match answered {
            Ok(Ok(())) => Answer::Answered,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "database check failed");
                self.connection = None;
                Answer::Failed
            }
            Err(_) => {
                tracing::debug!(?limit, "database check timed out");
                self.connection = None;
                Answer::TimedOut
            }
        }
    }

    async fn round_trip(&mut self) -> Result<(), sqlx::Error> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => {
                let options = self.options();
                self.connection.insert(options.connect().await?)
            }
        };
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut *connection).await?;
        debug_assert_eq!(one, 1);
        Ok(())
    }

    /// Closes the probe's connection.
    pub async fn close(mut self) {
        if let Some(connection) = self.connection.take() {
            let _ = connection.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reports_changes() {
        let status = DatabaseStatus::reachable();
        assert!(status.is_up());
        assert!(!status.set(true));
        assert!(status.set(false));
        assert!(!status.clone().is_up());
        assert!(status.set(true));
    }

    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_probe_answers_for_a_live_database_and_not_for_a_closed_port() -> Result<(), Box<dyn std::error::Error>> {
        let db = crate::testing::TestDatabase::new().await?;
        let mut probe = Probe::new(db.connect_options()?, "converge-test-probe");
        assert_eq!(probe.check(LIMIT).await, Answer::Answered);
        assert_eq!(probe.check(LIMIT).await, Answer::Answered, "the connection is reused");
        probe.close().await;

        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let nowhere = PgConnectOptions::new().host("127.0.0.1").port(port);
        let mut probe = Probe::new(nowhere, "converge-test-probe");
        assert_eq!(probe.check(LIMIT).await, Answer::Failed);
        Ok(())
    }
}
