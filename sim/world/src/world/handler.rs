//! Simulated task bodies: how long an attempt runs and whether it fails.
//!
//! Drawn from (seed, task, attempt) alone, not from the simulator's shared
//! RNG, so a task's behaviour does not shift when faults or scheduling change
//! (which keeps shrunk runs comparable to their originals).
//!
//! This is the task-body seam: every body records when it started, on which
//! process (the handler's own, not the one the fence names), and how it
//! ended; every completion callback the application receives is recorded.

use super::injector::{upto, Injector};
use super::quiet::Open;
use crate::faults::FaultKind;
use crate::history::Recorder;
use crate::scenario::Workload;
use crate::truth::Fact;
use leasesim_vocab::ids::{Fence, Owner};
use leasesim_vocab::task::{TaskError, TaskKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct SimHandler {
    seed: u64,
    workload: Arc<Workload>,
    faults: Arc<Injector>,
    rec: Recorder,
    /// The process incarnation this handler runs in.
    on: Owner,
    /// Where the world counts bodies still running (the quiet end waits
    /// for them); `None` for a handler outside a world.
    open: Option<Arc<Open>>,
}

impl SimHandler {
    pub fn new(seed: u64, workload: Arc<Workload>, faults: Arc<Injector>, rec: Recorder, on: Owner) -> Self {
        SimHandler { seed, workload, faults, rec, on, open: None }
    }

    /// Counts this handler's running bodies in `open`.
    pub fn counting(mut self, open: Arc<Open>) -> Self {
        self.open = Some(open);
        self
    }

    /// The body's behaviour for one attempt: (work time, error).
    pub fn behaviour(&self, fence: Fence, kind: TaskKind) -> (u64, Option<TaskError>) {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed, fence.task, fence.attempt as u64));
        let w = &self.workload;
        let mut work_ms = match kind {
            TaskKind::Activity => rng.gen_range(w.activity_work_min_ms..=w.activity_work_max_ms),
            _ => rng.gen_range(w.work_min_ms..=w.work_max_ms),
        };
        let fail_rate = match kind {
            TaskKind::AuthzMaterialization => w.authz_conflict_rate,
            TaskKind::Job => w.job_fail_rate,
            _ => 0.0,
        };
        let mut error = rng.gen_bool(fail_rate).then_some(TaskError::Conflict);
        // Drawn after the others, so that worlds without them replay as before.
        let fatal = matches!(kind, TaskKind::AuthzMaterialization | TaskKind::Job) && rng.gen_bool(w.fatal_rate);
        if fatal {
            error = Some(TaskError::Fatal);
        }
        if rng.gen_bool(w.long_work_rate) && w.long_work_kinds.contains(&kind) {
            work_ms = rng.gen_range(w.long_work_min_ms..=w.long_work_max_ms);
        }
        (work_ms, error)
    }
}

/// Records a body that is dropped before it returns.
struct Running<'a> {
    handler: &'a SimHandler,
    fence: Fence,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(open) = &self.handler.open {
            open.bodies.fetch_sub(1, Ordering::Relaxed);
        }
        // Outside the simulation (a runtime being torn down) there is no
        // simulated time to stamp the record with, and nobody to read it.
        if !self.done && madsim::time::TimeHandle::try_current().is_some() {
            self.handler.rec.fact(Fact::BodyStopped { fence: self.fence, on: self.handler.on });
        }
    }
}

impl SimHandler {
    /// Runs one attempt's body at the body seam: recorded as it starts, ends
    /// or is dropped.
    pub async fn run(&self, fence: Fence, kind: TaskKind) -> Result<(), TaskError> {
        let on = self.on;
        self.rec.fact(Fact::BodyStarted { fence, kind, on });
        if let Some(open) = &self.open {
            open.bodies.fetch_add(1, Ordering::Relaxed);
        }
        let mut running = Running { handler: self, fence, done: false };
        let result = self.body(fence, kind).await;
        running.done = true;
        self.rec.fact(Fact::BodyEnded { fence, on, error: result.err() });
        result
    }

    /// The application was told that `fence`'s completion committed.
    pub fn callback(&self, fence: Fence) {
        self.rec.fact(Fact::Callback { fence, on: self.on });
    }
}

impl SimHandler {
    async fn body(&self, fence: Fence, kind: TaskKind) -> Result<(), TaskError> {
        let (work_ms, mut error) = self.behaviour(fence, kind);
        if let Some(e) = self.faults.roll(FaultKind::SlowPreparation) {
            let prep_ms = upto(e.magnitude_ms.max(0) as u64);
            self.faults.inject(FaultKind::SlowPreparation, format!("{fence} prepares for {prep_ms} ms"));
            tokio::time::sleep(Duration::from_millis(prep_ms)).await;
        }
        if error.is_none() && self.faults.roll(FaultKind::WriteConflict).is_some() {
            self.faults.inject(FaultKind::WriteConflict, format!("{fence} hits a write conflict"));
            error = Some(TaskError::Conflict);
        }
        tokio::time::sleep(Duration::from_millis(work_ms)).await;
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// SplitMix64-style mixing of a few words into one seed.
pub fn mix(a: u64, b: u64, c: u64) -> u64 {
    let mut x = a ^ b.rotate_left(21) ^ c.rotate_left(42) ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
