//! testimony: what the engine says it did is what the harness saw it do.
//!
//! - The store's events for one answer (`LeaseGranted`, `WriteApplied`,
//!   `LeaseReleased`, ...) describe exactly the rows its transaction changed
//!   (read by the harness at the store seam).
//! - A worker's `ExecutionStarted` / `ExecutionFinished` match a body that
//!   really ran and how it really ended (the task-body seam), and its
//!   `CallbackPublished` matches a callback the application really got.
//!
//! Engine events are the engine's testimony; they are what operators read in
//! logs and metrics. A lie there is a bug even where nothing else breaks.

use super::{granted, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::ids::{Fence, IndexId, Owner, StageRef, TaskId};
use leasesim_vocab::op::{Op, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::testimony::{Event, WriteKind};
use leasesim_vocab::truth::{Commit, Fact};
use std::collections::BTreeSet;

pub const NAME: &str = "testimony";

/// One thing the store did (as the engine says it, or as the harness saw it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Did {
    /// A task created, due from this store time (its retry-at: a scheduled
    /// task's not-before time).
    Created(TaskId, u64),
    Granted(Fence, Option<u64>),
    Renewed(Fence, u64),
    Released(Fence),
    Done(Fence),
    Failed(Fence, u32, bool),
    Materialized(IndexId),
    StageDone(StageRef),
    Heartbeat(Owner),
}

/// What an engine store event says the store did.
fn said(e: &Event) -> Option<Did> {
    Some(match e {
        Event::TaskCreated { task, retry_at_ms, .. } => Did::Created(*task, *retry_at_ms),
        Event::LeaseGranted { fence, lease_expiry_ms, .. } => Did::Granted(*fence, *lease_expiry_ms),
        Event::LeaseRenewed { fence, lease_expiry_ms } => Did::Renewed(*fence, *lease_expiry_ms),
        Event::LeaseReleased { fence, .. } => Did::Released(*fence),
        Event::WriteApplied { fence, write: WriteKind::Complete, .. } => Did::Done(*fence),
        Event::WriteApplied { fence, write: WriteKind::Fail, retries, terminal, .. } => {
            Did::Failed(*fence, *retries, *terminal)
        }
        Event::IndexMaterialized { index, .. } => Did::Materialized(*index),
        Event::StageDone { stage, .. } => Did::StageDone(*stage),
        Event::HeartbeatApplied { owner } => Did::Heartbeat(*owner),
        // Nothing else is compared with what the harness saw commit.
        Event::StageEnqueueRefused { .. }
        | Event::PipelineCreated { .. }
        | Event::WriteApplied { .. }
        | Event::WriteRejected { .. }
        | Event::LeaseChecked { .. }
        | Event::RepairDecision { .. }
        | Event::QueryAnswered { .. }
        | Event::MaintenanceApplied { .. }
        | Event::PipelineSnapshotTaken { .. }
        | Event::ProcessStarted { .. }
        | Event::PermitAcquired { .. }
        | Event::PermitReleased { .. }
        | Event::ExecutionStarted { .. }
        | Event::AttemptDropped { .. }
        | Event::ExecutionFinished { .. }
        | Event::FinalizeTimedOut { .. }
        | Event::CallbackPublished { .. }
        | Event::HeartbeatSent { .. }
        | Event::MaintenanceStarted { .. }
        | Event::MaintenanceEnded { .. }
        | Event::MaintenanceStillRunning { .. }
        | Event::RetryPlanned { .. }
        | Event::NoteSent { .. }
        | Event::QueryResult { .. } => return None,
    })
}

/// What the harness saw the store do for `request`, answered `response`.
fn seen(request: Option<&Op>, response: Option<&Response>, commit: &Commit) -> Vec<Did> {
    let mut did = Vec::new();
    let fence_of = |task: TaskId| match request {
        Some(Op::Complete { fence } | Op::Fail { fence, .. }) if fence.task == task => Some(*fence),
        _ => None,
    };
    for c in &commit.tasks {
        let a = &c.after;
        let Some(b) = &c.before else {
            did.push(Did::Created(a.id, a.retry_at_ms));
            continue;
        };
        if let Some(fence) = granted(c) {
            did.push(Did::Granted(fence, a.lease_expiry_ms));
        } else if a.state == TaskState::Leased && b.state == TaskState::Leased && a.lease_expiry_ms != b.lease_expiry_ms
        {
            if let (Some(owner), Some(e)) = (a.owner, a.lease_expiry_ms) {
                did.push(Did::Renewed(Fence { task: a.id, attempt: a.attempt, owner }, e));
            }
        }
        let holder = b.owner.map(|owner| Fence { task: b.id, attempt: b.attempt, owner });
        if a.retries > b.retries {
            if let Some(f) = fence_of(a.id).or(holder) {
                did.push(Did::Failed(f, a.retries, a.state == TaskState::Dead));
            }
        } else if a.state == TaskState::Done && b.state != TaskState::Done {
            if let Some(f) = fence_of(a.id).or(holder) {
                did.push(Did::Done(f));
            }
        } else if b.state == TaskState::Leased && a.state == TaskState::Ready {
            if let Some(f) = holder {
                did.push(Did::Released(f));
            }
        }
    }
    did.extend(commit.materialized.iter().map(|i| Did::Materialized(*i)));
    for s in &commit.stages {
        if s.after.done && !s.before.as_ref().is_some_and(|b| b.done) {
            did.push(Did::StageDone(s.stage));
        }
    }
    match (request, response) {
        (Some(Op::Heartbeat { owner }), Some(Response::Ack)) => did.push(Did::Heartbeat(*owner)),
        // Renewed twice in one instant: the second commits the same expiry again.
        (Some(Op::Renew { fence }), Some(Response::Renewed { lease_expiry_ms }))
            if *lease_expiry_ms != u64::MAX && commit.task(fence.task).is_none() =>
        {
            did.push(Did::Renewed(*fence, *lease_expiry_ms));
        }
        _ => {}
    }
    did
}

#[derive(Default)]
pub struct Testimony {
    /// Store events since the last answer.
    pending: Vec<Did>,
    /// Executions the engine says it started and whose body has not shown.
    announced: BTreeSet<Fence>,
    callbacks: BTreeSet<Fence>,
    evaluations: u64,
}

impl Testimony {
    fn judge_answer(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let (request, response, commit) = match &rec.entry {
            Entry::Truth(Fact::Answered { req, response, commit, .. }) => {
                (ctx.view.request(*req).map(|r| &r.request), Some(response), commit)
            }
            Entry::Truth(Fact::Drift { commit }) => (None, None, commit),
            _ => return,
        };
        self.evaluations += 1;
        let mut said = std::mem::take(&mut self.pending);
        let mut seen = seen(request, response, commit);
        // A heartbeat from an incarnation that deregistered, late on the
        // way, is answered but applies nothing: it no longer keeps anything.
        let left = |o: &Owner| ctx.view.owner(*o).is_some_and(|v| v.deregistered_ms.is_some());
        seen.retain(|d| !matches!(d, Did::Heartbeat(o) if left(o)));
        said.sort();
        seen.sort();
        if said != seen {
            let op = request.map_or("a change outside any request", |r| r.op_name());
            let mut v = Violation::new(
                NAME,
                now,
                format!("{op} at {now} ms: the engine says {said:?}, the store did {seen:?}"),
            );
            if let Some(task) = commit.tasks.first().map(|c| c.after.id) {
                v = v.task(task);
            }
            out.push(v);
        }
    }

    fn judge_worker(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let problem = match &rec.entry {
            Entry::Engine(Event::ExecutionStarted { fence }) => {
                self.announced.insert(*fence);
                None
            }
            Entry::Truth(Fact::BodyStarted { fence, .. }) => {
                self.evaluations += 1;
                (!self.announced.remove(fence))
                    .then(|| (*fence, "a body ran that the engine never said it started".to_string()))
            }
            Entry::Engine(Event::ExecutionFinished { fence, error }) => {
                self.evaluations += 1;
                match ctx.view.bodies.get(fence) {
                    Some(b) if b.ended_ms.is_some() && !b.stopped && b.error == *error => None,
                    Some(b) if b.ended_ms.is_none() => {
                        Some((*fence, "the engine says the execution finished; its body still runs".into()))
                    }
                    Some(b) => Some((
                        *fence,
                        format!("the engine says the execution ended with {error:?}; the body returned {:?}", b.error),
                    )),
                    None => Some((*fence, "the engine says an execution finished whose body never ran".into())),
                }
            }
            Entry::Truth(Fact::Callback { fence, .. }) => {
                self.callbacks.insert(*fence);
                None
            }
            Entry::Engine(Event::CallbackPublished { fence }) => {
                self.evaluations += 1;
                (!self.callbacks.contains(fence))
                    .then(|| (*fence, "the engine says it published a callback the application never got".into()))
            }
            _ => None,
        };
        if let Some((fence, problem)) = problem {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!("t{}: attempt {} ({}) at {now} ms: {problem}", fence.task, fence.attempt, fence.owner),
                )
                .fence(&fence),
            );
        }
    }
}

