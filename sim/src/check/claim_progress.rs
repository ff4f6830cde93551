//! claim-progress (liveness): after heal, a due task is claimed within the
//! claim bound while some live worker has had a free permit all along.
//!
//! A ready task is due from `max(ready since, committed retry-at)`; only time
//! from heal on counts, so the clock starts at `since = max(due, H)`. It is a
//! violation if the task is still unclaimed at `t > since + claim_bound_ms`
//! while some worker was up at `since`, has not been killed or paused since,
//! and has not been at capacity since.
//!
//! A worker that came up after `since` (typically one restarted at heal)
//! counts the same way from its own start: it is a violation if the task is
//! still unclaimed `claim_bound_ms` after that worker came up, and the worker
//! has been free, alive and running since. Otherwise a world whose workers
//! all restart at heal would never be held to the bound.

use super::{Checker, Ctx, Violation};
use crate::history::Record;
use leasesim::ids::{Owner, TaskId};
use std::collections::BTreeSet;

pub const NAME: &str = "claim-progress";

#[derive(Default)]
pub struct ClaimProgress {
    /// Tasks already reported (only the first violation per task is kept).
    reported: BTreeSet<TaskId>,
    evaluations: u64,
}

/// A worker that could have claimed the task, due since `since`, by `now`:
/// up, alive, running and with a free permit from `max(since, its start)` on,
/// for longer than `bound`. Returns it with the time its clock started.
fn idle_owner(ctx: &Ctx, since: u64, now: u64, bound: u64) -> Option<(Owner, u64)> {
    ctx.view.owners.iter().find_map(|(owner, o)| {
        let start = o.up_ms?.max(since);
        let idle = now > start + bound
            && o.killed_ms.is_none()
            && !ctx.view.paused_between(owner.proc, start, now)
            && o.full_since_ms.is_none()
            && o.last_full_ms.is_none_or(|full| full <= start);
        idle.then_some((*owner, start))
    })
}

impl ClaimProgress {
    fn judge(&mut self, now: u64, heal: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let bound = ctx.scenario.bounds.claim_bound_ms;
        for &id in &ctx.view.ready {
            let Some(t) = ctx.view.task(id) else { continue };
            let due = t.ready_since_ms.max(t.retry_at_ms);
            let since = due.max(heal);
            if now <= since + bound || self.reported.contains(&id) {
                continue;
            }
            self.evaluations += 1;
            let Some((owner, start)) = idle_owner(ctx, since, now, bound) else {
                continue;
            };
            self.reported.insert(id);
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{id}: due since {since} ms and still unclaimed at {now} ms \
                         although {owner} had a free permit from {start} ms on (claim bound {bound} ms)"
                    ),
                )
                .task(id),
            );
        }
    }
}

impl Checker for ClaimProgress {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        if let Some(heal) = ctx.view.heal_ms {
            self.judge(rec.at_ms, heal, ctx, out);
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        // Every task gets a last look: claimed ones pass on sight.
        self.evaluations += ctx.view.tasks.len() as u64 + 1;
        self.judge(end_ms, ctx.view.heal_or(end_ms), ctx, out);
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
        claimed_within_bound_after_heal_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .attempt_ok(1_100, 1, 1, o(1, 1))
                .at(20_000).end().build()
            => Pass;
        starved_before_heal_counts_from_heal:
            // Unclaimed for 5 s during the fault phase: only time after heal counts.
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(5_000).heal()
                .attempt_ok(5_900, 1, 1, o(1, 1))
                .at(20_000).end().build()
            => Pass;
        due_task_unclaimed_with_free_permit:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .at(1_101).end().build()
            => Violates(NAME, Some(1));
        retried_task_unclaimed_after_its_retry_at:
            H::new().up(o(1, 1)).created(2, TaskKind::Job)
                .at(10).granted(2, 1, o(1, 1), None)
                .at(100).failed(2, 1, o(1, 1), 1, Some(5_100))
                .at(200).heal()
                .at(6_101).end().build()
            => Violates(NAME, Some(2));
        late_claim_is_a_violation:
            H::new().up(o(1, 1)).created(3, TaskKind::Job)
                .at(100).heal()
                .attempt_ok(2_000, 3, 1, o(1, 1))
                .at(20_000).end().build()
            => Violates(NAME, Some(3));
        no_free_permit_is_not_starvation:
            // Both permits of the only worker stay busy with other work.
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(60_000)).permit(o(1, 1), 1, 1)
                .granted(2, 1, o(1, 1), Some(60_000)).permit(o(1, 1), 2, 1)
                .at(100).heal()
                .at(3_000).end().build()
            => Pass;
        paused_worker_is_not_starvation:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .at(500).paused(1)
                .at(3_000).end().build()
            => Pass;
        worker_restarted_at_heal_counts_from_its_start:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(50).killed(o(1, 1))
                .at(100).heal()
                .at(500).up(o(1, 2))
                // bound 1000 from 500: claimed at 1500 is in time
                .attempt_ok(1_500, 1, 1, o(1, 2))
                .at(20_000).end().build()
            => Pass;
        worker_restarted_at_heal_never_claims:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(50).killed(o(1, 1))
                .at(100).heal()
                .at(500).up(o(1, 2))
                .at(1_501).end().build()
            => Violates(NAME, Some(1));
    }
}
