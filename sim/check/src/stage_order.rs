//! stage-order: a pipeline's stages run one after another. A stage's task is
//! created only once the previous stage is done, and while the stage has no
//! other live task; its body runs only once the previous stage is done; a
//! stage is done only after the previous one.
//!
//! Judged at the store seam (task and stage rows) and at the task-body seam.

use super::{commit, fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::StageRef;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::truth::Fact;

pub const NAME: &str = "stage-order";

#[derive(Default)]
pub struct StageOrder {
    evaluations: u64,
}

/// The stage before `stage`, if it is not the first.
fn previous(stage: StageRef) -> Option<StageRef> {
    stage.index.checked_sub(1).map(|index| StageRef { pipeline: stage.pipeline, index })
}

/// Is the stage before `stage` done (or is `stage` the first)?
fn previous_done(ctx: &Ctx, stage: StageRef) -> bool {
    previous(stage).is_none_or(|p| ctx.view.stages.get(&p).is_some_and(|s| s.done.is_some()))
}

impl StageOrder {
    fn judge_commit(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(commit) = commit(rec) else { return };
        for change in commit.tasks.iter().filter(|c| c.before.is_none()) {
            let Some(stage) = change.after.spec.stage else { continue };
            let id = change.after.id;
            self.evaluations += 1;
            if !previous_done(ctx, stage) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!("t{id}: created at {now} ms for stage {stage} before the previous stage was done"),
                    )
                    .task(id),
                );
            }
            let live = ctx
                .view
                .stages
                .get(&stage)
                .and_then(|s| s.row.task)
                .filter(|other| *other != id && ctx.view.task(*other).is_some_and(|t| !t.terminal()));
            if let Some(other) = live {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!("t{id}: created at {now} ms for stage {stage}, which still has live task t{other}"),
                    )
                    .task(id),
                );
            }
        }
        for change in &commit.stages {
            let done_now = change.after.done && !change.before.as_ref().is_some_and(|b| b.done);
            if !done_now {
                continue;
            }
            self.evaluations += 1;
            if !previous_done(ctx, change.stage) {
                let mut v = Violation::new(
                    NAME,
                    now,
                    format!("stage {} done at {now} ms before the previous stage", change.stage),
                );
                if let Some(task) = change.before.as_ref().and_then(|b| b.task) {
                    v = v.task(task);
                }
                out.push(v);
            }
        }
    }

    fn judge_body(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(Fact::BodyStarted { fence, .. }) = fact(rec) else { return };
        let Some(stage) = ctx.view.task(fence.task).and_then(|t| t.stage()) else { return };
        self.evaluations += 1;
        if !previous_done(ctx, stage) {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: the body of stage {stage} started at {now} ms on {} before the previous stage was done",
                        fence.task, fence.owner
                    ),
                )
                .fence(fence),
            );
        }
    }
}

impl Checker for StageOrder {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and body seams: a stage's task is created, run and done only after the previous stage is done, and a stage has one live task at a time"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_commit(rec.at_ms, rec, ctx, out);
        self.judge_body(rec.at_ms, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT.or(Kinds::BODY_STARTED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.pipelines
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};

    cases! {
        stages_in_order_pass:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).pipeline(9, 2).created_stage(1, 9, 0)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(200).created_stage(2, 9, 1).attempt_ok(300, 2, 1, o(1, 1))
                .build()
            => PASS;
        second_stage_created_before_the_first_is_done:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).pipeline(9, 2).created_stage(1, 9, 0)
                .at(5).created_stage(2, 9, 1)
                .attempt_ok(10, 2, 1, o(1, 1))
                .attempt_ok(300, 1, 1, o(1, 1))
                .build()
            // t2 is claimed ahead of t1, due earlier: store-reply objects too.
            => &[(NAME, Some(2)), ("store-reply", Some(2))];
        stage_gets_a_second_live_task:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).pipeline(9, 1).created_stage(1, 9, 0)
                .at(5).created_stage(2, 9, 0)
                .build()
            => &[(NAME, Some(2))];
    }
}
