//! Typed SQL access, one file per table family. All runtime SQL of the service
//! lives here (and in `migrations/`).

pub mod changes;
pub mod cluster;
pub mod deletion;
pub mod error;
pub mod events;
pub mod graph;
pub mod kinds;
pub mod pipeline;
pub mod requests;
pub mod resources;
pub mod retry;
pub mod statistics;
pub mod work;

pub use error::StoreError;
pub use retry::RetryPolicy;

/// The result of a store operation; [`StoreError`] says what went wrong.
pub type StoreResult<T> = Result<T, StoreError>;
