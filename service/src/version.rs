//! Build identity.

/// The build version: the crate version, plus `+<git describe>` when built from
/// a git checkout.
pub const VERSION: &str = env!("CONVERGE_VERSION");

/// The compiler that built this binary.
pub const RUSTC: &str = env!("CONVERGE_RUSTC");

/// The API packages this build serves.
pub const API_VERSIONS: [&str; 2] = ["converge.v1", "converge.worker.v1"];

/// The git description of the source tree, when it was known at build time.
pub fn commit() -> Option<&'static str> {
    VERSION.split_once('+').map(|(_, git)| git)
}
