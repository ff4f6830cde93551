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
//!   COMMIT, a ROLLBACK) was lost or held at the store seam, or was still at
//!   the store at the deadline, or its answer was lost or held back;
//! - the store refused it in a way no retry helps (a fault's refusal that
//!   is not retryable, the store unavailable);
//! - the owner was killed, paused or cut off, or the store was down;
//! - a renewal of its lease was refused by a fault and the lease ran out
//!   before the deadline (an engine that writes its outcome under a lease
//!   check cannot commit it then: the lease is what the fault cost).
//!
//! A refusal that says "nothing applied, try again" (a serialization
//! failure 40001, a statement timeout 57014, a lock wait given up 55P03, a
//! deadlock 40P01, a transaction no longer open) excuses nothing by itself:
//! the engine owes another try, a request naming the attempt that reaches
//! the store after it. Without one the loss is unexcused, unless the refusal
//! came too late for a try within the deadline: less than one RPC deadline
//! (half the finalization deadline, at most) and the slack before it. An
//! engine that promises no such retry (`Promises::outcome_retry`) is excused
//! by the refusal, as by any other.
//!
//! A loss without an excuse is a violation even when recovery then runs the
//! task again correctly: the engine threw away work it had done.

use super::{commit, fact, Checker, Ctx, NextDue, Violation};
use crate::view::RequestView;
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::truth::{Fact, Reply, Sender, HOP_MAX_MS};
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
    /// A retryable refusal of one of its requests (when, what) that no
    /// later request of the attempt has answered yet.
    untried: Option<(u64, Refusal)>,
    /// When the latest request naming the attempt reached the store.
    tried_ms: u64,
    /// A renewal of its lease was refused by a fault after its body ended.
    renewal_refused: bool,
}

#[derive(Default)]
pub struct OutcomeKept {
    owed: BTreeMap<Fence, Owed>,
    /// No owed outcome's deadline passes before this.
    next_due: NextDue,
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

    /// A retryable refusal of a request that may carry the owed outcomes of
    /// its owner: each of them owes a try after it (unless a try that reached
    /// the store after the refused one already answers for it).
    fn refused(&mut self, r: &RequestView, owner: leasesim_vocab::ids::Owner, now: u64, reason: Refusal) {
        for (fence, owed) in self.owed.iter_mut().filter(|(f, _)| f.owner == owner) {
            if may_carry(&r.request, fence) && owed.tried_ms <= r.arrived_ms {
                owed.untried = Some((now, reason));
            }
        }
    }

    /// A request naming `fence` reached the store: the engine tried again.
    fn tried(&mut self, fence: &Fence, now: u64) {
        if let Some(owed) = self.owed.get_mut(fence) {
            owed.untried = None;
            owed.tried_ms = now;
        }
    }

