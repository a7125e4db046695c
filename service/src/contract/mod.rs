//! The contract's shapes shared by every gRPC-facing duty: proto ⇄ domain
//! conversion ([`convert`]), the one mapping of errors to statuses
//! ([`status`]), who is calling ([`caller`]) and the stream type of
//! server-streaming answers. The API
//! services, the broker's worker endpoint and the watch hub all depend on
//! this module, and it depends on none of them.

pub mod authz;
pub mod caller;
pub mod convert;
pub mod status;

use std::pin::Pin;

use tokio_stream::Stream;

/// A server-streaming answer.
pub type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;
