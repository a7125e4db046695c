//! The transaction of every mutating call: idempotency keys, validate-only
//! dry runs, and retries of transactions the database aborted to break a
//! deadlock (with the store's one retry policy, [`RetryPolicy::CONFLICTS`]).

use std::sync::{Mutex, PoisonError};

use futures::future::BoxFuture;
use prost::Message;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};

use crate::contract::status::{ApiError, Reason};
use crate::domain::violation::{Violation, check_storable_text};
use crate::store::RetryPolicy;
use crate::store::requests::{self, Reservation};

/// Longest accepted request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// How one mutating call runs.
#[derive(Debug, Clone)]
pub struct WriteCall<'a> {
    /// Method name, recorded with the request id.
    pub method: &'static str,
    /// Idempotency key (empty = none).
    pub request_id: &'a str,
    /// Hash of the request without its request id.
    pub request_hash: Vec<u8>,
    /// Roll back instead of committing.
    pub validate_only: bool,
}

impl<'a> WriteCall<'a> {
    /// A call with no idempotency key and nothing to dry-run: a write the
    /// server makes on its own behalf, or one that is naturally idempotent.
    pub fn unkeyed(method: &'static str) -> Self {
        Self {
            method,
            request_id: "",
            request_hash: Vec::new(),
            validate_only: false,
        }
    }

    /// Describes a call; `request` is hashed after `strip` clears its request id.
    pub fn new<M: Message + Clone>(
        method: &'static str,
        request_id: &'a str,
        validate_only: bool,
        request: &M,
        strip: impl FnOnce(&mut M),
    ) -> Result<Self, ApiError> {
        if request_id.len() > MAX_REQUEST_ID_BYTES {
            return Err(Violation::new("/request_id", format!("must be at most {MAX_REQUEST_ID_BYTES} bytes")).into());
        }
        check_storable_text("/request_id", request_id)?;
        let mut stripped = request.clone();
        strip(&mut stripped);
        let request_hash = Sha256::digest(stripped.encode_to_vec()).to_vec();
        Ok(Self {
            method,
            request_id,
            request_hash,
            validate_only,
        })
    }
}

/// Runs `work` in a transaction. With a request id, a repeated call returns
/// the first call's answer without running again, and a different request
/// under the same id is refused. With `validate_only`, everything runs and is
/// rolled back. `work` may run more than once (when the database aborts the
/// transaction to break a deadlock), so it should own what it needs: the
/// future it returns borrows only the connection.
pub async fn run<R, F>(pool: &PgPool, call: &WriteCall<'_>, work: F) -> Result<R, ApiError>
where
    R: Message + Default,
    F: for<'c> FnMut(&'c mut PgConnection) -> BoxFuture<'c, Result<R, ApiError>> + Send,
{
    let remember = !call.request_id.is_empty() && !call.validate_only;
    // Each attempt's future calls `work`; the attempts run one after another,
    // so the lock is never contended (it only lets every attempt reach `work`).
    let work = Mutex::new(work);
    RetryPolicy::CONFLICTS
        .run(call.method, || async {
            let mut tx = pool.begin().await?;
            // A traced call hands its context to the work it queues (read
            // by schedule_eligible); an untraced one costs nothing here.
            if let Some(context) = crate::telemetry::propagation::current_as_text() {
                crate::store::work::carry_trace_context(&mut tx, &context).await?;
            }
            if remember {
                match requests::reserve(&mut tx, call.request_id, call.method, &call.request_hash).await? {
                    Reservation::Reserved => {}
                    Reservation::Existing {
                        method,
                        request_hash,
                        response,
                    } => {
                        if method != call.method || request_hash != call.request_hash {
                            return Err(ApiError::refused(
                                Reason::RequestIdReused,
                                format!(
                                    "request_id {:?} was already used for a different request; use a new id",
                                    call.request_id
                                ),
                            ));
                        }
                        return R::decode(response.as_slice())
                            .map_err(|e| ApiError::Internal(format!("stored answer does not decode: {e}")));
                    }
                }
            }
            let attempt = (work.lock().unwrap_or_else(PoisonError::into_inner))(&mut tx);
            match attempt.await {
                Ok(answer) if call.validate_only => {
                    tx.rollback().await?;
                    Ok(answer)
                }
                Ok(answer) => finish(tx, call, remember, answer).await,
                Err(e) => Err(e),
            }
        })
        .await
}

async fn finish<R: Message>(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    call: &WriteCall<'_>,
    remember: bool,
    answer: R,
) -> Result<R, ApiError> {
    if remember {
        requests::complete(&mut tx, call.request_id, &answer.encode_to_vec()).await?;
    }
    tx.commit().await?;
    Ok(answer)
}
