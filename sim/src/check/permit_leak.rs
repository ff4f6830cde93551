//! no-permit-leak: permits in use never exceed the configured concurrency, and
//! an attempt's permit comes back within the finalization deadline (plus
//! slack) after its execution finished.

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record, WorldEvent};
use leasesim::event::Event;
use leasesim::ids::{Owner, TaskId};
use std::collections::BTreeMap;

pub const NAME: &str = "no-permit-leak";

#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// When the attempt's execution finished (the release clock starts).
    finished_ms: Option<u64>,
    /// Already judged (reported or exempted).
    judged: bool,
}

#[derive(Default)]
pub struct PermitLeak {
    held: BTreeMap<(Owner, TaskId, u32), Held>,
    evaluations: u64,
}

impl PermitLeak {
    /// Judges every held permit whose release deadline is behind `now`.
    fn deadlines(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let allowed = ctx.scenario.engine.finalize_deadline_ms + ctx.scenario.bounds.permit_release_slack_ms;
        for (&(owner, task, attempt), held) in self.held.iter_mut() {
            let Some(finished) = held.finished_ms else {
                continue;
            };
            if held.judged {
                continue;
            }
            let deadline = finished + allowed;
            self.evaluations += 1;
            if now <= deadline {
                continue;
            }
            held.judged = true;
            if ctx.view.killed(owner).is_some_and(|k| k <= deadline) {
                continue;
            }
            if ctx.view.paused_between(owner.proc, finished, deadline) {
                continue;
            }
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{task}: permit of attempt {attempt} ({owner}) still held at {now} ms, \
                         {} ms after its execution finished at {finished} ms (allowed {allowed} ms)",
                        now - finished
                    ),
                )
                .task(task)
                .attempt(attempt)
                .process(owner),
            );
        }
    }
}

impl Checker for PermitLeak {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        // Time passed: judge the deadlines before this record changes anything.
        self.deadlines(now, ctx, out);
        match &rec.entry {
            Entry::Engine(Event::PermitAcquired { owner, task, attempt }) => {
                self.evaluations += 1;
                let concurrency = ctx.scenario.engine.concurrency;
                let in_use = ctx.view.permits(*owner) + 1;
                if in_use > concurrency {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{task}: {owner} holds {in_use} permits after acquiring one for attempt {attempt}, \
                                 more than its concurrency {concurrency}"
                            ),
                        )
                        .task(*task)
                        .attempt(*attempt)
                        .process(*owner),
                    );
                }
                self.held.insert((*owner, *task, *attempt), Held::default());
            }
            Entry::Engine(Event::ExecutionFinished { fence, .. }) => {
                if let Some(held) = self.held.get_mut(&(fence.owner, fence.task, fence.attempt)) {
                    held.finished_ms.get_or_insert(now);
                }
            }
            Entry::Engine(Event::PermitReleased { owner, task, attempt }) => {
                self.held.remove(&(*owner, *task, *attempt));
            }
            Entry::World(WorldEvent::ProcessKilled { owner }) => {
                // Its permits vanish with it; no release will come.
                self.held.retain(|(o, _, _), _| o != owner);
            }
            _ => {}
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        // Killed owners' permits were dropped at the kill: what is left is held
        // by live owners.
        self.evaluations += 1;
        self.deadlines(end_ms, ctx, out);
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
        permit_released_in_time_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).permit(o(1, 1), 1, 1)
                .at(100).finished(1, 1, o(1, 1), false)
                // deadline 1000 + slack 500 after 100 ms: 1600 ms
                .at(1_600).unpermit(o(1, 1), 1, 1)
                .at(5_000).end().build()
            => Pass;
        permit_released_late_is_a_leak:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).permit(o(1, 1), 1, 1)
                .at(100).finished(1, 1, o(1, 1), false)
                .at(1_601).unpermit(o(1, 1), 1, 1)
                .build()
            => Violates(NAME, Some(1));
        permit_never_released_is_a_leak_at_end:
            H::new().up(o(1, 1)).created(2, TaskKind::Job)
                .at(10).granted(2, 1, o(1, 1), None).permit(o(1, 1), 2, 1)
                .at(100).finished(2, 1, o(1, 1), true)
                .at(9_000).end().build()
            => Violates(NAME, Some(2));
        permits_beyond_concurrency_leak:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
                .at(10).permit(o(1, 1), 1, 1).permit(o(1, 1), 2, 1).permit(o(1, 1), 3, 1)
                .build()
            => Violates(NAME, Some(3));
        killed_owner_permit_is_not_a_leak:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).permit(o(1, 1), 1, 1)
                .at(100).finished(1, 1, o(1, 1), true)
                .at(500).killed(o(1, 1))
                .at(2_000).up(o(1, 2)).released(1, 1, o(1, 1)).granted(1, 2, o(1, 2), None).permit(o(1, 2), 1, 2)
                .completed(1, 2, o(1, 2)).unpermit(o(1, 2), 1, 2)
                .at(9_000).end().build()
            => Pass;
        paused_owner_is_exempt:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).permit(o(1, 1), 1, 1)
                .at(100).finished(1, 1, o(1, 1), true)
                .at(200).paused(1)
                .at(8_000).resumed(1)
                .completed(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(9_000).end().build()
            => Pass;
    }
}
