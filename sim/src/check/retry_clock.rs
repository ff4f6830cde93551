//! retry-clock: a task is not claimed before its committed retry-at, and a
//! peer that hears the task is ready again plans its claim no later than the
//! committed retry-at plus one idle poll (it keeps the committed time instead
//! of restarting the backoff from receipt).

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::Event;

pub const NAME: &str = "retry-clock";

#[derive(Default)]
pub struct RetryClock {
    evaluations: u64,
}

impl Checker for RetryClock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match &rec.entry {
            Entry::Engine(Event::LeaseGranted { fence, .. }) => {
                self.evaluations += 1;
                let Some(t) = ctx.view.task(fence.task) else {
                    return;
                };
                if now < t.retry_at_ms {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{}: attempt {} claimed by {} at {now} ms, before its committed retry-at {} ms",
                                fence.task, fence.attempt, fence.owner, t.retry_at_ms
                            ),
                        )
                        .fence(fence),
                    );
                }
            }
            Entry::Engine(Event::RetryPlanned { owner, task, retries, wake_at_ms }) => {
                self.evaluations += 1;
                let Some(t) = ctx.view.task(*task) else {
                    return;
                };
                // The retry-at committed by the failure the note speaks of;
                // the latest committed one if the view never saw that failure.
                let committed = t.retry_at_by_retries.get(retries).copied().unwrap_or(t.retry_at_ms);
                let latest = committed + ctx.scenario.engine.idle_poll_ms;
                if *wake_at_ms > latest {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{task}: {owner} planned its claim after failure {retries} for {wake_at_ms} ms, \
                                 {} ms after the committed retry-at {committed} ms (allowed: one idle poll)",
                                wake_at_ms - committed
                            ),
                        )
                        .task(*task)
                        .process(*owner),
                    );
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, _end_ms: u64, _ctx: &Ctx, _out: &mut Vec<Violation>) {
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
    use leasesim::task::{TaskKind, TaskSpec};

    fn scheduled(at: u64) -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: at }
    }

    cases! {
        claim_at_retry_at_and_note_kept_pass:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(100).failed(1, 1, o(1, 1), 1, Some(5_100))
                .at(5_100).retry_planned(o(2, 1), 1, 1, 5_100)
                .granted(1, 2, o(2, 1), None)
                .build()
            => Pass;
        claimed_before_committed_retry_at:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(100).failed(1, 1, o(1, 1), 1, Some(5_100))
                .at(5_099).granted(1, 2, o(1, 1), None)
                .build()
            => Violates(NAME, Some(1));
        scheduled_task_claimed_early:
            H::new().up(o(1, 1)).created_spec(7, scheduled(3_000))
                .at(2_000).granted(7, 1, o(1, 1), None)
                .build()
            => Violates(NAME, Some(7));
        note_receipt_time_replaces_retry_clock:
            // The receiver restarts the 5 s backoff from receipt at 5100.
            H::new().up(o(1, 1)).up(o(2, 1)).created(2, TaskKind::Job)
                .at(10).granted(2, 1, o(1, 1), None)
                .at(100).failed(2, 1, o(1, 1), 1, Some(5_100))
                .at(5_100).retry_planned(o(2, 1), 2, 1, 10_100)
                .build()
            => Violates(NAME, Some(2));
    }
}
