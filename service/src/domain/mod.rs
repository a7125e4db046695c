//! Domain types and rules, independent of the wire format and the database.

pub mod admin;
pub mod authz;
pub mod cel;
pub mod cel_composition;
pub mod compiled;
pub mod composition;
pub mod conversion;
pub mod event;
pub mod explain;
pub mod graph;
pub mod identity;
pub mod labels;
pub mod manifest;
pub mod names;
pub mod operation;
pub mod page_token;
pub mod plan;
pub mod position;
pub mod provider_config;
pub mod reactor;
pub mod resource;
pub mod rules;
pub mod schema;
pub mod shard;
pub mod violation;
