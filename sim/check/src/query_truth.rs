//! query-truth: an index query tells the truth. The store answers
//! "materialized" exactly when the index is materialized; the application is
//! told "materialized" only when the store had materialized it, never the
//! opposite of the answer the store delivered to it, and never "not
//! materialized" before the lag it asked to wait unless an answer came. The
//! store answers "not materialized" only once the query's lag ran out.
//!
//! Judged at the store seam (the answer against the store's materialized
//! set, read by the harness) and the client seam (what the application was
//! told).

use super::{answer, fact, promise, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::op::{Op, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::truth::{ClientAnswer, ClientCall, Fact, Reply, Sender};
use std::collections::BTreeMap;

pub const NAME: &str = "query-truth";

/// What a store's answer to a query said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Materialized(bool),
    /// A refusal: it ends the client's wait, says nothing of the index.
    Refused,
}

#[derive(Debug, Clone, Copy)]
struct Delivered {
    said: Said,
    sent_ms: u64,
}

#[derive(Default)]
pub struct QueryTruth {
    /// Per client call: the answer the store sent it, and when.
    delivered: BTreeMap<u64, Delivered>,
    /// Late answers (request -> (call, what it says)) until they leave.
    late: BTreeMap<u64, (u64, Said)>,
    evaluations: u64,
}

impl QueryTruth {
    fn judge_store(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let Some(a) = answer(rec, ctx) else { return };
        let Op::QueryIndex { index, lag_timeout_ms } = &a.request.request else { return };
        let Response::Query { materialized } = a.response else {
            // Any other answer (a refusal) still ends the client's wait.
            if let (Sender::Client(call), Reply::Sent) = (a.request.from, a.reply) {
                self.delivered.insert(call, Delivered { said: Said::Refused, sent_ms: now });
            }
            return;
        };
        self.evaluations += 1;
        let truth = ctx.view.materialized.get(index).map(|(at, _)| *at);
        if *materialized != truth.is_some() {
            let state = truth.map_or_else(|| "it is not".to_string(), |at| format!("it was materialized at {at} ms"));
            out.push(Violation::new(
                NAME,
                now,
                format!("index {index}: the store answered materialized={materialized} at {now} ms, but {state}"),
            ));
        }
        // The store holds a lag-bounded query until the index materializes
        // or the lag runs out: "not materialized" sooner is a wait cut short
        // (counted from the request's arrival, the most lenient base).
        let waited_ms = now.saturating_sub(a.request.arrived_ms);
        if !*materialized && waited_ms < *lag_timeout_ms {
            out.push(Violation::new(
                NAME,
                now,
                format!(
                    "index {index}: the store answered not materialized {waited_ms} ms after the query arrived, \
                     before its {lag_timeout_ms} ms lag ran out"
                ),
            ));
        }
        if let Sender::Client(call) = a.request.from {
            let said = Said::Materialized(*materialized);
            match a.reply {
                Reply::Sent => {
                    self.delivered.insert(call, Delivered { said, sent_ms: now });
                }
                Reply::Late => {
                    self.late.insert(a.req, (call, said));
                }
                Reply::Lost => {}
            }
        }
    }

    fn judge_client(&mut self, now: u64, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        match fact(rec) {
            Some(Fact::Replied { req }) => {
                if let Some((call, said)) = self.late.remove(req) {
                    self.delivered.insert(call, Delivered { said, sent_ms: now });
                }
            }
            Some(Fact::ClientAnswered { call, answer: ClientAnswer::Queried { materialized } }) => {
                let Some(c) = ctx.view.calls.get(call) else { return };
                let ClientCall::Query { index, lag_timeout_ms } = c.what else { return };
                self.evaluations += 1;
                let truth = ctx.view.materialized.get(&index).map(|(at, _)| *at);
                // A call whose answer never arrived (lost, late past the
                // client's deadline) may report "not materialized": it could
                // not know better. It may never report "materialized" untrue.
                // An answer sent just before the client's deadline may land
                // after it: only one sent a network latency earlier counts.
                // Nor may it give up before the lag it was asked to wait:
                // the store holds the query that long by contract.
                // A store's "not materialized" ends the wait only if the
                // store was asked to wait the application's whole lag: it
                // answers so once the request's lag ran out, which is past
                // the call's lag only if the request asked for all of it.
                let waited_ms = now.saturating_sub(c.called_ms);
                let delivered = self.delivered.get(call).map(|d| (d.said, d.sent_ms));
                let problem = match (*materialized, truth, delivered) {
                    (true, None, _) => Some("told materialized, but the store had not materialized it".to_string()),
                    (false, _, Some((Said::Materialized(true), sent_ms)))
                        if sent_ms + promise::NET_LATENCY_MAX_MS <= now =>
                    {
                        Some("told not materialized, but the store delivered materialized".to_string())
                    }
                    (false, _, None) if waited_ms < lag_timeout_ms => Some(format!(
                        "told not materialized after {waited_ms} ms with no answer from the store, \
                         before the {lag_timeout_ms} ms lag it asked to wait"
                    )),
                    (false, _, Some((Said::Materialized(false), _))) if waited_ms < lag_timeout_ms => Some(format!(
                        "told not materialized after {waited_ms} ms, before the {lag_timeout_ms} ms lag it asked \
                         to wait: the store was asked to wait less"
                    )),
                    _ => None,
                };
                if let Some(problem) = problem {
                    out.push(Violation::new(
                        NAME,
                        now,
                        format!("index {index}: client call {call} at {now} ms: {problem}"),
                    ));
                }
            }
            _ => {}
        }
    }
}

impl Checker for QueryTruth {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and client seams: a query answers materialized exactly when the store had materialized the index, not-materialized only once the lag ran out, and the application is told what the store answered, not before its lag unless answered"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        self.judge_store(rec.at_ms, rec, ctx, out);
        self.judge_client(rec.at_ms, rec, ctx, out);
    }

    fn reads(&self) -> Kinds {
        Kinds::ANSWERED.or(Kinds::REPLIED).or(Kinds::CLIENT_ANSWERED)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.indexes
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, o, H, PASS};

    /// The application asks about index 7 (never built) with a 1000 ms lag;
    /// the client asks the store to hold the query `asked_ms`, the store
    /// answers "not materialized" when that ran out, and the application is
    /// told so 10 ms later.
    fn asked_the_store_for(asked_ms: u64) -> Vec<leasesim_vocab::history::Record> {
        use leasesim_vocab::op::{Op, Response};
        use leasesim_vocab::truth::{ClientAnswer, ClientCall, Fact, Sender};
        let what = ClientCall::Query { index: 7, lag_timeout_ms: 1_000 };
        let h = H::new().up(o(1, 1)).at(100).fact(Fact::ClientCalled { call: 1, client: 1, what });
        let (h, req) = h.at(102).arrive(Sender::Client(1), Op::QueryIndex { index: 7, lag_timeout_ms: asked_ms });
        let answer = Response::Query { materialized: false };
        let h = h.at(102 + asked_ms).fact(Fact::Answered {
            req,
            response: answer,
            commit: Default::default(),
            reply: leasesim_vocab::truth::Reply::Sent,
        });
        let told = ClientAnswer::Queried { materialized: false };
        h.at(112 + asked_ms).fact(Fact::ClientAnswered { call: 1, answer: told }).at(5_000).end().build()
    }

    /// Index 7 is built by t1 and materialized at 110 ms.
    fn built() -> H {
        H::new().up(o(1, 1)).heartbeat(o(1, 1)).created_index(1, 7).attempt_ok(10, 1, 1, o(1, 1))
    }

    cases! {
        the_store_asked_to_wait_the_whole_lag:
            asked_the_store_for(1_000) => PASS;
        the_store_asked_to_wait_less_than_the_application:
            asked_the_store_for(500) => &[(NAME, None)];
        truthful_answers_pass:
            H::new().up(o(1, 1)).heartbeat(o(1, 1)).created_index(1, 7)
                .queried(7, Some(false), false)
                .attempt_ok(1_010, 1, 1, o(1, 1))
                .at(1_200).queried(7, Some(true), true)
                // No answer arrived in its whole lag: the application may
                // be told "not yet".
                .queried_after(7, None, false, 1_000)
                .build()
            => PASS;
        store_says_not_materialized_after_it_was:
            built().at(500).answered(7, false).build()
            => &[(NAME, None)];
        store_says_materialized_before_it_was:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).answered(7, true).build()
            => &[(NAME, None)];
        client_told_ready_without_an_answer:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).queried(7, None, true).build()
            => &[(NAME, None)];
        client_told_the_opposite_of_the_answer:
            built().at(500).queried_after(7, Some(true), false, 150).build()
            => &[(NAME, None)];
        store_cut_the_wait_short:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).answered_after(7, false, 999).build()
            => &[(NAME, None)];
        store_waited_the_whole_lag_passes:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).answered_after(7, false, 1_000).build()
            => PASS;
        client_gave_up_before_its_lag:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).queried_after(7, None, false, 999).build()
            => &[(NAME, None)];
        refusal_ends_the_wait:
            H::new().up(o(1, 1)).created_index(1, 7).at(5).queried_refused(7).build()
            => PASS;
        // Sent 5 ms before the client's deadline: it may land after it.
        answer_sent_at_the_deadline_may_miss_it:
            built().at(500).queried_after(7, Some(true), false, 5).build()
            => PASS;
    }
}
