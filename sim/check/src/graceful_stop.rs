//! graceful-stop: a process asked to stop leaves as it promised, neither
//! early nor late, and gives back what it held.
//!
//! Asked to stop at `s` (the world's `StopRequested`), an engine with
//! `Capabilities::graceful_stop` promises:
//! - **never early:** it lets a running attempt go on for the whole grace
//!   (`Promises::stop_grace_ms`): no body of it is cut short before
//!   `s + grace` (a body dropped, not returned, at the task-body seam);
//! - **never late:** it has exited by `s + grace + 2 * rpc_timeout_ms` (the
//!   grace, then its deregistration and its release, each one call under
//!   the RPC deadline), unless it was killed first or paused on the way;
//! - **nothing left running:** when it exits, no body of it still runs and
//!   (from its testimony) it holds no permit;
//! - **nothing kept:** it does not exit holding a task leased to it without
//!   having sent a release of its own tasks since `s`, unless it was cut off
//!   or the store was down (a release that reached the store is judged for
//!   what it did by `store-reply`);
//! - **never taken after leaving:** the store grants nothing to an
//!   incarnation whose deregistration it applied.
//!
//! Judged from ground truth (process control, the task-body seam, the store
//! seam); permits from testimony.

use super::{answer, granted, Checker, Ctx, Violation};
use crate::kinds::Kinds;
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Owner, TaskId};
use leasesim_vocab::op::Op;
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::testimony::Event;
use leasesim_vocab::truth::{Fact, Sender, TIMER_ROUNDING_MS};
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "graceful-stop";

#[derive(Debug, Clone, Default)]
struct Stopping {
    asked_ms: u64,
    /// A release of its own tasks reached the store since it was asked.
    released: bool,
    /// Judged for lateness already (or excused).
    judged_late: bool,
}

#[derive(Default)]
pub struct GracefulStop {
    stopping: BTreeMap<Owner, Stopping>,
    /// Permits each owner says it holds (testimony).
    permits: BTreeMap<Owner, BTreeSet<(TaskId, u32)>>,
    evaluations: u64,
}

impl GracefulStop {
    /// The latest a stopped process may still be up.
    fn exit_by_ms(s: &Stopping, ctx: &Ctx) -> u64 {
        let p = ctx.promises();
        // Three timers in a row: the grace, then each call's deadline.
        s.asked_ms + p.stop_grace_ms + 2 * p.rpc_timeout_ms + 3 * TIMER_ROUNDING_MS
    }

    /// Every stopping owner still up past its exit deadline.
    fn deadlines(&mut self, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        for (owner, s) in self.stopping.iter_mut().filter(|(_, s)| !s.judged_late) {
            let by = Self::exit_by_ms(s, ctx);
            if now <= by {
                continue;
            }
            s.judged_late = true;
            self.evaluations += 1;
            let gone = ctx.view.killed(*owner).is_some_and(|k| k <= by);
            if gone || ctx.view.paused_between(owner.proc, s.asked_ms, by) {
                continue;
            }
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "{owner}: asked to stop at {} ms and still up at {now} ms (it promised to exit by {by} ms: \
                         a grace of {} ms and two calls of {} ms)",
                        s.asked_ms,
                        ctx.promises().stop_grace_ms,
                        ctx.promises().rpc_timeout_ms
                    ),
                )
                .process(*owner),
            );
        }
    }

    /// A body of `on` was dropped before it returned.
    fn body_stopped(&mut self, now: u64, fence: leasesim_vocab::ids::Fence, on: Owner, ctx: &Ctx) -> Option<Violation> {
        let s = self.stopping.get(&on)?;
        if ctx.view.killed(on).is_some() {
            return None;
        }
        self.evaluations += 1;
        let grace_end = s.asked_ms + ctx.promises().stop_grace_ms;
        (now < grace_end).then(|| {
            Violation::new(
                NAME,
                now,
                format!(
                    "t{}: attempt {} cut short on {on} at {now} ms, before the stop's grace ran out at {grace_end} ms \
                     (asked to stop at {} ms)",
                    fence.task, fence.attempt, s.asked_ms
                ),
            )
            .fence(&fence)
        })
    }

    /// `owner` exited on its own: what did it leave behind?
    fn exited(&mut self, now: u64, owner: Owner, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(s) = self.stopping.get(&owner) else { return };
        self.evaluations += 1;
        let v = &ctx.view;
        if let Some(fence) = v.owner(owner).and_then(|o| o.bodies.iter().next()) {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!("{owner}: exited at {now} ms after a stop with t{}'s body still running", fence.task),
                )
                .fence(fence),
            );
        }
        if let Some((task, attempt)) = self.permits.get(&owner).and_then(|p| p.iter().next()) {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!("{owner}: exited at {now} ms after a stop still holding the permit of t{task}"),
                )
                .task(*task)
                .attempt(*attempt)
                .process(owner),
            );
        }
        let held: Vec<TaskId> =
            v.leased.iter().filter(|id| v.task(**id).is_some_and(|t| t.row.owner == Some(owner))).copied().collect();
        let cut_off = v.procs.get(&owner.proc).is_some_and(|p| p.partitioned_between(s.asked_ms, now));
        let store_down = v.store_down.iter().any(|&(from, to)| from <= now && to.is_none_or(|t| t >= s.asked_ms));
        if let Some(task) = held.first().filter(|_| !s.released && !cut_off && !store_down) {
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{task}: {owner} exited at {now} ms after a stop with {} task(s) still leased to it and no \
                         release of its own sent since it was asked at {} ms",
                        held.len(),
                        s.asked_ms
                    ),
                )
                .task(*task)
                .process(owner),
            );
        }
    }

    fn on_engine(&mut self, e: &Event) {
        match e {
            Event::PermitAcquired { owner, task, attempt } => {
                self.permits.entry(*owner).or_default().insert((*task, *attempt));
            }
            Event::PermitReleased { owner, task, attempt } => {
                if let Some(p) = self.permits.get_mut(owner) {
                    p.remove(&(*task, *attempt));
                }
            }
            _ => {}
        }
    }
}

