//! pass-cadence (liveness): every live process sends each periodic pass it
//! declares (release of dead owners, reclaim, repair, each maintenance kind)
//! on time. The next pass of a kind reaches the store at most its wait plus
//! `late_ms` after the store answered the previous one. The wait is the
//! pass's interval after a pass the store did its work for; after the k-th
//! failed pass in a row (refused, rejected, answered past an RPC deadline,
//! or never answered to it), `min(interval * 2^(k-1), backoff_cap_ms)`,
//! counted from when the engine noticed the failure, itself at most
//! `late_ms` after the answer.
//!
//! Two things the world does to a process change what the store seam can
//! know of that schedule, and are taken exactly as they are:
//! - A process cut off from the network loses every request it sends, with
//!   no trace at the store, and every answer sent to it: each such pass
//!   failed to the engine, and counts towards its failures in a row. Once
//!   the process was cut off since the previous pass of a kind arrived, the
//!   checker knows only a floor of that count, until a pass is done; the
//!   wait after a failed pass is then the longest the promise allows after
//!   any number of failures, its backoff cap.
//! - A process's clock never reads below zero (`SimClock`): one set back
//!   further than the world's time stands at zero until the world catches
//!   up. The wait is counted on that clock, so it runs from the later of the
//!   answer and the moment the clock leaves zero.
//!
//! Judged at the store seam alone (arrivals and answers of the requests that
//! start each pass, [`PassKind::of`]; a pipeline pass lasts until each of
//! its stage enqueues is answered or past its RPC deadline) and process
//! control. A gap is excused
//! when something outside the engine could have delayed the next pass: the
//! process paused, partitioned, killed or deregistered, its clock moved
//! (maintenance is due on the process's own clock), or the store down. Request
//! delays and stalls act after a request's arrival, so they delay answers,
//! which the wait already runs from. Not judged: the wait after a pass whose
//! answer was lost or held back (the engine then waits out its own deadline,
//! which is not a promise here); such a pass counts as failed, and the next
//! arrival starts the judgement again.

use super::{answer, fact, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Owner, ProcId};
use leasesim_vocab::op::{Op, Response};
use leasesim_vocab::promise::{Cadence, Capabilities, PassKind};
use leasesim_vocab::task::MaintenanceKind;
use leasesim_vocab::truth::{Fact, Reply, Sender};
use std::collections::BTreeMap;

pub const NAME: &str = "pass-cadence";

/// Where one (process, pass kind) stands.
#[derive(Debug, Clone, Copy)]
enum Beat {
    /// A pass is at the store, not yet answered.
    InFlight { req: u64, arrived_ms: u64 },
    /// The store answered the pass that arrived at `arrived_ms` at
    /// `answered_ms`; the wait runs from `from_ms` (the answer, or later if
    /// the process's clock stood at zero then); the next must arrive by
    /// `due_ms`.
    Waiting { arrived_ms: u64, answered_ms: u64, from_ms: u64, due_ms: u64 },
}

#[derive(Debug, Clone, Copy, Default)]
struct Track {
    beat: Option<Beat>,
    /// Passes that failed in a row, to the engine's knowledge at most.
    failed: u32,
    /// The process was cut off since a pass arrived: passes the store never
    /// saw may have failed too, so `failed` is only a floor until a pass is
    /// done.
    unseen_failures: bool,
    /// When the last pass of this kind reached the store.
    arrived_ms: Option<u64>,
}

#[derive(Default)]
pub struct PassCadence {
    tracks: BTreeMap<(Owner, PassKind), Track>,
    /// Per process: when its clock last moved.
    clock_moved_ms: BTreeMap<ProcId, u64>,
    /// Per process: until when its clock stands at zero (an offset further
    /// back than the world's time; a process's clock never reads below zero).
    clock_zero_until_ms: BTreeMap<ProcId, u64>,
    evaluations: u64,
}

fn cadence(ctx: &Ctx, kind: PassKind) -> Option<Cadence> {
    ctx.promises().cadences.iter().find(|c| c.pass == kind).copied()
}

