//! callback-kept: a completion the store committed, whose answer reached its
//! attempt while that attempt was still finalizing, is reported to the
//! application (the completion callback) on the attempt's process.
//!
//! The other half of exactly-once-completion, which judges "at most one
//! callback, from the committing attempt". A callback may be lost with
//! reason, and each reason is one the harness saw: the answer was lost or
//! held back, it left the store after the call's own deadline (the engine's
//! `rpc_timeout_ms`: the attempt stopped waiting for it) or after the
//! attempt's finalization deadline, or the process was killed,
//! paused or cut off before the callback was due. A completion committed
//! by a separate COMMIT (no fence on the request) is not judged: which
//! statement's answer carried it is the transaction's affair. A retry of a
//! completion that already committed, from the same attempt, owes the
//! callback whatever the store answered it, when the engine promises
//! idempotent outcome writes (`Promises::outcome_idempotent`): the retry is
//! how an attempt whose first answer was lost learns its fate. The same
//! holds for every statement a retried completion transaction sends before
//! the completion (a stage task's stage-link statement).

use super::{answer, fact, Checker, Ctx, NextDue, Violation};
use crate::outcome_kept::retryable;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::truth::{Fact, Reply};
use std::collections::BTreeMap;

pub const NAME: &str = "callback-kept";

/// The hop back to the worker and its own work before the callback.
const SLACK_MS: u64 = 1_000;

/// The hop back to the worker: an answer that leaves the store this close
/// to the finalization deadline may reach an attempt that gave up.
const HOP_SLACK_MS: u64 = 50;

#[derive(Default)]
pub struct CallbackKept {
    /// When each attempt's body ended.
    ended: BTreeMap<Fence, u64>,
    /// Callbacks owed: the fence, when its answer left the store, and when
    /// the callback is due.
    owed: BTreeMap<Fence, (u64, u64)>,
    /// No owed callback is due before this.
    next_due: NextDue,
    evaluations: u64,
    excused: u64,
}

impl CallbackKept {
    /// A committed completion of `fence` answered at `now`: is its callback
    /// owed?
    fn owe(&mut self, fence: Fence, arrived_ms: u64, now: u64, reply: Reply, ctx: &Ctx) {
        if reply != Reply::Sent {
            return;
        }
        // Past the call's own deadline the attempt stopped waiting for this
        // answer (a retry's answer speaks for itself).
        if now.saturating_sub(arrived_ms) + HOP_SLACK_MS > ctx.promises().rpc_timeout_ms {
            return;
        }
        let Some(&ended_ms) = self.ended.get(&fence) else { return };
        // Past its finalization deadline the attempt has given the outcome
        // up; the answer arrives to nobody who waits for it.
        if now + HOP_SLACK_MS > ended_ms + ctx.promises().finalize_deadline_ms {
            return;
        }
        self.owed.insert(fence, (now, now + SLACK_MS));
        self.next_due.set(now + SLACK_MS);
    }

    fn judge(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        if !self.next_due.passed(now) {
            return;
        }
        let due: Vec<Fence> = self.owed.iter().filter(|(_, &(_, due_ms))| due_ms < now).map(|(f, _)| *f).collect();
        self.next_due.looked(self.owed.values().map(|&(_, due_ms)| due_ms).filter(|&d| d >= now).min());
        for fence in due {
            let (answered_ms, due_ms) = self.owed.remove(&fence).expect("due callbacks are owed");
            self.evaluations += 1;
            if ctx.view.kept_from_acting(fence.owner, answered_ms, due_ms).is_some() {
                self.excused += 1;
                continue;
            }
            let message = format!(
                "t{}: the store committed the completion of attempt {} ({}) and an answer to it (or to its retry) left at {answered_ms} ms, \
                 within the attempt's finalization deadline, but no callback came by {due_ms} ms",
                fence.task, fence.attempt, fence.owner
            );
            out.push(Violation::new(NAME, now, message).fence(&fence));
        }
    }
}

