//! The service crate's tests against real PostgreSQL, in one test binary:
//! the store, the migrations and their schema snapshot, the row contracts
//! between Rust and SQL, the manifest rules in both languages, and the
//! `converge` binary as an operator runs it.

mod binary;
mod layers;
mod manifest_rules;
mod migrations;
mod row_contract;
mod schema;
mod store;