/// The longest wait after a pass, `failed` passes having failed in a row
/// (`unseen`: and perhaps more the store never saw).
fn wait_ms(c: &Cadence, failed: u32, unseen: bool) -> u64 {
    match failed {
        0 => c.interval_ms,
        // Any number of failures waits at most the cap.
        _ if unseen => c.backoff_cap_ms.max(c.interval_ms) + c.late_ms,
        k => c.interval_ms.saturating_mul(1 << (k - 1).min(20)).min(c.backoff_cap_ms).max(c.interval_ms) + c.late_ms,
    }
}

impl PassCadence {
    /// Could anything but the engine have held `owner`'s next pass back
    /// between `from` and `now`?
    fn excused(&self, owner: Owner, from: u64, now: u64, ctx: &Ctx) -> bool {
        let store_down = ctx.view.store_down.iter().any(|&(s, e)| s <= now && e.is_none_or(|e| e > from));
        let clock_moved = self.clock_moved_ms.get(&owner.proc).is_some_and(|&at| at >= from);
        store_down || clock_moved || !ctx.view.serving_throughout(owner, from, now)
    }

    /// When the wait after an answer at `answered_ms` starts to run on
    /// `owner`'s clock: once its clock has left zero.
    fn wait_from_ms(&self, owner: Owner, answered_ms: u64) -> u64 {
        self.clock_zero_until_ms.get(&owner.proc).map_or(answered_ms, |&until| answered_ms.max(until))
    }

    /// Reports `owner`'s pass of `kind` if it was due before `now`, and
    /// forgets the wait either way.
    fn judge_due(&mut self, now: u64, owner: Owner, kind: PassKind, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(track) = self.tracks.get_mut(&(owner, kind)) else { return };
        let Some(Beat::Waiting { arrived_ms, answered_ms, from_ms, due_ms }) = track.beat else { return };
        track.beat = None;
        let (failed, unseen) = (track.failed, track.unseen_failures);
        self.evaluations += 1;
        if now <= due_ms || self.excused(owner, arrived_ms, now, ctx) {
            return;
        }
        let what = match failed {
            0 => "its interval".to_string(),
            k if unseen => format!("its backoff cap after {k} or more failed passes in a row"),
            k => format!("its backoff after {k} failed passes in a row"),
        };
        let counted = if from_ms > answered_ms {
            format!(", counted from {from_ms} ms, when its clock left zero")
        } else {
            String::new()
        };
        out.push(
            Violation::new(
                NAME,
                now,
                format!(
                    "{owner} sent no {} pass between {answered_ms} ms, when the store answered its previous one, and \
                     {now} ms ({} ms; allowed {} ms: {what}, + {} ms late{counted})",
                    kind.name(),
                    now - answered_ms,
                    due_ms - answered_ms,
                    cadence(ctx, kind).map_or(0, |c| c.late_ms)
                ),
            )
            .process(owner),
        );
    }

    fn arrived(&mut self, now: u64, req: u64, from: Sender, request: &Op, ctx: &Ctx, out: &mut Vec<Violation>) {
        if let (Op::EnqueueStage { .. }, Sender::Worker(owner)) = (request, from) {
            // A pipeline pass goes on until its stage enqueues end: each is
            // answered, or given up at its RPC deadline.
            let key = (owner, PassKind::Maintain(MaintenanceKind::Pipeline));
            let late_ms = cadence(ctx, key.1).map_or(0, |c| c.late_ms);
            if let Some(Track { beat: Some(Beat::Waiting { due_ms, .. }), .. }) = self.tracks.get_mut(&key) {
                *due_ms = (*due_ms).max(now + ctx.promises().rpc_timeout_ms + late_ms);
            }
            return;
        }
        let Some((owner, kind)) = PassKind::of(request) else { return };
        if from != Sender::Worker(owner) || cadence(ctx, kind).is_none() {
            return;
        }
        self.judge_due(now, owner, kind, ctx, out);
        let up_ms = ctx.view.owner(owner).and_then(|o| o.up_ms).unwrap_or(0);
        let track = self.tracks.entry((owner, kind)).or_default();
        if let Some(Beat::InFlight { .. }) = track.beat {
            // The engine stopped waiting for the previous one: a failure.
            track.failed += 1;
        }
        // Cut off since the previous pass arrived (or the process came up):
        // a pass it sent then never arrived, and an answer sent to it then
        // never came back; either failed to the engine unseen here.
        let since_ms = track.arrived_ms.unwrap_or(up_ms);
        if ctx.view.procs.get(&owner.proc).is_some_and(|p| p.partitioned_between(since_ms, now)) {
            track.unseen_failures = true;
        }
        track.arrived_ms = Some(now);
        track.beat = Some(Beat::InFlight { req, arrived_ms: now });
    }

