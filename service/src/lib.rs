//! converge: a declarative control plane on PostgreSQL, served over gRPC.
//!
//! The binary (`converge`) runs one or more duties chosen by `ROLE`; this
//! library holds them, one module per concern.

pub mod api;
pub mod broker;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod contract;
pub mod db;
pub mod domain;
pub mod engine;
pub mod server;
pub mod store;
pub mod telemetry;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod version;
pub mod watch;
