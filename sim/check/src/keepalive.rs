//! keepalive: a live, connected worker keeps what it holds alive. It sends a
//! heartbeat at least every `heartbeat_interval_ms` (plus one RPC deadline),
//! and while a task body runs it sends a renewal before the lease expires
//! (the lease is renewed once its remaining time drops to TTL /
//! `renew_divisor`); a body never starts inside that margin without a
//! renewal first.
//!
//! Judged at the store seam: a heartbeat or renewal counts when it reached
//! the store process, whatever the harness then did to it (a fault that
//! drops it is the harness's doing, not the worker's). Only intervals in
//! which the worker was up, running and connected, and its clock was not
//! off by more than the renewal margin, are judged; and a worker's
//! heartbeats only once it has announced itself (its first heartbeat) or
//! holds a task, and until it says it is leaving (deregisters): a worker
//! still starting up, or shutting down, keeps nothing alive.

use super::{promise, Checker, Ctx, ExpiryScan, Violation};
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Fence, Owner};
use leasesim_vocab::op::Op;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::truth::{Fact, Sender};
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "keepalive";

/// Slack on a heartbeat gap, measured between two arrivals at the store:
/// the two sends' hops may differ by up to one hop (1 to `HOP_MAX_MS`), and
/// the simulator's scheduler adds nanoseconds per step. Two hops' worth,
/// and no more: a worker whose heartbeats come half a second late is late
/// (a slack of a second once let apalis's lost heartbeat wake-ups through
/// when the next event woke the worker within it).
const SLACK_MS: u64 = 2 * leasesim_vocab::truth::HOP_MAX_MS;

#[derive(Default)]
pub struct Keepalive {
    /// Per owner: when its last heartbeat reached the store.
    heartbeat: BTreeMap<Owner, u64>,
    /// Per attempt: when its renewals reached the store.
    renewals: BTreeMap<Fence, Vec<u64>>,
    /// Lease expiries already judged: (attempt, expiry).
    judged: BTreeSet<(Fence, u64)>,
    /// When the leases are next worth a look.
    expiries: ExpiryScan,
    /// Owners already reported for silence.
    silent: BTreeSet<Owner>,
    /// Owners whose heartbeat reached the store at least once.
    announced: BTreeSet<Owner>,
    /// Owners that said they are leaving (deregistered).
    left: BTreeSet<Owner>,
    /// The millisecond last judged.
    judged_ms: Option<u64>,
    /// No worker can be silent too long before this moment (see
    /// `judge_heartbeats`): heartbeats are judged again only after it.
    heartbeats_due_ms: u64,
    evaluations: u64,
}

impl Keepalive {
    fn note(&mut self, now: u64, rec: &Record) {
        match &rec.entry {
            Entry::Truth(Fact::Arrived { from: Sender::Worker(owner), request, .. }) => match request {
                Op::Heartbeat { .. } => {
                    self.heartbeat.insert(*owner, now);
                    self.announced.insert(*owner);
                }
                Op::Deregister { .. } => {
                    self.left.insert(*owner);
                }
                Op::Renew { fence } => self.renewals.entry(*fence).or_default().push(now),
                _ => {}
            },
            Entry::World(WorldEvent::ProcessUp { owner }) => {
                self.heartbeat.entry(*owner).or_insert(now);
            }
            _ => {}
        }
    }

