//! single-flight-maintenance: two passes of one kind from one process never
//! overlap, at the store or on the worker, and a worker never believes a
//! pass ended while the store is still doing its work.
//!
//! Judged at the store seam (maintenance requests that reached the store and
//! are not yet answered: `Maintain` does the pass's work there), and from
//! the workers' testimony (`MaintenanceStarted` / `MaintenanceEnded`),
//! cross-checked against the store seam.

use super::{fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::ids::Owner;
use leasesim_vocab::op::Op;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::task::MaintenanceKind;
use leasesim_vocab::testimony::Event;
use leasesim_vocab::truth::{Fact, Sender};
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "single-flight-maintenance";

#[derive(Default)]
pub struct SingleFlight {
    /// Passes the workers say started and have not ended, per (owner, kind).
    open: BTreeMap<(Owner, MaintenanceKind), BTreeSet<u64>>,
    evaluations: u64,
}

/// The maintenance requests of `owner` and `kind` in flight at the store
/// (arrived, not answered, not dropped), with their arrival times.
fn at_store(ctx: &Ctx, owner: Owner, kind: MaintenanceKind) -> Vec<(u64, u64)> {
    ctx.view
        .requests
        .iter()
        .filter(|(_, r)| r.from == Sender::Worker(owner) && r.answer.is_none())
        .filter(|(_, r)| matches!(r.request, Op::Maintain { kind: k, .. } if k == kind))
        .map(|(id, r)| (*id, r.arrived_ms))
        .collect()
}

impl SingleFlight {
    fn judge_store(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(Fact::Arrived { req, from: Sender::Worker(owner), request: Op::Maintain { kind, .. }, .. }) =
            fact(rec)
        else {
            return;
        };
        self.evaluations += 1;
        if let Some((other, since)) = at_store(ctx, *owner, *kind).first() {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "{} pass of {owner} reached the store at {now} ms (request {req}) while its pass of {since} ms \
                         (request {other}) is still running there",
                        kind.name()
                    ),
                )
                .process(*owner),
            );
        }
    }

    fn judge_testimony(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        match &rec.entry {
            Entry::Engine(Event::MaintenanceStarted { owner, kind, pass }) => {
                self.evaluations += 1;
                let open = self.open.entry((*owner, *kind)).or_default();
                if let Some(running) = open.iter().next() {
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
                open.insert(*pass);
            }
            Entry::Engine(Event::MaintenanceEnded { owner, kind, pass }) => {
                if let Some(open) = self.open.get_mut(&(*owner, *kind)) {
                    open.remove(pass);
                }
                if !matches!(kind, MaintenanceKind::Index | MaintenanceKind::Bucket | MaintenanceKind::Tenant) {
                    return;
                }
                self.evaluations += 1;
                if let Some((req, since)) = at_store(ctx, *owner, *kind).first() {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "{owner} says its {} pass {pass} ended at {now} ms, but its store work of {since} ms \
                                 (request {req}) is still running",
                                kind.name()
                            ),
                        )
                        .process(*owner),
                    );
                }
            }
            // Its passes vanish with it (killed or exited).
            Entry::World(w) => {
                if let Some(owner) = w.gone() {
                    self.open.retain(|(o, _), _| *o != owner);
                }
            }
            _ => {}
        }
    }
}

impl Checker for SingleFlight {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam and worker testimony: two passes of one kind from one process never overlap, and no pass ends while its store work runs"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_store(rec.at_ms, rec, ctx, out);
        self.judge_testimony(rec.at_ms, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::ARRIVED.or(Kinds::ENGINE).or(Kinds::WORLD)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.maintenance && caps.testimony
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::MaintenanceKind::{Bucket, Index};
    use leasesim_vocab::testimony::Event;
    use leasesim_vocab::truth::{Fact, Sender};

    fn maintain(h: H, owner: leasesim_vocab::ids::Owner, req_done: bool) -> H {
        let request = Op::Maintain { owner, kind: Index, timeout_ms: Some(29_000) };
        if req_done {
            h.answer(
                Sender::Worker(owner),
                request,
                Response::Ack,
                vec![Event::MaintenanceApplied { owner, kind: Index }],
                &[],
            )
        } else {
            h.arrive(Sender::Worker(owner), request).0
        }
    }

    cases! {
        sequential_and_other_kind_passes_pass:
            {
                let h = H::new().up(o(1, 1)).up(o(2, 1))
                    .at(10).pass_started(o(1, 1), Index, 1)
                    .pass_started(o(1, 1), Bucket, 2)
                    .pass_started(o(2, 1), Index, 1);
                let h = maintain(h, o(1, 1), true);
                maintain(h.at(300).pass_ended(o(1, 1), Index, 1).pass_started(o(1, 1), Index, 3), o(1, 1), true).build()
            }
            => PASS;
        killed_owners_pass_does_not_block_its_successor:
            maintain(H::new().up(o(1, 1)).at(10).pass_started(o(1, 1), Index, 1), o(1, 1), false)
                .at(100).killed(o(1, 1))
                .at(200).up(o(1, 2)).pass_started(o(1, 2), Index, 1)
                .build()
            => PASS;
        overlapping_passes_on_the_worker:
            H::new().up(o(1, 1))
                .at(10).pass_started(o(1, 1), Index, 1)
                .at(5_010).pass_started(o(1, 1), Index, 2)
                .build()
            => &[(NAME, None)];
        overlapping_passes_at_the_store:
            // The worker gave up on pass 1 and started pass 2; pass 1's
            // store work never stopped.
            {
                let h = maintain(H::new().up(o(1, 1)).at(10).pass_started(o(1, 1), Index, 1), o(1, 1), false);
                maintain(h.at(5_000).pass_ended(o(1, 1), Index, 1).pass_started(o(1, 1), Index, 2), o(1, 1), false).build()
            }
            => &[(NAME, None)];
        a_lost_answer_ends_the_store_work:
            {
                let h = H::new().up(o(1, 1)).at(10).pass_started(o(1, 1), Index, 1);
                let (h, req) = h.arrive(Sender::Worker(o(1, 1)), Op::Maintain { owner: o(1, 1), kind: Index, timeout_ms: Some(29_000) });
                h.ev(Event::MaintenanceApplied { owner: o(1, 1), kind: Index })
                    .fact(Fact::Answered { req, response: Response::Ack, commit: Default::default(), reply: leasesim_vocab::truth::Reply::Lost })
                    .build()
            }
            => PASS;
    }
}
