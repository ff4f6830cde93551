//! eventual-completion (liveness): once the completion bound after heal has
//! passed, every task is terminal (done, or dead after a terminal failure);
//! and no stage task outlives its done stage (an orphan).

use super::view::TaskView;
use super::{Checker, Ctx, Violation};
use crate::history::Record;
use leasesim::task::{TaskKind, TaskState};

pub const NAME: &str = "eventual-completion";

#[derive(Default)]
pub struct EventualCompletion {
    evaluations: u64,
}

fn describe(t: &TaskView) -> String {
    match (t.state, t.owner) {
        (TaskState::Leased, Some(owner)) => format!("leased to attempt {} ({owner})", t.attempt),
        (TaskState::Leased, None) => format!("leased to attempt {}", t.attempt),
        _ => format!("ready after {} attempts", t.attempt),
    }
}

impl Checker for EventualCompletion {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, _rec: &Record, _ctx: &Ctx, _out: &mut Vec<Violation>) {}

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.evaluations += 1;
        let heal = ctx.view.heal_or(end_ms);
        let bound = ctx.scenario.bounds.completion_bound_ms;
        let due = end_ms >= heal + bound;
        for (&id, t) in &ctx.view.tasks {
            self.evaluations += 1;
            if t.terminal() {
                continue;
            }
            let orphan_of = (t.kind() == Some(TaskKind::Stage))
                .then(|| t.stage())
                .flatten()
                .and_then(|s| ctx.view.done_stages.get(&s).map(|(at, _)| (s, *at)));
            let message = match orphan_of {
                Some((stage, done_ms)) => format!(
                    "t{id}: orphan stage task, still {} at the end ({end_ms} ms) although stage {stage} was done at {done_ms} ms",
                    describe(t)
                ),
                None if due => format!(
                    "t{id}: still {} at the end ({end_ms} ms), {} ms after heal (completion bound {bound} ms)",
                    describe(t),
                    end_ms - heal
                ),
                None => continue,
            };
            let mut v = Violation::new(NAME, end_ms, message).task(id);
            if t.attempt > 0 {
                v = v.attempt(t.attempt);
            }
            if let Some(owner) = t.owner {
                v = v.process(owner);
            }
            out.push(v);
        }
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
        every_task_terminal_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(200).granted(2, 1, o(1, 1), None)
                .at(300).failed(2, 1, o(1, 1), 6, None)
                .at(1_000).heal()
                .at(6_000).end().build()
            => Pass;
        unfinished_before_bound_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(1_000).heal()
                .at(5_999).end().build()
            => Pass;
        task_still_leased_at_end:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None)
                .at(1_000).heal()
                .at(6_000).end().build()
            => Violates(NAME, Some(1));
        orphan_stage_task_remains:
            H::new().up(o(1, 1)).created_stage(4, 3, 0)
                .at(10).granted(4, 1, o(1, 1), None)
                .at(100).cleared_link(4, 1, o(1, 1)).stage_done(3, 0, 4)
                .at(1_000).heal()
                .at(1_500).end().build()
            => Violates(NAME, Some(4));
    }
}
