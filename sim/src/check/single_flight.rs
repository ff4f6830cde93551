//! single-flight-maintenance: two passes of one kind never overlap on one
//! process incarnation.

use super::{Checker, Ctx, Violation};
use crate::history::{Entry, Record, WorldEvent};
use leasesim::config::MaintenanceKind;
use leasesim::event::Event;
use leasesim::ids::Owner;
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "single-flight-maintenance";

#[derive(Default)]
pub struct SingleFlight {
    /// Passes started and not yet ended, per (owner, kind).
    open: BTreeMap<(Owner, MaintenanceKind), BTreeSet<u64>>,
    evaluations: u64,
}

impl Checker for SingleFlight {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match &rec.entry {
            Entry::Engine(Event::MaintenanceStarted { owner, kind, pass }) => {
                self.evaluations += 1;
                let open = self.open.entry((*owner, *kind)).or_default();
                if let Some(running) = open.iter().next() {
                    if ctx.view.killed(*owner).is_none() {
                        out.push(
                            Violation::new(
                                NAME,
                                now,
                                format!(
                                    "{} pass {pass} started on {owner} at {now} ms while pass {running} is still running",
                                    kind.name()
                                ),
                            )
                            .process(*owner),
                        );
                    }
                }
                open.insert(*pass);
            }
            Entry::Engine(Event::MaintenanceEnded { owner, kind, pass }) => {
                if let Some(open) = self.open.get_mut(&(*owner, *kind)) {
                    open.remove(pass);
                }
            }
            Entry::World(WorldEvent::ProcessKilled { owner }) => {
                // Its passes vanish with it.
                self.open.retain(|(o, _), _| o != owner);
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
    use leasesim::config::MaintenanceKind::{Bucket, Index};

    cases! {
        sequential_and_other_kind_passes_pass:
            H::new().up(o(1, 1)).up(o(2, 1))
                .at(10).pass_started(o(1, 1), Index, 1)
                .pass_started(o(1, 1), Bucket, 2)
                .pass_started(o(2, 1), Index, 1)
                .at(300).pass_ended(o(1, 1), Index, 1)
                .pass_started(o(1, 1), Index, 3)
                .build()
            => Pass;
        killed_owners_pass_does_not_block_its_successor:
            H::new().up(o(1, 1))
                .at(10).pass_started(o(1, 1), Index, 1)
                .at(100).killed(o(1, 1))
                .at(200).up(o(1, 2)).pass_started(o(1, 2), Index, 1)
                .build()
            => Pass;
        overlapping_passes_of_one_kind:
            H::new().up(o(1, 1))
                .at(10).pass_started(o(1, 1), Index, 1)
                .at(5_010).pass_started(o(1, 1), Index, 2)
                .build()
            => Violates(NAME, None);
    }
}
