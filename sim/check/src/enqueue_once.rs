//! enqueue-once: one call of the application's `enqueue` creates at most one
//! task, however often the request is sent or delivered, and the task id the
//! application is told is the task that call created.
//!
//! Judged at the store seam (which requests of which client call created
//! which task rows) and the client seam (what the application was told).

use super::{answer, fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::TaskId;
use leasesim_vocab::truth::{ClientAnswer, Fact, Sender};
use std::collections::BTreeMap;

pub const NAME: &str = "enqueue-once";

#[derive(Default)]
pub struct EnqueueOnce {
    /// Per client call: the tasks its requests created.
    created: BTreeMap<u64, Vec<TaskId>>,
    evaluations: u64,
}

impl Checker for EnqueueOnce {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and client seams: one enqueue call creates at most one task, and the id it returns is that task"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        if let Some(a) = answer(rec, ctx) {
            let Sender::Client(call) = a.request.from else { return };
            for change in a.commit.tasks.iter().filter(|c| c.before.is_none()) {
                self.evaluations += 1;
                let id = change.after.id;
                let mine = self.created.entry(call).or_default();
                if let Some(first) = mine.first() {
                    out.push(
                        Violation::new(
                            NAME,
                            now,
                            format!(
                                "t{id}: client call {call} created a second task at {now} ms (the first was t{first})"
                            ),
                        )
                        .task(id),
                    );
                }
                mine.push(id);
            }
            return;
        }
        let Some(Fact::ClientAnswered { call, answer: ClientAnswer::Enqueued { task: Some(id) } }) = fact(rec) else {
            return;
        };
        self.evaluations += 1;
        let mine = self.created.get(call).map(Vec::as_slice).unwrap_or_default();
        if !mine.contains(id) {
            let created = if mine.is_empty() {
                "created no task".to_string()
            } else {
                format!("created {}", mine.iter().map(|t| format!("t{t}")).collect::<Vec<_>>().join(", "))
            };
            out.push(
                Violation::new(
                    NAME,
                    now,
                    format!("t{id}: client call {call} was told t{id} at {now} ms but {created}"),
                )
                .task(*id),
            );
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::ANSWERED.or(Kinds::CLIENT_ANSWERED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::{Row, TaskKind, TaskSpec};
    use leasesim_vocab::testimony::Event;
    use leasesim_vocab::truth::{ClientAnswer, ClientCall, Fact, Sender};

    fn spec() -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0, queue: None }
    }

    /// Client call 1 sends the enqueue, and the store creates `task`.
    fn enqueue(h: H, task: u64) -> H {
        h.answer(
            Sender::Client(1),
            Op::Enqueue { spec: spec(), key: None },
            Response::Enqueued { task },
            vec![Event::TaskCreated { task, spec: spec(), retry_at_ms: 0 }],
            &[(task, &|_: &mut Row| {})],
        )
    }

    cases! {
        one_call_one_task_passes:
            H::new().up(o(1, 1)).created(1, TaskKind::Job).created(2, TaskKind::Job).build()
            => PASS;
        a_retried_enqueue_creates_two_tasks:
            {
                let h = H::new().fact(Fact::ClientCalled { call: 1, client: 1, what: ClientCall::Enqueue { spec: spec() } });
                let h = enqueue(enqueue(h, 1).at(10_000), 2);
                h.fact(Fact::ClientAnswered { call: 1, answer: ClientAnswer::Enqueued { task: Some(2) } }).build()
            }
            => &[(NAME, Some(2))];
        told_an_id_it_did_not_create:
            {
                let h = H::new().fact(Fact::ClientCalled { call: 1, client: 1, what: ClientCall::Enqueue { spec: spec() } });
                enqueue(h, 1).fact(Fact::ClientAnswered { call: 1, answer: ClientAnswer::Enqueued { task: Some(9) } }).build()
            }
            => &[(NAME, Some(9))];
    }
}
