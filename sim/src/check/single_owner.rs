//! single-owner: at most one unexpired lease per task at any instant.

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record};
use leasesim::event::Event;
use leasesim::task::TaskState;

pub const NAME: &str = "single-owner";

#[derive(Default)]
pub struct SingleOwner {
    evaluations: u64,
}

impl Checker for SingleOwner {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Entry::Engine(Event::LeaseGranted { fence, .. }) = &rec.entry else {
            return;
        };
        self.evaluations += 1;
        let Some(t) = ctx.view.task(fence.task) else {
            return;
        };
        if t.state != TaskState::Leased || (t.attempt == fence.attempt && t.owner == Some(fence.owner)) {
            return;
        }
        let lease = match t.lease_expiry_ms {
            Some(e) if e <= now => return,
            Some(e) => format!("a lease until {e} ms"),
            None => "a heartbeat-owned lease".to_string(),
        };
        let holder = t.owner.map_or_else(|| "?".to_string(), |o| o.to_string());
        out.push(
            Violation::new(
                NAME,
                now,
                format!(
                    "t{}: attempt {} granted to {} at {now} ms while attempt {} ({holder}) holds {lease}",
                    fence.task, fence.attempt, fence.owner, t.attempt
                ),
            )
            .fence(fence),
        );
    }

    fn finish(&mut self, _end_ms: u64, _ctx: &Ctx, _out: &mut Vec<Violation>) {
        // Grants are the only way to a second holder, and each was judged.
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
    use leasesim::task::TaskKind;

    cases! {
        regrant_after_expiry_passes:
            // Expired at 100 but never released: a regrant is still one owner.
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(100))
                .at(100).granted(1, 2, o(2, 1), Some(5_000))
                .build()
            => Pass;
        grant_over_unexpired_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), Some(1_000))
                .at(500).granted(1, 2, o(2, 1), Some(5_000))
                .build()
            => Violates(NAME, Some(1));
        grant_over_renewed_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).created(2, TaskKind::Job)
                .at(10).granted(2, 1, o(1, 1), Some(1_000))
                .at(900).renewed(2, 1, o(1, 1), 2_000)
                .at(1_500).granted(2, 2, o(2, 1), Some(5_000))
                .build()
            => Violates(NAME, Some(2));
        grant_over_heartbeat_owned_lease:
            H::new().up(o(1, 1)).up(o(2, 1)).created(3, TaskKind::Job)
                .at(10).granted(3, 1, o(1, 1), None)
                .at(90_000).granted(3, 2, o(2, 1), None)
                .build()
            => Violates(NAME, Some(3));
    }
}
