//! transactions: a transaction that spans round trips behaves as a SQL
//! store's does under Read Committed with row locks, judged at the store
//! seam from what reached the store and what it committed.
//!
//! - A row an open transaction locked (a fenced statement of it matched the
//!   row) is changed by nobody but that transaction's commit, and locked by
//!   no other transaction, until it ends.
//! - A commit changes only the rows its transaction's statements locked.
//!   (That nothing shows before COMMIT is `store-reply`'s rule.)
//! - The store says "no longer open" only of a transaction that is not:
//!   it was open `txn_timeout_ms`, its process has a newer incarnation (one
//!   whose request of the kind the engine names, `replaced_txns_end`,
//!   reached the store), the store restarted, it already ended, or it never
//!   opened; and it says so (or refuses) to every statement of a
//!   transaction that ended, even one whose ROLLBACK overtook its first
//!   statement.
//! - A request gives up on a row lock only after waiting `txn_timeout_ms`.
//! - At the network seam, the client keeps the protocol: it sends no
//!   statement of a transaction it ended (COMMIT or ROLLBACK sent), and
//!   before it starts another transaction for the same attempt it ends the
//!   one it gave up on (an abandoned transaction keeps its row locks until
//!   the store times it out). Nor does it go on with a transaction after
//!   the store told it, in that transaction, that the attempt's lease is
//!   not valid (a lease check guards what follows it: a failure written
//!   anyway spends a retry of a task the attempt no longer holds, or of an
//!   expired lease not yet reclaimed); a rollback is the way out. Judged
//!   for a statement sent after the answer left the store: a client that
//!   waits for each statement's answer (both engines here do; graphile
//!   sends no lease checks) sent it knowing the answer. (Requiring a
//!   whole hop after it would miss the engine that reacts at once: its
//!   rollback, or its write, leaves a few milliseconds after the answer.)
//!
//! The checker's model of open transactions and their locks is the view's
//! (`View::txns`), rebuilt from the statements' answers.

