//! Typed SQL access, one file per table family. All runtime SQL of the service
//! lives here (and in `migrations/`).

pub mod changes;
pub mod cluster;
pub mod deletion;
pub mod events;
pub mod graph;
pub mod kinds;
pub mod pipeline;
pub mod requests;
pub mod resources;
pub mod statistics;
pub mod work;

/// A failed database statement.
pub type StoreResult<T> = Result<T, sqlx::Error>;