    /// What a record shows about the owed outcomes' requests and owners.
    fn note(&mut self, rec: &Record, ctx: &Ctx) {
        let request_of = |req: &u64| ctx.view.request(*req).map(|r| (r.from, r.request.clone()));
        let live = |req: &u64| ctx.view.request(*req).filter(|r| !r.duplicate);
        let owes_retry = ctx.promises().outcome_retry;
        let retryable_refusal = match &rec.entry {
            Entry::Truth(Fact::Refused { req, response: Response::Rejected { reason }, .. })
            | Entry::Truth(Fact::Answered { req, response: Response::Rejected { reason }, .. })
                if owes_retry && retryable(reason) =>
            {
                Some((req, *reason))
            }
            _ => None,
        };
        // A renewal is not the outcome: its refusal owes no outcome retry,
        // but may cost the lease the outcome is written under.
        let refused_renewal = match &rec.entry {
            Entry::Truth(Fact::Refused { req, .. }) => live(req).and_then(|r| match (&r.request, r.from) {
                (Op::Renew { fence }, Sender::Worker(_)) => Some(*fence),
                _ => None,
            }),
            _ => None,
        };
        if let Some(fence) = refused_renewal {
            if let Some(owed) = self.owed.get_mut(&fence) {
                owed.renewal_refused = true;
            }
            return;
        }
        if let Some((req, reason)) = retryable_refusal {
            if let Some(r) = live(req) {
                if let Sender::Worker(owner) = r.from {
                    self.refused(r, owner, rec.at_ms, reason);
                }
            }
            return;
        }
        if let Entry::Truth(Fact::Arrived { req, .. }) = &rec.entry {
            if let Some(fence) = live(req).and_then(|r| r.request.fence()) {
                self.tried(fence, rec.at_ms);
            }
            return;
        }
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
            // Gone as a killed process is: excused alike.
            Entry::World(WorldEvent::ProcessExited { owner }) => {
                self.excuse_owner(*owner, "it exited", None);
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
        if !self.next_due.passed(now) {
            return;
        }
        let due: Vec<Fence> = self.owed.iter().filter(|(_, o)| o.deadline_ms < now).map(|(f, _)| *f).collect();
        self.next_due.looked(self.owed.values().map(|o| o.deadline_ms).filter(|&d| d >= now).min());
        for fence in due {
            let owed = self.owed.remove(&fence).expect("due outcomes are owed");
            if !ctx.view.task(fence.task).is_some_and(|t| t.held_by(&fence)) {
                continue;
            }
            self.evaluations += 1;
            let lease_ran_out = owed.renewal_refused
                && ctx.view.task(fence.task).and_then(|t| t.row.lease_expiry_ms).is_some_and(|e| e <= owed.deadline_ms);
            let excuse = owed
                .excuse
                .or_else(|| lease_ran_out.then(|| "a renewal was refused by a fault and its lease ran out".into()))
                .or_else(|| Self::interval_excuse(ctx, &fence, owed.ended_ms, owed.deadline_ms));
            if excuse.is_some() {
                self.excused += 1;
                continue;
            }
            // An engine may pause up to one RPC deadline between tries (half
            // its finalization deadline at most: a longer pause is no retry),
            // counted from when the refusal reaches it, and its next try takes
            // a hop to the store: the refusal's way back and the try's way
            // there are the world's, up to `HOP_MAX_MS` each (c-workflows
            // seed 64330237747334: refused 10003 ms before the deadline, the
            // engine's pause capped at 10000 ms).
            let cfg = ctx.promises();
            let too_late = cfg.rpc_timeout_ms.min(cfg.finalize_deadline_ms / 2) + 2 * HOP_MAX_MS + SLACK_MS;
            let (by, deadline) = (owed.deadline_ms, cfg.finalize_deadline_ms);
            let what = match owed.untried {
                Some((refused_ms, _)) if by.saturating_sub(refused_ms) < too_late => {
                    self.excused += 1;
                    continue;
                }
                Some((refused_ms, reason)) => format!(
                    "; the store refused its outcome at {refused_ms} ms with a retryable {} (nothing applied: try \
                     again), and the engine sent nothing more for it by {by} ms (finalization deadline {deadline} ms)",
                    reason.name()
                ),
                None => format!(
                    ", but no outcome committed by {by} ms (finalization deadline {deadline} ms), and nothing the \
                     harness saw or injected explains the loss"
                ),
            };
            let message = format!(
                "t{}: the body of attempt {} ({}) ended at {} ms with the task still its own{what}",
                fence.task, fence.attempt, fence.owner, owed.ended_ms
            );
            out.push(Violation::new(NAME, now, message).fence(&fence));
        }
    }
}

/// A refusal the store makes on its own account, which no retry helps (or
/// one the engine promises no retry for: `Promises::outcome_retry`).
fn store_side(reason: &Refusal) -> bool {
    matches!(reason, Refusal::Unavailable) || retryable(reason)
}

/// A refusal that says nothing applied and a new try may succeed.
pub(crate) fn retryable(reason: &Refusal) -> bool {
    matches!(
        reason,
        Refusal::Conflict | Refusal::TimedOut | Refusal::LockTimeout | Refusal::Deadlock | Refusal::TxnClosed
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
                self.owed.insert(
                    *fence,
                    Owed {
                        ended_ms: now,
                        deadline_ms,
                        excuse: None,
                        untried: None,
                        tried_ms: 0,
                        renewal_refused: false,
                    },
                );
                self.next_due.set(deadline_ms);
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
    use crate::testkit::{cases, fence, judged_at, o, owner_of, run_case, three_begun, H, PASS};
    use leasesim_vocab::faults::FaultKind;
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::{Fact, Sender};

    /// t1's body returned at 100 ms holding it, and its completion was
    /// refused at `at_ms` by a statement timeout.
    fn refused_at(at_ms: u64) -> H {
        let (h, req) = H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::Job)
            .begun(10, 1, 1, o(1, 1))
            .at(100)
            .finished(1, 1, o(1, 1), true)
            .at(at_ms)
            .arrive(Sender::Worker(o(1, 1)), Op::Complete { fence: fence(1, 1, o(1, 1)) });
        let response = Response::Rejected { reason: Refusal::TimedOut };
        h.fact(Fact::Refused { req, response, fault: Some(FaultKind::TxnTimeout) })
    }

    /// t1, a workflow task granted at 10 ms with its 3 s lease (to
    /// 3010 ms), returned its body at `ended_ms`; a renewal of it was
    /// refused 100 ms later by a statement timeout, and no outcome
    /// committed (c-workflows seed 55124501436100, guided: its renewals
    /// were refused, the lease ran out, and the engine's lease check then
    /// said "not valid").
    fn renewal_refused(ended_ms: u64) -> H {
        let (h, req) = H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::WorkflowTask)
            .begun(10, 1, 1, o(1, 1))
            .at(ended_ms)
            .finished(1, 1, o(1, 1), true)
            .at(ended_ms + 100)
            .arrive(Sender::Worker(o(1, 1)), Op::Renew { fence: fence(1, 1, o(1, 1)) });
        let response = Response::Rejected { reason: Refusal::TimedOut };
        h.fact(Fact::Refused { req, response, fault: Some(FaultKind::TxnTimeout) })
            .at(ended_ms + 1_000)
            .unpermit(o(1, 1), 1, 1)
            .at(ended_ms + 2_100)
            .heartbeat(o(1, 1))
    }

