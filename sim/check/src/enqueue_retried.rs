//! enqueue-retried: an enqueue the application is told failed was sent as
//! often as the client's contract says, unless an answer it does not retry
//! reached it; and a success that reached it is not reported as a failure.
//!
//! The other half of enqueue-once. enqueue-once judges that one call makes
//! at most one task; nothing asked whether a call the store would have taken
//! was given up too soon. The contract is the engine's own
//! (`Promises::enqueue_retry`): up to N sends while a send gets no answer in
//! time or a refusal the client retries. Judged from the store seam (every
//! send of the call that reached the store, and what became of it) and the
//! client seam (what the application was told). A send whose answer reached
//! the client within a few hops of its timeout cannot be told apart from
//! one that did not, and is not judged.

use super::{fact, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::op::{Op, Response};
use leasesim_vocab::promise::{Capabilities, EnqueueRetry};
use leasesim_vocab::truth::{ClientAnswer, Fact, Reply, Sender};
use std::collections::BTreeMap;

pub const NAME: &str = "enqueue-retried";

/// Two hops of the store link and their scheduling: within this of the send
/// timeout, whether an answer came in time is unknowable.
const SLACK_MS: u64 = 25;

/// What became of one send of an enqueue, as the harness saw it.
#[derive(Debug, Clone)]
enum Seen {
    /// Still at the store.
    Pending,
    /// No answer will come, for this reason.
    NoAnswer(&'static str),
    /// Answered at `at_ms` (`delivered`: the answer left for the client).
    Answer { at_ms: u64, response: Response, delivered: bool },
}

#[derive(Debug, Clone)]
struct Send {
    arrived_ms: u64,
    seen: Seen,
}

#[derive(Default)]
pub struct EnqueueRetried {
    /// Per client call, its sends in order of arrival.
    sends: BTreeMap<u64, Vec<Send>>,
    /// Request id -> (call, index of the send).
    by_req: BTreeMap<u64, (u64, usize)>,
    evaluations: u64,
}

impl EnqueueRetried {
    fn send(&mut self, req: u64) -> Option<&mut Send> {
        let &(call, i) = self.by_req.get(&req)?;
        self.sends.get_mut(&call).and_then(|s| s.get_mut(i))
    }

    /// Why the client had to send again after `last`, if it had to; `Err`
    /// when the call must not fail at all (its success reached it).
    fn retry_reason(last: &Send, contract: &EnqueueRetry) -> Result<Option<String>, String> {
        let Seen::Answer { at_ms, response, delivered } = &last.seen else {
            return Ok(Some(match &last.seen {
                Seen::NoAnswer(why) => (*why).to_string(),
                _ => "no answer (still at the store)".to_string(),
            }));
        };
        let took_ms = at_ms.saturating_sub(last.arrived_ms);
        if !delivered || took_ms > contract.send_timeout_ms + SLACK_MS {
            return Ok(Some(format!("no answer within its {} ms timeout", contract.send_timeout_ms)));
        }
        // Near the timeout only a final answer is in doubt: a refusal the
        // client retries asks for a retry whether it came in time or not.
        let in_time = took_ms + SLACK_MS <= contract.send_timeout_ms;
        match response {
            Response::Rejected { reason } if contract.retry_on.contains(reason) => {
                Ok(Some(format!("a {} refusal", reason.name())))
            }
            Response::Enqueued { task } if in_time => {
                Err(format!("the store's answer t{task} reached it at {at_ms} ms"))
            }
            _ => Ok(None),
        }
    }

    fn judge(&mut self, call: u64, now: u64, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(contract) = &ctx.promises().enqueue_retry else { return };
        self.evaluations += 1;
        let sends = self.sends.remove(&call).unwrap_or_default();
        let n = sends.len() as u32;
        if n >= contract.sends {
            return;
        }
        let Some(last) = sends.last() else {
            let message =
                format!("client call {call} was told its enqueue failed at {now} ms, but it never reached the store");
            out.push(Violation::new(NAME, now, message));
            return;
        };
        let message = match Self::retry_reason(last, contract) {
            Ok(None) => return,
            Ok(Some(why)) => format!(
                "client call {call} was told its enqueue failed at {now} ms after {n} of {} sends: its last send \
                 (at the store at {} ms) got {why}, which the client's contract retries",
                contract.sends, last.arrived_ms
            ),
            Err(success) => format!("client call {call} was told its enqueue failed at {now} ms, though {success}"),
        };
        out.push(Violation::new(NAME, now, message));
    }
}

impl Checker for EnqueueRetried {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and client seams: an enqueue reported failed was retried as the client's contract says, and a success that reached the client is never reported as a failure"
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.enqueue_keys
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match fact(rec) {
            Some(Fact::Arrived { req, from: Sender::Client(call), request: Op::Enqueue { .. }, duplicate: false }) => {
                let sends = self.sends.entry(*call).or_default();
                self.by_req.insert(*req, (*call, sends.len()));
                sends.push(Send { arrived_ms: now, seen: Seen::Pending });
            }
            Some(Fact::Dropped { req }) => {
                if let Some(s) = self.send(*req) {
                    s.seen = Seen::NoAnswer("no answer (lost at the store seam)");
                }
            }
            Some(Fact::Refused { req, response, .. }) => {
                if let Some(s) = self.send(*req) {
                    s.seen = Seen::Answer { at_ms: now, response: response.clone(), delivered: true };
                }
            }
            Some(Fact::Answered { req, response, reply, .. }) => {
                if let Some(s) = self.send(*req) {
                    s.seen = match reply {
                        Reply::Lost => Seen::NoAnswer("no answer (its answer was lost)"),
                        Reply::Sent | Reply::Late => {
                            Seen::Answer { at_ms: now, response: response.clone(), delivered: *reply == Reply::Sent }
                        }
                    };
                }
            }
            Some(Fact::Replied { req }) => {
                if let Some(Send { seen: Seen::Answer { at_ms, delivered, .. }, .. }) = self.send(*req) {
                    (*at_ms, *delivered) = (now, true);
                }
            }
            Some(Fact::ClientAnswered { call, answer: ClientAnswer::Enqueued { task } }) => match task {
                None => self.judge(*call, now, ctx, out),
                Some(_) => {
                    self.sends.remove(call);
                }
            },
            _ => {}
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::ARRIVED
            .or(Kinds::DROPPED)
            .or(Kinds::REFUSED)
            .or(Kinds::ANSWERED)
            .or(Kinds::REPLIED)
            .or(Kinds::CLIENT_ANSWERED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, H, PASS};
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::task::{TaskKind, TaskSpec};
    use leasesim_vocab::testimony::Event;
    use leasesim_vocab::truth::{ClientAnswer, ClientCall, Commit, Fact, Reply, Sender, TaskChange};

    fn spec() -> TaskSpec {
        TaskSpec { kind: TaskKind::Job, group: None, stage: None, index: None, not_before_ms: 0, queue: None }
    }

    /// Client call 1 sends its enqueue once per entry of `answers` (each
    /// answered 100 ms later as it says, `None`: lost), then is told it failed.
    fn call_failing(answers: &[Option<Response>], told_at_ms: u64) -> Vec<leasesim_vocab::history::Record> {
        let mut h =
            H::new().fact(Fact::ClientCalled { call: 1, client: 1, what: ClientCall::Enqueue { spec: spec() } });
        for (i, answer) in answers.iter().enumerate() {
            let (next, req) =
                h.at(i as u64 * 1_000).arrive(Sender::Client(1), Op::Enqueue { spec: spec(), key: Some(7) });
            h = next.at(i as u64 * 1_000 + 100);
            h = match answer {
                Some(response) => h.fact(Fact::Refused { req, response: response.clone(), fault: None }),
                None => h.fact(Fact::Dropped { req }),
            };
        }
        h.at(told_at_ms).fact(Fact::ClientAnswered { call: 1, answer: ClientAnswer::Enqueued { task: None } }).build()
    }

    /// Call 1's one send, answered `response` at `at_ms`; then it is told
    /// it failed.
    fn answered_at(at_ms: u64, response: Response) -> Vec<leasesim_vocab::history::Record> {
        let h = H::new().fact(Fact::ClientCalled { call: 1, client: 1, what: ClientCall::Enqueue { spec: spec() } });
        let (h, req) = h.arrive(Sender::Client(1), Op::Enqueue { spec: spec(), key: Some(7) });
        // A success commits its row; a refusal commits nothing.
        let mut commit = Commit::default();
        let mut h = h.at(at_ms);
        if let Response::Enqueued { task } = response {
            let mut after = crate::testkit::new_row(task, at_ms);
            after.spec = spec();
            commit.tasks.push(TaskChange { before: None, after });
            h = h.ev(Event::TaskCreated { task, spec: spec(), retry_at_ms: 0 });
        }
        h.fact(Fact::Answered { req, response, commit, reply: Reply::Sent })
            .at(at_ms + 10)
            .fact(Fact::ClientAnswered { call: 1, answer: ClientAnswer::Enqueued { task: None } })
            .build()
    }

    fn conflict() -> Option<Response> {
        Some(Response::Rejected { reason: Refusal::Conflict })
    }

    cases! {
        a_call_that_used_all_its_sends_may_fail:
            call_failing(&[conflict(), None, conflict()], 5_000) => PASS;
        a_final_refusal_ends_the_call:
            call_failing(&[None, Some(Response::Rejected { reason: Refusal::Missing })], 5_000) => PASS;
        a_conflict_given_up_at_once:
            call_failing(&[conflict()], 5_000) => &[(NAME, None)];
        a_lost_send_given_up:
            call_failing(&[conflict(), None], 5_000) => &[(NAME, None)];
        a_call_that_never_sent:
            call_failing(&[], 5_000) => &[(NAME, None)];
        a_success_reported_as_a_failure:
            answered_at(50, Response::Enqueued { task: 3 }) => &[(NAME, None)];
        a_success_at_the_timeout_is_not_judged:
            answered_at(9_990, Response::Enqueued { task: 3 }) => PASS;
        a_conflict_at_the_timeout_is_still_retried:
            answered_at(9_990, Response::Rejected { reason: Refusal::Conflict }) => &[(NAME, None)];
        a_success_past_the_timeout_was_rightly_given_up_on_once:
            answered_at(10_100, Response::Enqueued { task: 3 }) => &[(NAME, None)];
        a_successful_call_is_not_judged:
            H::new().created(1, TaskKind::Job).build() => PASS;
    }
}
