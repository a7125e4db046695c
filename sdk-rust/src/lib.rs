//! Rust SDK for converge.
//!
//! [`Client`] is a typed client over every control-plane service, sharing one
//! HTTP/2 connection. The generated message types are re-exported as
//! [`proto`]. [`worker`] is the runtime for worker processes that serve
//! kinds. [`manifest`] reads kind manifest files (the JSON that
//! `buf curl -d @file` sends to `ApplyKindManifest`). [`error`] reads the
//! typed [`ErrorReason`] of a failed call.

pub use converge_proto as proto;

pub mod error;
pub mod manifest;
pub mod tls;
pub mod worker;

use converge_proto::v1::admin_service_client::AdminServiceClient;
use converge_proto::v1::cluster_service_client::ClusterServiceClient;
use converge_proto::v1::kind_migration_service_client::KindMigrationServiceClient;
use converge_proto::v1::kind_service_client::KindServiceClient;
use converge_proto::v1::operation_service_client::OperationServiceClient;
use converge_proto::v1::provider_config_service_client::ProviderConfigServiceClient;
use converge_proto::v1::reactor_binding_service_client::ReactorBindingServiceClient;
use converge_proto::v1::resource_service_client::ResourceServiceClient;
use converge_proto::worker_v1::worker_service_client::WorkerServiceClient;
use tonic::transport::{Channel, Endpoint};

pub use error::{ErrorReason, StatusExt};

/// Largest message the client sends or accepts, matching the server's limit.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why a client could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a valid URI.
    #[error("invalid server address {address:?}: {source}")]
    InvalidAddress {
        /// The address given.
        address: String,
        /// The parse error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server could not be reached.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// The address given.
        address: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
}

/// Defines one accessor per generated service client, each with the shared
/// message-size limits.
macro_rules! service_clients {
    ($($(#[$doc:meta])* $name:ident => $client:ident,)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> $client<Channel> {
                $client::new(self.channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
            }
        )*
    };
}

/// `address` as an endpoint.
fn endpoint(address: String) -> Result<Endpoint, ClientError> {
    Endpoint::from_shared(address.clone()).map_err(|source| ClientError::InvalidAddress { address, source })
}

/// A typed client for the converge API. Cheap to clone; clones share the
/// connection.
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
}

impl Client {
    /// Connects to `address` (e.g. `http://127.0.0.1:50051`).
    pub async fn connect(address: impl Into<String>) -> Result<Self, ClientError> {
        Self::connect_endpoint(endpoint(address.into())?, None).await
    }

    /// Connects to `address` (e.g. `https://converge.internal:50051`)
    /// through `tls`; see [`tls`] for what is verified and reloaded.
    pub async fn connect_tls(address: impl Into<String>, tls: tls::ClientTls) -> Result<Self, ClientError> {
        Self::connect_endpoint(endpoint(address.into())?, Some(tls)).await
    }

    /// Connects through a configured `endpoint` (connect and request
    /// timeouts, HTTP/2 keepalive, ...), over `tls` when given. The
    /// endpoint's `connect_timeout` bounds the TLS handshake too.
    pub async fn connect_endpoint(endpoint: Endpoint, tls: Option<tls::ClientTls>) -> Result<Self, ClientError> {
        let connected = match tls {
            Some(tls) => tls::channel(&endpoint, tls).await,
            None => endpoint.connect().await,
        };
        let channel = connected.map_err(|source| ClientError::Connect {
            address: endpoint.uri().to_string().trim_end_matches('/').to_owned(),
            source,
        })?;
        Ok(Self { channel })
    }

    /// A client over an existing channel.
    pub fn from_channel(channel: Channel) -> Self {
        Self { channel }
    }

    /// The underlying channel.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    service_clients! {
        /// `converge.v1.ResourceService`.
        resources => ResourceServiceClient,
        /// `converge.v1.KindService`.
        kinds => KindServiceClient,
        /// `converge.v1.KindMigrationService`.
        migrations => KindMigrationServiceClient,
        /// `converge.v1.OperationService`.
        operations => OperationServiceClient,
        /// `converge.v1.ProviderConfigService`.
        provider_configs => ProviderConfigServiceClient,
        /// `converge.v1.ReactorBindingService`.
        reactor_bindings => ReactorBindingServiceClient,
        /// `converge.v1.AdminService`.
        admin => AdminServiceClient,
        /// `converge.v1.ClusterService`.
        cluster => ClusterServiceClient,
        /// `converge.worker.v1.WorkerService` (used by worker runtimes).
        workers => WorkerServiceClient,
    }
}