    /// Since when the worker could have been expected to reach the store:
    /// its start, its last resume or rejoin, its last heartbeat.
    ///
    /// A worker's `since` only moves forward while it is not paused or cut
    /// off, and once it is back it is at least the moment it came back; a
    /// worker that starts later starts its `since` then. So no worker can be
    /// silent too long until the earliest `since + gap` of the workers
    /// judged now (the moment itself plus `gap` for one paused or cut off
    /// now), and the scan is skipped until then.
    fn judge_heartbeats(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        if now <= self.heartbeats_due_ms {
            return;
        }
        let gap = promise::heartbeat_gap_ms(ctx.promises()) + SLACK_MS;
        let mut due_ms = now.saturating_add(gap);
        for (owner, o) in &ctx.view.owners {
            if !o.alive() || self.silent.contains(owner) || self.left.contains(owner) {
                continue;
            }
            let p = ctx.view.procs.get(&owner.proc);
            if p.is_some_and(|p| p.paused_now() || p.partitions.last().is_some_and(|(_, end)| end.is_none())) {
                continue;
            }
            let last_back = p.map_or(0, |p| {
                let resumed = p.pauses.last().and_then(|(_, e)| *e).unwrap_or(0);
                let rejoined = p.partitions.last().and_then(|(_, e)| *e).unwrap_or(0);
                resumed.max(rejoined)
            });
            let since = self.heartbeat.get(owner).copied().unwrap_or(0).max(last_back).max(o.up_ms.unwrap_or(0));
            // Counted whether or not it is judged now: a worker that starts
            // holding a task later is judged from this same `since`.
            due_ms = due_ms.min(since.saturating_add(gap));
            let holds =
                || ctx.view.leased.iter().any(|id| ctx.view.task(*id).is_some_and(|t| t.row.owner == Some(*owner)));
            if !self.announced.contains(owner) && !holds() {
                continue;
            }
            self.evaluations += 1;
            if now > since + gap {
                self.silent.insert(*owner);
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "{owner} is up, running and connected, but no heartbeat of it reached the store from {since} ms \
                             to {now} ms (interval {} ms)",
                            ctx.promises().heartbeat_interval_ms
                        ),
                    )
                    .process(*owner),
                );
            }
        }
        self.heartbeats_due_ms = due_ms;
    }

    fn judge_leases(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        if !self.expiries.due(now) {
            return;
        }
        let cfg = ctx.promises();
        let mut next_ms = u64::MAX;
        for id in &ctx.view.leased {
            let Some(t) = ctx.view.task(*id) else { continue };
            let (Some(expiry), Some(owner)) = (t.row.lease_expiry_ms, t.row.owner) else { continue };
            let fence = Fence { task: *id, attempt: t.row.attempt, owner };
            if expiry > now {
                next_ms = next_ms.min(expiry);
                continue;
            }
            if !self.judged.insert((fence, expiry)) {
                continue;
            }
            let Some(margin) = promise::renew_margin_ms(cfg, t.kind()) else { continue };
            let from = expiry.saturating_sub(margin);
            let offset = ctx.view.procs.get(&owner.proc).map_or(0, |p| p.offset_ms.unsigned_abs());
            // Working on the task from the margin to the expiry: its body
            // running, or ended and its outcome still being recorded, within
            // the finalization deadline, when the lease ran out (a lease is
            // kept until the outcome is written: an outcome write held past
            // the expiry would otherwise find the task taken).
            let finalizing = ctx.view.owner(owner).is_some_and(|o| o.finalizing.contains_key(&fence));
            let working = ctx.view.bodies.get(&fence).is_some_and(|b| {
                b.started_ms <= from
                    && match b.ended_ms {
                        None => true,
                        Some(ended) => ended > expiry || (finalizing && ended + cfg.finalize_deadline_ms > expiry),
                    }
            });
            // A stop whose grace ran out before the expiry cancelled the
            // attempt, its renewer with it: nothing more is owed for it.
            let cancelled = ctx
                .view
                .owner(owner)
                .and_then(|o| o.stop_requested_ms)
                .is_some_and(|s| s + cfg.stop_grace_ms <= expiry);
            if !working
                || cancelled
                || !ctx.view.live_throughout(owner, from, expiry)
                || offset + promise::NET_LATENCY_MAX_MS >= margin
            {
                continue;
            }
            self.evaluations += 1;
            let window = from.saturating_sub(offset + promise::NET_LATENCY_MAX_MS);
            let renewed = self.renewals.get(&fence).is_some_and(|at| at.iter().any(|&a| a >= window && a <= expiry));
            if !renewed {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{id}: the lease of attempt {} ({owner}) expired at {expiry} ms while its body ran or its \
                             outcome was being recorded and {owner} was up and connected, but no renewal of it reached \
                             the store after {window} ms (renew margin {margin} ms)",
                            fence.attempt
                        ),
                    )
                    .fence(&fence),
                );
            }
        }
        self.expiries.looked(next_ms);
    }
}

