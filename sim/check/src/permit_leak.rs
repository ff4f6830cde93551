//! no-permit-leak: what a worker says of its permits (testimony) holds up.
//! Permits in use never exceed the configured concurrency; an attempt's
//! permit comes back within the finalization deadline (plus slack) after its
//! body returned; a permit is never given back while its body still runs,
//! and no body runs without one.
//!
//! The other half: a permit the worker says it gave back is free again. An
//! engine that promises its claims fill every free permit
//! (`Promises::claim_fills_free_permits`) asks, in each claim, for as many
//! tasks as it says it has permits free, up to `claim_batch_max`; a claim
//! that asks for fewer shows a permit said to be released and never
//! returned (the worker would run fewer and fewer tasks, and then none).
//!
//! The permits are the engine's testimony (`PermitAcquired` /
//! `PermitReleased`); the body's start and end come from the task-body seam,
//! a claim's size from the store seam (as it arrived, at most one hop after
//! it was sent).

use super::{fact, Checker, Ctx, NextDue, Violation};
use leasesim_vocab::history::{Entry, Record};
use leasesim_vocab::ids::{Owner, TaskId};
use leasesim_vocab::op::Op;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::testimony::Event;
use leasesim_vocab::truth::{Fact, Sender, HOP_MAX_MS, TIMER_ROUNDING_MS};
use std::collections::BTreeMap;

pub const NAME: &str = "no-permit-leak";

#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// When the attempt's body returned (the release clock starts).
    finished_ms: Option<u64>,
    /// Already judged (reported or exempted).
    judged: bool,
}

#[derive(Default)]
pub struct PermitLeak {
    held: BTreeMap<(Owner, TaskId, u32), Held>,
    /// Per owner, when it said it released a permit in the last hop and how
    /// many it held just before: a claim arriving now was sent at most a
    /// hop earlier, holding at most the most of these.
    released: BTreeMap<Owner, Vec<(u64, u32)>>,
    /// No returned body's permit is past its release deadline before this.
    next_due: NextDue,
    evaluations: u64,
}

impl PermitLeak {
    /// How long a permit may stay held after its body returned.
    fn allowed_ms(ctx: &Ctx) -> u64 {
        ctx.promises().finalize_deadline_ms + TIMER_ROUNDING_MS + ctx.spec.bounds.permit_release_slack_ms
    }

