//! lease-revocation: a lease is taken from its holder only for a reason the
//! harness can justify from ground truth.
//!
//! Judged at every commit (store seam) that leaves a leased task no longer
//! held by its attempt, other than by that attempt's own outcome write. The
//! reasons, all from what the harness itself saw:
//!
//! - the lease had expired at store time (its committed expiry);
//! - for a heartbeat-owned task (no expiry), the holder's process was dead:
//!   killed (process control), or silent at the store for `dead_after_ms`
//!   (no heartbeat of it applied, and none of its requests reached the store
//!   before, for that long); a lease with an expiry outlives its holder;
//! - the holder released it itself (same-owner recovery): its body was not
//!   running or finalizing when it sent the request nor when the store
//!   applied it, and the grant was older than a claim answer can be when it
//!   sent the request;
//! - for a heartbeat-owned task, the holder deregistered (said it is leaving)
//!   and its attempt was not running or finalizing when the lease was taken;
//! - the holder handed it back itself, naming it (a worker returning its
//!   jobs as it shuts down): whether its body still ran then is
//!   `execution-exclusive`'s to judge.
//!
//! A revocation without a reason is a violation even when the fence then
//! keeps the old attempt's writes out: the owner lost work it still held.

use super::view::RequestView;
use super::{answer, commit, fact, lost_holder, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::{Fence, Owner};
use leasesim_vocab::op::Op;
use leasesim_vocab::task::Row;
use leasesim_vocab::truth::{Fact, Sender};

pub const NAME: &str = "lease-revocation";

/// Latency between a worker and the store seam, on top of clock offsets.
const CLOCK_SLACK_MS: u64 = 1_000;

#[derive(Default)]
pub struct LeaseRevocation {
    evaluations: u64,
}

/// Is the holder's own outcome write what ended its lease?
fn own_outcome(holder: &Fence, request: Option<&RequestView>) -> bool {
    let Some(r) = request else { return false };
    let fence = match &r.request {
        Op::Complete { fence } | Op::Fail { fence, .. } => fence,
        _ => return false,
    };
    fence == holder && r.from == Sender::Worker(holder.owner)
}

/// When `owner` was last seen alive at the store: its last applied
/// heartbeat, or else its first request.
fn last_sign_of_life(ctx: &Ctx, owner: Owner) -> Option<u64> {
    let o = ctx.view.owner(owner)?;
    o.last_heartbeat_ms.or(o.first_seen_ms)
}

/// When the transaction that `r` commits began, if a recovery statement of
/// it released `owner`'s tasks (`ReleaseOwners`).
fn sweep_began(ctx: &Ctx, r: &RequestView, owner: Owner) -> Option<u64> {
    let txn = match (&r.request, r.txn) {
        (Op::Commit { txn }, _) => *txn,
        (_, Some((txn, true))) => txn,
        _ => return None,
    };
    ctx.view.txns.get(&txn).filter(|t| t.releases.contains(&owner)).map(|t| t.opened_ms)
}

/// The owner's last sign of life at the store before `at`: its last
/// applied heartbeat then, or its first request (0: none).
fn silent_as_of(ctx: &Ctx, owner: Owner, at: u64) -> u64 {
    let Some(o) = ctx.view.owner(owner) else { return 0 };
    let beat = o.heartbeats_ms.iter().rev().find(|&&t| t < at).copied();
    beat.or(o.first_seen_ms.filter(|&t| t < at)).unwrap_or(0)
}

/// Why the holder's lease could be taken at `now`, or why it could not.
pub(super) fn justify(
    ctx: &Ctx,
    holder: &Fence,
    before: &Row,
    now: u64,
    request: Option<&RequestView>,
) -> Result<String, String> {
    let cfg = ctx.promises();
    if let Some(expiry) = before.lease_expiry_ms {
        if expiry <= now {
            return Ok(format!("its lease expired at {expiry} ms"));
        }
    }
    let owner = holder.owner;
    // A lease with an expiry is the engine's promise to its holder until
    // then: nothing but the expiry or the holder's own release may end it,
    // not even the holder's death (no engine path takes a leased kind from
    // a dead owner early; a reclaim that did would be a too-eager reclaim).
    let dead_may_lose = before.lease_expiry_ms.is_none();
    if let Some(killed) = ctx.view.killed(owner).filter(|&k| dead_may_lose && k <= now) {
        return Ok(format!("{owner} was killed at {killed} ms"));
    }
    let left = ctx.view.owner(owner).and_then(|o| o.deregistered_ms).filter(|&d| dead_may_lose && d <= now);
    if let Some(left) = left {
        // The owner said it is leaving and keeps nothing alive (graphile's
        // shutdown deletes its worker row, and a sweep frees its locks as
        // orphans). A reason only while the attempt is not running: a
        // shutdown that leaves before its jobs end hands them over live.
        if !ctx.view.active(holder, now) {
            return Ok(format!("{owner} deregistered at {left} ms and was not running it"));
        }
        return Err(format!("{owner} deregistered at {left} ms while its attempt was still running"));
    }
    let last = last_sign_of_life(ctx, owner);
    let silent_since = last.unwrap_or(0);
    if dead_may_lose && now.saturating_sub(silent_since) >= cfg.dead_after_ms {
        return Ok(format!("{owner} was silent at the store since {silent_since} ms"));
    }
    if let Some(began) = request.and_then(|r| sweep_began(ctx, r, owner)).filter(|_| dead_may_lose) {
        // A recovery transaction reads which owners are dead, then
        // releases their tasks by that list (graphile's sweep:
        // `recover_dead_worker_jobs(ids)`); a heartbeat between the two
        // does not undo its reason, which holds as of what it could read:
        // an owner silent for `dead_after_ms` when it began.
        let seen = silent_as_of(ctx, owner, began);
        if began.saturating_sub(seen) >= cfg.dead_after_ms {
            return Ok(format!(
                "{owner} was silent at the store since {seen} ms when the recovery transaction releasing it began at {began} ms"
            ));
        }
    }
    if let Some(r) = request.filter(|r| r.from == Sender::Worker(owner)) {
        if let Op::ReturnOwn { owner: by, tasks, .. } = &r.request {
            if *by == owner && tasks.contains(&holder.task) {
                return Ok(format!("{owner} handed it back itself"));
            }
        }
        if let Op::ReleaseOrphans { older_than_ms, .. } = r.request {
            // The owner listed what it runs just before the request reached
            // the store; its clock may be off by its offset. It may ask for
            // younger grants than the promised age (a stopping owner, which
            // starts nothing more, asks for every one).
            let orphan_age_ms = older_than_ms.min(promise::orphan_age_ms(cfg));
            // Once it deregistered, or its stop's grace ran out, it is
            // leaving: it may give back any task whose body no longer runs,
            // an attempt it cut short while it recorded its outcome included
            // (the harness cannot see that cut; the fence turns away
            // whatever the attempt still sends).
            let o = ctx.view.owner(owner);
            let left = o.and_then(|o| o.deregistered_ms).filter(|&d| d <= now);
            let grace_over = o.and_then(|o| o.stop_requested_ms).map(|s| s + cfg.stop_grace_ms).filter(|&g| g <= now);
            let body_runs = o.is_some_and(|o| o.bodies.contains(holder));
            if let (Some(since), false) = (left.or(grace_over), body_runs) {
                return Ok(format!(
                    "{owner} released it itself, leaving (deregistered, or its stop's grace over, at {since} ms), its body no longer running"
                ));
            }
            let listed = r.arrived_ms;
            let active = ctx.view.active(holder, listed) || ctx.view.active(holder, now);
            let granted = ctx.view.grants.get(holder).copied().unwrap_or(0);
            let skew = ctx.view.procs.get(&owner.proc).map_or(0, |p| p.offset_ms.unsigned_abs()) + CLOCK_SLACK_MS;
            if !active && listed + skew > granted + orphan_age_ms {
                return Ok(format!(
                    "{owner} released it itself, not running it, {} ms after the grant",
                    listed - granted.min(listed)
                ));
            }
        }
    }
    let lease = match before.lease_expiry_ms {
        Some(e) => format!("its lease runs until {e} ms"),
        None => "it is owned by heartbeat".to_string(),
    };
    let seen = match last {
        Some(at) => format!("{owner} was last seen alive at the store at {at} ms"),
        None => format!("{owner} never reached the store"),
    };
    Err(format!("{lease}, {seen} (dead after {} ms), and it did not release the task itself", cfg.dead_after_ms))
}

impl Checker for LeaseRevocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: a lease is taken from its holder only when it expired, the owner of a heartbeat-owned task was dead or silent for dead_after_ms, or the owner released it itself"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        let Some(commit) = commit(rec) else { return };
        let answered = answer(rec, ctx);
        let request = answered.as_ref().map(|a| a.request);
        // Named only for a violation: most commits revoke nothing.
        let by = || match (request, fact(rec)) {
            (Some(r), _) => format!("{} from {}", r.request.op_name(), r.from),
            (None, Some(Fact::Drift { .. })) => "a change outside any request".to_string(),
            _ => "an unknown request".to_string(),
        };
        for change in &commit.tasks {
            let Some(holder) = lost_holder(change) else { continue };
            if own_outcome(&holder, request) {
                continue;
            }
            self.evaluations += 1;
            let before = change.before.as_ref().expect("a lost holder had a row");
            if let Err(why) = justify(ctx, &holder, before, now, request) {
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{}: lease of attempt {} ({}) taken away at {now} ms by {}, but {why}",
                            holder.task,
                            holder.attempt,
                            holder.owner,
                            by()
                        ),
                    )
                    .fence(&holder),
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
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::ids::TxnId;
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::{Row, TaskKind, TaskState};
    use leasesim_vocab::testimony::{Event, ReleaseCause};
    use leasesim_vocab::truth::Sender;

    /// Job t1 (owned by heartbeat; dead after 200 s) run by p1.1 from
    /// 10 ms, p1.1's only heartbeat at 0 ms, p1.1 paused from 100 ms.
    /// p2.1's recovery transaction begins at `began` (its list of dead
    /// workers), p1.1 resumes and heartbeats at 200.2 s, and the
    /// transaction then releases p1.1's jobs by that list and commits at
    /// 200.4 s. graphile-recovery seed 9327832014: the sweep
    /// listed a paused worker, which heartbeated before the release.
    fn swept_after_a_late_heartbeat(began: u64) -> H {
        let (p, sweeper) = (o(1, 1), o(2, 1));
        let txn = TxnId { owner: sweeper, seq: 1 };
        let exec = |stmt: Op| Op::Exec { txn, stmt: Box::new(stmt), commit: false };
        let list = exec(Op::Other { what: "list-dead-workers".into(), by: Some(sweeper) });
        let release = exec(Op::ReleaseOwners { by: sweeper, owners: vec![p] });
        let released = Event::LeaseReleased { fence: fence(1, 1, p), cause: ReleaseCause::DeadOwner };
        let freed = |t: &mut Row| {
            t.state = TaskState::Ready;
            t.owner = None;
        };
        H::new()
            .up(p)
            .heartbeat(p)
            .up(sweeper)
            .created(1, TaskKind::Job)
            .begun(10, 1, 1, p)
            .at(100)
            .paused(1)
            .at(began)
            .answer(Sender::Worker(sweeper), list, Response::Rows { count: 1 }, vec![], &[])
            .at(200_200)
            .resumed(1)
            .heartbeat(p)
            .at(200_300)
            .answer(Sender::Worker(sweeper), release, Response::Released { tasks: 1 }, vec![], &[])
            .at(200_400)
            .answer(Sender::Worker(sweeper), Op::Commit { txn }, Response::Ack, vec![released], &[(1, &freed)])
    }

    /// Job t1 granted to p1.1 at 10 ms (its body started if `running`),
    /// p1.1 deregisters at 40 s, and p2.1's sweep releases p1.1's locks as
    /// orphans at 72 s, long before p1.1 could be silent for
    /// `dead_after_ms`.
    fn deregistered_then_swept(running: bool) -> H {
        let (p, sweeper) = (o(1, 1), o(2, 1));
        let h = H::new().up(p).up(sweeper).heartbeat(p).created(1, TaskKind::Job);
        let h = if running { h.begun(10, 1, 1, p) } else { h.at(10).grant(1, 1, p) };
        h.at(40_000)
            .heartbeat(p)
            .answer(Sender::Worker(p), Op::Deregister { owner: p }, Response::Rows { count: 1 }, vec![], &[])
            .at(72_000)
            .released_by(1, sweeper, Op::ReleaseOwners { by: sweeper, owners: vec![p] }, ReleaseCause::DeadOwner)
    }

    /// Job t1 runs on p1.1 from 10 ms; its body fails at 3 s and its lease
    /// check is still unanswered at the store (the outcome being recorded);
    /// p1.1 was asked to stop at 1 s (a 10 s grace in the test spec) and
    /// releases its own tasks at `at`, listing nothing running.
    fn stop_releases_at(at: u64) -> H {
        let p = o(1, 1);
        let h = H::new().up(p).heartbeat(p).created(1, TaskKind::Job).begun(10, 1, 1, p);
        let h = h.at(1_000).world(leasesim_vocab::history::WorldEvent::StopRequested { owner: p });
        let h =
            h.at(3_000).finished(1, 1, p, false).arrive(Sender::Worker(p), Op::LeaseValid { fence: fence(1, 1, p) }).0;
        let release = Op::ReleaseOrphans { owner: p, running: vec![], older_than_ms: 0, as_of_ms: at };
        h.at(at).released_by(1, p, release, ReleaseCause::Orphaned)
    }

    /// Judged with a finalization deadline of 20 s: the cut attempt's
    /// outcome could still be on its way until 23 s.
    #[test]
    fn a_stopping_owner_releases_its_own_task_once_its_grace_is_over() {
        let mut spec = crate::testkit::spec();
        spec.promises.finalize_deadline_ms = 20_000;
        // The stop's grace ran out at 11 s: the attempt was cut short, and
        // its owner, leaving, gives its task back.
        let history = stop_releases_at(11_000).at(12_000).end().build();
        crate::testkit::run_case_in("at the grace's end", &spec, history, PASS);
        // A millisecond sooner its outcome may still be on its way.
        let history = stop_releases_at(10_999).at(12_000).end().build();
        crate::testkit::run_case_in("a millisecond before", &spec, history, &[(NAME, Some(1))]);
    }

    cases! {
        // p1.1 silent 200.1 s when the sweep began: its reason holds.
        sweep_that_began_while_the_owner_was_dead_passes:
            swept_after_a_late_heartbeat(200_100).build()
            => PASS;
        // p1.1 silent 180 s when the sweep began, alive at its commit.
        sweep_that_began_while_the_owner_was_alive:
            swept_after_a_late_heartbeat(180_000).build()
            => &[(NAME, Some(1))];
        // graphile-recovery seed 9481116382: p1.1's claim answer was lost,
        // so it never ran t1; it deregistered as it shut down, and p2.1's
        // sweep freed its lock as an orphan 32 s later.
        deregistered_owners_unstarted_job_released_passes:
            deregistered_then_swept(false).build()
            => PASS;
        // A shutdown that leaves before its job ends: the job is handed
        // over while it still runs.
        deregistered_owners_running_job_released:
            deregistered_then_swept(true).build()
            => &[(NAME, Some(1))];
        expired_lease_reclaimed_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_010).released(1, 1, o(2, 1))
                .build()
            => PASS;
        lease_reclaimed_before_its_expiry:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(3_009).released(1, 1, o(2, 1))
                .build()
            => &[(NAME, Some(1))];
        killed_owners_lease_reclaimed_before_its_expiry:
            // A too-eager reclaim: p1 is dead, but its workflow lease (3 s
            // TTL in this world) runs until 3_010 ms; its death is no reason.
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(1_000).killed(o(1, 1))
                .at(3_009).released(1, 1, o(2, 1))
                .build()
            => &[(NAME, Some(1))];
        killed_owners_lease_reclaimed_at_its_expiry_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).created(1, TaskKind::WorkflowTask)
                .at(10).grant(1, 1, o(1, 1))
                .at(1_000).killed(o(1, 1))
                .at(3_010).released(1, 1, o(2, 1))
                .build()
            => PASS;
        heartbeat_owned_task_of_a_live_owner_reclaimed:
            // The b-machines shape: reclaim of "expired" leases takes a job
            // whose owner heartbeats on time.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1))
                .at(90_000).heartbeat(o(1, 1))
                .at(100_000).released(2, 1, o(2, 1))
                .build()
            => &[(NAME, Some(2))];
        silent_owner_released_passes:
            // p1 hangs (paused) and stays silent for dead_after_ms.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).paused(1)
                .at(100_000).heartbeat(o(2, 1))
                .at(200_000).released_by(2, o(2, 1), Op::ReleaseDead { by: o(2, 1) }, ReleaseCause::DeadOwner)
                .build()
            => PASS;
        owner_released_as_dead_one_ms_early:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).paused(1)
                .at(100_000).heartbeat(o(2, 1))
                .at(199_999).released_by(2, o(2, 1), Op::ReleaseDead { by: o(2, 1) }, ReleaseCause::DeadOwner)
                .build()
            => &[(NAME, Some(2))];
        killed_owner_released_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1))
                .at(50).killed(o(1, 1))
                .at(60).up(o(1, 2)).heartbeat(o(1, 2))
                .at(70).released_by(2, o(2, 1), Op::ReleaseDead { by: o(2, 1) }, ReleaseCause::DeadOwner)
                .build()
            => PASS;
        own_return_passes:
            // A worker shutting down hands back the job it holds, naming it.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(20).released_by(3, o(1, 1), Op::ReturnOwn { owner: o(1, 1), tasks: vec![3], interrupted: false }, ReleaseCause::Orphaned)
                .build()
            => PASS;
        return_of_a_task_it_does_not_name:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(20).released_by(3, o(1, 1), Op::ReturnOwn { owner: o(1, 1), tasks: vec![4], interrupted: false }, ReleaseCause::Orphaned)
                .build()
            => &[(NAME, Some(3))];
        live_owner_named_dead_by_a_sweep:
            // A sweep releases the jobs of owners it listed as dead; p1's
            // heartbeat reached the store 10 s before.
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1))
                .at(90_000).heartbeat(o(1, 1))
                .at(100_000).released_by(2, o(2, 1), Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] }, ReleaseCause::DeadOwner)
                .build()
            => &[(NAME, Some(2))];
        silent_owner_named_dead_by_a_sweep_passes:
            H::new().up(o(1, 1)).up(o(2, 1)).heartbeat(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).paused(1)
                .at(100_000).heartbeat(o(2, 1))
                .at(200_000).released_by(2, o(2, 1), Op::ReleaseOwners { by: o(2, 1), owners: vec![o(1, 1)] }, ReleaseCause::DeadOwner)
                .build()
            => PASS;
        own_orphan_released_passes:
            // The grant's answer never reached p1: it is not running t3.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(15_000).orphaned(3, o(1, 1), vec![])
                .build()
            => PASS;
        orphan_release_of_a_running_task:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1)).permit(o(1, 1), 3, 1).started(3, 1, o(1, 1))
                .at(15_000).orphaned(3, o(1, 1), vec![])
                .build()
            => &[(NAME, Some(3))];
        orphan_release_of_a_fresh_grant:
            // Its claim answer may still be on the way: too young to be an orphan.
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(3, TaskKind::Job)
                .at(10).grant(3, 1, o(1, 1))
                .at(5_000).orphaned(3, o(1, 1), vec![])
                .build()
            => &[(NAME, Some(3))];
        repair_takes_a_healthy_member_of_the_group:
            H::new().up(o(1, 1)).up(o(2, 1)).created_in(1, TaskKind::WorkflowTask, 7).created_in(2, TaskKind::Activity, 7)
                .at(10).grant(1, 1, o(1, 1)).grant(2, 1, o(2, 1))
                .at(3_100)
                .released_by(1, o(2, 1), Op::Repair { by: o(2, 1) }, ReleaseCause::Repair)
                .released_by(2, o(2, 1), Op::Repair { by: o(2, 1) }, ReleaseCause::Repair)
                .build()
            => &[(NAME, Some(2))];
    }
}
