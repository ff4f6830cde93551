//! eventual-completion (liveness): once the completion bound after the heal
//! has passed, every task is terminal (done, or dead after a terminal
//! failure) and every pipeline created before the heal has all its stages
//! done; and no stage task outlives its done stage (an orphan).
//!
//! An engine that does not release the tasks of dead holders (no recovery:
//! `Capabilities::heartbeats` off, `leases` off) promises nothing for a task
//! whose holder died holding it, nor for the tasks of a named queue such a
//! holder keeps locked: they are lost for a reason the engine declared.
//!
//! Judged at the end of the run, from the store's rows (store seam).

use super::view::TaskView;
use super::{Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::ids::StageRef;
use leasesim_vocab::task::{TaskKind, TaskState};

pub const NAME: &str = "eventual-completion";

#[derive(Default)]
pub struct EventualCompletion {
    evaluations: u64,
}

fn describe(t: &TaskView) -> String {
    match (t.state(), t.row.owner) {
        (TaskState::Leased, Some(owner)) => format!("leased to attempt {} ({owner})", t.row.attempt),
        (TaskState::Leased, None) => format!("leased to attempt {}", t.row.attempt),
        _ => format!("ready after {} attempts", t.row.attempt),
    }
}

/// Is `t` stuck behind a holder that died, in an engine that never
/// releases a dead holder's work?
fn abandoned_by_design(t: &TaskView, ctx: &Ctx) -> bool {
    let caps = &ctx.spec.caps;
    if caps.heartbeats || caps.leases {
        return false;
    }
    let dead = |owner| ctx.view.killed(owner).is_some();
    let held_by_dead = t.state() == TaskState::Leased && t.row.owner.is_some_and(dead);
    let queue_of_dead = t.row.spec.queue.and_then(|q| ctx.view.queues.get(&q)).and_then(|r| r.holder).is_some_and(dead);
    held_by_dead || queue_of_dead
}

impl EventualCompletion {
    fn judge_tasks(&mut self, end_ms: u64, heal: u64, due: bool, ctx: &Ctx, out: &mut Vec<Violation>) {
        let bound = ctx.spec.bounds.completion_bound_ms;
        for (&id, t) in &ctx.view.tasks {
            // A task that ended is judged whenever the run ends (a run may
            // end early, once the world is quiet); one still open only once
            // the bound is due (orphan stages aside).
            if due || t.terminal() {
                self.evaluations += 1;
            }
            if t.terminal() {
                continue;
            }
            let orphan_of = (t.kind() == TaskKind::Stage)
                .then(|| t.stage())
                .flatten()
                .and_then(|s| ctx.view.stages.get(&s).and_then(|v| v.done).map(|(at, _)| (s, at)));
            if orphan_of.is_some() && !due {
                self.evaluations += 1;
            }
            if orphan_of.is_none() && abandoned_by_design(t, ctx) {
                continue;
            }
            let message = match orphan_of {
                Some((stage, done_ms)) => format!(
                    "t{id}: orphan stage task, still {} at the end ({end_ms} ms) although stage {stage} was done at {done_ms} ms",
                    describe(t)
                ),
                // A task scheduled past the heal has its bound from then.
                None if due && end_ms >= t.not_before_ms().max(heal) + bound => format!(
                    "t{id}: still {} at the end ({end_ms} ms), {} ms after heal (completion bound {bound} ms)",
                    describe(t),
                    end_ms - heal
                ),
                None => continue,
            };
            let mut v = Violation::new(NAME, end_ms, message).task(id);
            if t.row.attempt > 0 {
                v = v.attempt(t.row.attempt);
            }
            if let Some(owner) = t.row.owner {
                v = v.process(owner);
            }
            out.push(v);
        }
    }

    /// Every pipeline created before the heal has every stage done (or one
    /// failed), once the bound is due; one that already has is judged
    /// whenever the run ends.
    fn judge_pipelines(&mut self, end_ms: u64, heal: u64, due: bool, ctx: &Ctx, out: &mut Vec<Violation>) {
        for (&pipeline, &created_ms) in &ctx.view.pipelines {
            if created_ms >= heal {
                continue;
            }
            // A stage whose task died ends its pipeline: nothing is left to run.
            let failed = ctx.view.stages.iter().any(|(stage, s)| {
                stage.pipeline == pipeline
                    && s.row.task.and_then(|t| ctx.view.task(t)).is_some_and(|t| t.state() == TaskState::Dead)
            });
            if failed {
                self.evaluations += 1;
                continue;
            }
            let open: Vec<StageRef> = ctx
                .view
                .stages
                .iter()
                .filter(|(stage, s)| stage.pipeline == pipeline && s.done.is_none())
                .map(|(stage, _)| *stage)
                .collect();
            if !due && !open.is_empty() {
                continue;
            }
            self.evaluations += 1;
            if let Some(first) = open.first() {
                let mut v = Violation::new(
                    NAME,
                    end_ms,
                    format!(
                        "pipeline {pipeline} (created at {created_ms} ms) still has {} stages not done at the end ({end_ms} ms), from {first} on",
                        open.len()
                    ),
                );
                if let Some(task) = ctx.view.stages.get(first).and_then(|s| s.row.task) {
                    v = v.task(task);
                }
                out.push(v);
            }
        }
    }
}

impl Checker for EventualCompletion {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "every task is terminal and every pipeline done within the completion bound after heal; no orphan stage tasks remain"
    }

    fn on_record(&mut self, _rec: &leasesim_vocab::history::Record, _ctx: &Ctx, _out: &mut Vec<Violation>) {}

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let heal = ctx.view.heal_or(end_ms);
        let due = end_ms >= heal + ctx.spec.bounds.completion_bound_ms;
        self.judge_tasks(end_ms, heal, due, ctx, out);
        self.judge_pipelines(end_ms, heal, due, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::NONE
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::{TaskKind, TaskSpec};

    /// A run that ends before the bound is due (ended early, once the world
    /// was quiet) still judges what ended: a task done or dead, a pipeline
    /// with every stage done. What is still open is owed nothing yet.
    #[test]
    fn a_run_ended_before_the_bound_judges_what_ended() {
        let early = |h: H| h.at(1_000).heal().at(2_000).end().build();
        let done = early(H::new().up(o(1, 1)).created(1, TaskKind::Job).attempt_ok(10, 1, 1, o(1, 1)));
        let report = crate::testkit::run_case("one task done", done, PASS);
        assert_eq!(report.checks[NAME], 1);
        let open = early(H::new().up(o(1, 1)).created(1, TaskKind::Job).at(10).grant(1, 1, o(1, 1)));
        let report = crate::testkit::run_case("one task open", open, PASS);
        assert_eq!(report.checks[NAME], 0);
        let pipeline = H::new().up(o(1, 1)).pipeline(3, 1).created_stage(4, 3, 0).attempt_ok(10, 4, 1, o(1, 1));
        let report = crate::testkit::run_case("a pipeline done", early(pipeline), PASS);
        assert_eq!(report.checks[NAME], 2, "its stage task and the pipeline");
    }

    cases! {
        every_task_terminal_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(200).grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(300).finished(2, 1, o(1, 1), false).failed(2, 1, o(1, 1), 3, None).unpermit(o(1, 1), 2, 1)
                .at(1_000).heal()
                .at(6_000).end().build()
            => &[("retry-budget", Some(2))];
        unfinished_before_the_bound_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(1_000).heal()
                .at(5_999).end().build()
            => PASS;
        task_still_leased_at_the_end:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(1_000).heal()
                .at(6_000).end().build()
            => &[(NAME, Some(1))];
        scheduled_past_the_heal_has_its_bound_from_then_passes:
            H::new().up(o(1, 1))
                .created_spec(1, TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 3_000, queue: None })
                .at(1_000).heal()
                .at(3_100).grant(1, 1, o(1, 1))
                .at(6_000).end().build()
            => PASS;
        scheduled_past_the_heal_and_past_its_bound:
            H::new().up(o(1, 1))
                .created_spec(1, TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 3_000, queue: None })
                .at(1_000).heal()
                .at(3_100).grant(1, 1, o(1, 1))
                .at(8_000).end().build()
            => &[(NAME, Some(1))];
        orphan_stage_task_remains:
            H::new().up(o(1, 1)).pipeline(3, 1).created_stage(4, 3, 0)
                .at(10).grant(4, 1, o(1, 1)).permit(o(1, 1), 4, 1).started(4, 1, o(1, 1))
                .at(100).finished(4, 1, o(1, 1), true).cleared_link(4, 1, o(1, 1))
                .at(1_000).heal()
                .at(1_500).end().build()
            => &[(NAME, Some(4))];
        pipeline_stuck_after_its_first_stage:
            H::new().up(o(1, 1)).pipeline(3, 2).created_stage(4, 3, 0)
                .attempt_ok(10, 4, 1, o(1, 1))
                .at(1_000).heal()
                .at(6_000).end().build()
            => &[(NAME, None)];
    }
}

