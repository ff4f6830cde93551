//! The adapter's own bookkeeping for one world, shared by its store seam,
//! its workers and its client: which task ids the application drew, which
//! attempt each fetch granted to whom, and which process each worker name
//! stands for. apalis keeps none of this in the harness's words: its
//! in-flight sets name workers, not incarnations, and it numbers no grants.

use leasesim_vocab::ids::{Fence, Owner, TaskId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The worker name an incarnation runs under: its process's, the same
/// across restarts (as a supervisor restarts it), or, with `per_run`, one
/// of its own (as an orchestrator names each new pod).
pub fn worker_name(owner: Owner, per_run: bool) -> String {
    match per_run {
        false => format!("p{}", owner.proc),
        true => format!("p{}.{}", owner.proc, owner.incarnation),
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The last task id the application drew.
    last_task: TaskId,
    /// Each task's latest grant.
    grants: BTreeMap<TaskId, Fence>,
    /// The latest attempt each owner was granted of each task.
    held: BTreeMap<(TaskId, Owner), u32>,
    /// Failures recorded per task.
    failures: BTreeMap<TaskId, u32>,
    /// The newest incarnation heard from under each worker name.
    names: BTreeMap<String, Owner>,
}

#[derive(Debug, Clone, Default)]
pub struct Book(Arc<Mutex<Inner>>, bool);

impl Book {
    /// A world's book; `per_run`: each incarnation has a worker name of
    /// its own ([`worker_name`]).
    pub fn new(per_run: bool) -> Book {
        Book(Arc::default(), per_run)
    }

    /// The worker name `owner` runs under.
    pub fn name_of(&self, owner: Owner) -> String {
        worker_name(owner, self.1)
    }

    /// Does one name stand for every incarnation of its process?
    pub fn names_per_process(&self) -> bool {
        !self.1
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().expect("apalis book")
    }

    /// A fresh task id for the application to push (apalis takes the id
    /// the application gives; its own ULIDs would draw on the OS).
    pub fn next_task(&self) -> TaskId {
        let mut b = self.inner();
        b.last_task += 1;
        b.last_task
    }

    /// A fetch handed `task` to `owner`: the next attempt.
    pub fn grant(&self, task: TaskId, owner: Owner) -> Fence {
        let mut b = self.inner();
        let attempt = b.grants.get(&task).map_or(0, |f| f.attempt) + 1;
        let fence = Fence { task, attempt, owner };
        b.grants.insert(task, fence);
        b.held.insert((task, owner), attempt);
        fence
    }

    /// The task's latest grant.
    pub fn current(&self, task: TaskId) -> Option<Fence> {
        self.inner().grants.get(&task).copied()
    }

    /// The attempt `owner` speaks for when it reports on `task`: the last
    /// one it was granted (0: never granted to it).
    pub fn held_by(&self, task: TaskId, owner: Owner) -> Fence {
        let attempt = self.inner().held.get(&(task, owner)).copied().unwrap_or(0);
        Fence { task, attempt, owner }
    }

    pub fn failed(&self, task: TaskId) {
        *self.inner().failures.entry(task).or_default() += 1;
    }

    pub fn failures(&self, task: TaskId) -> u32 {
        self.inner().failures.get(&task).copied().unwrap_or(0)
    }

    /// `owner` spoke at the store under its worker name.
    pub fn heard(&self, owner: Owner) {
        let mut b = self.inner();
        let newest = b.names.entry(worker_name(owner, self.1)).or_insert(owner);
        if owner.incarnation > newest.incarnation {
            *newest = owner;
        }
    }

    /// The newest incarnation heard under `name`.
    pub fn owner_named(&self, name: &str) -> Option<Owner> {
        self.inner().names.get(name).copied()
    }

    /// Every worker name heard so far, sorted.
    pub fn names(&self) -> Vec<String> {
        self.inner().names.keys().cloned().collect()
    }
}