    /// Each lost outcome is judged at the first record past its own
    /// deadline, the second one after a look that found only the first due
    /// (the look is skipped until the earliest open deadline passes).
    #[test]
    fn each_deadline_is_judged_at_the_first_record_past_it() {
        let beat = |h: H| h.heartbeat(o(1, 1)).heartbeat(o(2, 1));
        let on = owner_of;
        // Bodies return at 100, 1500 and 1000 ms: deadlines 2100, 3500, 3000.
        let h = three_begun().at(100).finished(1, 1, on(1), true).at(1_000).finished(3, 1, on(3), true);
        let h = h.at(1_100).unpermit(on(1), 1, 1).at(1_500).finished(2, 1, on(2), true);
        let h = beat(h.at(2_000).unpermit(on(3), 3, 1).at(2_150));
        let h = beat(beat(h.at(2_500).unpermit(on(2), 2, 1).at(3_050)).at(3_550));
        let expect = &[(NAME, Some(1)), (NAME, Some(2)), (NAME, Some(3))];
        let report = run_case("three deadlines", h.build(), expect);
        assert_eq!(judged_at(&report), vec![(Some(1), 2_150), (Some(2), 3_550), (Some(3), 3_050)]);
    }

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
        a_retryable_refusal_not_tried_again:
            // The completion was refused at 200 ms with a statement timeout
            // (nothing applied); 1900 ms were left, and nothing more came.
            refused_at(200).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            => &[(NAME, Some(1))];
        a_retryable_refusal_tried_again_and_committed:
            refused_at(200).at(400).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(2_200).heartbeat(o(1, 1)).build()
            => PASS;
        a_refusal_too_late_by_its_two_hops_is_excused:
            // Needed: 500 ms of pause (half the deadline), two hops of 10 ms
            // and the slack: 1520 ms; 1519 were left. Once judged without
            // the hops.
            refused_at(581).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            => PASS;
        a_refusal_with_time_for_its_hops_and_pause_is_owed_a_try:
            // 1520 ms were left: the try was owed.
            refused_at(580).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            => &[(NAME, Some(1))];
        a_retryable_refusal_too_late_to_try_again:
            // 1500 ms (half the deadline and the slack) are needed; 1100 were left.
            refused_at(1_000).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build()
            => PASS;
        a_refused_renewal_whose_lease_ran_out_excuses_the_loss:
            // Deadline 3501 ms, past the expiry (3010 ms). Once read as the
            // outcome's own refusal, owing a retry.
            renewal_refused(1_501).build()
            => PASS;
        a_refused_renewal_whose_lease_outlived_the_deadline_excuses_nothing:
            // Deadline 3009 ms (1009 + 1000 + 1000 slack), the expiry 1 ms
            // later.
            renewal_refused(1_009).build()
            => &[(NAME, Some(1))];
        an_outcome_due_after_the_end_is_not_judged:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true)
                .at(1_500).heartbeat(o(1, 1))
                .build()
            => PASS;
    }

    /// An engine that promises no retry of its outcome writes (graphile's
    /// ReleaseJobError) is excused by the refusal itself.
    #[test]
    fn a_retryable_refusal_excuses_an_engine_that_promises_no_retry() {
        let mut spec = crate::testkit::spec();
        spec.promises.outcome_retry = false;
        let history = refused_at(200).at(1_100).unpermit(o(1, 1), 1, 1).at(2_200).heartbeat(o(1, 1)).build();
        crate::testkit::run_case_in("promises no retry", &spec, history, PASS);
    }
}
