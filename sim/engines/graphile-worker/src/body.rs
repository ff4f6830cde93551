//! The task-body seam for graphile: one task identifier whose handler runs
//! the harness's body (`SimHandler`), with the attempt graphile granted.

use crate::book::Book;
use graphile_worker::{IntoTaskHandlerResult, TaskHandler, WorkerContext};
use leasesim_vocab::ids::{Fence, Owner, TaskId};
use leasesim_vocab::task::{TaskError, TaskKind};
use leasesim_world::world::SimHandler;
use serde::{Deserialize, Serialize};

/// The identifier every job of the workload has.
pub const TASK: &str = "leasesim_job";

/// What a job's handler needs, as a graphile extension.
#[derive(Clone)]
pub struct BodySeam {
    pub handler: SimHandler,
    pub book: Book,
    pub owner: Owner,
}

impl std::fmt::Debug for BodySeam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BodySeam({})", self.owner)
    }
}

/// A job of the workload (its payload carries nothing the body needs).
#[derive(Debug, Serialize, Deserialize)]
pub struct LeasesimJob {}

impl TaskHandler for LeasesimJob {
    const IDENTIFIER: &'static str = TASK;

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let seam = ctx.extensions().get::<BodySeam>().expect("the body seam is a worker extension").clone();
        let job = ctx.job();
        let task = *job.id() as TaskId;
        // The grant graphile handed over: the attempt the store seam numbered.
        let attempt = job
            .locked_at()
            .as_ref()
            .and_then(|at| seam.book.attempt(task, crate::seam::micros(*at)))
            .unwrap_or_else(|| seam.book.granted(task));
        let fence = Fence { task, attempt, owner: seam.owner };
        seam.book.ran(task, attempt, seam.owner);
        let result = seam.handler.run(fence, TaskKind::Job).await;
        // The outcome graphile sends next, from this process, is this
        // attempt's: the driver stamps it with this fence.
        seam.book.returned(fence);
        result.map_err(|e| match e {
            TaskError::Conflict => "leasesim: conflict",
            TaskError::Fatal => "leasesim: fatal",
        })
    }
}