use super::{answer, commit, fact, Answer, Checker, Ctx, Violation};
use crate::Kinds;
use leasesim_vocab::history::Record;
use leasesim_vocab::ids::{Fence, TaskId, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::promise::Capabilities;
use leasesim_vocab::truth::{Commit, Fact, Reply, TxnSend};
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "transactions";

#[derive(Default)]
pub struct Transactions {
    evaluations: u64,
    /// Transactions their client ended (sent COMMIT or ROLLBACK).
    ended_by_client: BTreeSet<TxnId>,
    /// The latest transaction the client started for each attempt.
    latest_for: BTreeMap<Fence, TxnId>,
    /// Transactions in which a lease check was answered "not valid", and
    /// when the answer left the store.
    told_invalid: BTreeMap<TxnId, u64>,
}

/// The task a fenced statement speaks for.
fn statement_task(req: &Op) -> Option<TaskId> {
    req.fence().map(|f| f.task)
}

impl Transactions {
    /// Is `txn` open at `now` by the view (its timeout counted to `now`)?
    fn open_at(ctx: &Ctx, txn: TxnId, now: u64) -> Option<u64> {
        let t = ctx.view.txns.get(&txn)?;
        let superseded = ctx.view.disconnected(txn.owner);
        (t.in_time(now, ctx.view.txn_timeout_ms) && !superseded).then_some(t.opened_ms)
    }

    /// The other open transaction holding task `task` at `now`, if any.
    fn other_holder(ctx: &Ctx, task: TaskId, own: Option<TxnId>, now: u64) -> Option<TxnId> {
        ctx.view
            .txns
            .iter()
            .filter(|(id, t)| Some(**id) != own && t.locks.contains(&task))
            .map(|(id, _)| *id)
            .find(|id| Self::open_at(ctx, *id, now).is_some())
    }

    /// Rows a commit changed that another open transaction holds.
    fn isolation(
        &mut self,
        now: u64,
        c: &Commit,
        own: Option<TxnId>,
        who: &dyn Fn() -> String,
        ctx: &Ctx,
    ) -> Option<Violation> {
        if ctx.view.txns.is_empty() {
            return None;
        }
        self.evaluations += 1;
        c.tasks.iter().find_map(|ch| {
            let task = ch.after.id;
            let holder = Self::other_holder(ctx, task, own, now)?;
            let message = format!("t{task} changed by {} while transaction {holder} held its lock", who());
            Some(Violation::new(NAME, now, message).task(task))
        })
    }

    fn judge_statement(&mut self, now: u64, a: &Answer, txn: TxnId, commit: bool, ctx: &Ctx) -> Option<Violation> {
        self.evaluations += 1;
        let op = a.request.request.op_name();
        if let Response::Rejected { reason: Refusal::TxnClosed } = a.response {
            let never_opened = !ctx.view.txn_ended.contains(&txn);
            let superseded = ctx.view.disconnected(txn.owner);
            return match Self::open_at(ctx, txn, now) {
                Some(opened_ms) => Some(format!(
                    "{op} of {txn} told the transaction is no longer open; it opened at {opened_ms} ms and was"
                )),
                None if never_opened && !superseded && !matches!(a.request.request, Op::Rollback { .. }) => {
                    Some(format!("{op} of {txn} told the transaction is no longer open; it never opened"))
                }
                None => None,
            }
            .map(|m| Violation::new(NAME, now, m));
        }
        // The other half: a transaction that ended (its COMMIT or ROLLBACK
        // reached the store, even before its first statement; it timed
        // out; its process was replaced, as the engine's promise counts it)
        // is not open again for a late statement of it. (A second ROLLBACK changes nothing either way.)
        let rollback = matches!(a.request.request, Op::Rollback { .. });
        if ctx.view.txn_ended.contains(&txn) && !rollback && !matches!(a.response, Response::Rejected { .. }) {
            return Some(Violation::new(
                NAME,
                now,
                format!("{op} of {txn} was answered as if the transaction were open, but it had ended"),
            ));
        }
        let task = statement_task(&a.request.request)?;
        let selected = ctx.view.task(task).zip(a.request.request.fence()).is_some_and(|(t, f)| t.held_by(f));
        let matched = match a.response {
            Response::Valid { valid } => *valid,
            Response::Applied { .. } => selected,
            _ => false,
        };
        if let Some(holder) = Self::other_holder(ctx, task, Some(txn), now).filter(|_| matched) {
            return Some(
                Violation::new(
                    NAME,
                    now,
                    format!("{op} of {txn} matched t{task} while transaction {holder} held its lock"),
                )
                .task(task),
            );
        }
        if !commit {
            return None;
        }
        let mut locked = ctx.view.txns.get(&txn).map(|t| t.locks.clone()).unwrap_or_default();
        locked.insert(task);
        let stray = a.commit.tasks.iter().map(|ch| ch.after.id).find(|id| !locked.contains(id));
        let stray_stage = a
            .commit
            .stages
            .iter()
            .find(|s| !locked.iter().any(|id| ctx.view.task(*id).and_then(|t| t.stage()) == Some(s.stage)));
        match (stray, stray_stage) {
            (Some(id), _) => Some(format!("the commit of {txn} changed t{id}, which none of its statements locked")),
            (None, Some(s)) => {
                Some(format!("the commit of {txn} changed stage {}, which none of its statements locked", s.stage))
            }
            (None, None) => None,
        }
        .map(|m| Violation::new(NAME, now, m).task(task))
    }

    /// A request the store answered "timed out" because of a row lock.
    fn judge_lock_wait(&mut self, now: u64, a: &Answer, ctx: &Ctx) -> Option<Violation> {
        if !matches!(a.response, Response::Rejected { reason: Refusal::TimedOut }) {
            return None;
        }
        statement_task(&a.request.request)?;
        self.evaluations += 1;
        let waited_ms = now - a.request.handed_ms.unwrap_or(a.request.arrived_ms);
        (waited_ms < ctx.view.txn_timeout_ms).then(|| {
            Violation::new(
                NAME,
                now,
                format!(
                    "{} gave up on a row lock after {waited_ms} ms; txn_timeout_ms is {} ms",
                    a.request.request.op_name(),
                    ctx.view.txn_timeout_ms
                ),
            )
        })
    }
}

impl Transactions {
    /// What the client sent, in the order it sent it.
    fn judge_send(&mut self, now: u64, txn: TxnId, fence: Option<Fence>, send: TxnSend) -> Option<Violation> {
        self.evaluations += 1;
        if send != TxnSend::Rollback && self.ended_by_client.contains(&txn) {
            return Some(
                Violation::new(NAME, now, format!("{} sent a statement of {txn} after it ended it", txn.owner))
                    .process(txn.owner),
            );
        }
        if matches!(send, TxnSend::Commit | TxnSend::Rollback) {
            self.ended_by_client.insert(txn);
        }
        let fence = fence?;
        if let Some(told_ms) = self.told_invalid.get(&txn).filter(|&&t| now > t) {
            return Some(
                Violation::new(
                    NAME,
                    now,
                    format!(
                        "{} went on with {txn} for {fence} after the store told it at {told_ms} ms, in that transaction, \
                         that the lease is not valid",
                        txn.owner
                    ),
                )
                .fence(&fence),
            );
        }
        let before = self.latest_for.insert(fence, txn).filter(|&t| t != txn)?;
        (!self.ended_by_client.contains(&before)).then(|| {
            Violation::new(
                NAME,
                now,
                format!("{} started {txn} for {fence} without ending {before}, which it gave up on", txn.owner),
            )
            .fence(&fence)
        })
    }

    /// A lease check of `txn` answered "not valid", sent back at once (a
    /// copy delivered twice, or an answer held back, may not be the one its
    /// sender went on from).
    fn note_lease_check(&mut self, now: u64, a: &Answer, txn: TxnId) {
        let invalid = matches!(a.request.request.statement(), Op::LeaseValid { .. })
            && a.response == &(Response::Valid { valid: false });
        if invalid && !a.request.duplicate && a.reply == Reply::Sent {
            self.told_invalid.entry(txn).or_insert(now);
        }
    }
}

impl Checker for Transactions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "store and network seams: a row an open transaction locked is changed and locked by nobody else until it ends, a commit changes only rows its statements locked, 'no longer open' is said only of a transaction that is not, a lock wait gives up only after txn_timeout_ms, and a client never reuses a transaction it ended, nor moves on from one without ending it, nor goes on with one after a lease check in it said 'not valid'"
    }

    fn on_record(&mut self, rec: &Record, ctx: &Ctx, out: &mut Vec<Violation>) {
        let now = rec.at_ms;
        match answer(rec, ctx) {
            Some(a) => {
                let own = a.request.txn.filter(|(_, commit)| *commit).map(|(txn, _)| txn);
                let who = || format!("request {} ({})", a.req, a.request.request.op_name());
                out.extend(self.isolation(now, a.commit, own, &who, ctx));
                if let Some((txn, commit)) = a.request.txn {
                    out.extend(self.judge_statement(now, &a, txn, commit, ctx));
                    self.note_lease_check(now, &a, txn);
                }
                out.extend(self.judge_lock_wait(now, &a, ctx));
            }
            None => {
                if let Some(c) = commit(rec) {
                    let who = || "a change outside any request".to_string();
                    out.extend(self.isolation(now, c, None, &who, ctx));
                }
                if let Some(Fact::TxnSent { txn, fence, send, .. }) = fact(rec) {
                    out.extend(self.judge_send(now, *txn, *fence, *send));
                }
            }
        }
    }

    fn reads(&self) -> Kinds {
        Kinds::COMMIT.or(Kinds::TXN_SENT)
    }

    fn evaluations(&self) -> u64 {
        self.evaluations
    }

    fn applies(&self, caps: &Capabilities) -> bool {
        caps.transactions
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::testkit::{cases, fence, o, run_case_in, H, PASS};
    use leasesim_vocab::ids::TxnId;
    use leasesim_vocab::op::{Op, Refusal, Response};
    use leasesim_vocab::task::{Row, TaskKind, TaskState};
    use leasesim_vocab::testimony::Event;
    use leasesim_vocab::truth::{Sender, TxnSend};

    /// p1 runs t1 (a workflow task, 3 s lease from 10 ms) and its body fails
    /// at 200 ms; its failure transaction opens with a lease check at 300 ms
    /// that locks the row.
    fn locked() -> H {
        H::new()
            .up(o(1, 1))
            .up(o(2, 1))
            .heartbeat(o(1, 1))
            .heartbeat(o(2, 1))
            .created(1, TaskKind::WorkflowTask)
            .created(2, TaskKind::Job)
            .at(10)
            .grant(1, 1, o(1, 1))
            .permit(o(1, 1), 1, 1)
            .started(1, 1, o(1, 1))
            .at(200)
            .finished(1, 1, o(1, 1), false)
            .at(300)
            .in_txn(o(1, 1), 1, false)
            .lease_checked(1, 1, o(1, 1), true)
    }

    /// The worker drops the attempt's permit (its outcome written, or its
    /// finalization deadline passed).
    fn done(h: H) -> H {
        let at = h.now().max(1_000);
        h.at(at).unpermit(o(1, 1), 1, 1)
    }

    /// t2 (a job) run by p1 and completed in transaction 1 at 300 ms.
    fn committed_job() -> H {
        H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(2, TaskKind::Job)
            .at(10)
            .grant(2, 1, o(1, 1))
            .permit(o(1, 1), 2, 1)
            .started(2, 1, o(1, 1))
            .at(200)
            .finished(2, 1, o(1, 1), true)
            .at(300)
            .in_txn(o(1, 1), 1, true)
            .completed(2, 1, o(1, 1))
            .callback(2, 1, o(1, 1))
            .unpermit(o(1, 1), 2, 1)
    }

    /// Transaction `seq` of p1 sends t2's completion again (not committing).
    fn retried_completion(h: H, seq: u64) -> H {
        let f = fence(2, 1, o(1, 1));
        h.in_txn(o(1, 1), seq, false).answer(
            Sender::Worker(o(1, 1)),
            Op::Complete { fence: f },
            Response::Applied { retries: 0, retry_at_ms: None },
            vec![],
            &[],
        )
    }

    /// p1.1 sends something of its transaction `seq` (for t1's attempt 1
    /// when `task` is given).
    fn sent(h: H, seq: u64, task: Option<u64>, send: TxnSend) -> H {
        let txn = TxnId { owner: o(1, 1), seq };
        let f = task.map(|t| fence(t, 1, o(1, 1)));
        h.fact(leasesim_vocab::truth::Fact::TxnSent { from: o(1, 1), txn, fence: f, send })
    }

    /// t1's body (a 3 s lease from 10 ms) ends at 3000 ms and fails; its
    /// failure transaction's lease check reaches the store at 3100 ms,
    /// after the expiry, and is answered "not valid".
    fn told_expired() -> H {
        let h = H::new().up(o(1, 1)).heartbeat(o(1, 1)).created(1, TaskKind::WorkflowTask).at(10);
        let h = h.grant(1, 1, o(1, 1)).permit(o(1, 1), 1, 1).started(1, 1, o(1, 1));
        // Cut off across the renewal margin: why its lease ran out (a
        // worker that could reach the store owed a renewal while it
        // worked: keepalive's).
        let h = h.at(1_900).partitioned(1).at(3_000).finished(1, 1, o(1, 1), false).at(3_050).rejoined(1);
        let h = sent(h.at(3_090), 1, Some(1), TxnSend::Statement);
        h.at(3_100).in_txn(o(1, 1), 1, false).lease_checked(1, 1, o(1, 1), false)
    }

    /// A statement of `by`'s that the harness has no concept for.
    fn other_of(by: leasesim_vocab::ids::Owner) -> Op {
        Op::Other { what: "last-migration".into(), by: Some(by) }
    }

    fn closed(h: H, at: u64) -> H {
        let f = fence(1, 1, o(1, 1));
        let txn = TxnId { owner: o(1, 1), seq: 1 };
        let stmt = Box::new(Op::Fail { fence: f, error: leasesim_vocab::task::TaskError::Conflict });
        h.at(at).answer(
            Sender::Worker(o(1, 1)),
            Op::Exec { txn, stmt, commit: true },
            Response::Rejected { reason: Refusal::TxnClosed },
            vec![],
            &[],
        )
    }

    /// t1's body fails at 100 ms; the ROLLBACK of its failure's
    /// transaction 1 reaches the store at 200 ms, before the transaction's
    /// first statement (its lease check), which comes at 300 ms.
    fn rollback_overtook_the_statement() -> H {
        H::new()
            .up(o(1, 1))
            .heartbeat(o(1, 1))
            .created(1, TaskKind::Job)
            .attempt_body(10, 1, 1, o(1, 1), false)
            .at(200)
            .rolled_back(o(1, 1), 1)
            .at(300)
    }

    /// The spec of an engine whose store ends a replaced incarnation's
    /// transactions only at the newer one's first claim or heartbeat (the
    /// built-in engine's).
    fn ends_at_claim_or_heartbeat() -> crate::Spec {
        let mut s = crate::testkit::spec();
        s.promises.replaced_txns_end = leasesim_vocab::promise::ReplacedTxnsEnd::ClaimOrHeartbeat;
        s
    }

    /// p1.1 was replaced: p1.2 is up and its recovery pass (not a claim, not
    /// a heartbeat) reaches the store at 1100 ms.
    fn replaced_then_recovery_pass(h: H) -> H {
        h.up(o(1, 2)).at(1_100).answer(
            Sender::Worker(o(1, 2)),
            Op::ReclaimExpired { by: o(1, 2) },
            Response::Released { tasks: 0 },
            vec![],
            &[],
        )
    }

    /// p1.1's failure of t1, the COMMIT of transaction 1, is answered
    /// "applied" at 1200 ms (a COMMIT the store held through p1's restart).
    fn failure_committed_late(h: H) -> H {
        done(h.at(1_200).in_txn(o(1, 1), 1, true).failed(1, 1, o(1, 1), 1, Some(2_200)))
    }

    /// swarm seed 87125656050862: the built-in store ends p3.1's
    /// transaction only at p3.2's first claim or heartbeat; p3.2's recovery
    /// passes came first, and p3.1's COMMIT, held by the store until the
    /// heal, committed before p3.2 claimed. Judged by the earlier rule it
    /// was "answered as if the transaction were open, but it had ended".
    #[test]
    fn a_commit_before_the_new_incarnations_first_claim_passes_where_the_claim_ends_them() {
        let history = failure_committed_late(replaced_then_recovery_pass(locked())).build();
        run_case_in("claim ends them", &ends_at_claim_or_heartbeat(), history, PASS);
    }

    /// The same history, for a store that ends them at the newer
    /// incarnation's first request of any kind.
    #[test]
    fn a_commit_after_the_new_incarnations_first_request_fails_where_any_request_ends_them() {
        let history = failure_committed_late(replaced_then_recovery_pass(locked())).build();
        run_case_in("any request ends them", &crate::testkit::spec(), history, &[(NAME, None)]);
    }

    /// The built-in store's rule still ends them: p1.2's heartbeat reached
    /// the store before the COMMIT was answered.
    #[test]
    fn a_commit_after_the_new_incarnations_heartbeat_fails_where_the_claim_ends_them() {
        let history = failure_committed_late(replaced_then_recovery_pass(locked()).heartbeat(o(1, 2))).build();
        run_case_in("heartbeat ends them", &ends_at_claim_or_heartbeat(), history, &[(NAME, None)]);
    }

    /// Nor does the recovery pass free the row for the built-in store:
    /// p1.1's transaction still holds it, so a renewal outside it is a
    /// write past its lock.
    #[test]
    fn a_recovery_pass_of_the_new_incarnation_frees_no_lock_where_the_claim_ends_them() {
        let history = replaced_then_recovery_pass(done(locked())).at(1_200).renew(1, 1, o(1, 1)).build();
        run_case_in("lock still held", &ends_at_claim_or_heartbeat(), history, &[(NAME, Some(1))]);
    }

    /// p1.1 was replaced: p1.2's first request reaches the store at 1100 ms
    /// and is lost there (dropped, never answered), if `arrives`; then p1.1's
    /// renewal of t1 outside its transaction is answered at 1200 ms.
    fn replaced_then_renewed(arrives: bool) -> H {
        let mut h = done(locked()).up(o(1, 2)).at(1_100);
        if arrives {
            let (arrived, req) = h.arrive(Sender::Worker(o(1, 2)), Op::ReclaimExpired { by: o(1, 2) });
            h = arrived.fact(leasesim_vocab::truth::Fact::Dropped { req });
        }
        h.at(1_200).renew(1, 1, o(1, 1))
    }

    /// graphile-recovery seed 122199 (a fresh range): p3.13's first request
    /// reached the store and was lost there; graphile's store had closed
    /// p3.12's transaction on its arrival, so another worker's COMMIT
    /// changed the row that transaction had locked. The view ended it only
    /// at the answer of a newer incarnation's request, which never came:
    /// "t23 changed by request 905 (commit) while transaction x2@p3.12
    /// held its lock".
    #[test]
    fn a_newer_incarnations_first_request_ends_the_older_ones_transactions_on_arrival() {
        run_case_in("arrived, lost", &crate::testkit::spec(), replaced_then_renewed(true).build(), PASS);
    }

    /// Nothing of p1.2 reached the store: p1.1's transaction still holds t1.
    #[test]
    fn a_write_past_the_lock_of_a_replaced_incarnation_nothing_newer_reached_fails() {
        let expect: &[(&str, Option<u64>)] = &[(NAME, Some(1))];
        run_case_in("nothing arrived", &crate::testkit::spec(), replaced_then_renewed(false).build(), expect);
    }

    /// A store whose transactions end after `txn_timeout_ms` (500 ms here)
    /// counted as `from` says.
    fn timeout_from(from: leasesim_vocab::promise::TxnTimeoutFrom) -> crate::Spec {
        let mut s = crate::testkit::spec();
        s.promises.txn_timeout_ms = 500;
        s.promises.txn_timeout_from = from;
        s
    }

    /// t1's failure transaction (opened at 300 ms by its lease check) checks
    /// the lease again at 600 ms, and its COMMIT is answered "applied" at
    /// `commit_ms`.
    fn busy_then_committed(commit_ms: u64) -> H {
        let h = locked().at(600).in_txn(o(1, 1), 1, false).lease_checked(1, 1, o(1, 1), true);
        done(h.at(commit_ms).in_txn(o(1, 1), 1, true).failed(1, 1, o(1, 1), 1, Some(commit_ms + 1_000)))
    }

    /// graphile-recovery seed 9100000584: x4@p2.1 opened at 60048 ms, its
    /// last statement was answered at 76667 ms, its COMMIT at 133809 ms:
    /// 73 s after it opened, 57 s idle, inside PostgreSQL's 60 s
    /// `idle_in_transaction_session_timeout`. Judged from the open, it was
    /// "answered as if the transaction were open, but it had ended".
    #[test]
    fn a_commit_inside_the_idle_timeout_passes_where_it_counts_from_the_latest_statement() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Idle);
        run_case_in("idle, in time", &spec, busy_then_committed(1_000).build(), PASS);
    }

    /// The same commit, where the timeout counts from the open.
    #[test]
    fn a_commit_past_the_timeout_from_the_open_fails_where_it_counts_from_the_open() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Open);
        run_case_in("from the open", &spec, busy_then_committed(1_000).build(), &[(NAME, None)]);
    }

    /// Idle past the timeout since its latest statement: ended.
    #[test]
    fn a_commit_past_the_idle_timeout_fails() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Idle);
        run_case_in("idle, late", &spec, busy_then_committed(1_100).build(), &[(NAME, None)]);
    }

    /// t1's transaction, its lease check answered at 600 ms (idle from
    /// then: 500 ms of timeout), sends another that reaches the store at
    /// `arrive_ms` and is answered "valid" at 1,300 ms (a stall held it).
    /// p2's heartbeat at 1,200 ms lets the view look at the transaction
    /// between its timeout and the answer.
    fn statement_held_by_the_store(arrive_ms: u64) -> H {
        let h = locked().at(600).in_txn(o(1, 1), 1, false).lease_checked(1, 1, o(1, 1), true);
        let check = Op::LeaseValid { fence: fence(1, 1, o(1, 1)) };
        let (h, req) = h.at(arrive_ms).in_txn(o(1, 1), 1, false).arrive(Sender::Worker(o(1, 1)), check);
        let answer = leasesim_vocab::truth::Fact::Answered {
            req,
            response: Response::Valid { valid: true },
            commit: Default::default(),
            reply: leasesim_vocab::truth::Reply::Sent,
        };
        h.at(1_200).heartbeat(o(2, 1)).at(1_300).fact(answer)
    }

    /// graphile-recovery seed 120019 (a fresh range): x2@p1.1's statement
    /// reached the store 52 s into its 60 s idle timeout and a store stall
    /// held it 8 s, past the timeout; it was answered as open, as
    /// PostgreSQL's would be (a session running a statement is not idle).
    /// Judged by the idle clock alone, it was "answered as if the
    /// transaction were open, but it had ended".
    #[test]
    fn a_statement_that_reached_the_store_in_time_keeps_its_transaction_open_until_answered() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Idle);
        run_case_in("arrived in time", &spec, statement_held_by_the_store(1_000).build(), PASS);
    }

    /// The same statement reaching the store after the idle timeout ran
    /// out: its transaction had ended.
    #[test]
    fn a_statement_that_reached_the_store_after_the_idle_timeout_fails() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Idle);
        run_case_in("arrived late", &spec, statement_held_by_the_store(1_150).build(), &[(NAME, None)]);
    }

    /// Where the timeout counts from the open, a statement in progress
    /// does not keep its transaction open.
    #[test]
    fn a_statement_held_past_the_timeout_from_the_open_fails() {
        let spec = timeout_from(leasesim_vocab::promise::TxnTimeoutFrom::Open);
        run_case_in("from the open", &spec, statement_held_by_the_store(700).build(), &[(NAME, None)]);
    }

    cases! {
        a_statement_after_its_rollback_reopens_the_transaction:
            rollback_overtook_the_statement().in_txn(o(1, 1), 1, false).lease_checked(1, 1, o(1, 1), true).build()
            => &[(NAME, None)];
        a_statement_after_its_rollback_told_no_longer_open_passes:
            rollback_overtook_the_statement()
                .in_txn(o(1, 1), 1, false)
                .answer(Sender::Worker(o(1, 1)), Op::LeaseValid { fence: fence(1, 1, o(1, 1)) },
                    Response::Rejected { reason: Refusal::TxnClosed }, vec![], &[])
                .build()
            => PASS;
        a_failure_committed_with_its_lease_check_passes:
            done(locked().at(400).in_txn(o(1, 1), 1, true).failed(1, 1, o(1, 1), 1, Some(1_400))).build()
            => PASS;
        a_recovery_pass_takes_a_locked_row:
            // The lease ran out at 3010 while the transaction held the row:
            // reclaim must skip it until the transaction ends.
            done(locked()).at(3_100).released(1, 1, o(2, 1)).build()
            // (The failure never committed: outcome-kept's.)
            => &[(NAME, Some(1)), ("outcome-kept", Some(1))];
        a_rolled_back_transaction_leaves_the_row_free:
            done(locked().at(400).rolled_back(o(1, 1), 1)).at(3_100).released(1, 1, o(2, 1)).build()
            // Rolled back with nothing refused: the failure is lost.
            => &[("outcome-kept", Some(1))];
        an_open_transaction_told_it_is_closed:
            done(closed(locked(), 400)).build()
            => &[(NAME, None)];
        a_transaction_past_its_timeout_told_it_is_closed_passes:
            // The scenario's txn_timeout_ms is the default 30 s.
            closed(done(locked()), 30_300).build()
            => &[("outcome-kept", Some(1))];
        a_commit_writes_a_row_no_statement_locked:
            done(locked().at(400).in_txn(o(1, 1), 1, true).answer(
                Sender::Worker(o(1, 1)),
                Op::Fail { fence: fence(1, 1, o(1, 1)), error: leasesim_vocab::task::TaskError::Conflict },
                Response::Applied { retries: 1, retry_at_ms: Some(1_400) },
                vec![Event::WriteApplied { fence: fence(1, 1, o(1, 1)), write: leasesim_vocab::testimony::WriteKind::Fail, retries: 1, retry_at_ms: Some(1_400), terminal: false }],
                &[
                    (1, &|t: &mut Row| { t.retries = 1; t.owner = None; t.lease_expiry_ms = None; t.state = TaskState::Ready; t.retry_at_ms = 1_400; }),
                    (2, &|t: &mut Row| t.state = TaskState::Dead),
                ],
            )).build()
            => &[(NAME, Some(1)), ("fenced-completion", Some(1)), ("retry-budget", Some(2))];
        a_statement_shows_its_write_before_commit:
            // store-reply's rule: nothing a transaction writes shows before
            // COMMIT.
            done(locked().at(400).in_txn(o(1, 1), 1, false).answer(
                Sender::Worker(o(1, 1)),
                Op::Fail { fence: fence(1, 1, o(1, 1)), error: leasesim_vocab::task::TaskError::Conflict },
                Response::Applied { retries: 1, retry_at_ms: Some(1_400) },
                vec![Event::WriteApplied { fence: fence(1, 1, o(1, 1)), write: leasesim_vocab::testimony::WriteKind::Fail, retries: 1, retry_at_ms: Some(1_400), terminal: false }],
                &[(1, &|t: &mut Row| { t.retries = 1; t.owner = None; t.lease_expiry_ms = None; t.state = TaskState::Ready; t.retry_at_ms = 1_400; })],
            )).build()
            => &[("store-reply", Some(1)), (NAME, Some(1))];
        a_completion_retried_on_a_done_row_locks_nothing:
            // t2's completion committed but its answer was lost: each retry
            // of its transaction reads the done row ("applied" again) and
            // locks nothing, so two retries never contend.
            done(retried_completion(retried_completion(committed_job(), 2), 3)).build()
            => PASS;
        a_newer_incarnation_ends_the_old_ones_transactions:
            // p1.2's long poll reaches the store (held, answered later): from
            // then on p1.1's transaction is gone and its row free, so p1.1's
            // waiting renewal goes through.
            done(locked())
                .up(o(1, 2))
                .fact(leasesim_vocab::truth::Fact::Arrived {
                    req: 100,
                    from: Sender::Worker(o(1, 2)),
                    request: Op::Claim { owner: o(1, 2), max: 1, wait_ms: 5_000 },
                    duplicate: false,
                })
                .fact(leasesim_vocab::truth::Fact::Handed { req: 100 })
                .at(1_100)
                .renew(1, 1, o(1, 1))
                .build()
            => PASS;
        a_newer_incarnations_first_statement_of_any_kind_ends_them:
            // graphile's store ends a replaced process's transactions at the
            // newer incarnation's first statement, a read of its own.
            done(locked())
                .up(o(1, 2))
                .answer(Sender::Worker(o(1, 2)), other_of(o(1, 2)), Response::Rows { count: 1 }, vec![], &[])
                .at(1_100)
                .renew(1, 1, o(1, 1))
                .build()
            => PASS;
        the_same_incarnations_read_ends_nothing:
            done(locked())
                .answer(Sender::Worker(o(1, 1)), other_of(o(1, 1)), Response::Rows { count: 1 }, vec![], &[])
                .at(1_100)
                .renew(1, 1, o(1, 1))
                .build()
            => &[(NAME, Some(1))];
        a_transaction_reused_after_its_rollback:
            sent(sent(sent(H::new().up(o(1, 1)), 1, Some(1), TxnSend::Statement), 1, None, TxnSend::Rollback), 1, Some(1), TxnSend::Commit).build()
            => &[(NAME, None)];
        a_transaction_given_up_without_a_rollback:
            sent(sent(H::new().up(o(1, 1)), 1, Some(1), TxnSend::Statement), 2, Some(1), TxnSend::Statement).build()
            => &[(NAME, Some(1))];
        a_transaction_rolled_back_before_the_next_try_passes:
            sent(sent(sent(sent(H::new().up(o(1, 1)), 1, Some(1), TxnSend::Statement), 1, None, TxnSend::Rollback), 2, Some(1), TxnSend::Statement), 2, Some(1), TxnSend::Commit).build()
            => PASS;
        a_failure_sent_after_its_lease_check_said_not_valid:
            // t1's lease ran out at 3010 ms, not yet reclaimed: the check
            // at 3100 ms says so, and p1.1 sends the failure anyway.
            sent(told_expired().at(3_200), 1, Some(1), TxnSend::Commit).build()
            => &[(NAME, Some(1))];
        a_rollback_after_its_lease_check_said_not_valid_passes:
            sent(told_expired().at(3_200), 1, None, TxnSend::Rollback).build()
            => PASS;
        a_statement_sent_as_the_answer_left_is_not_judged:
            // (the same millisecond as the answer: sent before it arrived)
            sent(told_expired(), 1, Some(1), TxnSend::Commit).build()
            => PASS;
        a_lock_wait_given_up_at_once:
            done(locked().at(400).answer(
                Sender::Worker(o(1, 1)),
                Op::Renew { fence: fence(1, 1, o(1, 1)) },
                Response::Rejected { reason: Refusal::TimedOut },
                vec![],
                &[],
            )).build()
            => &[(NAME, None)];
    }
}