impl Checker for Testimony {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "engine events, cross-checked: the store's events match what its transactions changed; executions and callbacks match the body seam"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        if let Entry::Engine(e) = &rec.entry {
            if let Some(did) = said(e) {
                self.pending.push(did);
            }
        }
        self.judge_answer(now, rec, ctx, out);
        self.judge_worker(now, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::ENGINE.or(Kinds::COMMIT).or(Kinds::BODY_STARTED).or(Kinds::CALLBACK)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.testimony
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::{Row, TaskKind, TaskSpec};
    use leasesim_vocab::testimony::{Event, ReleaseCause};
    use leasesim_vocab::truth::Sender;

    cases! {
        truthful_testimony_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).attempt_ok(10, 1, 1, o(1, 1)).build()
            => PASS;
        a_scheduled_task_told_due_at_its_time_passes:
            H::new().up(o(1, 1)).created_spec(1, TaskSpec::job(5_000)).build()
            => PASS;
        // The store wrote the task due at 5000 ms; its event says due at once.
        a_scheduled_task_told_due_at_once:
            H::new().up(o(1, 1))
                .answer(
                    Sender::Client(1),
                    Op::Enqueue { spec: TaskSpec::job(5_000), key: None },
                    Response::Enqueued { task: 1 },
                    vec![Event::TaskCreated { task: 1, spec: TaskSpec::job(5_000), retry_at_ms: 0 }],
                    &[(1, &|t: &mut Row| {
                        t.spec = TaskSpec::job(5_000);
                        t.retry_at_ms = 5_000;
                    })],
                )
                .build()
            => &[(NAME, Some(1))];
        store_event_for_a_release_that_did_not_happen:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .answer(Sender::Worker(o(1, 1)), Op::ReclaimExpired { by: o(1, 1) }, Response::Released { tasks: 0 },
                    vec![Event::LeaseReleased { fence: fence(1, 1, o(1, 1)), cause: ReleaseCause::Expired }], &[])
                .build()
            => &[(NAME, None)];
        execution_reported_for_a_body_that_never_ran:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .ev(Event::ExecutionStarted { fence: fence(1, 1, o(1, 1)) })
                .ev(Event::ExecutionFinished { fence: fence(1, 1, o(1, 1)), error: None })
                .build()
            => &[(NAME, Some(1))];
        callback_reported_but_never_delivered:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1))
                .ev(Event::CallbackPublished { fence: fence(1, 1, o(1, 1)) }).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
    }
}
