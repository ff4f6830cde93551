//! fenced-completion: a fenced write (complete, fail, clear-stage-link,
//! renewal) changes a task only if it carries the task's current attempt and
//! the task is still leased to that owner; a completion callback follows its
//! own attempt's applied completion. Every claim carries a fresh attempt
//! (the previous one + 1, also when the same owner claims again), or the
//! fence could not tell a stale attempt from the current one.

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::{Event, WriteKind};
use leasesim::ids::Fence;
use std::collections::BTreeSet;

pub const NAME: &str = "fenced-completion";

#[derive(Default)]
pub struct FencedCompletion {
    /// Fences whose completion was applied while they held the task.
    completed: BTreeSet<Fence>,
    evaluations: u64,
}

fn write_name(write: WriteKind) -> &'static str {
    match write {
        WriteKind::Complete => "complete",
        WriteKind::Fail => "fail",
        WriteKind::Renew => "renewal",
        WriteKind::ClearStageLink => "clear-stage-link",
    }
}

impl FencedCompletion {
    /// Is `fence` the holder of its task right now? Reports it if not.
    fn fenced(&mut self, now: u64, fence: &Fence, what: &str, ctx: &Ctx, out: &mut Vec<Violation>) -> bool {
        self.evaluations += 1;
        let holder = match ctx.view.task(fence.task) {
            Some(t) if t.held_by(fence.attempt, fence.owner) => return true,
            Some(t) => t.holder(),
            None => "the task does not exist".to_string(),
        };
        out.push(
            Violation::new(
                NAME,
                now,
                format!(
                    "t{}: {what} by attempt {} ({}) applied at {now} ms while {holder}",
                    fence.task, fence.attempt, fence.owner
                ),
            )
            .fence(fence),
        );
        false
    }
}

impl Checker for FencedCompletion {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Entry::Engine(e) = &rec.entry else { return };
        match e {
            Event::LeaseGranted { fence, .. } => {
                self.evaluations += 1;
                let previous = ctx.view.task(fence.task).map_or(0, |t| t.attempt);
                if fence.attempt != previous + 1 {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{}: claimed at {now} ms as attempt {} by {}, but the previous attempt was {previous}: the attempt is not fresh",
                                fence.task, fence.attempt, fence.owner
                            ),
                        )
                        .fence(fence),
                    );
                }
            }
            Event::WriteApplied { fence, write, .. } => {
                let held = self.fenced(now, fence, write_name(*write), ctx, out);
                if held && *write == WriteKind::Complete {
                    self.completed.insert(*fence);
                }
            }
            Event::LeaseRenewed { fence, .. } => {
                self.fenced(now, fence, "renewal", ctx, out);
            }
            Event::CallbackPublished { fence } => {
                self.evaluations += 1;
                if !self.completed.contains(fence) {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{}: callback published at {now} ms for attempt {} ({}) without that attempt's own applied completion",
                                fence.task, fence.attempt, fence.owner
                            ),
                        )
                        .fence(fence),
                    );
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, _end_ms: u64, _ctx: &Ctx, _out: &mut Vec<Violation>) {
        // Every fenced write was judged when it was applied; the final look
        // only confirms there is nothing pending.
        self.evaluations += 1;
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::check::testkit::{cases, o, Pass, Violates, H};
    use leasesim::task::TaskKind;

    cases! {
        current_attempt_completes_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(100))
                .at(200).released(1, 1, o(1, 1))
                .attempt_ok(300, 1, 2, o(2, 1))
                .build()
            => Pass;
        stale_completion_changes_newer_attempt:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(100))
                .at(200).released(1, 1, o(1, 1))
                .at(300).granted(1, 2, o(2, 1), Some(5_000))
                .at(400).completed(1, 1, o(1, 1))
                .build()
            => Violates(NAME, Some(1));
        stale_failure_spends_newer_attempts_budget:
            H::new().up(o(1, 1)).up(o(2, 1)).created(4, TaskKind::Job)
                .at(10).granted(4, 1, o(1, 1), Some(100))
                .at(200).released(4, 1, o(1, 1))
                .at(300).granted(4, 2, o(2, 1), Some(5_000))
                .at(400).failed(4, 1, o(1, 1), 1, Some(5_400))
                .build()
            => Violates(NAME, Some(4));
        stale_renewal_is_fenced:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(100))
                .at(200).released(1, 1, o(1, 1))
                .at(250).renewed(1, 1, o(1, 1), 5_000)
                .build()
            => Violates(NAME, Some(1));
        same_attempt_other_owner_is_fenced:
            H::new().up(o(1, 1)).up(o(1, 2)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 2), Some(5_000))
                .at(20).completed(1, 1, o(1, 1))
                .build()
            => Violates(NAME, Some(1));
        reclaim_without_a_new_attempt:
            H::new().up(o(1, 1)).created(6, TaskKind::Job)
                .at(10).granted(6, 1, o(1, 1), Some(100))
                .at(200).released(6, 1, o(1, 1))
                .at(300).granted(6, 1, o(1, 1), Some(5_000))
                .build()
            => Violates(NAME, Some(6));
        callback_without_own_completion:
            H::new().up(o(1, 1)).up(o(2, 1)).created(3, TaskKind::Job)
                .at(10).granted(3, 1, o(1, 1), Some(100))
                .at(200).released(3, 1, o(1, 1))
                .attempt_ok(300, 3, 2, o(2, 1))
                .at(500).callback(3, 1, o(1, 1))
                .build()
            => Violates(NAME, Some(3));
    }
}
