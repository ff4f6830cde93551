//! no-resurrection: done and dead tasks never change again, and no task is
//! created or granted for a stage that is already done.
//!
//! Judged at the store seam, from the rows the harness read.

use super::{commit, granted, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::task::TaskState;

pub const NAME: &str = "no-resurrection";

#[derive(Default)]
pub struct NoResurrection {
    evaluations: u64,
}

fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Done => "done",
        TaskState::Dead => "dead",
        TaskState::Ready => "ready",
        TaskState::Leased => "leased",
    }
}

impl Checker for NoResurrection {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: done and dead tasks never change again; no task is created or granted for a done stage"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(commit) = commit(rec) else { return };
        for change in &commit.tasks {
            let after = &change.after;
            self.evaluations += 1;
            if let Some(before) = change.before.as_ref().filter(|b| b.state.is_terminal()) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: changed at {now} ms although it was {} (now {}, attempt {} -> {})",
                            after.id,
                            state_name(before.state),
                            state_name(after.state),
                            before.attempt,
                            after.attempt
                        ),
                    )
                    .task(after.id),
                );
                continue;
            }
            let Some(stage) = after.spec.stage else { continue };
            let Some((done_ms, by)) = ctx.view.stages.get(&stage).and_then(|s| s.done) else { continue };
            let by = by.map_or_else(String::new, |t| format!(" by t{t}"));
            if change.before.is_none() {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!("t{}: created at {now} ms for stage {stage}, done at {done_ms} ms{by}", after.id),
                    )
                    .task(after.id),
                );
            } else if let Some(fence) = granted(change) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: attempt {} granted to {} at {now} ms for stage {stage}, done at {done_ms} ms{by}",
                            fence.task, fence.attempt, fence.owner
                        ),
                    )
                    .fence(&fence),
                );
            }
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::TaskKind;

    /// Pipeline 9 with two stages; stage 0's task t1 completes at 110 ms.
    fn first_stage_done() -> H {
        H::new().up(o(1, 1)).heartbeat(o(1, 1)).pipeline(9, 2).created_stage(1, 9, 0).attempt_ok(10, 1, 1, o(1, 1))
    }

    cases! {
        stage_completes_once_passes:
            first_stage_done().at(200).created_stage(2, 9, 1).attempt_ok(300, 2, 1, o(1, 1)).build()
            => PASS;
        stale_snapshot_recreates_a_done_stage:
            first_stage_done().at(500).created_stage(2, 9, 0).build()
            => &[(NAME, Some(2)), ("eventual-completion", Some(2))];
        orphan_stage_task_claimed_again:
            // Two-step completion: the link is cleared, then the owner dies
            // before completing the task; it is released and claimed again.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).heartbeat(o(2, 1)).pipeline(9, 1).created_stage(3, 9, 0)
                .at(10).grant(3, 1, o(1, 1)).permit(o(1, 1), 3, 1).started(3, 1, o(1, 1))
                .at(100).finished(3, 1, o(1, 1), true).cleared_link(3, 1, o(1, 1))
                .at(110).killed(o(1, 1))
                .at(1_000).released(3, 1, o(2, 1))
                .at(1_100).grant(3, 2, o(2, 1))
                .build()
            => &[(NAME, Some(3)), ("eventual-completion", Some(3))];
        done_task_granted_again:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(4, TaskKind::Job)
                .attempt_ok(10, 4, 1, o(1, 1))
                .at(500).grant(4, 2, o(1, 1))
                .build()
            => &[(NAME, Some(4)), ("store-reply", Some(4))];
    }
}