impl Checker for GracefulStop {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "process control, body and store seams: a process asked to stop cuts no body short before its grace, exits by grace + two RPC deadlines, leaves no body or permit behind, gives back its tasks, and is granted nothing once deregistered"
    }

    fn reads(&self) -> Kinds {
        Kinds::WORLD.or(Kinds::BODY_STOPPED).or(Kinds::ARRIVED).or(Kinds::ANSWERED).or(Kinds::ENGINE)
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.graceful_stop
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        self.deadlines(now, ctx, out);
        match &rec.entry {
            Entry::World(WorldEvent::StopRequested { owner }) => {
                self.stopping.entry(*owner).or_insert(Stopping { asked_ms: now, ..Stopping::default() });
            }
            Entry::World(WorldEvent::ProcessExited { owner }) => self.exited(now, *owner, ctx, out),
            Entry::World(WorldEvent::ProcessKilled { owner }) => {
                self.permits.remove(owner);
            }
            Entry::Engine(e) => self.on_engine(e),
            Entry::Truth(Fact::BodyStopped { fence, on }) => out.extend(self.body_stopped(now, *fence, *on, ctx)),
            Entry::Truth(Fact::Arrived { from: Sender::Worker(from), request, .. }) => {
                let own_release =
                    matches!(request, Op::ReleaseOrphans { owner, .. } | Op::ReturnOwn { owner, .. } if owner == from);
                if let (true, Some(s)) = (own_release, self.stopping.get_mut(from)) {
                    s.released = true;
                }
            }
            Entry::Truth(Fact::Answered { .. }) => self.judge_grants(now, rec, ctx, out),
            _ => {}
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.deadlines(end_ms, ctx, out);
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

impl GracefulStop {
    /// Nothing is granted to an incarnation after the store applied its
    /// deregistration.
    fn judge_grants(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(a) = answer(rec, ctx) else { return };
        for fence in a.commit.tasks.iter().filter_map(granted) {
            let Some(left_ms) = ctx.view.owner(fence.owner).and_then(|o| o.deregistered_ms) else { continue };
            self.evaluations += 1;
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "t{}: granted at {now} ms to {}, which deregistered at {left_ms} ms",
                        fence.task, fence.owner
                    ),
                )
                .fence(&fence),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::history::WorldEvent;
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::TaskKind;
    use leasesim_vocab::testimony::ReleaseCause;
    use leasesim_vocab::truth::{Fact, Sender};

    /// The grace (10 s) and two RPC deadlines (10 s each) of the test spec,
    /// each timer's firing a millisecond late at most: asked at 1 s, p1.1
    /// must be gone by 31.003 s.
    const EXIT_BY_MS: u64 = 31_003;

    /// t1 runs on p1.1 (a heartbeat-owned job, its permit held) from 10 ms;
    /// p1.1 is asked to stop at 1 s.
    fn stopping() -> H {
        H::new()
            .up(o(1, 1))
            .created(1, TaskKind::Job)
            .at(10)
            .granted(1, 1, o(1, 1), None)
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(1_000)
            .world(WorldEvent::StopRequested { owner: o(1, 1) })
    }

    /// p1.1 deregisters (the store applies it) and exits at `at`.
    fn leaves(h: H, at: u64) -> H {
        h.at(at - 20)
            .answer(Sender::Worker(o(1, 1)), Op::Deregister { owner: o(1, 1) }, Response::Ack, vec![], &[])
            .at(at)
            .exited(o(1, 1))
    }

    /// `stopping`; t1's body is cut short at `cut_ms`, p1.1 gives t1 back and exits.
    fn cut_at(cut_ms: u64) -> H {
        let h = stopping()
            .at(cut_ms)
            .fact(Fact::BodyStopped { fence: crate::testkit::fence(1, 1, o(1, 1)), on: o(1, 1) })
            .unpermit(o(1, 1), 1, 1)
            .at(cut_ms + 10)
            .answer(Sender::Worker(o(1, 1)), Op::Deregister { owner: o(1, 1) }, Response::Ack, vec![], &[]);
        let release = Op::ReleaseOrphans { owner: o(1, 1), running: vec![], older_than_ms: 0, as_of_ms: cut_ms + 20 };
        h.at(cut_ms + 20).released_by(1, o(1, 1), release, ReleaseCause::Orphaned).at(cut_ms + 30).exited(o(1, 1))
    }

    /// `stopping`; t1 ends well at 3 s and completes; p1.1 exits at `exit_ms`.
    fn drains_and_exits(exit_ms: u64) -> H {
        let h = stopping()
            .at(3_000)
            .finished(1, 1, o(1, 1), true)
            .completed(1, 1, o(1, 1))
            .callback(1, 1, o(1, 1))
            .unpermit(o(1, 1), 1, 1);
        leaves(h, exit_ms)
    }

    cases! {
        a_stop_that_drains_and_leaves_in_time:
            drains_and_exits(4_000).at(40_000).end().build() => PASS;
        an_exit_at_its_exact_bound:
            drains_and_exits(EXIT_BY_MS).at(40_000).end().build() => PASS;
        an_exit_one_millisecond_late:
            drains_and_exits(EXIT_BY_MS + 1).at(40_000).end().build() => &[(NAME, None)];
        a_process_never_exiting_after_a_stop:
            stopping().at(3_000).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1)
                .at(40_000).end().build() => &[(NAME, None)];
        a_process_killed_before_its_bound_owes_no_exit:
            stopping().at(20_000).killed(o(1, 1)).at(40_000).end().build() => PASS;
        a_process_paused_while_stopping_is_excused:
            stopping().at(2_000).paused(1).at(35_000).resumed(1).at(40_000).end().build() => PASS;
        a_body_cut_when_the_grace_runs_out:
            cut_at(11_000).at(40_000).end().build() => PASS;
        a_body_cut_one_millisecond_before_the_grace_runs_out:
            cut_at(10_999).at(40_000).end().build() => &[(NAME, Some(1))];
        an_exit_with_a_body_still_running:
            leaves(stopping(), 2_000).at(40_000).end().build() => &[(NAME, Some(1))];
        an_exit_with_a_permit_still_held:
            leaves(stopping().at(1_500).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)), 2_000)
                .at(40_000).end().build() => &[(NAME, Some(1))];
        an_exit_holding_a_task_it_never_gave_back:
            leaves(
                stopping().at(2_000).fact(Fact::BodyStopped { fence: crate::testkit::fence(1, 1, o(1, 1)), on: o(1, 1) })
                    .unpermit(o(1, 1), 1, 1),
                2_100,
            ).at(40_000).end().build() => &[(NAME, Some(1))];
        a_grant_after_deregistering:
            leaves(stopping().at(3_000).finished(1, 1, o(1, 1), true).completed(1, 1, o(1, 1)).callback(1, 1, o(1, 1)).unpermit(o(1, 1), 1, 1), 4_000)
                .created(2, TaskKind::Job).at(4_010).granted(2, 1, o(1, 1), None)
                .at(40_000).end().build() => &[(NAME, Some(2))];
    }
}
