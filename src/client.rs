//! The client side: enqueue work, create pipelines, query indexes with a lag
//! timeout. Calls are not retried: a lost enqueue is the caller's to notice.

use crate::event::{Event, Observer};
use crate::ids::{GroupId, IndexId, TaskId};
use crate::proto::{Request, Response, Transport};
use crate::task::TaskSpec;
use std::sync::Arc;
use std::time::Duration;

pub struct Client<T> {
    transport: T,
    obs: Arc<dyn Observer>,
    rpc_timeout_ms: u64,
}

impl<T: Transport> Client<T> {
    pub fn new(transport: T, obs: Arc<dyn Observer>, rpc_timeout_ms: u64) -> Self {
        Client { transport, obs, rpc_timeout_ms }
    }

    async fn call(&self, req: Request, deadline_ms: u64) -> Option<Response> {
        match tokio::time::timeout(Duration::from_millis(deadline_ms), self.transport.call(req)).await {
            Ok(Ok(resp)) => Some(resp),
            _ => None,
        }
    }

    pub async fn enqueue(&self, spec: TaskSpec) -> Option<TaskId> {
        match self.call(Request::Enqueue { spec }, self.rpc_timeout_ms).await {
            Some(Response::Enqueued { task }) => Some(task),
            _ => None,
        }
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