impl Checker for CallbackKept {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and body seams: a committed completion whose answer reached its live attempt in time is reported to the application"
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.callbacks
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        self.judge(now, ctx, out);
        match fact(rec) {
            Some(Fact::BodyEnded { fence, .. }) => {
                self.ended.insert(*fence, now);
            }
            Some(Fact::Callback { fence, .. }) if self.owed.remove(fence).is_some() => {
                self.evaluations += 1;
            }
            _ => {}
        }
        let Some(a) = answer(rec, ctx) else { return };
        // A stage task's completion transaction opens with clearing its
        // stage link: that statement is the first an attempt retrying the
        // transaction after a lost COMMIT answer sends, so its answer tells
        // the attempt its fate as much as the completion's would.
        let (fence, completion) = match a.request.request.statement() {
            Op::Complete { fence } => (*fence, true),
            Op::ClearStageLink { fence } => (*fence, false),
            _ => return,
        };
        match a.response {
            Response::Applied { .. } if completion => {
                let done_now =
                    a.commit.tasks.iter().any(|c| c.after.id == fence.task && c.after.state == TaskState::Done);
                if done_now || ctx.view.task(fence.task).is_some_and(|t| t.state() == TaskState::Done) {
                    self.owe(fence, a.request.arrived_ms, now, a.reply, ctx);
                }
            }
            // The attempt's retry of a completion that already committed
            // (its first answer lost): an engine that promises idempotent
            // outcome writes answers it as applied, so a final refusal
            // ("not yours", "missing") owes the callback as if it had. A
            // refusal that says "try again" (the transaction a copy already
            // committed is no longer open) leads to another try instead.
            Response::Rejected { reason }
                if ctx.promises().outcome_idempotent
                    && !retryable(reason)
                    && *reason != Refusal::Unavailable
                    && !a.request.duplicate
                    && ctx.view.completed_by.get(&fence.task) == Some(&fence) =>
            {
                self.owe(fence, a.request.arrived_ms, now, a.reply, ctx);
            }
            _ => {}
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        // A callback due after the end is not late.
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
    use crate::testkit::{cases, judged_at, o, owner_of, run_case, three_begun, H, PASS};
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::Reply;
    use leasesim_vocab::truth::Sender::Worker;

    /// t1's attempt 1 on p1.1, granted at 10 ms: its body ends at 100 ms.
    fn body_ended() -> H {
        H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job).attempt_body(10, 1, 1, o(1, 1), true)
    }

    /// `body_ended`, then its completion commits at 200 ms; then, if
    /// `callback`, the application is told.
    fn completed(callback: bool) -> H {
        let h = body_ended().at(200).completed(1, 1, o(1, 1));
        let h = if callback { h.at(210).callback(1, 1, o(1, 1)) } else { h };
        h.at(220).unpermit(o(1, 1), 1, 1)
    }

    fn complete() -> Op {
        Op::Complete { fence: crate::testkit::fence(1, 1, o(1, 1)) }
    }

    /// As `completed(false)`, but the commit's answer is lost and the
    /// attempt's retry at 400 ms is refused as if the attempt no longer
    /// held the task.
    fn retried_after_a_lost_answer() -> H {
        retry_refused(Refusal::NotOwner)
    }

    /// The same, the retry refused for `reason`.
    fn retry_refused(reason: Refusal) -> H {
        retry_answered(Response::Rejected { reason }).at(420).unpermit(o(1, 1), 1, 1)
    }

    /// `body_ended`, its completion commits at 200 ms with its answer lost,
    /// and the attempt's retry is answered `response` at 400 ms.
    fn retry_answered(response: Response) -> H {
        body_ended().at(200).completed_as(Reply::Lost, 1, 1, o(1, 1)).at(400).answer(
            Worker(o(1, 1)),
            complete(),
            response,
            vec![],
            &[],
        )
    }

    /// As `retry_answered`, but the retry is a stage completion
    /// transaction's first statement, clearing the stage link, answered
    /// `response`.
    fn stage_retry_answered(response: Response) -> H {
        let clear = Op::ClearStageLink { fence: crate::testkit::fence(1, 1, o(1, 1)) };
        body_ended().at(200).completed_as(Reply::Lost, 1, 1, o(1, 1)).at(400).answer(
            Worker(o(1, 1)),
            clear,
            response,
            vec![],
            &[],
        )
    }

    fn without_idempotence() -> crate::Spec {
        let mut spec = crate::testkit::spec();
        spec.promises.outcome_idempotent = false;
        spec
    }

    #[test]
    fn a_refused_retry_without_the_promise_passes() {
        let history = retried_after_a_lost_answer().at(5_000).heartbeat(o(1, 1)).build();
        crate::testkit::run_case_in("no promise", &without_idempotence(), history, PASS);
    }

