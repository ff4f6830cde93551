//! expired-lease-recovery (liveness): after heal, an expired lease is
//! reclaimed (released, or ended by its own outcome) within the recovery
//! bound, whatever other leases of its group are doing.

use super::{Checker, Ctx, Violation};
use crate::history::Record;
use leasesim::ids::TaskId;
use std::collections::BTreeSet;

pub const NAME: &str = "expired-lease-recovery";

#[derive(Default)]
pub struct LeaseRecovery {
    reported: BTreeSet<TaskId>,
    evaluations: u64,
}

impl LeaseRecovery {
    fn judge(&mut self, now: u64, heal: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let bound = ctx.scenario.bounds.recovery_bound_ms;
        for &id in &ctx.view.leased {
            let Some(t) = ctx.view.task(id) else { continue };
            // Heartbeat-owned leases have no expiry: they end by release only.
            let Some(expiry) = t.lease_expiry_ms else {
                continue;
            };
            if self.reported.contains(&id) {
                continue;
            }
            self.evaluations += 1;
            let from = expiry.max(heal);
            if now <= from + bound {
                continue;
            }
            self.reported.insert(id);
            let mut v = Violation::new(
                NAME,
                now,
                format!(
                    "t{id}: lease of attempt {} expired at {expiry} ms and is still held at {now} ms, \
                     {} ms after {from} ms (recovery bound {bound} ms)",
                    t.attempt,
                    now - from
                ),
            )
            .task(id)
            .attempt(t.attempt);
            if let Some(owner) = t.owner {
                v = v.process(owner);
            }
            out.push(v);
        }
    }
}

impl Checker for LeaseRecovery {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        if let Some(heal) = ctx.view.heal_ms {
            self.judge(rec.at_ms, heal, ctx, out);
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.evaluations += 1;
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
        expired_lease_reclaimed_in_time_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).granted(1, 1, o(1, 1), Some(1_000))
                .at(500).killed(o(1, 1))
                .at(600).heal()
                // expired at 1000, bound 2000: reclaimed by 3000
                .at(3_000).released(1, 1, o(1, 1))
                .attempt_ok(3_100, 1, 2, o(2, 1))
                .at(20_000).end().build()
            => Pass;
        renewed_lease_is_not_expired:
            H::new().up(o(1, 1)).created(1, TaskKind::Activity)
                .at(10).granted(1, 1, o(1, 1), Some(1_000))
                .at(100).heal()
                .at(700).renewed(1, 1, o(1, 1), 4_000)
                .at(3_500).renewed(1, 1, o(1, 1), 7_000)
                .at(5_000).end().build()
            => Pass;
        expired_lease_hidden_behind_a_live_one:
            // The activity (t2) stays healthy; the workflow task (t1) expired
            // at 1000 and nobody reclaims it.
            H::new().up(o(1, 1)).up(o(2, 1))
                .created(1, TaskKind::WorkflowTask).created(2, TaskKind::Activity)
                .at(10).granted(1, 1, o(1, 1), Some(1_000)).granted(2, 1, o(2, 1), Some(300_000))
                .at(500).killed(o(1, 1))
                .at(600).heal()
                .at(3_001).end().build()
            => Violates(NAME, Some(1));
        expiry_during_faults_counts_from_heal:
            H::new().up(o(1, 1)).created(3, TaskKind::Job)
                .at(10).granted(3, 1, o(1, 1), Some(1_000))
                .at(5_000).heal()
                .at(7_000).released(3, 1, o(1, 1))
                .at(7_001).end().build()
            => Pass;
        late_recovery_is_a_violation:
            H::new().up(o(1, 1)).created(3, TaskKind::Job)
                .at(10).granted(3, 1, o(1, 1), Some(1_000))
                .at(5_000).heal()
                .at(7_001).released(3, 1, o(1, 1))
                .build()
            => Violates(NAME, Some(3));
    }
}
