//! exactly-once-completion: at most one committed success per task, and its
//! callback is published once.

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::{Event, WriteKind};
use leasesim::ids::{Fence, TaskId};
use std::collections::BTreeMap;

pub const NAME: &str = "exactly-once-completion";

#[derive(Default)]
pub struct ExactlyOnce {
    /// First applied completion per task: (time, fence).
    completions: BTreeMap<TaskId, (u64, Fence)>,
    /// First published callback per task: (time, fence).
    callbacks: BTreeMap<TaskId, (u64, Fence)>,
    evaluations: u64,
}

fn once(seen: &mut BTreeMap<TaskId, (u64, Fence)>, now: u64, fence: &Fence, what: &str, out: &mut Vec<Violation>) {
    match seen.get(&fence.task) {
        None => {
            seen.insert(fence.task, (now, *fence));
        }
        Some((first_ms, first)) => out.push(
            Violation::new(
                NAME,
                now,
                format!(
                    "t{}: second {what} at {now} ms by attempt {} ({}); the first was by attempt {} ({}) at {first_ms} ms",
                    fence.task, fence.attempt, fence.owner, first.attempt, first.owner
                ),
            )
            .fence(fence),
        ),
    }
}

impl Checker for ExactlyOnce {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, _ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match &rec.entry {
            Entry::Engine(Event::WriteApplied { fence, write: WriteKind::Complete, .. }) => {
                self.evaluations += 1;
                once(&mut self.completions, now, fence, "completion applied", out);
            }
            Entry::Engine(Event::CallbackPublished { fence }) => {
                self.evaluations += 1;
                once(&mut self.callbacks, now, fence, "callback published", out);
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
    use leasesim::task::TaskKind;

    cases! {
        one_completion_one_callback_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .attempt_ok(200, 2, 1, o(1, 1))
                .build()
            => Pass;
        second_completion_applied:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(5_000))
                .at(50).completed(1, 1, o(1, 1))
                .at(60).completed(1, 2, o(2, 1))
                .build()
            => Violates(NAME, Some(1));
        callback_published_twice:
            H::new().up(o(1, 1)).created(5, TaskKind::Job)
                .attempt_ok(10, 5, 1, o(1, 1))
                .at(200).callback(5, 1, o(1, 1))
                .build()
            => Violates(NAME, Some(5));
    }
}
