//! claim-progress (liveness): a due task does not wait while a worker has
//! room for it.
//!
//! - After the heal, at every moment: a task that has been ready and due
//!   (its not-before time and its failure's backoff past, by the policy) for
//!   longer than the claim bound violates the invariant if some worker was up,
//!   running and connected, and had a free slot, during the whole bound.
//!   A slot is in use while a body runs, and while its outcome is being
//!   recorded (until the answer reaches the worker, at most the finalization
//!   deadline). Every moment is judged on its own: a worker that was full
//!   once is not excused for good.
//! - At any time: a long poll held at the store does not sit beside a task
//!   that is due at the store (the store must answer it as soon as one is).
//!
//! Judged from ground truth: the store's rows (store seam), bodies (task-body
//! seam), liveness (process control), held claims (store seam).

use super::{promise, Checker, Ctx, Violation};
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Owner, TaskId};
use leasesim_vocab::op::Op;
use leasesim_vocab::task::TaskState;
use leasesim_vocab::truth::{Fact, Sender};
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "claim-progress";

/// How long a held long poll may sit beside a due task.
const LONG_POLL_SLACK_MS: u64 = 100;

#[derive(Default)]
pub struct ClaimProgress {
    /// Per owner: the last moment all its slots were in use.
    last_full: BTreeMap<Owner, u64>,
    /// Owners that may have every slot in use: full when last looked at,
    /// or started up or given a body since. Only a body's start (and a
    /// process coming up) raises an owner's slots in use; time and every
    /// other record only lower them, so no other owner can be full.
    watch: BTreeSet<Owner>,
    /// Tasks already reported (only the first violation per task is kept).
    reported: BTreeSet<TaskId>,
    /// The millisecond last judged.
    judged_ms: Option<u64>,
    evaluations: u64,
}

impl ClaimProgress {
    /// Notes, for every owner watched, whether all its slots are in use now.
    fn note_fullness(&mut self, now: u64, ctx: &Ctx) {
        let concurrency = ctx.view.concurrency();
        let last_full = &mut self.last_full;
        self.watch.retain(|owner| {
            let full = ctx.view.owner(*owner).is_some_and(|o| o.alive() && ctx.view.busy_of(o, now) >= concurrency);
            if full {
                last_full.insert(*owner, now);
            }
            full
        });
    }

    /// A record that may raise an owner's slots in use puts it on watch
    /// (from the next record on, which sees it applied).
    fn watch(&mut self, rec: &Record) {
        match &rec.entry {
            Entry::Truth(Fact::BodyStarted { on, .. }) => {
                self.watch.insert(*on);
            }
            Entry::World(WorldEvent::ProcessUp { owner }) => {
                self.watch.insert(*owner);
            }
            _ => {}
        }
    }

    /// When task `id` became due, by the policy (not by the store's word):
    /// a task of a named queue only once no other task of it runs; a task
    /// given back by recovery only after the engine's recovery delay.
    fn due_ms(ctx: &Ctx, id: TaskId) -> Option<u64> {
        let t = ctx.view.task(id)?;
        let backoff = t.last_failure.map_or(0, |f| promise::retry_due_ms(ctx.promises(), &f));
        let recovery = if t.recovered { t.ready_since_ms.saturating_add(ctx.promises().recovery_delay_ms) } else { 0 };
        let queue = match t.row.spec.queue {
            Some(q) if ctx.view.queues_busy.contains(&q) => return None,
            Some(q) => ctx.view.queue_free_since.get(&q).copied().unwrap_or(0),
            None => 0,
        };
        Some(t.ready_since_ms.max(t.not_before_ms()).max(backoff).max(queue).max(recovery))
    }

    /// A worker that had room for a task throughout `[from, now]`.
    fn idle_owner(&self, ctx: &Ctx, from: u64, now: u64) -> Option<Owner> {
        let concurrency = ctx.view.concurrency();
        ctx.view.owners.keys().copied().find(|owner| {
            ctx.view.serving_throughout(*owner, from, now)
                && self.last_full.get(owner).is_none_or(|&full| full < from)
                && ctx.view.busy(*owner, now) < concurrency
        })
    }

