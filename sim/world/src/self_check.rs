//! The harness checks itself. Whatever the engine under test does, the
//! history the harness records at its own seams has a shape: records in
//! time order, every answer to a request that arrived, every body's end
//! after its start, every client answer after its call, incarnations that
//! only go up, one heal and one end. A history without that shape means a
//! bug of the harness, and a verdict drawn from it means nothing: the run
//! fails as a panic of its own ("harness invariant broken"), never as a
//! finding against the engine.
//!
//! The tap, too: every row a commit reports changed was, just before it,
//! what the last commit of that row said it became (or absent, for a row
//! seen for the first time). The checkers' view is the fold of those
//! commits, so this is the view agreeing with the store at every step,
//! not only at the end (where `reconciliation` compares the two).
//!
//! Checked after every world, in release builds too: one pass over the
//! history, far cheaper than judging it.

use crate::history::{Entry, Fact, Record, WorldEvent};
use leasesim_vocab::ids::{Fence, Owner, ProcId, StageRef, TaskId};
use leasesim_vocab::task::{QueueId, QueueRow, Row, StageRow};
use leasesim_vocab::truth::{Commit, Reply};
use std::collections::BTreeMap;

/// What the harness saw of one request at the store seam.
#[derive(Default)]
struct Request {
    arrivals: u32,
    /// Answered or refused: how many times the store side finished it.
    answers: u32,
    /// Dropped: on its way in, held by a dying store, or its answer on its
    /// way back (so a drop may follow an answer).
    drops: u32,
    late_answer: bool,
}

#[derive(Default)]
struct Shape {
    problems: Vec<String>,
    last_ms: u64,
    requests: BTreeMap<u64, Request>,
    /// Bodies running, by attempt and process: an engine may (wrongly)
    /// start one attempt's body twice at once, which is its bug to be
    /// judged (`execution-exclusive`), not the harness's.
    bodies: BTreeMap<(Fence, Owner), u32>,
    calls: BTreeMap<u64, bool>,
    /// Per process: its latest incarnation, and whether it is up.
    procs: BTreeMap<ProcId, (u32, bool)>,
    heals: u32,
    ends: u32,
    /// The store's rows as the commits so far left them.
    rows: Rows,
}

/// The fold of every commit the tap reported, row by row.
#[derive(Default)]
struct Rows {
    tasks: BTreeMap<TaskId, Row>,
    stages: BTreeMap<StageRef, StageRow>,
    queues: BTreeMap<QueueId, QueueRow>,
}

impl Rows {
    /// Applies `commit`; the name of each row whose `before` is not what
    /// the earlier commits left.
    fn apply(&mut self, commit: &Commit) -> Vec<String> {
        let mut wrong = Vec::new();
        for c in &commit.tasks {
            if self.tasks.insert(c.after.id, c.after.clone()) != c.before {
                wrong.push(format!("task t{}", c.after.id));
            }
        }
        for c in &commit.stages {
            if self.stages.insert(c.stage, c.after.clone()) != c.before {
                wrong.push(format!("stage {}.{}", c.stage.pipeline, c.stage.index));
            }
        }
        for c in &commit.queues {
            if self.queues.insert(c.queue, c.after.clone()) != c.before {
                wrong.push(format!("queue q{}", c.queue));
            }
        }
        wrong
    }
}

/// Every way `history` breaks the harness's own invariants, in order (empty
/// for a well-formed history).
pub fn history_problems(history: &[Record]) -> Vec<String> {
    let mut s = Shape::default();
    for (i, rec) in history.iter().enumerate() {
        if rec.at_ms < s.last_ms {
            s.problems.push(format!("record {i} at {} ms comes after one at {} ms", rec.at_ms, s.last_ms));
        }
        s.last_ms = s.last_ms.max(rec.at_ms);
        if s.ends > 0 && !matches!(rec.entry, Entry::Truth(Fact::Final { .. } | Fact::FinalQueues { .. })) {
            s.problems.push(format!("record {i} comes after the run's end"));
        }
        match &rec.entry {
            Entry::World(w) => s.world(i, w),
            Entry::Truth(f) => s.fact(i, f),
            Entry::Engine(_) => {}
        }
    }
    if s.ends > 1 || s.heals > 1 {
        s.problems.push(format!("{} ends and {} heals in one run", s.ends, s.heals));
    }
    s.problems
}

