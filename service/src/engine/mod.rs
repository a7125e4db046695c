//! Control-plane sweepers: idempotent loops that are safe to run on several
//! pods at once.

pub mod drainer;
pub mod fleet_summary;
pub mod queue_sampler;
pub mod reaper;
pub mod resync;
pub mod retention;
pub mod statistics;
pub mod unserved;