#[cfg(test)]
mod recovery_tests {
    use super::NAME;
    use crate::testkit::{cases, o, spec_without_recovery, H, PASS};
    use leasesim_vocab::task::TaskKind;

    fn dead_holder() -> H {
        H::new()
            .up(o(1, 1))
            .up(o(2, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .grant(1, 1, o(1, 1))
            .at(1_000)
            .killed(o(1, 1))
            .at(10_000)
            .heal()
            .at(16_000)
    }

    cases! {
        dead_holders_task_left_leased:
            dead_holder().end().build()
            => &[(NAME, Some(1))];
    }

    #[test]
    fn without_recovery_a_dead_holders_task_is_lost_by_design() {
        let report = crate::check(&spec_without_recovery(), &dead_holder().end().build());
        assert_eq!(report.violations.iter().map(|v| v.invariant.as_str()).collect::<Vec<_>>(), Vec::<&str>::new());
        // ... but a task held by a live owner is not.
        let live =
            H::new().up(o(1, 1)).created(1, TaskKind::Job).at(10).grant(1, 1, o(1, 1)).at(10_000).heal().at(16_000);
        let report = crate::check(&spec_without_recovery(), &live.end().build());
        let names: Vec<&str> = report.violations.iter().map(|v| v.invariant.as_str()).collect();
        assert_eq!(names, vec![NAME]);
        let _ = PASS;
    }
}
