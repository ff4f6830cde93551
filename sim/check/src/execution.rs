//! execution-exclusive: a task body runs only for an attempt the store
//! granted, once per attempt, on that attempt's own process; and two bodies
//! of one task never run at once unless the older attempt's lease was lost
//! for a reason the harness can justify (see lease-revocation).
//!
//! Judged at the task-body seam (which bodies really ran, where), against the
//! grants and revocations the store committed.

use super::lease_revocation::justify;
use super::{answer, commit, fact, lost_holder, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::Fence;
use leasesim_vocab::truth::Fact;
use std::collections::BTreeMap;

pub const NAME: &str = "execution-exclusive";

#[derive(Default)]
pub struct ExecutionExclusive {
    /// Attempts whose lease was taken away: when, and whether for a reason.
    revoked: BTreeMap<Fence, (u64, Result<String, String>)>,
    evaluations: u64,
}

impl ExecutionExclusive {
    fn note_revocations(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let Some(commit) = commit(rec) else { return };
        let request = answer(rec, ctx).map(|a| a.request);
        for change in &commit.tasks {
            let Some(holder) = lost_holder(change) else { continue };
            let before = change.before.as_ref().expect("a lost holder had a row");
            self.revoked.insert(holder, (now, justify(ctx, &holder, before, now, request)));
        }
    }

    fn judge_start(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(Fact::BodyStarted { fence, on, .. }) = fact(rec) else { return };
        self.evaluations += 1;
        let mut problems = Vec::new();
        if !ctx.view.grants.contains_key(fence) {
            problems.push("the store never granted this attempt".to_string());
        }
        if let Some(first) = ctx.view.bodies.get(fence) {
            problems.push(format!("this attempt's body already ran (from {} ms)", first.started_ms));
        }
        if *on != fence.owner {
            problems.push(format!("it runs on {on}, not on the attempt's owner"));
        }
        let others =
            ctx.view.bodies.iter().filter(|(f, b)| f.task == fence.task && f != &fence && b.ended_ms.is_none());
        for (other, body) in others {
            // Of two overlapping bodies, the older attempt must have lost its
            // lease for a reason (a zombie may start late, once it lost it).
            let older = if other.attempt < fence.attempt { other } else { fence };
            let running = format!("attempt {} still runs on {} (since {} ms)", other.attempt, body.on, body.started_ms);
            match self.revoked.get(older) {
                Some((_, Ok(_))) => {}
                Some((at, Err(why))) => problems.push(format!(
                    "{running}, and attempt {} lost its lease at {at} ms without cause: {why}",
                    older.attempt
                )),
                None => problems.push(format!("{running}, and attempt {} still holds its lease", older.attempt)),
            }
        }
        for problem in problems {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: body of attempt {} ({}) started at {now} ms, but {problem}",
                        fence.task, fence.attempt, fence.owner
                    ),
                )
                .fence(fence),
            );
        }
    }
}

impl Checker for ExecutionExclusive {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "task-body seam: bodies run only for granted attempts, once, on their owner; two bodies of one task overlap only after a justified lease loss"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.note_revocations(rec.at_ms, rec, ctx);
        self.judge_start(rec.at_ms, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT.or(Kinds::BODY_STARTED)
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
        zombie_runs_after_a_justified_loss_passes:
            // p1 hangs while running t1; its lease expires and p2 runs
            // attempt 2 while p1's body, resumed, is still going.
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).paused(1)
                .at(3_100).released(1, 1, o(2, 1))
                .attempt_ok(3_200, 1, 2, o(2, 1))
                .at(3_350).resumed(1).finished(1, 1, o(1, 1), true).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        body_without_a_grant:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        one_attempt_executes_twice:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).started(1, 1, o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        two_attempts_run_at_once_after_an_unjustified_loss:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(1_000).released(2, 1, o(2, 1))
                .at(1_100).grant(2, 2, o(2, 1)).permit(o(2, 1), 2, 2).started(2, 2, o(2, 1))
                .build()
            => &[(NAME, Some(2)), ("lease-revocation", Some(2))];
    }
}
