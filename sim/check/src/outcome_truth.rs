//! outcome-truth: a worker reports for an attempt exactly what its body did.
//! It asks to complete only an attempt whose body succeeded, and to fail
//! (or check the lease before failing) only one whose body returned that
//! error; it speaks only for attempts of its own process, after the body
//! returned.
//!
//! Judged where the two seams meet: outcome requests as they reached the
//! store (with the sender the network saw) against the task-body seam.

use super::{fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::Fence;
use leasesim_vocab::op::Op;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::truth::{Fact, Sender};

pub const NAME: &str = "outcome-truth";

#[derive(Default)]
pub struct OutcomeTruth {
    evaluations: u64,
}

/// The attempt an outcome request speaks for, and the body result it claims
/// (`None`: success; `Some(None)`: some failure, unnamed).
fn claims(req: &Op) -> Option<(Fence, Option<Option<TaskError>>)> {
    match req {
        Op::Complete { fence } | Op::ClearStageLink { fence } => Some((*fence, None)),
        Op::Fail { fence, error } => Some((*fence, Some(Some(*error)))),
        Op::LeaseValid { fence } => Some((*fence, Some(None))),
        // Not an attempt's outcome.
        Op::Enqueue { .. }
        | Op::CreatePipeline { .. }
        | Op::Claim { .. }
        | Op::Heartbeat { .. }
        | Op::Renew { .. }
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
        Op::Exec { stmt, .. } => claims(stmt),
    }
}

impl Checker for OutcomeTruth {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and body seams: a worker completes only attempts whose body succeeded and fails them only with the error the body returned"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(Fact::Arrived { from: Sender::Worker(sender), request, .. }) = fact(rec) else { return };
        let Some((fence, claimed)) = claims(request) else { return };
        self.evaluations += 1;
        let op = request.op_name();
        let body = ctx.view.bodies.get(&fence);
        let problem = match body {
            _ if *sender != fence.owner => Some(format!("sent by {sender}, not by the attempt's owner")),
            None => Some("its body never ran".to_string()),
            Some(b) if b.ended_ms.is_none() => Some(format!("its body is still running (since {} ms)", b.started_ms)),
            Some(b) if b.stopped => Some("its body never returned".to_string()),
            Some(b) => match (claimed, b.error) {
                (None, None) => None,
                (None, Some(e)) => Some(format!("its body failed with {e:?}")),
                (Some(_), None) => Some("its body succeeded".to_string()),
                (Some(Some(claimed)), Some(e)) if claimed != e => {
                    Some(format!("its body failed with {e:?}, not {claimed:?}"))
                }
                (Some(_), Some(_)) => None,
            },
        };
        if let Some(problem) = problem {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: {op} for attempt {} ({}) reached the store at {now} ms, but {problem}",
                        fence.task, fence.attempt, fence.owner
                    ),
                )
                .fence(&fence),
            );
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::ARRIVED
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

    cases! {
        true_outcomes_pass:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job)
                .attempt_ok(10, 1, 1, o(1, 1))
                .at(200).grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(300).finished(2, 1, o(1, 1), false).failed(2, 1, o(1, 1), 1, Some(1_300)).unpermit(o(1, 1), 2, 1)
                .build()
            => PASS;
        completes_a_failed_body:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), false).completed(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
        completes_before_the_body_returns:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(50).completed(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
        fails_a_body_that_succeeded:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).failed(1, 1, o(1, 1), 1, Some(1_100)).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
    }
}