impl Keepalive {
    /// A body never starts inside its lease's renewal margin: by then its
    /// renewal is already owed (the engine must renew first, as a late
    /// claim answer's attempt confirms its lease), and the lease rule above
    /// judges only bodies that started before the margin. The owner's clock
    /// offset and one network latency are allowed for.
    fn judge_start(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Entry::Truth(Fact::BodyStarted { fence, kind, .. }) = &rec.entry else { return };
        let Some(t) = ctx.view.task(fence.task).filter(|t| t.held_by(fence)) else { return };
        let (Some(expiry), Some(margin)) = (t.row.lease_expiry_ms, promise::renew_margin_ms(ctx.promises(), *kind))
        else {
            return;
        };
        let offset = ctx.view.procs.get(&fence.owner.proc).map_or(0, |p| p.offset_ms.unsigned_abs());
        let Some(least) = margin.checked_sub(offset + promise::NET_LATENCY_MAX_MS) else { return };
        self.evaluations += 1;
        if expiry < now + least {
            let left = expiry.saturating_sub(now);
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: attempt {} ({}) started its body at {now} ms with {left} ms of its lease left (expiry {expiry} ms), \
                         inside the renew margin of {margin} ms, without renewing first",
                        fence.task, fence.attempt, fence.owner
                    ),
                )
                .fence(fence),
            );
        }
    }
}

impl Checker for Keepalive {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a live, connected worker heartbeats every interval, renews a running body's lease before it expires, and starts no body inside its renewal margin without renewing first"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        // Judged at the first record of each millisecond: nothing later in
        // the same millisecond can make a worker newly silent (heartbeats,
        // resumes and restarts only move `since` forward) or a lease newly
        // expired (a grant or renewal moves its expiry past now).
        if self.judged_ms != Some(now) {
            self.judged_ms = Some(now);
            self.judge_heartbeats(now, ctx, out);
            self.judge_leases(now, ctx, out);
        }
        self.judge_start(now, rec, ctx, out);
        self.note(now, rec);
        self.expiries.note(rec);
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_heartbeats(end_ms, ctx, out);
        self.judge_leases(end_ms, ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.leases || caps.heartbeats
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::task::TaskKind;

    /// p1 runs workflow task t1 (3 s lease, renewed 1 s before expiry) from 10 ms.
    fn running() -> H {
        H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::WorkflowTask)
            .at(10)
            .grant(1, 1, o(1, 1))
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
    }

    /// The body ends at 2500 ms and its outcome is being recorded when
    /// p1.1, asked to stop at `asked_ms` with a 500 ms grace, cancels the
    /// attempt (its renewer with it); the lease runs out at 3010 ms.
    #[test]
    fn a_stop_that_cancels_an_attempt_owes_no_renewal_after_its_grace() {
        let mut spec = crate::testkit::spec();
        spec.promises.stop_grace_ms = 500;
        let asked_at = |asked_ms: u64| {
            running()
                .at(2_500)
                .finished(1, 1, o(1, 1), true)
                .at(asked_ms)
                .world(leasesim_vocab::history::WorldEvent::StopRequested { owner: o(1, 1) })
                .at(asked_ms + 500)
                .unpermit(o(1, 1), 1, 1)
                .at(5_000)
                .build()
        };
        // The grace is over at 3010 ms, at the expiry.
        crate::testkit::run_case_in("cancelled by the expiry", &spec, asked_at(2_510), PASS);
        // At 3011 ms, after it: the renewal was still owed.
        crate::testkit::run_case_in("cancelled after the expiry", &spec, asked_at(2_511), &[(NAME, Some(1))]);
    }