    /// Judges every held permit whose release deadline is behind `now`.
    fn deadlines(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        if !self.next_due.passed(now) {
            return;
        }
        let allowed = Self::allowed_ms(ctx);
        let open = self.held.values().filter(|h| !h.judged).filter_map(|h| h.finished_ms).map(|f| f + allowed);
        self.next_due.looked(open.filter(|&d| d >= now).min());
        for (&(owner, task, attempt), held) in self.held.iter_mut() {
            let Some(finished) = held.finished_ms else {
                continue;
            };
            if held.judged {
                continue;
            }
            let deadline = finished + allowed;
            if now <= deadline {
                continue;
            }
            self.evaluations += 1;
            held.judged = true;
            if ctx.view.killed(owner).is_some_and(|k| k <= deadline) {
                continue;
            }
            if ctx.view.paused_between(owner.proc, finished, deadline) {
                continue;
            }
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{task}: permit of attempt {attempt} ({owner}) still held at {now} ms, \
                         {} ms after its body returned at {finished} ms (allowed {allowed} ms)",
                        now - finished
                    ),
                )
                .task(task)
                .attempt(attempt)
                .process(owner),
            );
        }
    }

    fn held_now(&self, owner: Owner) -> u32 {
        self.held.keys().filter(|(o, _, _)| *o == owner).count() as u32
    }

    fn note_release(&mut self, owner: Owner, now: u64) {
        let held_before = self.held_now(owner);
        let recent = self.released.entry(owner).or_default();
        recent.retain(|&(at_ms, _)| at_ms + HOP_MAX_MS >= now);
        recent.push((now, held_before));
    }

    /// A claim of `owner` for `max` tasks arrived at `now`: did it ask for
    /// every permit the owner said it had free when it sent it?
    fn judge_claim(&mut self, owner: Owner, max: u32, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let cfg = ctx.promises();
        let sent_ms = now.saturating_sub(HOP_MAX_MS);
        // A pause on the way stretches the trip; a killed sender's claim
        // speaks for nobody.
        if !cfg.claim_fills_free_permits
            || ctx.view.killed(owner).is_some()
            || ctx.view.paused_between(owner.proc, sent_ms, now)
        {
            return;
        }
        self.evaluations += 1;
        // Between the send and now the owner only gave permits back (it
        // takes new ones from this claim's answer), so it held at most the
        // most it held at a release since `sent_ms`, or what it holds now.
        let recent = self.released.get(&owner).into_iter().flatten();
        let held_before = recent.filter(|&&(at_ms, _)| at_ms >= sent_ms).map(|&(_, held)| held).max();
        let held = held_before.unwrap_or(0).max(self.held_now(owner));
        let owed = cfg.concurrency.saturating_sub(held).min(cfg.claim_batch_max);
        if max >= owed {
            return;
        }
        let message = format!(
            "a claim of {owner} at {now} ms asks for {max} tasks, but it said it held at most {held} of its {} permits \
             (claim_batch_max {}): fewer than it says are free (a permit given back but not returned, or fewer permits than its concurrency)",
            cfg.concurrency, cfg.claim_batch_max
        );
        out.push(Violation::new(NAME, now, message).process(owner));
    }
}