/// Panics (the run fails as a harness panic) if `history` is not
/// well-formed.
pub fn assert_history(history: &[Record]) {
    let problems = history_problems(history);
    assert!(problems.is_empty(), "harness invariant broken: {} (and {} more)", problems[0], problems.len() - 1);
}

impl Shape {
    fn world(&mut self, i: usize, w: &WorldEvent) {
        match w {
            WorldEvent::ProcessUp { owner } => {
                let (latest, up) = self.procs.entry(owner.proc).or_insert((0, false));
                if owner.incarnation <= *latest || *up {
                    self.problems.push(format!("record {i}: {owner} up after p{}.{latest}", owner.proc));
                }
                (*latest, *up) = (owner.incarnation.max(*latest), true);
            }
            WorldEvent::ProcessKilled { owner } | WorldEvent::ProcessExited { owner } => {
                match self.procs.get_mut(&owner.proc) {
                    Some((latest, up)) if *latest == owner.incarnation && *up => *up = false,
                    _ => self.problems.push(format!("record {i}: {owner} gone, but it was not the live incarnation")),
                }
            }
            WorldEvent::StopRequested { owner } => {
                if self.procs.get(&owner.proc) != Some(&(owner.incarnation, true)) {
                    self.problems
                        .push(format!("record {i}: {owner} asked to stop, but it was not the live incarnation"));
                }
            }
            WorldEvent::Heal => {
                self.heals += 1;
            }
            WorldEvent::End => {
                if self.heals == 0 {
                    self.problems.push(format!("record {i}: the run ended before its heal"));
                }
                self.ends += 1;
            }
            WorldEvent::ProcessPaused { .. }
            | WorldEvent::ProcessResumed { .. }
            | WorldEvent::ClockOffset { .. }
            | WorldEvent::Fault { .. } => {}
        }
    }

    fn fact(&mut self, i: usize, f: &Fact) {
        if let Fact::Answered { commit, .. } | Fact::Drift { commit } = f {
            for row in self.rows.apply(commit) {
                self.problems.push(format!("record {i}: {row} changed from a row the earlier commits did not leave"));
            }
        }
        match f {
            Fact::Arrived { req, .. } => self.requests.entry(*req).or_default().arrivals += 1,
            Fact::Answered { req, reply, .. } => {
                self.answered(i, *req);
                if *reply == Reply::Late {
                    self.requests.entry(*req).or_default().late_answer = true;
                }
            }
            Fact::Refused { req, .. } => self.answered(i, *req),
            Fact::Dropped { req } => self.dropped(i, *req),
            Fact::Handed { req } if self.arrivals(*req) == 0 => {
                self.problems.push(format!("record {i}: request {req} handed over before it arrived"));
            }
            Fact::Replied { req } if !self.requests.get(req).is_some_and(|r| r.late_answer) => {
                self.problems.push(format!("record {i}: request {req} replied late without a late answer"));
            }
            Fact::BodyStarted { fence, on, .. } => *self.bodies.entry((*fence, *on)).or_default() += 1,
            Fact::BodyEnded { fence, on, .. } | Fact::BodyStopped { fence, on } if !self.body_ended(*fence, *on) => {
                self.problems.push(format!("record {i}: the body of {fence} ended on {on} without running there"));
            }
            Fact::ClientCalled { call, .. } if self.calls.insert(*call, false).is_some() => {
                self.problems.push(format!("record {i}: client call {call} made twice"));
            }
            Fact::ClientAnswered { call, .. } => match self.calls.get_mut(call) {
                Some(answered @ false) => *answered = true,
                _ => self.problems.push(format!("record {i}: client call {call} answered without an open call")),
            },
            _ => {}
        }
    }

