//! no-resurrection: no task is created or claimed for a stage that is
//! already done, and done and dead tasks never change again.

use super::view::TaskView;
use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::{Event, WriteKind};
use leasesim::ids::Fence;
use leasesim::task::TaskState;

pub const NAME: &str = "no-resurrection";

#[derive(Default)]
pub struct NoResurrection {
    evaluations: u64,
}

fn state_name(t: &TaskView) -> &'static str {
    match t.state {
        TaskState::Done => "done",
        TaskState::Dead => "dead",
        TaskState::Ready => "ready",
        TaskState::Leased => "leased",
    }
}

fn on_fence(now: u64, fence: &Fence, message: String) -> Violation {
    Violation::new(NAME, now, message).fence(fence)
}

impl NoResurrection {
    /// A write or grant touched a terminal task.
    fn absorbing(&mut self, now: u64, fence: &Fence, what: &str, ctx: &Ctx, out: &mut Vec<Violation>) -> bool {
        self.evaluations += 1;
        match ctx.view.task(fence.task) {
            Some(t) if t.terminal() => {
                out.push(on_fence(
                    now,
                    fence,
                    format!(
                        "t{}: {what} by attempt {} ({}) at {now} ms on a {} task",
                        fence.task,
                        fence.attempt,
                        fence.owner,
                        state_name(t)
                    ),
                ));
                false
            }
            _ => true,
        }
    }
}

impl Checker for NoResurrection {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Entry::Engine(e) = &rec.entry else { return };
        match e {
            Event::TaskCreated { task, spec, .. } => {
                let Some(stage) = spec.stage else { return };
                self.evaluations += 1;
                if let Some((done_ms, by)) = ctx.view.done_stages.get(&stage) {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!("t{task}: created at {now} ms for stage {stage}, done at {done_ms} ms by t{by}"),
                        )
                        .task(*task),
                    );
                }
            }
            Event::LeaseGranted { fence, .. } => {
                if !self.absorbing(now, fence, "grant", ctx, out) {
                    return;
                }
                self.evaluations += 1;
                let Some(stage) = ctx.view.task(fence.task).and_then(|t| t.stage()) else {
                    return;
                };
                if let Some((done_ms, _)) = ctx.view.done_stages.get(&stage) {
                    out.push(on_fence(
                        now,
                        fence,
                        format!(
                            "t{}: attempt {} granted to {} at {now} ms for stage {stage}, done at {done_ms} ms",
                            fence.task, fence.attempt, fence.owner
                        ),
                    ));
                }
            }
            Event::WriteApplied { fence, write, .. } => {
                let what = match write {
                    WriteKind::Complete => "completion",
                    WriteKind::Fail => "failure",
                    WriteKind::Renew => "renewal",
                    WriteKind::ClearStageLink => "clear-stage-link",
                };
                self.absorbing(now, fence, what, ctx, out);
            }
            Event::LeaseRenewed { fence, .. } => {
                self.absorbing(now, fence, "renewal", ctx, out);
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

    cases! {
        stage_completes_once_passes:
            H::new().up(o(1, 1)).created_stage(1, 9, 0)
                .attempt_ok(10, 1, 1, o(1, 1))
                .stage_done(9, 0, 1)
                .at(200).created_stage(2, 9, 1)
                .attempt_ok(300, 2, 1, o(1, 1))
                .stage_done(9, 1, 2)
                .build()
            => Pass;
        stale_snapshot_recreates_done_stage:
            H::new().up(o(1, 1)).created_stage(1, 9, 0)
                .attempt_ok(10, 1, 1, o(1, 1))
                .stage_done(9, 0, 1)
                .at(500).created_stage(2, 9, 0)
                .build()
            => Violates(NAME, Some(2));
        orphan_stage_task_claimed_again:
            // Two-step completion: the link is cleared, then the owner dies
            // before deleting the task; the task is released and claimed again.
            H::new().up(o(1, 1)).up(o(2, 1)).created_stage(3, 9, 0)
                .at(10).granted(3, 1, o(1, 1), None)
                .at(100).cleared_link(3, 1, o(1, 1)).stage_done(9, 0, 3)
                .at(110).killed(o(1, 1))
                .at(1_000).released(3, 1, o(1, 1))
                .at(1_100).granted(3, 2, o(2, 1), None)
                .build()
            => Violates(NAME, Some(3));
        done_task_granted_again:
            H::new().up(o(1, 1)).created(4, leasesim::task::TaskKind::Job)
                .attempt_ok(10, 4, 1, o(1, 1))
                .at(500).granted(4, 2, o(1, 1), None)
                .build()
            => Violates(NAME, Some(4));
        dead_task_failed_again:
            H::new().up(o(1, 1)).created(5, leasesim::task::TaskKind::Job)
                .at(10).granted(5, 1, o(1, 1), None)
                .at(100).failed(5, 1, o(1, 1), 6, None)
                .at(200).failed(5, 1, o(1, 1), 7, None)
                .build()
            => Violates(NAME, Some(5));
    }
}