    fn judge_due(&mut self, now: u64, heal: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let bound = ctx.spec.bounds.claim_bound_ms;
        // The idle owner depends on the moment only, not on the task: looked
        // for once per judgement (with hundreds of due tasks this look was
        // most of a campaign's time).
        let mut idle: Option<Option<Owner>> = None;
        for &id in &ctx.view.ready {
            if self.reported.contains(&id) {
                continue;
            }
            let Some(due) = Self::due_ms(ctx, id) else { continue };
            let since = due.max(heal);
            if now < since {
                continue;
            }
            // A due task after the heal: the predicate is "claimed within
            // the bound, or no worker had room all along".
            self.evaluations += 1;
            if now <= since + bound {
                continue;
            }
            let Some(owner) = *idle.get_or_insert_with(|| self.idle_owner(ctx, now - bound, now)) else { continue };
            self.reported.insert(id);
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{id}: due since {since} ms and still unclaimed at {now} ms although {owner} was up, \
                         connected and had a free slot from {} ms on (claim bound {bound} ms)",
                        now - bound
                    ),
                )
                .task(id),
            );
        }
    }

    fn judge_held_polls(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let held = ctx.view.requests.values().filter(|r| {
            matches!(r.request, Op::Claim { wait_ms, .. } if wait_ms > 0) && r.handed_ms.is_some() && r.answer.is_none()
        });
        // A held poll of an incarnation that deregistered is owed nothing.
        let left = |from: &Sender| matches!(from, Sender::Worker(o) if ctx.view.owner(*o).is_some_and(|v| v.deregistered_ms.is_some()));
        let held: Vec<_> = held.filter(|r| !left(&r.from)).collect();
        for r in held {
            let handed = r.handed_ms.expect("held polls were handed over");
            for &id in &ctx.view.ready {
                let Some(t) = ctx.view.task(id) else { continue };
                let due_at_store = t.row.retry_at_ms.max(t.ready_since_ms).max(handed);
                if t.row.state != TaskState::Ready
                    || now <= due_at_store + LONG_POLL_SLACK_MS
                    || self.reported.contains(&id)
                {
                    continue;
                }
                self.evaluations += 1;
                self.reported.insert(id);
                out.push(
                    Violation::new(
                        NAME,
                        now,
                        format!(
                            "t{id}: due at the store since {due_at_store} ms, but the long poll of {} held since {handed} ms \
                             had not claimed it at {now} ms",
                            r.from
                        ),
                    )
                    .task(id),
                );
            }
        }
    }
}

impl Checker for ClaimProgress {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "after heal, a due task is claimed within the claim bound while a live worker has had a free slot; a held long poll claims a due task at once"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        self.note_fullness(now, ctx);
        self.watch(rec);
        if let Some(leasesim_vocab::truth::Fact::BodyStarted { on, .. }) = super::fact(rec) {
            // The slot this body takes counts from now, not from the next record.
            if ctx.view.busy(*on, now) + 1 >= ctx.view.concurrency() {
                self.last_full.insert(*on, now);
            }
        }
        // Judged at the first record of each millisecond: a task or poll
        // that waits too long at one record of it already did at the first
        // (time alone makes it late; a claim or answer only ends the wait).
        if self.judged_ms == Some(now) {
            return;
        }
        self.judged_ms = Some(now);
        if let Some(heal) = ctx.view.heal_ms {
            self.judge_due(now, heal, ctx, out);
        }
        self.judge_held_polls(now, ctx, out);
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.watch.extend(ctx.view.owners.keys().copied());
        self.note_fullness(end_ms, ctx);
        self.judge_due(end_ms, ctx.view.heal_or(end_ms), ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, H, PASS};
    use leasesim_vocab::faults::FaultKind;
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::task::{TaskKind, TaskSpec};
    use leasesim_vocab::testimony::{Event, ReleaseCause};
    use leasesim_vocab::truth::Fact;
    use leasesim_vocab::truth::Sender;

    /// p1.1 gives back task `id`, started (`interrupted`) or not.
    fn returned(id: u64, interrupted: bool) -> Op {
        Op::ReturnOwn { owner: o(1, 1), tasks: vec![id], interrupted }
    }