    /// One running body of `fence` on `on` ended; false if none ran.
    fn body_ended(&mut self, fence: Fence, on: Owner) -> bool {
        match self.bodies.get_mut(&(fence, on)) {
            Some(running) if *running > 1 => *running -= 1,
            Some(_) => drop(self.bodies.remove(&(fence, on))),
            None => return false,
        }
        true
    }

    fn arrivals(&self, req: u64) -> u32 {
        self.requests.get(&req).map_or(0, |r| r.arrivals)
    }

    /// Answered or refused: the request must have arrived, and each
    /// delivery is answered at most once.
    fn answered(&mut self, i: usize, req: u64) {
        let r = self.requests.entry(req).or_default();
        r.answers += 1;
        if r.arrivals == 0 {
            self.problems.push(format!("record {i}: request {req} answered before it arrived"));
        } else if r.answers > r.arrivals {
            self.problems
                .push(format!("record {i}: request {req} answered {} times, delivered {}", r.answers, r.arrivals));
        }
    }

    /// Dropped: at most once per delivery (or once, for one that never
    /// arrived).
    fn dropped(&mut self, i: usize, req: u64) {
        let r = self.requests.entry(req).or_default();
        r.drops += 1;
        if r.drops > r.arrivals.max(1) {
            self.problems
                .push(format!("record {i}: request {req} dropped {} times, delivered {}", r.drops, r.arrivals));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::history_problems;
    use crate::history::{Entry, Fact, Record, WorldEvent};
    use leasesim_vocab::ids::{Fence, Owner};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::{Row, TaskError, TaskKind, TaskSpec, TaskState};
    use leasesim_vocab::truth::{Commit, Reply, Sender, TaskChange};

    const P1: Owner = Owner { proc: 1, incarnation: 1 };
    const T1: Fence = Fence { task: 1, attempt: 1, owner: P1 };

    fn w(at_ms: u64, w: WorldEvent) -> Record {
        Record { at_ms, entry: Entry::World(w) }
    }

    fn f(at_ms: u64, f: Fact) -> Record {
        Record { at_ms, entry: Entry::Truth(f) }
    }

    fn arrived(at_ms: u64, req: u64) -> Record {
        let request = Op::Heartbeat { owner: P1 };
        f(at_ms, Fact::Arrived { req, from: Sender::Worker(P1), request, duplicate: false })
    }

    fn answered(at_ms: u64, req: u64, reply: Reply) -> Record {
        f(at_ms, Fact::Answered { req, response: Response::Ack, commit: Commit::default(), reply })
    }

    /// Task 1 as a commit leaves it: ready, or leased to p1.1.
    fn row(leased: bool) -> Row {
        let ready = Row::ready(1, TaskSpec::job(0));
        match leased {
            true => Row { state: TaskState::Leased, owner: Some(P1), attempt: 1, ..ready },
            false => ready,
        }
    }

    fn change(before: Option<Row>, after: Row) -> Commit {
        Commit { tasks: vec![TaskChange { before, after }], ..Commit::default() }
    }

    /// A well-formed run: a process up, a request answered late and
    /// replied, a dropped request that never arrived, a task created by a
    /// drift and granted by a commit, a body, a heal, the end.
    fn valid() -> Vec<Record> {
        vec![
            w(0, WorldEvent::ProcessUp { owner: P1 }),
            arrived(10, 1),
            answered(12, 1, Reply::Late),
            f(15, Fact::Replied { req: 1 }),
            f(16, Fact::Dropped { req: 2 }),
            f(17, Fact::Drift { commit: change(None, row(false)) }),
            arrived(18, 3),
            f(
                19,
                Fact::Answered {
                    req: 3,
                    response: Response::Ack,
                    commit: change(Some(row(false)), row(true)),
                    reply: Reply::Sent,
                },
            ),
            f(20, Fact::BodyStarted { fence: T1, kind: TaskKind::Job, on: P1 }),
            f(30, Fact::BodyEnded { fence: T1, on: P1, error: None::<TaskError> }),
            w(40, WorldEvent::ProcessExited { owner: P1 }),
            w(50, WorldEvent::ProcessUp { owner: Owner { incarnation: 2, ..P1 } }),
            w(60, WorldEvent::Heal),
            w(70, WorldEvent::End),
        ]
    }

    /// Each case: how the valid run is broken, and every problem it must
    /// report (the whole list, in order).
    #[test]
    fn each_broken_history_is_told_and_the_valid_one_passes() {
        type Break = fn(&mut Vec<Record>);
        let cases: [(&str, Break, &[&str]); 12] = [
            ("valid", |_| {}, &[]),
            ("out of time order", |h| h[2].at_ms = 5, &["record 2 at 5 ms comes after one at 10 ms"]),
            (
                "answered before it arrived",
                |h| h[1] = f(10, Fact::Handed { req: 1 }),
                &[
                    "record 1: request 1 handed over before it arrived",
                    "record 2: request 1 answered before it arrived",
                ],
            ),
            (
                "a body ended twice",
                |h| h.insert(10, f(31, Fact::BodyStopped { fence: T1, on: P1 })),
                &["record 10: the body of t1#1@p1.1 ended on p1.1 without running there"],
            ),
            (
                "one attempt's body run twice at once (the engine's bug, not the harness's)",
                |h| {
                    h.insert(9, f(21, Fact::BodyStarted { fence: T1, kind: TaskKind::Job, on: P1 }));
                    h.insert(11, f(31, Fact::BodyStopped { fence: T1, on: P1 }));
                },
                &[],
            ),
            (
                "an incarnation reused",
                |h| h[11] = w(50, WorldEvent::ProcessUp { owner: P1 }),
                &["record 11: p1.1 up after p1.1"],
            ),
            (
                "a kill of a process already gone",
                |h| h.insert(11, w(45, WorldEvent::ProcessKilled { owner: P1 })),
                &["record 11: p1.1 gone, but it was not the live incarnation"],
            ),
            (
                "a record after the end",
                |h| h.push(w(80, WorldEvent::Heal)),
                &["record 14 comes after the run's end", "1 ends and 2 heals in one run"],
            ),
            (
                "a commit from a row the tap never reported (the view would part from the store)",
                |h| drop(h.remove(5)),
                &["record 6: task t1 changed from a row the earlier commits did not leave"],
            ),
            (
                "a commit from another row than the last commit left",
                |h| {
                    h[7] = f(
                        19,
                        Fact::Answered {
                            req: 3,
                            response: Response::Ack,
                            commit: change(Some(row(true)), row(true)),
                            reply: Reply::Sent,
                        },
                    )
                },
                &["record 7: task t1 changed from a row the earlier commits did not leave"],
            ),
            (
                "a row created twice",
                |h| h.insert(6, f(17, Fact::Drift { commit: change(None, row(false)) })),
                &["record 6: task t1 changed from a row the earlier commits did not leave"],
            ),
            (
                "a late reply without a late answer",
                |h| h[2] = answered(12, 1, Reply::Sent),
                &["record 3: request 1 replied late without a late answer"],
            ),
        ];
        for (name, breaks, want) in cases {
            let mut history = valid();
            breaks(&mut history);
            assert_eq!(history_problems(&history), want, "{name}");
        }
    }

    #[test]
    #[should_panic(expected = "harness invariant broken: record 2 at 5 ms comes after one at 10 ms")]
    fn a_broken_history_fails_its_run() {
        let mut history = valid();
        history[2].at_ms = 5;
        super::assert_history(&history);
    }
}
