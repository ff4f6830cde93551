//! The client side: enqueue work, create pipelines, query indexes with a lag
//! timeout. An enqueue that gets no answer (or a retryable conflict) is sent
//! again with the same idempotency key, so it creates its task at most once.

use crate::event::{Event, Observer};
use crate::ids::{GroupId, IndexId, TaskId};
use crate::proto::{Rejection, Request, Response, Transport};
use crate::task::TaskSpec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sends of one enqueue, at most (the first and its retries).
pub const ENQUEUE_SENDS: u32 = 3;

pub struct Client<T> {
    transport: T,
    obs: Arc<dyn Observer>,
    rpc_timeout_ms: u64,
    /// This client's identity: its idempotency keys are its own.
    id: u64,
    next_key: AtomicU64,
}

impl<T: Transport> Client<T> {
    pub fn new(transport: T, obs: Arc<dyn Observer>, rpc_timeout_ms: u64) -> Self {
        Client { transport, obs, rpc_timeout_ms, id: 0, next_key: AtomicU64::new(0) }
    }

    /// The client's identity (distinct clients must have distinct ids).
    pub fn with_id(mut self, id: u64) -> Self {
        self.id = id;
        self
    }

    fn key(&self) -> u64 {
        (self.id << 24) | self.next_key.fetch_add(1, Ordering::Relaxed)
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
                Some(Response::Rejected { reason: Rejection::Conflict }) | None if send < ENQUEUE_SENDS => {
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
