//! fenced-completion: a fenced write (complete, fail, renewal,
//! clear-stage-link) changes the store only if it carries the task's current
//! attempt and the task is still leased to that owner, and it changes only
//! its own task (with its stage and its index). Every grant carries a fresh
//! attempt (the previous one + 1, also when the same owner claims again), or
//! the fence could not tell a stale attempt from the current one.
//!
//! Judged at the store seam: the fence is the one the request carried when it
//! reached the store; the change is what the harness read in the store.

use super::{answer, granted, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::Op;

pub const NAME: &str = "fenced-completion";

#[derive(Default)]
pub struct FencedCompletion {
    evaluations: u64,
}

/// The fence a write carries, and its name.
fn fenced_write(req: &Op) -> Option<(Fence, &'static str)> {
    match req {
        Op::Complete { fence } => Some((*fence, "complete")),
        Op::Fail { fence, .. } => Some((*fence, "fail")),
        Op::Renew { fence } => Some((*fence, "renewal")),
        Op::ClearStageLink { fence } => Some((*fence, "clear-stage-link")),
        // Unfenced: judged by the other checkers.
        Op::Enqueue { .. }
        | Op::CreatePipeline { .. }
        | Op::Claim { .. }
        | Op::Heartbeat { .. }
        | Op::LeaseValid { .. }
        | Op::ReleaseDead { .. }
        | Op::ReleaseOrphans { .. }
        | Op::ReclaimExpired { .. }
        | Op::Repair { .. }
        | Op::Maintain { .. }
        | Op::PipelineSnapshot { .. }
        | Op::EnqueueStage { .. }
        | Op::QueryIndex { .. }
        | Op::Rollback { .. }
        | Op::Commit { .. }
        | Op::ReleaseOwners { .. }
        | Op::ReturnOwn { .. }
        | Op::Other { .. }
        | Op::Deregister { .. } => None,
        Op::Exec { stmt, .. } => fenced_write(stmt),
    }
}

impl FencedCompletion {
    fn judge_write(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(a) = answer(rec, ctx) else { return };
        let Some((fence, what)) = fenced_write(&a.request.request) else { return };
        if a.commit.is_empty() {
            return;
        }
        self.evaluations += 1;
        let before = match a.commit.task(fence.task).and_then(|c| c.before.as_ref()) {
            Some(row) => Some(row.clone()),
            None => ctx.view.task(fence.task).map(|t| t.row.clone()),
        };
        let holder = match &before {
            Some(row) if super::view::held_by(row, &fence) => None,
            Some(row) => Some(super::view::holder(row)),
            None => Some("the task does not exist".to_string()),
        };
        if let Some(holder) = holder {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: {what} by attempt {} ({}) changed the store at {now} ms while {holder}",
                        fence.task, fence.attempt, fence.owner
                    ),
                )
                .fence(&fence),
            );
        }
        for other in a.commit.tasks.iter().filter(|c| c.after.id != fence.task) {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: {what} by attempt {} ({}) also changed t{} at {now} ms",
                        fence.task, fence.attempt, fence.owner, other.after.id
                    ),
                )
                .fence(&fence),
            );
        }
    }

    fn judge_grants(&mut self, now: u64, rec: &Record, out: &mut Vec<Violation>) {
        let Some(commit) = super::commit(rec) else { return };
        for change in &commit.tasks {
            let Some(fence) = granted(change) else { continue };
            self.evaluations += 1;
            let previous = change.before.as_ref().map_or(0, |b| b.attempt);
            if fence.attempt != previous + 1 {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: granted at {now} ms as attempt {} to {}, but the previous attempt was {previous}: the attempt is not fresh",
                            fence.task, fence.attempt, fence.owner
                        ),
                    )
                    .fence(&fence),
                );
            }
        }
    }
}

impl Checker for FencedCompletion {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a complete, fail, renewal or stage write changes the store only for the task's current attempt and owner, and only its own task; every grant is a fresh attempt"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_write(rec.at_ms, rec, ctx, out);
        // An engine whose rows carry no fencing token: the harness numbers
        // its grants itself, so freshness is true by construction.
        if ctx.spec.caps.fresh_attempts {
            self.judge_grants(rec.at_ms, rec, out);
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

    /// p1 holds workflow task t1 (lease to 3010 ms) and runs it, pauses at
    /// 100 ms; the lease expires, p2 reclaims it and holds attempt 2.
    fn zombie() -> H {
        H::new()
            .up(o(1, 1))
            .up(o(2, 1))
            .created(1, TaskKind::WorkflowTask)
            .at(10)
            .grant(1, 1, o(1, 1))
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(100)
            .paused(1)
            .at(3_100)
            .released(1, 1, o(2, 1))
            .at(3_200)
            .grant(1, 2, o(2, 1))
            .at(3_250)
            .resumed(1)
            .finished(1, 1, o(1, 1), true)
    }

    cases! {
        current_attempt_completes_passes:
            zombie().at(3_260).unpermit(o(1, 1), 1, 1)
                .permit(o(2, 1), 1, 2).started(1, 2, o(2, 1))
                .at(3_300).finished(1, 2, o(2, 1), true).completed(1, 2, o(2, 1)).callback(1, 2, o(2, 1)).unpermit(o(2, 1), 1, 2)
                .build()
            => PASS;
        stale_completion_takes_the_newer_attempts_task:
            zombie().at(3_260).completed(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1)), ("lease-revocation", Some(1))];
        stale_failure_spends_the_newer_attempts_budget:
            H::new().up(o(1, 1)).up(o(2, 1)).created(4, TaskKind::WorkflowTask)
                .at(10).grant(4, 1, o(1, 1)).permit(o(1, 1), 4, 1).started(4, 1, o(1, 1))
                .at(100).paused(1)
                .at(3_100).released(4, 1, o(2, 1))
                .at(3_200).grant(4, 2, o(2, 1))
                .at(3_250).resumed(1).finished(4, 1, o(1, 1), false)
                .failed(4, 1, o(1, 1), 1, Some(4_250)).unpermit(o(1, 1), 4, 1)
                .build()
            => &[(NAME, Some(4)), ("lease-revocation", Some(4))];
        reclaim_without_a_new_attempt:
            H::new().up(o(1, 1)).created(6, TaskKind::WorkflowTask)
                .at(10).grant(6, 1, o(1, 1))
                .at(3_100).released(6, 1, o(1, 1))
                .at(3_200).grant(6, 1, o(1, 1))
                .build()
            => &[(NAME, Some(6))];
    }
}