    #[test]
    fn an_excused_loss_is_counted_as_wasted_work() {
        let excused = |history| crate::testkit::run_case("excused", history, PASS).excused.get(NAME).copied();
        assert_eq!(excused(completed(false).at(300).killed(o(1, 1)).at(5_000).end().build()), Some(1));
        assert_eq!(excused(completed(true).at(5_000).heartbeat(o(1, 1)).build()), None);
    }

    /// Each lost callback is judged at the first record past its own due
    /// time, also after a look that found only another one due.
    #[test]
    fn each_callback_is_judged_at_the_first_record_past_its_due_time() {
        let on = owner_of;
        let mut h = three_begun();
        for t in 1..=3 {
            h = h.at(110).finished(t, 1, on(t), true);
        }
        // Completions commit at 200, 700 and 500 ms: callbacks due by 1200, 1700, 1500.
        let h = h.at(200).completed(1, 1, on(1)).at(500).completed(3, 1, on(3)).at(700).completed(2, 1, on(2));
        let h = h.unpermit(on(1), 1, 1).unpermit(on(2), 2, 1).unpermit(on(3), 3, 1);
        let h = h.at(1_250).heartbeat(o(1, 1)).at(1_550).heartbeat(o(1, 1)).at(1_750).heartbeat(o(1, 1));
        let expect = &[(NAME, Some(1)), (NAME, Some(2)), (NAME, Some(3))];
        let report = run_case("three callbacks", h.build(), expect);
        assert_eq!(judged_at(&report), vec![(Some(1), 1_250), (Some(2), 1_750), (Some(3), 1_550)]);
    }

    cases! {
        a_callback_after_the_commit_passes:
            completed(true).at(5_000).heartbeat(o(1, 1)).build() => PASS;
        a_committed_completion_without_its_callback:
            completed(false).at(5_000).heartbeat(o(1, 1)).build() => &[(NAME, Some(1))];
        a_callback_lost_to_a_kill_is_excused:
            completed(false).at(300).killed(o(1, 1)).build() => PASS;
        a_callback_lost_to_an_exit_is_excused_as_to_a_kill:
            completed(false).at(300).exited(o(1, 1)).build() => PASS;
        a_retry_refused_after_the_commit_loses_the_callback:
            // The first answer is lost; the retry at 400 ms is refused.
            retried_after_a_lost_answer().at(5_000).heartbeat(o(1, 1)).build()
            => &[(NAME, Some(1))];
        a_retry_told_to_try_again_owes_nothing_yet_passes:
            // "No longer open" (a copy committed the transaction first): the
            // attempt tries again, and that try's answer is judged.
            retry_refused(Refusal::TxnClosed).at(5_000).heartbeat(o(1, 1)).build()
            => PASS;
        a_retry_answered_as_applied_and_reported_passes:
            retry_answered(Response::Applied { retries: 0, retry_at_ms: None })
                .at(410).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(5_000).heartbeat(o(1, 1)).build()
            => PASS;
        a_stage_link_retry_refused_after_the_commit_loses_the_callback:
            stage_retry_answered(Response::Rejected { reason: Refusal::NotOwner })
                .at(420).unpermit(o(1, 1), 1, 1).at(5_000).heartbeat(o(1, 1)).build()
            => &[(NAME, Some(1))];
        a_stage_link_retry_told_to_try_again_passes:
            stage_retry_answered(Response::Rejected { reason: Refusal::TxnClosed })
                .at(420).unpermit(o(1, 1), 1, 1).at(5_000).heartbeat(o(1, 1)).build()
            => PASS;
        a_stage_link_retry_applied_owes_nothing_until_the_completion_is_answered:
            // The stage link's answer alone is not the completion's: the
            // attempt goes on to the completion statement, whose answer is
            // judged (here the attempt gives up before it is answered).
            stage_retry_answered(Response::Applied { retries: 0, retry_at_ms: None })
                .at(420).unpermit(o(1, 1), 1, 1).at(5_000).heartbeat(o(1, 1)).build()
            => PASS;
        a_callback_due_after_the_end_is_not_judged:
            completed(false).at(600).heartbeat(o(1, 1)).build() => PASS;
    }
}
