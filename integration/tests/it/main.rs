//! The end-to-end tests of converge, in one test binary: a real server
//! (in-process or as `converge` OS processes) on real PostgreSQL, reached
//! over real gRPC by the Rust SDK, the command line and workers in four
//! languages. One binary links the service, the SDK and the examples once
//! and shares one private PostgreSQL cluster among all tests (each test
//! still gets its own database); each module is one area of behaviour.

mod admin;
mod authz;
mod bad_input;
mod cel_composition;
mod cli;
mod cluster_members;
mod cluster_processes;
mod composition;
mod conformance;
mod data_only;
mod database_auth;
mod database_replica;
mod database_restart;
mod deletion;
mod docs;
mod engine;
mod engine_processes;
mod foundation;
mod graph;
mod helm_chart;
mod image;
mod kind_migration;
mod kind_versions;
mod kinds;
mod mixed_languages;
mod observations;
mod operations;
mod plan;
mod probes;
mod provider_configs;
mod quarantine;
mod reactors;
mod release;
mod resources;
mod resync;
mod retry_policy;
mod revisions;
mod sdk;
mod soak;
mod telemetry;
mod tls;
mod unserved;
mod waiting_for;
mod watches;
