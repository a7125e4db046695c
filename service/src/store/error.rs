//! The one error boundary of the store: every failed statement becomes a
//! [`StoreError`], and [`From<sqlx::Error>`] is the one place in the service
//! that reads SQLSTATEs. Callers branch on the variant (retry a conflict,
//! answer a refusal, report the database as unavailable), never on codes.

/// SQLSTATE class 08: connection exceptions.
const CONNECTION_EXCEPTION_CLASS: &str = "08";
/// SQLSTATE 57P01..57P05 (admin shutdown, crash shutdown, cannot connect now,
/// database dropped, idle session timeout): the server went away.
const OPERATOR_INTERVENTION_SHUTDOWN_PREFIX: &str = "57P";
/// SQLSTATE 40001: the transaction could not be serialized; retrying is safe.
/// `apply_composition` also raises it when a child name is taken concurrently.
pub const SERIALIZATION_FAILURE: &str = "40001";
/// SQLSTATE 40P01: the transaction was chosen to break a deadlock; retrying is safe.
pub const DEADLOCK_DETECTED: &str = "40P01";
/// SQLSTATE 22021: a byte sequence invalid in the database encoding.
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
/// SQLSTATE 22P05: a character the database cannot translate (U+0000 in `jsonb`).
pub const UNTRANSLATABLE_CHARACTER: &str = "22P05";

/// A SQLSTATE converge's own SQL functions raise (`RAISE ... USING ERRCODE`
/// in `migrations/functions/`). Class `CV` is not used by PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvergeCode {
    /// `CV001`, raised by `apply_composition` for a composition that cannot be
    /// applied as given (a child of another kind's name, an edge naming a
    /// resource that does not exist, ...). Nothing was written.
    CompositionRefused,
}

impl ConvergeCode {
    /// Every code, for lookups and tests.
    pub const ALL: [ConvergeCode; 1] = [ConvergeCode::CompositionRefused];

    /// The SQLSTATE raised.
    pub fn sqlstate(self) -> &'static str {
        match self {
            ConvergeCode::CompositionRefused => "CV001",
        }
    }

    /// The code a SQLSTATE names, if it is one of converge's.
    pub fn from_sqlstate(sqlstate: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.sqlstate() == sqlstate)
    }
}

/// A failed store operation, classified by what the caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// PostgreSQL cannot be reached: pool timeout or closed, I/O or TLS
    /// failure, a connection exception (`08xxx`) or a server shutting down
    /// (`57P0x`). Transient; worth retrying later.
    #[error(transparent)]
    Unavailable(sqlx::Error),
    /// The database aborted the transaction to resolve a conflict with a
    /// concurrent one ([`SERIALIZATION_FAILURE`], [`DEADLOCK_DETECTED`]).
    /// Nothing was committed; running the transaction again is safe.
    #[error(transparent)]
    Conflict(sqlx::Error),
    /// Text the database cannot store ([`CHARACTER_NOT_IN_REPERTOIRE`],
    /// [`UNTRANSLATABLE_CHARACTER`]: U+0000). Request text is checked before it
    /// gets here; this keeps a field that was missed a caller's error.
    #[error(transparent)]
    Unstorable(sqlx::Error),
    /// One of converge's own SQL functions refused the operation.
    #[error("{message}")]
    Refused {
        /// Which refusal.
        code: ConvergeCode,
        /// The message the function raised.
        message: String,
    },
    /// Anything else: a bug or a broken invariant, not the caller's doing.
    #[error(transparent)]
    Other(sqlx::Error),
}

impl StoreError {
    /// The error's class, as metrics label it (`error.type`).
    pub fn class(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "unavailable",
            Self::Conflict(_) => "conflict",
            Self::Unstorable(_) => "unstorable",
            Self::Refused { .. } => "refused",
            Self::Other(_) => "other",
        }
    }

    /// Whether running the same transaction again may succeed (a [`Conflict`](Self::Conflict)).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Conflict(_))
    }

    /// Whether the database is unreachable.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        let code = match &error {
            // A connection that broke or never properly opened. `Protocol`
            // is what a proxy in front of the database (a mesh sidecar, a
            // pooler, a load balancer with no backend) produces when it
            // accepts a connection and closes it: the startup reads garbage.
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => {
                return StoreError::Unavailable(error);
            }
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        let Some(code) = code else {
            return StoreError::Other(error);
        };
        if code.starts_with(CONNECTION_EXCEPTION_CLASS) || code.starts_with(OPERATOR_INTERVENTION_SHUTDOWN_PREFIX) {
            return StoreError::Unavailable(error);
        }
        match code.as_str() {
            SERIALIZATION_FAILURE | DEADLOCK_DETECTED => StoreError::Conflict(error),
            CHARACTER_NOT_IN_REPERTOIRE | UNTRANSLATABLE_CHARACTER => StoreError::Unstorable(error),
            other => match ConvergeCode::from_sqlstate(other) {
                Some(code) => StoreError::Refused {
                    code,
                    message: error
                        .as_database_error()
                        .map(|db| db.message().to_owned())
                        .unwrap_or_default(),
                },
                None => StoreError::Other(error),
            },
        }
    }
}

impl crate::db::replica::Unreachable for StoreError {
    fn is_unreachable(&self) -> bool {
        self.is_unavailable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_and_transport_failures_are_unavailable() {
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(StoreError::from(sqlx::Error::PoolClosed).is_unavailable());
        assert!(StoreError::from(sqlx::Error::Io(std::io::Error::other("reset"))).is_unavailable());
        assert!(
            StoreError::from(sqlx::Error::Protocol(
                "unexpected response from SSLRequest: 0x00".into()
            ))
            .is_unavailable()
        );
        assert!(matches!(
            StoreError::from(sqlx::Error::RowNotFound),
            StoreError::Other(_)
        ));
    }

    #[test]
    fn only_conflicts_are_retryable() {
        assert!(!StoreError::from(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(
            !StoreError::Refused {
                code: ConvergeCode::CompositionRefused,
                message: String::new()
            }
            .is_retryable()
        );
    }

    #[test]
    fn converge_codes_round_trip() {
        for code in ConvergeCode::ALL {
            assert_eq!(ConvergeCode::from_sqlstate(code.sqlstate()), Some(code));
            assert!(code.sqlstate().starts_with("CV"));
        }
        assert_eq!(ConvergeCode::from_sqlstate(SERIALIZATION_FAILURE), None);
    }

    /// Every `ERRCODE = 'CV...'` a SQL function raises is a named code.
    #[test]
    fn every_raised_converge_code_is_named() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/functions");
        let mut raised = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("migrations/functions") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
            for (i, _) in text.match_indices("ERRCODE = '") {
                let rest = &text[i + "ERRCODE = '".len()..];
                let code = &rest[..rest.find('\'').expect("closing quote")];
                raised.insert(code.to_owned());
            }
        }
        assert!(
            !raised.is_empty(),
            "no RAISE ... USING ERRCODE found in {}",
            dir.display()
        );
        for code in &raised {
            let named = ConvergeCode::from_sqlstate(code).is_some()
                || [SERIALIZATION_FAILURE, DEADLOCK_DETECTED].contains(&code.as_str());
            assert!(
                named,
                "SQLSTATE {code} raised in migrations/functions has no name in store::error"
            );
        }
    }
}
