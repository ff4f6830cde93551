//! outcome-kept: an attempt whose body finished while it still held its
//! task has its outcome committed, unless the harness can name what lost it.
//!
//! The other half of fenced-completion. Fencing keeps a stale outcome out;
//! nothing else asked whether a *current* outcome got in. A body that ends
//! holding its task (its lease unexpired, or its owner's liveness lease)
//! obliges the engine to commit its outcome (complete or fail) within the
//! finalization deadline. Judged from ground truth: the body seam (the end),
//! the store seam (the commits, and what became of the attempt's requests),
//! process control. The obligation ends when the task stops being held by
//! the attempt, whoever changed it (its own outcome; a release is
//! lease-revocation's to judge). It is excused, from what the harness saw
//! and injected, when within the window:
//!
//! - a request of that owner (the attempt's own, or one no fence names: a
//!   COMMIT, a ROLLBACK) was lost, refused or held at the store seam, or was
//!   still at the store at the deadline, or its answer was lost or held back;
//! - the store answered its outcome with a refusal of the store's own (a
//!   lock or statement timeout, a deadlock, the store unavailable, the
//!   transaction no longer open);
//! - the owner was killed, paused or cut off, or the store was down.
//!
//! A loss without an excuse is a violation even when recovery then runs the
//! task again correctly: the engine threw away work it had done.

use super::{commit, fact, Checker, Ctx, Violation};
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::truth::{Fact, Reply, Sender};
use std::collections::BTreeMap;

pub const NAME: &str = "outcome-kept";

/// Beyond the finalization deadline: the hops to the store and back and the
/// store's own time for a statement.
const SLACK_MS: u64 = 1_000;

/// An outcome the engine owes.
#[derive(Debug, Clone)]
struct Owed {
    ended_ms: u64,
    deadline_ms: u64,
    /// What the harness saw that may have lost it.
    excuse: Option<String>,
}

#[derive(Default)]
pub struct OutcomeKept {
    owed: BTreeMap<Fence, Owed>,
    evaluations: u64,
    excused: u64,
}

/// Does this request speak for `fence`, or for no attempt at all (so a
/// fault on it may have cost `fence`'s outcome)?
fn may_carry(op: &Op, fence: &Fence) -> bool {
    match op.fence() {
        Some(f) => f == fence,
        None => matches!(op, Op::Commit { .. } | Op::Rollback { .. }),
    }
}

impl OutcomeKept {
    fn excuse_owner(&mut self, owner: leasesim_vocab::ids::Owner, why: &str, op: Option<&Op>) {
        for (fence, owed) in self.owed.iter_mut().filter(|(f, _)| f.owner == owner) {
            if owed.excuse.is_none() && op.is_none_or(|op| may_carry(op, fence)) {
                owed.excuse = Some(why.to_string());
            }
        }
    }

    /// What a record shows about the owed outcomes' requests and owners.
    fn note(&mut self, rec: &Record, ctx: &Ctx) {
        let request_of = |req: &u64| ctx.view.request(*req).map(|r| (r.from, r.request.clone()));
        let (why, req) = match &rec.entry {
            Entry::Truth(Fact::Dropped { req }) => ("a request of it was lost at the store seam", req),
            Entry::Truth(Fact::Refused { req, .. }) => ("a request of it was refused by a fault", req),
            Entry::Truth(Fact::Handed { req }) => ("a request of it was held at the store", req),
            Entry::Truth(Fact::Answered { req, response: Response::Rejected { reason }, .. }) if store_side(reason) => {
                ("the store refused its outcome", req)
            }
            Entry::Truth(Fact::Answered { req, reply: Reply::Lost, .. }) => ("an answer to it was lost", req),
            Entry::Truth(Fact::Answered { req, reply: Reply::Late, .. }) => ("an answer to it was held back", req),
            Entry::World(WorldEvent::ProcessKilled { owner }) => {
                self.excuse_owner(*owner, "it was killed", None);
                return;
            }
            _ => return,
        };
        if let Some((Sender::Worker(owner), op)) = request_of(req) {
            self.excuse_owner(owner, why, Some(&op));
        }
    }

    /// An excuse the view's intervals give for `[from, to]`, if any.
    fn interval_excuse(ctx: &Ctx, fence: &Fence, from: u64, to: u64) -> Option<String> {
        let v = &ctx.view;
        if let Some(why) = v.kept_from_acting(fence.owner, from, to) {
            return Some(why.into());
        }
        if v.store_down.iter().any(|&(down, up)| down <= to && up.is_none_or(|u| u > from)) {
            return Some("the store was down".into());
        }
        let at_store = v
            .requests
            .values()
            .any(|r| r.from == Sender::Worker(fence.owner) && r.answer.is_none() && may_carry(&r.request, fence));
        at_store.then(|| "a request of it was still at the store".into())
    }