    /// The store's answer to a pass (or to a pipeline pass's stage enqueue).
    fn answered(&mut self, now: u64, rec: &Record, ctx: &Ctx) {
        let Some(a) = answer(rec, ctx) else { return };
        let Sender::Worker(owner) = a.request.from else { return };
        let Some((_, kind)) = PassKind::of(&a.request.request) else { return };
        let Some(c) = cadence(ctx, kind) else { return };
        let Some(track) = self.tracks.get_mut(&(owner, kind)) else { return };
        let Some(Beat::InFlight { req, arrived_ms }) = track.beat else { return };
        if req != a.req {
            return;
        }
        // An answer near an RPC deadline may have come after the engine
        // stopped waiting: a failure to it.
        let in_time = now - arrived_ms + promise::NET_LATENCY_MAX_MS < ctx.promises().rpc_timeout_ms;
        let done = a.reply == Reply::Sent && in_time && !matches!(a.response, Response::Rejected { .. });
        track.failed = if done { 0 } else { track.failed + 1 };
        track.unseen_failures &= !done;
        let (failed, unseen) = (track.failed, track.unseen_failures);
        let from_ms = self.wait_from_ms(owner, now);
        let Some(track) = self.tracks.get_mut(&(owner, kind)) else { return };
        track.beat = match a.reply {
            Reply::Sent => {
                let due_ms = from_ms + wait_ms(&c, failed, unseen) + c.late_ms;
                Some(Beat::Waiting { arrived_ms, answered_ms: now, from_ms, due_ms })
            }
            Reply::Lost | Reply::Late => None,
        };
    }

    /// The harness answered for the store (nothing applied), or dropped it.
    fn refused_or_dropped(&mut self, now: u64, req: u64, refused: bool, ctx: &Ctx) {
        let Some(r) = ctx.view.request(req) else { return };
        let Some((owner, kind)) = PassKind::of(&r.request) else { return };
        let Some(c) = cadence(ctx, kind) else { return };
        let Some(track) = self.tracks.get_mut(&(owner, kind)) else { return };
        let Some(Beat::InFlight { req: pending, arrived_ms }) = track.beat else { return };
        if pending != req {
            return;
        }
        track.failed += 1;
        let (failed, unseen) = (track.failed, track.unseen_failures);
        let from_ms = self.wait_from_ms(owner, now);
        let Some(track) = self.tracks.get_mut(&(owner, kind)) else { return };
        track.beat = refused.then(|| Beat::Waiting {
            arrived_ms,
            answered_ms: now,
            from_ms,
            due_ms: from_ms + wait_ms(&c, failed, unseen) + c.late_ms,
        });
    }

    /// `owner` stops: what was overdue is reported, the rest forgotten.
    fn stopped(&mut self, now: u64, owner: Owner, ctx: &Ctx, out: &mut Vec<Violation>) {
        let kinds: Vec<PassKind> = self.tracks.keys().filter(|(o, _)| *o == owner).map(|(_, k)| *k).collect();
        for kind in kinds {
            self.judge_due(now, owner, kind, ctx, out);
            self.tracks.remove(&(owner, kind));
        }
    }
}