    cases! {
        renewed_in_time_and_heartbeating_passes:
            running().at(2_010).renew(1, 1, o(1, 1)).at(4_010).renew(1, 1, o(1, 1))
                .at(5_000).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(100_000).heartbeat(o(1, 1))
                .at(200_000).heartbeat(o(1, 1))
                .build()
            => PASS;
        lease_lost_without_a_renewal:
            running().at(3_010).released(1, 1, o(1, 1))
                .at(4_000).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1)), ("fenced-completion", Some(1))];
        // The body ends at 2500 ms, inside the margin; its outcome is still
        // being recorded (deadline 3500 ms) when the lease runs out at
        // 3010 ms, and no renewal came after 2010 ms.
        lease_lost_while_the_outcome_is_recorded:
            running().at(2_500).finished(1, 1, o(1, 1), true)
                .at(3_100).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => &[(NAME, Some(1))];
        lease_kept_while_the_outcome_is_recorded_passes:
            running().at(2_500).finished(1, 1, o(1, 1), true)
                .at(2_600).renew(1, 1, o(1, 1))
                .at(3_100).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        paused_owner_loses_its_lease_passes:
            running().at(1_000).paused(1).at(3_010).released(1, 1, o(1, 1))
                .at(4_000).resumed(1).finished(1, 1, o(1, 1), true).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        partitioned_owner_loses_its_lease_passes:
            running().at(1_000).partitioned(1).at(3_010).released(1, 1, o(1, 1))
                .at(4_000).rejoined(1).finished(1, 1, o(1, 1), true).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        clock_far_behind_excuses_a_late_renewal:
            H::new().up(o(1, 1)).offset(1, -1_500).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(3_010).released(1, 1, o(1, 1))
                .at(4_000).finished(1, 1, o(1, 1), true).unpermit(o(1, 1), 1, 1)
                .build()
            => PASS;
        body_started_inside_the_margin:
            // Granted at 10 ms, its lease ends at 3010 ms; 510 ms are left
            // at the start, inside the 1 s margin.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1)
                .at(2_500).started(1, 1, o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        body_started_after_a_confirming_renewal_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1)
                .at(2_400).renewed(1, 1, o(1, 1), 5_400)
                .at(2_500).started(1, 1, o(1, 1))
                .build()
            => PASS;
        body_started_by_a_clock_behind_passes:
            // 600 ms behind: by its clock 1110 ms were left, past the margin.
            H::new().up(o(1, 1)).offset(1, -600).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1)
                .at(2_500).started(1, 1, o(1, 1))
                .build()
            => PASS;
        silent_worker:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).at(120_000).heartbeat(o(1, 1)).build()
            => &[(NAME, None)];
        starting_worker_holding_nothing_passes:
            // Up for two minutes, still starting (no heartbeat, no task).
            H::new().up(o(1, 1)).at(120_000).heartbeat(o(1, 1)).build()
            => PASS;
        worker_leaving_stops_heartbeats_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1))
                .at(30_000).fact(leasesim_vocab::truth::Fact::Arrived { req: 900, from: leasesim_vocab::truth::Sender::Worker(o(1, 1)), request: leasesim_vocab::op::Op::Deregister { owner: o(1, 1) }, duplicate: false })
                .at(120_000).build()
            => PASS;
        // The scan of heartbeats is skipped until the earliest moment a
        // worker can be late (heartbeat gap here: 111 s); these hold the
        // skip to the moments a scan at every millisecond would report.
        worker_granted_a_task_long_after_it_came_up:
            H::new().up(o(1, 1)).created(2, TaskKind::Job)
                .at(150_000).grant(2, 1, o(1, 1))
                .at(150_010).heartbeat(o(1, 1)).build()
            => &[(NAME, None)];
        worker_silent_after_its_pause_ends:
            H::new().up(o(1, 1)).heartbeat(o(1, 1))
                .at(50_000).paused(1).at(200_000).resumed(1)
                .at(312_000).heartbeat(o(1, 1)).build()
            => &[(NAME, None)];
        worker_heartbeating_after_its_pause_ends_passes:
            H::new().up(o(1, 1)).heartbeat(o(1, 1))
                .at(50_000).paused(1).at(200_000).resumed(1)
                .at(300_000).heartbeat(o(1, 1)).at(400_000).heartbeat(o(1, 1)).build()
            => PASS;
        silent_worker_holding_a_task_it_never_announced:
            H::new().up(o(1, 1)).created(2, TaskKind::Job).at(10).grant(2, 1, o(1, 1))
                .at(120_000).heartbeat(o(1, 1)).build()
            => &[(NAME, None)];
    }

    /// A worker whose heartbeat round is `calls` calls (apalis: keep-alive,
    /// renewal, re-enqueue) heartbeats at 0 and at `next_ms`; `late` says
    /// whether that is past its bound: one interval (100 s), each call's
    /// deadline (10 s), and two hops (20 ms).
    fn round_of(calls: u32, next_ms: u64, late: bool) -> crate::Report {
        let mut spec = crate::testkit::spec();
        spec.promises.heartbeat_calls = calls;
        let history = H::new().up(o(1, 1)).heartbeat(o(1, 1)).at(next_ms).heartbeat(o(1, 1)).build();
        let expect: crate::testkit::Expect = if late { &[(NAME, None)] } else { PASS };
        crate::testkit::run_case_in(&format!("next heartbeat at {next_ms} ms, {calls} calls"), &spec, history, expect)
    }

    #[test]
    fn a_heartbeat_gap_is_judged_at_its_exact_bound() {
        // Three calls: 130.020 s is the bound, 130.021 s one ms past it.
        round_of(3, 130_020, false);
        round_of(3, 130_021, true);
        // One call: the same gaps are late; 110.020 s is its bound.
        round_of(1, 110_020, false);
        round_of(1, 110_021, true);
        round_of(1, 130_020, true);
        // Half a second late is late (a slack of a second once passed it).
        round_of(1, 110_500, true);
    }
}
