//! final-answer: an attempt told, in time, that it no longer holds its task
//! stops at once.
//!
//! A lease check answered "not valid", or an outcome write refused for good
//! (the task is missing, done or dead, or has a newer attempt or another
//! owner, or its lease ran out), is a final answer: no retry of the same
//! attempt can succeed. An engine that answers its outcome writes
//! (`Capabilities::outcome_answers`) promises that an attempt whose final
//! answer reached it sends no more lease checks or outcome writes for that
//! attempt: it gives its slot back instead of retrying to its finalization
//! deadline (held-out set 7's `h7-invalid-lease-retried-to-deadline`, which
//! held a stale attempt's permit for nothing, was of this kind).
//!
//! The answer surely reached the attempt when the store sent it at once
//! (`Reply::Sent`), its way back (at most `HOP_MAX_MS`) ended inside the
//! call's deadline (the call was sent at most a hop before it arrived), and
//! the process was neither paused nor cut off from the call's arrival to
//! the answer's; a request of the attempt arriving more than two hops after
//! the answer was sent after it was heard. Copies a network delivered twice
//! are not the attempt's sends. Renewals are not judged here: the lease is
//! kept until the outcome is recorded (`keepalive`).
//!
//! Judged from ground truth alone (the store seam, process control).

use super::{answer, fact, Checker, Ctx, Violation};
use crate::kinds::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::truth::{Fact, Reply, HOP_MAX_MS};
use std::collections::BTreeMap;

pub const NAME: &str = "final-answer";

#[derive(Debug, Clone, Copy)]
struct Told {
    answered_ms: u64,
    arrived_ms: u64,
    what: &'static str,
}

#[derive(Default)]
pub struct FinalAnswer {
    /// Per attempt: when a final answer was sent that reached it unless its
    /// process was held up (from when its call arrived: judged when it
    /// sends again, once the view knows), and what it was.
    told: BTreeMap<Fence, Told>,
    evaluations: u64,
}

/// A lease check or outcome write (a transaction's statement included).
fn outcome_fence(op: &Op) -> Option<Fence> {
    match op.statement() {
        Op::LeaseValid { fence } | Op::Complete { fence } | Op::Fail { fence, .. } | Op::ClearStageLink { fence } => {
            Some(*fence)
        }
        _ => None,
    }
}

/// The answer is final for the attempt: what it says, if so.
fn final_answer(response: &Response) -> Option<&'static str> {
    match response {
        Response::Valid { valid: false } => Some("its lease check answered \"not valid\""),
        Response::Rejected { reason } => match reason {
            Refusal::Missing | Refusal::Superseded | Refusal::NotOwner | Refusal::Terminal | Refusal::Expired => {
                Some(reason.name())
            }
            _ => None,
        },
        _ => None,
    }
}

impl FinalAnswer {
    fn answered(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let Some(a) = answer(rec, ctx) else { return };
        let Some(fence) = outcome_fence(&a.request.request) else { return };
        let Some(what) = final_answer(a.response) else { return };
        self.evaluations += 1;
        let cfg = ctx.promises();
        let in_time = a.reply == Reply::Sent && now + 2 * HOP_MAX_MS <= a.request.arrived_ms + cfg.rpc_timeout_ms;
        if in_time && !a.request.duplicate {
            self.told.entry(fence).or_insert(Told { answered_ms: now, arrived_ms: a.request.arrived_ms, what });
        }
    }

    fn arrived(&mut self, now: u64, request: &Op, duplicate: bool, ctx: &Ctx) -> Option<Violation> {
        let fence = outcome_fence(request)?;
        let told = *self.told.get(&fence)?;
        if duplicate || now <= told.answered_ms + 2 * HOP_MAX_MS {
            return None;
        }
        self.evaluations += 1;
        let from = told.arrived_ms.saturating_sub(HOP_MAX_MS);
        if ctx.view.kept_from_acting(fence.owner, from, told.answered_ms + HOP_MAX_MS).is_some() {
            return None;
        }
        let (told_ms, what) = (told.answered_ms, told.what);
        Some({
            Violation::new(
                NAME,
                now,
                format!(
                    "t{}: attempt {} sent a {} at {now} ms after a final answer reached it ({what}, answered at {told_ms} ms)",
                    fence.task,
                    fence.attempt,
                    request.op_name()
                ),
            )
            .fence(&fence)
        })
    }
}

impl Checker for FinalAnswer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: an attempt whose lease check said \"not valid\", or whose outcome write was refused for good, in time to hear it, sends no more lease checks or outcome writes"
    }

    fn reads(&self) -> Kinds {
        Kinds::ARRIVED.or(Kinds::ANSWERED)
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.outcome_answers
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match fact(rec) {
            Some(Fact::Arrived { request, duplicate, .. }) => out.extend(self.arrived(now, request, *duplicate, ctx)),
            Some(Fact::Answered { .. }) => self.answered(now, rec, ctx),
            _ => {}
        }
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::{Reply, Sender, HOP_MAX_MS};

    fn check() -> Op {
        Op::LeaseValid { fence: fence(1, 1, o(1, 1)) }
    }

    /// t1's body (a 3 s lease from 10 ms, its process cut off across the
    /// renewal margin) ends at 3000 ms and fails; at 3100 ms its lease check
    /// is answered "not valid" (the reply as `reply`).
    fn told(reply: Reply) -> H {
        let h = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask).at(10);
        let h = h.grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1));
        let h = h.at(1_900).partitioned(1).at(3_000).finished(1, 1, o(1, 1), false).at(3_050).rejoined(1);
        h.at(3_100).answer_as(reply, Sender::Worker(o(1, 1)), check(), Response::Valid { valid: false }, vec![], &[])
    }

    /// `told`, then the attempt's lease check arrives again at `at`.
    fn checks_again(reply: Reply, at: u64) -> H {
        told(reply).at(at).arrive(Sender::Worker(o(1, 1)), check()).0
    }

    fn done(h: H) -> Vec<leasesim_vocab::history::Record> {
        h.unpermit(o(1, 1), 1, 1).at(5_000).end().build()
    }

    cases! {
        an_attempt_that_stops_when_told:
            done(told(Reply::Sent)) => PASS;
        a_lease_check_sent_again_after_not_valid:
            done(checks_again(Reply::Sent, 3_500)) => &[(NAME, Some(1))];
        sent_before_the_answer_could_be_heard:
            done(checks_again(Reply::Sent, 3_100 + 2 * HOP_MAX_MS)) => PASS;
        one_millisecond_after_it_could_be_heard:
            done(checks_again(Reply::Sent, 3_101 + 2 * HOP_MAX_MS)) => &[(NAME, Some(1))];
        an_answer_lost_on_the_way_back:
            done(checks_again(Reply::Lost, 3_500)) => PASS;
        an_answer_the_process_slept_through:
            done(told(Reply::Sent).at(3_101).paused(1).at(3_400).resumed(1).at(3_500)
                .arrive(Sender::Worker(o(1, 1)), check()).0) => PASS;
    }
}
