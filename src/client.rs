//! The client side: enqueue work, create pipelines, query indexes with a lag
//! timeout. An enqueue that gets no answer (or a retryable refusal: a
//! conflict, a statement or lock timeout) is sent again with the same
//! idempotency key, so it creates its task at most once.

use crate::event::{Event, Observer};
use crate::ids::{GroupId, IndexId, TaskId};
use crate::proto::{Rejection, Request, Response, Transport};
use crate::task::TaskSpec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sends of one enqueue, at most (the first and its retries).
pub const ENQUEUE_SENDS: u32 = 3;

/// One application client's identity and key counter. A long-lived client
/// makes many calls, each over a connection of its own: every handle built
/// from one `ClientKeys` draws its idempotency keys from the same counter, so
/// no two calls of that client share a key.
#[derive(Clone, Default)]
pub struct ClientKeys {
    /// Distinct clients must have distinct ids: a key is unique only within
    /// its client.
    id: u64,
    next_key: Arc<AtomicU64>,
}

impl ClientKeys {
    pub fn new(id: u64) -> Self {
        ClientKeys { id, next_key: Arc::new(AtomicU64::new(0)) }
    }
}

pub struct Client<T> {
    transport: T,
    obs: Arc<dyn Observer>,
    rpc_timeout_ms: u64,
    /// This client's identity: its idempotency keys are its own.
    keys: ClientKeys,
}

impl<T: Transport> Client<T> {
    pub fn new(transport: T, obs: Arc<dyn Observer>, rpc_timeout_ms: u64) -> Self {
        Client { transport, obs, rpc_timeout_ms, keys: ClientKeys::default() }
    }

    /// A client of its own with this identity (distinct clients must have
    /// distinct ids).
    pub fn with_id(self, id: u64) -> Self {
        self.with_keys(ClientKeys::new(id))
    }

    /// A handle of the client these keys belong to (a long-lived client's
    /// next call).
    pub fn with_keys(mut self, keys: ClientKeys) -> Self {
        self.keys = keys;
        self
    }

    fn key(&self) -> u64 {
        let n = self.keys.next_key.fetch_add(1, Ordering::Relaxed);
        // A client's keys are its id and a counter below 2^24.
        assert!(n < 1 << 24, "client {} made more than 2^24 keyed calls", self.keys.id);
        (self.keys.id << 24) | n
    }

    async fn call(&self, req: Request, deadline_ms: u64) -> Option<Response> {
        match tokio::time::timeout(Duration::from_millis(deadline_ms), self.transport.call(req)).await {
            Ok(Ok(resp)) => Some(resp),
            _ => None,
        }
    }

    /// Creates a task. An answer that never came may mean it was created:
    /// the retry carries the same key, and the store answers with that task.
    pub async fn enqueue(&self, spec: TaskSpec) -> Option<TaskId> {
        let key = Some(self.key());
        for send in 1..=ENQUEUE_SENDS {
            let req = Request::Enqueue { spec: spec.clone(), key };
            match self.call(req, self.rpc_timeout_ms).await {
                Some(Response::Enqueued { task }) => return Some(task),
                Some(Response::Rejected {
                    reason: Rejection::Conflict | Rejection::TimedOut | Rejection::LockTimeout,
                })
                | None
                    if send < ENQUEUE_SENDS =>
                {
                    tokio::time::sleep(Duration::from_millis(100 << send)).await;
                }
                _ => return None,
            }
        }
        None
    }

    pub async fn create_pipeline(&self, pipeline: GroupId, stages: u32) -> bool {
        matches!(
            self.call(Request::CreatePipeline { pipeline, stages }, self.rpc_timeout_ms).await,
            Some(Response::Ack)
        )
    }

    /// Is the index materialized, waiting for it up to `lag_timeout_ms`?
    pub async fn query_index(&self, index: IndexId, lag_timeout_ms: u64) -> bool {
        let req = Request::QueryIndex { index, lag_timeout_ms };
        let materialized = matches!(
            self.call(req, lag_timeout_ms + self.rpc_timeout_ms).await,
            Some(Response::Query { materialized: true })
        );
        self.obs.emit(Event::QueryResult { index, materialized });
        materialized
    }
}