    /// Given back at 200 ms by an interrupted return, under a recovery
    /// delay of 2000 ms: due at 2200 ms, so unclaimed at 3100 ms is on time
    /// (the claim bound is 1 s), and at 3201 ms it is not.
    #[test]
    fn an_interrupted_return_waits_out_the_recovery_delay() {
        let returned_at_200 = || {
            H::new()
                .up(o(1, 1))
                .heartbeat(o(1, 1))
                .created(1, TaskKind::Job)
                .at(10)
                .grant(1, 1, o(1, 1))
                .at(100)
                .heal()
                .at(200)
                .released_by(1, o(1, 1), returned(1, true), ReleaseCause::Orphaned)
        };
        let spec = crate::testkit::spec_delaying_recovery();
        let on_time = returned_at_200().at(3_100).end().build();
        crate::testkit::run_case_in("unclaimed within the delay and the bound", &spec, on_time, PASS);
        let late = returned_at_200().at(3_201).end().build();
        crate::testkit::run_case_in("unclaimed past the delay and the bound", &spec, late, &[(NAME, Some(1))]);
    }

    /// p1.1 (two slots) full until 200 ms and again from 1000 to 1500 ms;
    /// t4 is due from the heal at 100 ms and never claimed.
    fn refilled() -> H {
        let p = o(1, 1);
        H::new()
            .up(p)
            .created(1, TaskKind::Job)
            .created(2, TaskKind::Job)
            .created(3, TaskKind::Job)
            .created(4, TaskKind::Job)
            .begun(10, 1, 1, p)
            .begun(10, 2, 1, p)
            .at(100)
            .heal()
            .ended_ok(200, 1, 1, p)
            .begun(1_000, 3, 1, p)
            .ended_ok(1_500, 3, 1, p)
    }

    /// p1.1 (two slots) runs t1 and t2 from 10 ms; the heal is at 100 ms;
    /// t1's body returns at 200 ms and its completion is refused for
    /// `reason` by a fault; t2 runs on. t3 is due from the heal.
    fn outcome_refused(reason: Refusal) -> H {
        let p = o(1, 1);
        let h = H::new()
            .up(p)
            .created(1, TaskKind::Job)
            .created(2, TaskKind::Job)
            .created(3, TaskKind::Job)
            .begun(10, 1, 1, p)
            .begun(10, 2, 1, p)
            .at(100)
            .heal()
            .at(200)
            .finished(1, 1, p, true);
        refuse_completion(h, reason)
    }

    /// t1's completion arrives from p1.1 and a fault refuses it.
    fn refuse_completion(h: H, reason: Refusal) -> H {
        let p = o(1, 1);
        let (h, req) = h.arrive(Sender::Worker(p), Op::Complete { fence: fence(1, 1, p) });
        h.fact(Fact::Refused { req, response: Response::Rejected { reason }, fault: Some(FaultKind::LockTimeout) })
    }

    /// After a retryable refusal the engine tries again at 300 ms (refused
    /// again); a heartbeat at 1199 ms samples the slots just before t1's
    /// finalization deadline (1000 ms) runs out; at 1200 ms it gives up.
    fn tried_again_until_the_deadline() -> H {
        let p = o(1, 1);
        refuse_completion(outcome_refused(Refusal::LockTimeout).at(300), Refusal::LockTimeout)
            .at(1_199)
            .heartbeat(p)
            .at(1_200)
            .ev(Event::FinalizeTimedOut { fence: fence(1, 1, p) })
            .unpermit(p, 1, 1)
    }

