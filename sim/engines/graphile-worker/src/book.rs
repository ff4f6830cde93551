//! The adapter's own bookkeeping for one world (never graphile's state):
//! which graphile worker id belongs to which process incarnation, and the
//! attempt number the harness gives each grant.
//!
//! graphile's rows carry no fencing token: `attempts` goes back down when a
//! job is recovered, so the same number can be granted twice. The harness
//! numbers the grants it sees instead (the n-th grant of a job is attempt
//! n), keyed by what the row says of the grant (`locked_at`, microseconds),
//! so the store seam (which sees the claim's answer) and the task-body seam
//! (which sees the job graphile hands its handler) name the same attempt.

use leasesim_vocab::ids::{Fence, Owner, TaskId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Inner {
    /// graphile worker id -> the process incarnation that runs it.
    workers: BTreeMap<String, Owner>,
    /// (job, locked_at in µs) -> the attempt number of that grant.
    grants: BTreeMap<(TaskId, i64), u32>,
    /// Grants of each job so far.
    granted: BTreeMap<TaskId, u32>,
    /// The latest attempt each owner was granted of each job.
    latest: BTreeMap<(TaskId, Owner), u32>,
    /// The latest attempt whose body each owner started, of each job.
    ran: BTreeMap<(TaskId, Owner), u32>,
    /// The attempt whose body last returned on each owner, until that
    /// process sends its next statement: graphile sends an attempt's
    /// outcome in the same poll as its handler returns, so that statement
    /// is this attempt's outcome (see [`Book::returned`]).
    returned: BTreeMap<Owner, Fence>,
}

/// Shared by a world's store seam, workers and client.
#[derive(Debug, Clone, Default)]
pub struct Book(Arc<Mutex<Inner>>);

impl Book {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().expect("book")
    }

    /// The worker `id` runs in `owner` (registered before it claims anything).
    pub fn register(&self, id: &str, owner: Owner) {
        self.inner().workers.insert(id.to_string(), owner);
    }

    /// The incarnation a worker id belongs to (`None`: not one of ours).
    pub fn owner_of(&self, id: &str) -> Option<Owner> {
        self.inner().workers.get(id).copied()
    }

    /// A grant of `task` to `owner` at `locked_us`: its attempt number (the
    /// same grant seen again keeps its number).
    pub fn grant(&self, task: TaskId, locked_us: i64, owner: Owner) -> u32 {
        let mut inner = self.inner();
        if let Some(&attempt) = inner.grants.get(&(task, locked_us)) {
            return attempt;
        }
        let attempt = inner.granted.get(&task).copied().unwrap_or(0) + 1;
        inner.granted.insert(task, attempt);
        inner.grants.insert((task, locked_us), attempt);
        inner.latest.insert((task, owner), attempt);
        attempt
    }

    /// The attempt number of the grant at `locked_us` (`None`: unseen).
    pub fn attempt(&self, task: TaskId, locked_us: i64) -> Option<u32> {
        self.inner().grants.get(&(task, locked_us)).copied()
    }

    /// Grants of `task` so far (its last attempt number).
    pub fn granted(&self, task: TaskId) -> u32 {
        self.inner().granted.get(&task).copied().unwrap_or(0)
    }

    /// The body of `task`'s attempt started on `owner` (the task-body seam).
    pub fn ran(&self, task: TaskId, attempt: u32, owner: Owner) {
        self.inner().ran.insert((task, owner), attempt);
    }

    /// The body of `fence`'s attempt returned (the task-body seam, as the
    /// handler hands its result back to graphile).
    ///
    /// Why this and not the latest attempt that ran: a worker recovered by
    /// a sweep while alive (paused, partitioned) can claim its own job again
    /// and run it while the first run's handler is still out; the first
    /// run's outcome then comes after the second run started, under the
    /// same worker id, and graphile's statements name only the job and the
    /// worker. Between the handler returning and `complete_job` /
    /// `fail_job` being sent graphile does not yield (no hooks, no batcher:
    /// `run_and_release_job`), so the next statement the process sends is
    /// this attempt's outcome.
    pub fn returned(&self, fence: Fence) {
        self.inner().returned.insert(fence.owner, fence);
    }

    /// The attempt whose body returned on `owner` since its last statement,
    /// taken by the statement being sent now (the driver, at send time: the
    /// link may reorder statements on their way to the store).
    pub fn take_returned(&self, owner: Owner) -> Option<Fence> {
        self.inner().returned.remove(&owner)
    }

    /// The attempt an outcome of `owner` for `task` speaks for, when the
    /// statement did not carry the attempt whose body had just returned
    /// ([`Book::returned`]): graphile writes an outcome only for a job it
    /// ran, so the latest attempt whose body ran on that owner; else its
    /// latest grant (attempt 0 if none).
    pub fn fence_of(&self, task: TaskId, owner: Owner) -> Fence {
        let inner = self.inner();
        let attempt = inner.ran.get(&(task, owner)).or(inner.latest.get(&(task, owner))).copied().unwrap_or(0);
        Fence { task, attempt, owner }
    }
}