impl Checker for PermitLeak {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "worker testimony, cross-checked at the body and store seams: permits never exceed concurrency, come back within the finalize deadline + slack after the body returns, are held while it runs, and a permit given back is asked for again by the next claim"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        // Time passed: judge the deadlines before this record changes anything.
        self.deadlines(now, ctx, out);
        match &rec.entry {
            Entry::Engine(Event::PermitAcquired { owner, task, attempt }) => {
                self.evaluations += 1;
                let concurrency = ctx.promises().concurrency;
                let in_use = self.held_now(*owner) + 1;
                if in_use > concurrency {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{task}: {owner} holds {in_use} permits after acquiring one for attempt {attempt}, \
                                 more than its concurrency {concurrency}"
                            ),
                        )
                        .task(*task)
                        .attempt(*attempt)
                        .process(*owner),
                    );
                }
                self.held.insert((*owner, *task, *attempt), Held::default());
            }
            Entry::Engine(Event::PermitReleased { owner, task, attempt }) => {
                self.evaluations += 1;
                let fence = leasesim_vocab::ids::Fence { task: *task, attempt: *attempt, owner: *owner };
                if let Some(body) = ctx.view.bodies.get(&fence).filter(|b| b.ended_ms.is_none()) {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{task}: {owner} says it released the permit of attempt {attempt} at {now} ms, \
                                 but that body still runs (since {} ms)",
                                body.started_ms
                            ),
                        )
                        .fence(&fence),
                    );
                }
                self.note_release(*owner, now);
                self.held.remove(&(*owner, *task, *attempt));
            }
            // Its permits vanish with it (killed or exited); no release will come.
            Entry::World(w) => {
                if let Some(owner) = w.gone() {
                    self.held.retain(|(o, _, _), _| *o != owner);
                    self.released.remove(&owner);
                }
            }
            _ => {}
        }
        match fact(rec) {
            Some(Fact::Arrived {
                from: Sender::Worker(owner),
                request: Op::Claim { max, .. },
                duplicate: false,
                ..
            }) => self.judge_claim(*owner, *max, now, ctx, out),
            Some(Fact::BodyEnded { fence, .. }) => {
                if let Some(held) = self.held.get_mut(&(fence.owner, fence.task, fence.attempt)) {
                    let finished_ms = *held.finished_ms.get_or_insert(now);
                    self.next_due.set(finished_ms + Self::allowed_ms(ctx));
                }
            }
            Some(Fact::BodyStarted { fence, on, .. }) => {
                self.evaluations += 1;
                if !self.held.contains_key(&(*on, fence.task, fence.attempt)) {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{}: the body of attempt {} started on {on} at {now} ms without a permit held for it",
                                fence.task, fence.attempt
                            ),
                        )
                        .fence(fence),
                    );
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        // Killed owners' permits were dropped at the kill: what is left is held
        // by live owners.
        self.deadlines(end_ms, ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.permits
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, judged_at, o, owner_of, run_case, three_begun, H, PASS};
    use leasesim_vocab::op::Op;
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::truth::{Sender, HOP_MAX_MS};

    /// t1 granted to p1.1 at 10 ms with its permit; its body runs 10..100 ms.
    fn held() -> H {
        H::new()
            .up(o(1, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .granted(1, 1, o(1, 1), None)
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(100)
            .finished(1, 1, o(1, 1), true)
    }

    /// Each permit kept too long is judged at the first record past its own
    /// deadline, also after a look that found only another one due.
    #[test]
    fn each_deadline_is_judged_at_the_first_record_past_it() {
        let on = owner_of;
        // Bodies return at 100, 1500 and 1000 ms and complete; no permit comes back.
        let h = three_begun().at(100).finished(1, 1, on(1), true).completed(1, 1, on(1)).callback(1, 1, on(1));
        let h = h.at(1_000).finished(3, 1, on(3), true).completed(3, 1, on(3)).callback(3, 1, on(3));
        let mut h = h.at(1_500).finished(2, 1, on(2), true).completed(2, 1, on(2)).callback(2, 1, on(2));
        for at_ms in (1_600..=6_000).step_by(50) {
            h = h.at(at_ms).heartbeat(o(1, 1)).heartbeat(o(2, 1));
        }
        let expect = &[(NAME, Some(1)), (NAME, Some(2)), (NAME, Some(3))];
        let report = run_case("three permits", h.build(), expect);
        assert_eq!(judged_at(&report), vec![(Some(1), 1_650), (Some(2), 3_050), (Some(3), 2_550)]);
    }

    /// With no slack, the bound is the engine's own: its finalization
    /// deadline from the body's return (the built-in scenarios).
    #[test]
    fn a_permit_is_judged_at_the_finalization_deadline_exactly() {
        let mut spec = crate::testkit::spec();
        spec.bounds.permit_release_slack_ms = 0;
        let released_at = |at: u64| {
            held()
                .at(at)
                .completed(1, 1, o(1, 1))
                .callback(1, 1, o(1, 1))
                .unpermit(o(1, 1), 1, 1)
                .at(5_000)
                .end()
                .build()
        };
        // The body returned at 100 ms; the deadline is 1000 ms, and its
        // timer may read a millisecond late (TIMER_ROUNDING_MS).
        crate::testkit::run_case_in("at the deadline", &spec, released_at(1_101), PASS);
        crate::testkit::run_case_in("a millisecond past it", &spec, released_at(1_102), &[(NAME, Some(1))]);
    }

    cases! {
        permit_released_in_time_passes:
            // deadline 1000 (+ 1 of timer rounding) + slack 500 after 100 ms: 1601 ms
            held().at(1_601).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(5_000).end().build()
            => PASS;
        permit_released_late_is_a_leak:
            held().at(1_602).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(5_000).end().build()
            => &[(NAME, Some(1))];
        permit_never_released_is_a_leak_at_end:
            held().at(9_000).end().build()
            => &[(NAME, Some(1)), ("outcome-kept", Some(1))];
        permits_beyond_concurrency_leak:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).created(3, TaskKind::Job)
                .at(10).permit(o(1, 1), 1, 1).permit(o(1, 1), 2, 1).permit(o(1, 1), 3, 1)
                .build()
            => &[(NAME, Some(3))];
        permit_given_back_while_the_body_runs:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1))
                .at(50).unpermit(o(1, 1), 1, 1)
                .at(100).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1))
                .at(5_000).end().build()
            => &[(NAME, Some(1))];
        body_without_a_permit:
            H::new().up(o(1, 1)).created(1, TaskKind::Job)
                .at(10).granted(1, 1, o(1, 1), None).started(1, 1, o(1, 1))
                .at(100).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1))
                .at(5_000).end().build()
            => &[(NAME, Some(1))];
        killed_owner_permit_is_not_a_leak:
            held().at(500).killed(o(1, 1))
                .at(2_000).up(o(1, 2)).orphaned(1, o(1, 1), vec![])
                .granted(1, 2, o(1, 2), None).permit(o(1, 2), 1, 2).started(1, 2, o(1, 2))
                .at(2_100).finished(1, 2, o(1, 2), true).completed(1, 2, o(1, 2)).callback(1, 2, o(1, 2)).unpermit(o(1, 2), 1, 2)
                .at(9_000).end().build()
            => PASS;
        paused_owner_is_exempt:
            held().at(200).paused(1)
                .at(8_000).resumed(1)
                .completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(9_000).end().build()
            => PASS;
    }

    /// The cases' spec, with the promise that claims fill every free permit.
    fn filling() -> crate::Spec {
        let mut spec = crate::testkit::spec();
        spec.promises.claim_fills_free_permits = true;
        spec
    }

    /// t1 granted to p1.1 at 10 ms by a claim for both its permits; its
    /// body starts then.
    fn running() -> H {
        H::new()
            .up(o(1, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .granted_asking(2, 1, 1, o(1, 1), None)
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
    }

    /// `running`; the body returns at 100 ms, the attempt completes and
    /// gives its permit back at 200 ms; p1.1 then claims `max` tasks,
    /// arriving at `arrives_ms` (if `paused`, its process paused on the way,
    /// 5..1 ms before).
    fn claims_after_a_release(max: u32, arrives_ms: u64, paused: bool) -> H {
        let h = running()
            .at(100)
            .finished(1, 1, o(1, 1), true)
            .at(200)
            .completed(1, 1, o(1, 1))
            .callback(1, 1, o(1, 1))
            .unpermit(o(1, 1), 1, 1);
        let h = if paused { h.at(arrives_ms - 5).paused(1).at(arrives_ms - 1).resumed(1) } else { h };
        h.at(arrives_ms).arrive(Sender::Worker(o(1, 1)), claim(max)).0
    }

    fn claim(max: u32) -> Op {
        Op::Claim { owner: o(1, 1), max, wait_ms: 0 }
    }

    #[test]
    fn claims_fill_every_free_permit() {
        let short: crate::testkit::Expect = &[(NAME, None)];
        let table: [(&str, H, crate::testkit::Expect); 6] = [
            // Both permits free again: the claim asks for both.
            ("every free permit asked for", claims_after_a_release(2, 300, false), PASS),
            // It said it gave its permit back, and asks for one task of two.
            ("one returned permit not asked for", claims_after_a_release(1, 300, false), short),
            // Within a hop of the release it may have been sent while the
            // permit was still held.
            ("sent before the release", claims_after_a_release(1, 200 + HOP_MAX_MS, false), PASS),
            ("one hop and a millisecond after it", claims_after_a_release(1, 201 + HOP_MAX_MS, false), short),
            // A pause on the way stretches the trip.
            ("across a pause", claims_after_a_release(1, 300, true), PASS),
            // One permit held, one free: one task asked for.
            ("the free permit asked for", running().at(50).arrive(Sender::Worker(o(1, 1)), claim(1)).0, PASS),
        ];
        for (name, history, expect) in table {
            let history = history.at(5_000).end().build();
            crate::testkit::run_case_in(name, &filling(), history, expect);
        }
    }
}
