//! Typed SQL access, one file per table family. All runtime SQL of the service
//! lives here (and in `migrations/`).

pub mod cluster;

/// A failed database statement.
pub type StoreResult<T> = Result<T, sqlx::Error>;
