//! The application's task bodies. The engine executes a claimed task by
//! calling the handler while holding a permit; the handler's answer decides
//! whether the attempt is completed or failed. Once a completion is
//! committed, the engine tells the application through the same handler.

use crate::ids::Fence;
use crate::task::TaskKind;
use std::future::Future;

/// Why a task body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskError {
    /// A write conflict (an MVCC predicate conflict): worth retrying.
    Conflict,
    /// The body gave up; retrying will not help.
    Fatal,
}

pub trait TaskHandler: Send + Sync + 'static {
    /// Runs the body of one attempt. Preparation and execution both happen here.
    fn execute(&self, fence: Fence, kind: TaskKind) -> impl Future<Output = Result<(), TaskError>> + Send;

    /// The completion callback: `fence`'s completion was committed. Called at
    /// most once per task, by the attempt whose completion the store applied.
    fn completed(&self, fence: Fence, kind: TaskKind) -> impl Future<Output = ()> + Send {
        let _ = (fence, kind);
        async {}
    }
}