    fn job_at(not_before_ms: u64) -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms, queue: None }
    }

    cases! {
        // An engine that tries an outcome again after a retryable refusal
        // (`outcome_retry`) keeps the slot until a final answer or the
        // finalization deadline (a-index-builds, guided seed
        // 8771241161599496225: the slot was read as free from the refusal on).
        slot_kept_after_a_retryable_refusal_passes:
            tried_again_until_the_deadline().at(1_250).end().build()
            => PASS;
        // (outcome-kept also fires: the engine stopped trying at 300 ms.)
        slot_free_once_the_deadline_ran_out:
            tried_again_until_the_deadline().at(2_201).end().build()
            => &[(crate::outcome_kept::NAME, Some(1)), (NAME, Some(3))];
        slot_free_after_a_final_refusal:
            outcome_refused(Refusal::NotOwner).unpermit(o(1, 1), 1, 1).at(1_199).heartbeat(o(1, 1))
                .at(1_250).end().build()
            => &[(NAME, Some(3))];
        claimed_within_bound_after_heal_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .attempt_ok(1_100, 1, 1, o(1, 1))
                .at(20_000).end().build()
            => PASS;
        starved_before_heal_counts_from_heal:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(5_000).heal()
                .attempt_ok(5_900, 1, 1, o(1, 1))
                .at(20_000).end().build()
            => PASS;
        due_task_unclaimed_with_a_free_slot:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .at(1_101).end().build()
            => &[(NAME, Some(1))];
        scheduled_task_waits_for_its_time_passes:
            H::new().up(o(1, 1)).created_as(1, job_at(5_000), job_at(5_000))
                .at(100).heal()
                .at(5_500).end().build()
            => PASS;
        schedule_deferred_by_the_engine:
            // The application asked for no delay; the engine wrote one, so
            // the row's own not-before time would excuse the wait.
            H::new().up(o(1, 1)).created_as(1, job_at(0), job_at(50_000))
                .at(100).heal()
                .at(1_101).end().build()
            => &[(NAME, Some(1))];
        failed_task_unclaimed_after_its_backoff:
            H::new().up(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).finished(2, 1, o(1, 1), false).failed(2, 1, o(1, 1), 1, Some(1_100)).unpermit(o(1, 1), 2, 1)
                .at(200).heal()
                .at(2_101).end().build()
            => &[(NAME, Some(2))];
        retry_time_committed_late_does_not_excuse:
            // The store committed 9100 instead of the promised 1100.
            H::new().up(o(1, 1)).created(2, TaskKind::Job)
                .at(10).grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).finished(2, 1, o(1, 1), false).failed(2, 1, o(1, 1), 1, Some(9_100)).unpermit(o(1, 1), 2, 1)
                .at(200).heal()
                .at(2_101).end().build()
            => &[(NAME, Some(2))];
        both_slots_busy_is_not_starvation:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).heal()
                .at(3_000).end().build()
            => PASS;
        full_once_does_not_excuse_for_good:
            // Both slots were busy until 200 ms; from then on one is free.
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .grant(2, 1, o(1, 1)).permit(o(1, 1), 2, 1).started(2, 1, o(1, 1))
                .at(100).heal()
                .at(200).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(1_201).end().build()
            => &[(NAME, Some(3))];
        // Full until 200 ms, then full again from 1000 to 1500 ms (a body
        // started): the wait of t4 is excused while the end of the second
        // fill is inside the bound (1 s), and judged once it is not. The
        // first case fails if a body's start does not put its owner back
        // on watch (its last full moment would be the start, 1000 ms).
        full_again_inside_the_bound_passes:
            refilled().at(2_400).end().build()
            => PASS;
        full_again_before_the_bound_does_not_excuse:
            refilled().at(2_600).end().build()
            => &[(NAME, Some(4))];
        paused_worker_is_not_starvation:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(100).heal()
                .at(500).paused(1)
                .at(3_000).end().build()
            => PASS;
        worker_restarted_at_heal_never_claims:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(50).killed(o(1, 1))
                .at(100).heal()
                .at(500).up(o(1, 2))
                .at(1_501).end().build()
            => &[(NAME, Some(1))];
        unstarted_return_is_due_at_once:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::Job)
                .at(10).grant(1, 1, o(1, 1))
                .at(100).heal()
                .at(200).released_by(1, o(1, 1), returned(1, false), ReleaseCause::Orphaned)
                .at(1_201).end().build()
            => &[(NAME, Some(1))];
        held_long_poll_beside_a_due_task:
            {
                let (h, req) = H::new().up(o(1, 1))
                    .arrive(Sender::Worker(o(1, 1)), Op::Claim { owner: o(1, 1), max: 1, wait_ms: 5_000 });
                h.fact(leasesim_vocab::truth::Fact::Handed { req }).at(10).created(1, TaskKind::Job).at(500).heartbeat(o(1, 1)).build()
            }
            => &[(NAME, Some(1))];
    }
}