impl Checker for PassCadence {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store seam: each live process's next periodic pass arrives within its interval of the previous pass's answer (after failed passes, its capped doubling backoff), unless a pause, partition, clock jump or store outage explains the gap"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match &rec.entry {
            // Killed or exited: it runs no more passes.
            Entry::World(WorldEvent::ProcessKilled { owner } | WorldEvent::ProcessExited { owner }) => {
                self.stopped(now, *owner, ctx, out)
            }
            Entry::World(WorldEvent::ClockOffset { proc, offset_ms }) => {
                self.clock_moved_ms.insert(*proc, now);
                // Set back further than the world's time, the clock reads
                // zero until the world's time reaches the offset.
                let zero_until_ms = offset_ms.checked_neg().map_or(0, |back| back.max(0) as u64);
                if zero_until_ms > now {
                    self.clock_zero_until_ms.insert(*proc, zero_until_ms);
                } else {
                    self.clock_zero_until_ms.remove(proc);
                }
            }
            Entry::Truth(Fact::Arrived { req, from, request, duplicate: false }) => {
                if let Op::Deregister { owner } = request {
                    self.stopped(now, *owner, ctx, out);
                }
                self.arrived(now, *req, *from, request, ctx, out);
            }
            Entry::Truth(Fact::Answered { .. }) => self.answered(now, rec, ctx),
            _ => match fact(rec) {
                Some(Fact::Refused { req, .. }) => self.refused_or_dropped(now, *req, true, ctx),
                Some(Fact::Dropped { req }) => self.refused_or_dropped(now, *req, false, ctx),
                _ => {}
            },
        }
    }

    fn finish(&mut self, end_ms: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let open: Vec<(Owner, PassKind)> = self.tracks.keys().copied().collect();
        for (owner, kind) in open {
            self.judge_due(end_ms, owner, kind, ctx, out);
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::WORLD.or(Kinds::ARRIVED).or(Kinds::ANSWERED).or(Kinds::REFUSED).or(Kinds::DROPPED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.periodic_passes
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{o, run_case_in, spec, Expect, H, PASS};
    use leasesim_vocab::faults::FaultKind;
    use leasesim_vocab::history::Record;
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::promise::{Cadence, PassKind};
    use leasesim_vocab::task::MaintenanceKind::{Index, Pipeline};
    use leasesim_vocab::truth::{Fact, Reply, Sender};

    const W: Sender = Sender::Worker(leasesim_vocab::ids::Owner { proc: 1, incarnation: 1 });

    fn repair() -> Op {
        Op::Repair { by: o(1, 1) }
    }

    fn maintain() -> Op {
        Op::Maintain { owner: o(1, 1), kind: Index, timeout_ms: Some(29_000) }
    }

    /// A repair every 3 s (1 s late at most); index maintenance every 5 s,
    /// after a failure at most 60 s (2 s late at most); pipeline passes as
    /// index ones.
    fn check(name: &str, history: Vec<Record>, expect: Expect) {
        let mut spec = spec();
        let pass = |pass, interval_ms, backoff_cap_ms, late_ms| Cadence { pass, interval_ms, backoff_cap_ms, late_ms };
        spec.promises.cadences = vec![
            pass(PassKind::Repair, 3_000, 3_000, 1_000),
            pass(PassKind::Maintain(Index), 5_000, 60_000, 2_000),
            pass(PassKind::Maintain(Pipeline), 5_000, 60_000, 2_000),
        ];
        run_case_in(name, &spec, history, expect);
    }

    /// Heal at 10 s, with o(1, 1) up from the start.
    fn healed() -> H {
        H::new().up(o(1, 1)).at(10_000).heal()
    }

    /// A pass that arrives now and is answered `held_ms` later.
    fn held(h: H, request: Op, held_ms: u64, response: Response) -> H {
        let (h, req) = h.arrive(W, request);
        let at = h.now() + held_ms;
        h.at(at).fact(Fact::Answered { req, response, commit: Default::default(), reply: Reply::Sent })
    }

    macro_rules! cadence_cases {
        ($($name:ident: $history:expr => $expect:expr;)+) => {
            $( #[test] fn $name() { check(stringify!($name), $history, $expect); } )+
        };
    }

    const LATE: Expect = &[(NAME, None)];

    fn rejected() -> Response {
        Response::Rejected { reason: Refusal::TimedOut }
    }

    /// swarm seed 2252's shape: a done pass at 1 200; cut off 5 000-20 000,
    /// when the engine's next pass was lost unseen (its first failure);
    /// a pass refused at 40 000 by a serialization failure (its second);
    /// then the next at `next_ms`.
    fn refused_after_a_cut_off(next_ms: u64) -> Vec<Record> {
        let h = held(H::new().up(o(1, 1)).at(1_000), maintain(), 200, Response::Ack)
            .at(5_000)
            .partitioned(1)
            .at(20_000)
            .rejoined(1);
        let (h, req) = h.at(40_000).arrive(W, maintain());
        let conflict = Response::Rejected { reason: Refusal::Conflict };
        let h = h.fact(Fact::Refused { req, response: conflict, fault: Some(FaultKind::SerializationFailure) });
        next_pass_done(h, next_ms)
    }

    /// a-index-builds seed 103745's shape: p1's clock set back 1 832 ms at
    /// 0, so it reads zero until 1 832; a done pass answered at 206; the
    /// next at `next_ms`.
    fn after_a_clock_at_zero(next_ms: u64) -> Vec<Record> {
        next_pass_done(held(H::new().offset(1, -1_832).up(o(1, 1)).at(6), maintain(), 200, Response::Ack), next_ms)
    }

    /// The next pass arrives at `next_ms` and is done; the heal comes a
    /// second later.
    fn next_pass_done(h: H, next_ms: u64) -> Vec<Record> {
        h.at(next_ms).answer(W, maintain(), Response::Ack, vec![], &[]).at(next_ms + 1_000).heal().end().build()
    }

    cadence_cases! {
        passes_on_time_pass:
            // 11 000 + 3 000 + 1 000 = 15 000: the last allowed millisecond;
            // the run ends before the next is due.
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(15_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(18_000).end().build()
            => PASS;
        a_late_pass:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(15_001).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .end().build()
            => LATE;
        a_late_pass_before_the_heal:
            H::new().up(o(1, 1)).at(1_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(5_001).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(6_000).heal().end().build()
            => LATE;
        passes_that_stop:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(30_000).end().build()
            => LATE;
        a_slow_answer_moves_the_wait:
            // Held 2 s at the store: the wait runs from the answer.
            held(healed().at(11_000), repair(), 2_000, Response::Released { tasks: 0 })
                .at(17_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .end().build()
            => PASS;
        a_pause_excuses_the_gap:
            H::new().up(o(1, 1)).at(1_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(2_000).paused(1).at(8_000).resumed(1)
                .at(9_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(10_000).end().build()
            => PASS;
        a_clock_jump_excuses_the_gap:
            held(H::new().up(o(1, 1)).at(1_000), maintain(), 100, Response::Ack)
                .at(2_000).offset(1, -20_000)
                .at(30_000).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(31_000).end().build()
            => PASS;
        a_done_pass_does_not_back_off:
            // 11 100 + 5 000 + 2 000 = 18 100.
            held(healed().at(11_000), maintain(), 100, Response::Ack)
                .at(18_101).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(19_000).end().build()
            => LATE;
        one_failed_pass_waits_its_interval_once_noticed:
            // 11 100 + 5 000 + 2 000 (noticed) + 2 000 = 20 100.
            held(healed().at(11_000), maintain(), 100, rejected())
                .at(20_100).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(21_000).end().build()
            => PASS;
        a_backoff_cap_taken_as_a_floor:
            // One failure waits the interval, not the 60 s cap.
            held(healed().at(11_000), maintain(), 100, rejected())
                .at(71_100).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(72_000).end().build()
            => LATE;
        failed_passes_in_a_row_double_the_wait:
            // After two: 20 000 + 10 000 + 2 000 + 2 000 = 34 000.
            held(healed().at(11_000), maintain(), 100, rejected())
                .at(20_000).answer(W, maintain(), rejected(), vec![], &[])
                .at(34_000).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(35_000).end().build()
            => PASS;
        a_wait_past_its_doubling:
            held(healed().at(11_000), maintain(), 100, rejected())
                .at(20_000).answer(W, maintain(), rejected(), vec![], &[])
                .at(34_001).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(35_000).end().build()
            => LATE;
        a_pass_given_up_counts_as_failed:
            // The first pass is never answered: the worker gave up on it, so
            // the rejected second one is its second failure in a row.
            // (Pipeline passes: an index pass may not overlap its successor.)
            {
                let snapshot = Op::PipelineSnapshot { by: o(1, 1) };
                let (h, _) = healed().at(11_000).arrive(W, snapshot.clone());
                h.at(50_000).answer(W, snapshot.clone(), rejected(), vec![], &[])
                    .at(64_000).answer(W, snapshot, Response::Snapshot { due: vec![] }, vec![], &[])
                    .at(65_000).end().build()
            }
            => PASS;
        a_refused_pass_is_a_failed_one:
            {
                let (h, req) = healed().at(11_000).arrive(W, maintain());
                h.at(11_100).fact(Fact::Refused { req, response: rejected(), fault: None })
                    .at(20_100).answer(W, maintain(), Response::Ack, vec![], &[])
                    .at(21_000).end().build()
            }
            => PASS;
        an_answer_past_the_rpc_deadline_counts_as_failed:
            // Held 10 s: the worker stopped waiting; 21 000 + 9 000.
            held(healed().at(11_000), maintain(), 10_000, Response::Ack)
                .at(30_000).answer(W, maintain(), Response::Ack, vec![], &[])
                .at(31_000).end().build()
            => PASS;
        a_pipeline_pass_lasts_until_its_stage_enqueues_end:
            {
                let snapshot = Op::PipelineSnapshot { by: o(1, 1) };
                let stage = Op::EnqueueStage { stage: leasesim_vocab::ids::StageRef { pipeline: 1, index: 0 } };
                // Due by 18 000 from the snapshot; by 12 000 + 10 000 + 2 000
                // from its stage enqueue (answered or not).
                let h = healed().at(11_000).answer(W, snapshot.clone(), Response::Snapshot { due: vec![] }, vec![], &[]);
                held(h.at(12_000), stage, 5_000, Response::Ack)
                    .at(24_000).answer(W, snapshot, Response::Snapshot { due: vec![] }, vec![], &[])
                    .at(25_000).end().build()
            }
            => PASS;
        passes_lost_while_cut_off_leave_the_failures_unknown:
            // Two failures (one unseen) wait 10 000, which one seen failure
            // does not allow: 40 000 + 10 000 + 2 000 (noticed) + 2 000.
            refused_after_a_cut_off(54_000)
            => PASS;
        after_unseen_failures_the_wait_is_the_backoff_cap:
            // 40 000 + 60 000 + 2 000 + 2 000 = 104 000.
            refused_after_a_cut_off(104_001)
            => LATE;
        a_done_pass_after_a_cut_off_counts_failures_again:
            // Done at 41 000 after the cut; refused at 47 000: its first
            // failure, 47 000 + 5 000 + 2 000 + 2 000 = 56 000.
            {
                let h = held(H::new().up(o(1, 1)).at(1_000), maintain(), 200, Response::Ack)
                    .at(5_000).partitioned(1).at(20_000).rejoined(1)
                    .at(41_000).answer(W, maintain(), Response::Ack, vec![], &[]);
                let (h, req) = h.at(47_000).arrive(W, maintain());
                h.fact(Fact::Refused { req, response: rejected(), fault: None })
                    .at(56_001).answer(W, maintain(), Response::Ack, vec![], &[])
                    .at(57_000).heal().end().build()
            }
            => LATE;
        a_clock_at_zero_holds_the_wait_until_it_runs:
            // The wait runs from 1 832: 1 832 + 5 000 + 2 000 = 8 832, past
            // 206 + 5 000 + 2 000 = 7 206 from the answer.
            after_a_clock_at_zero(8_832)
            => PASS;
        a_pass_late_once_the_clock_left_zero:
            after_a_clock_at_zero(8_833)
            => LATE;
        a_lost_answer_is_not_judged:
            healed().at(11_000).answer_as(Reply::Lost, W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(30_000).end().build()
            => PASS;
        a_killed_process_owes_no_pass:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(14_000).killed(o(1, 1)).at(30_000).end().build()
            => PASS;
        a_process_killed_after_a_missed_pass:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(16_000).killed(o(1, 1)).at(30_000).end().build()
            => LATE;
        // An exit (no one killed it) is judged as a kill.
        an_exited_process_owes_no_pass:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(14_000).exited(o(1, 1)).at(30_000).end().build()
            => PASS;
        a_process_exited_after_a_missed_pass:
            healed().at(11_000).answer(W, repair(), Response::Released { tasks: 0 }, vec![], &[])
                .at(16_000).exited(o(1, 1)).at(30_000).end().build()
            => LATE;
    }
}
