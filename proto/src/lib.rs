//! Generated Rust types, clients and server traits for the converge gRPC
//! contract. The sources are the `.proto` files beside this crate:
//! `converge.v1` (the control-plane API) and `converge.worker.v1` (the worker
//! contract). Nothing here is written by hand except this module tree.

#![allow(missing_docs, clippy::doc_lazy_continuation, clippy::large_enum_variant)]

/// Google API types used by the contract.
pub mod google {
    /// `google.rpc`: status and error details.
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// The converge packages.
pub mod converge {
    /// `converge.v1`: the control-plane API.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/converge.v1.rs"));
    }
    /// `converge.worker`: the worker contract.
    pub mod worker {
        /// `converge.worker.v1`.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/converge.worker.v1.rs"));
        }
    }
}

pub use converge::v1;
pub use converge::worker::v1 as worker_v1;

/// The encoded `FileDescriptorSet` of the whole contract (with its imports),
/// for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/converge_descriptor.bin"));

pub mod json;