    fn judge(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let due: Vec<Fence> = self.owed.iter().filter(|(_, o)| o.deadline_ms < now).map(|(f, _)| *f).collect();
        for fence in due {
            let owed = self.owed.remove(&fence).expect("due outcomes are owed");
            if !ctx.view.task(fence.task).is_some_and(|t| t.held_by(&fence)) {
                continue;
            }
            self.evaluations += 1;
            let excuse = owed.excuse.or_else(|| Self::interval_excuse(ctx, &fence, owed.ended_ms, owed.deadline_ms));
            if excuse.is_some() {
                self.excused += 1;
                continue;
            }
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: the body of attempt {} ({}) ended at {} ms with the task still its own, but no outcome \
                         committed by {} ms (finalization deadline {} ms), and nothing the harness saw or injected \
                         explains the loss",
                        fence.task,
                        fence.attempt,
                        fence.owner,
                        owed.ended_ms,
                        owed.deadline_ms,
                        ctx.promises().finalize_deadline_ms
                    ),
                )
                .fence(&fence),
            );
        }
    }
}

/// A refusal the store makes on its own account, which no engine can help.
fn store_side(reason: &Refusal) -> bool {
    matches!(
        reason,
        Refusal::LockTimeout | Refusal::Deadlock | Refusal::Unavailable | Refusal::TxnClosed | Refusal::TimedOut
    )
}

impl Checker for OutcomeKept {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "body and store seams: a body that ends holding its task has its outcome committed within the finalization deadline, unless a fault on its requests, its process or the store explains the loss"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        self.judge(now, ctx, out);
        if let Some(Fact::BodyEnded { fence, .. }) = fact(rec) {
            let held = ctx.view.task(fence.task).is_some_and(|t| t.held_by(fence));
            let unexpired =
                ctx.view.task(fence.task).is_some_and(|t| t.row.lease_expiry_ms.is_none_or(|expiry| expiry > now));
            if held && unexpired {
                let deadline_ms = now + ctx.promises().finalize_deadline_ms + SLACK_MS;
                self.owed.insert(*fence, Owed { ended_ms: now, deadline_ms, excuse: None });
            }
        }
        self.note(rec, ctx);
        // A commit that leaves the task no longer the attempt's settles it.
        if let Some(commit) = commit(rec) {
            for change in &commit.tasks {
                let settled: Vec<Fence> = self
                    .owed
                    .keys()
                    .filter(|f| f.task == change.after.id && !super::view::held_by(&change.after, f))
                    .copied()
                    .collect();
                for fence in settled {
                    self.owed.remove(&fence);
                    self.evaluations += 1;
                }
            }
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        // Judged up to the end only: an outcome due after it is not late.
        self.judge(end_ms, ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn excused(&self) -> u64 {
        self.excused
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::op::Op;
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::{Fact, Sender};

    cases! {
        an_outcome_committed_in_time_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(20_000).end().build()
            => PASS;
        a_finished_body_whose_outcome_never_came:
            // The body returned at 100 ms holding t1; nothing was faulted,
            // and by the deadline (1000 + 1000 slack) no outcome committed.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(1_100).unpermit(o(1, 1), 1, 1)
                .at(2_200).heartbeat(o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        a_lost_outcome_request_is_excused:
            {
                let (h, req) = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                    .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                    .at(100).finished(1, 1, o(1, 1), true)
                    .arrive(Sender::Worker(o(1, 1)), Op::Complete { fence: fence(1, 1, o(1, 1)) });
                h.fact(Fact::Dropped { req }).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            }
            => PASS;
        a_lost_request_of_another_attempt_excuses_nothing:
            {
                let (h, req) = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                    .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                    .at(100).finished(1, 1, o(1, 1), true)
                    .arrive(Sender::Worker(o(1, 1)), Op::Complete { fence: fence(2, 1, o(1, 1)) });
                h.fact(Fact::Dropped { req }).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            }
            // (t2 was never granted: outcome-truth's.)
            => &[(NAME, Some(1)), ("outcome-truth", Some(2))];
        a_loss_while_the_process_was_paused_is_excused:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(150).paused(1)
                .at(2_200).heartbeat(o(1, 1))
                .build()
            => PASS;
        an_outcome_due_after_the_end_is_not_judged:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(1_500).heartbeat(o(1, 1))
                .build()
            => PASS;
    }
}
