//! graphile's store process behind the harness's store seam: the model of
//! its PostgreSQL answering its statements, each classified in the
//! harness's words, and the model's rows read back by the harness.
//!
//! The store process keeps what a PostgreSQL server keeps per connection:
//! a session for each autocommit statement and each transaction; a statement
//! that must wait for a lock waits until the holder's transaction ends (at
//! most `lock_timeout_ms`, then SQLSTATE 55P03); a transaction left idle
//! longer than `txn_timeout_ms` is rolled back (25P03 to its next
//! statement); the connections of a process that died or was replaced close
//! (their transactions roll back). `now()` is the store's clock.

use crate::book::Book;
use crate::config::GraphileConfig;
use crate::driver::{Answer, Statement};
use crate::{classify, Graphile};
use chrono::{DateTime, Utc};
use graphile_worker_database::{DbCell, DbError};
use leasesim_graphile_model::{Db, Exec, JobRow, Output, SessionId, Stmt};
use leasesim_vocab::faults::FaultKind;
use leasesim_vocab::ids::{ProcId, TaskId, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::task::{QueueId, QueueRow, Row, TaskKind, TaskSpec, TaskState};
use leasesim_vocab::truth::{Commit, QueueChange, Sender, TaskChange};
use leasesim_world::engine::{BoxFuture, LastLook, StoreSeam};
use leasesim_world::world::sim_clock::SimTime;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// The schema graphile's worker and utils are given.
pub const SCHEMA: &str = "graphile_worker";

/// One open transaction: its session, and when it was last busy.
#[derive(Debug, Clone, Copy)]
struct OpenTxn {
    session: SessionId,
    idle_since_ms: u64,
}

/// How a transaction ended without its client's COMMIT or ROLLBACK.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// Its client ended it (COMMIT or ROLLBACK): a later statement opens
    /// nothing (the driver never sends one).
    ByClient,
    /// Idle past `txn_timeout_ms`: the server terminated the session.
    IdleTimeout,
    /// A statement failed (a lock timeout): the block is aborted.
    Aborted,
    /// Its process died or was replaced: the connection is gone.
    Closed,
}

#[derive(Debug, Default)]
struct Sessions {
    next: SessionId,
    open: BTreeMap<TxnId, OpenTxn>,
    ended: BTreeMap<TxnId, Ended>,
    /// The newest incarnation of each process the store heard from.
    newest: BTreeMap<ProcId, u32>,
}

/// The tap's mirror of the rows it has read, in the harness's words.
#[derive(Debug, Default)]
struct Mirror {
    version: u64,
    tasks: BTreeMap<TaskId, Row>,
    queues: BTreeMap<i32, (QueueId, QueueRow)>,
}

pub struct GraphileStore {
    db: Mutex<Db>,
    sessions: Mutex<Sessions>,
    /// A transaction ended: statements waiting for its locks try again.
    ended: Notify,
    mirror: Mutex<Mirror>,
    pub(crate) book: Book,
    time: SimTime,
    /// The store's wall clock at the start of the world (`now()` is this
    /// plus the world's time).
    epoch: DateTime<Utc>,
    cfg: GraphileConfig,
}

impl GraphileStore {
    pub fn new(cfg: GraphileConfig, time: SimTime, book: Book) -> Self {
        GraphileStore {
            db: Mutex::new(Db::new(SCHEMA)),
            sessions: Mutex::new(Sessions::default()),
            ended: Notify::new(),
            mirror: Mutex::new(Mirror::default()),
            book,
            epoch: Utc::now(),
            time,
            cfg,
        }
    }

    /// The store's clock: `now()`.
    fn now(&self) -> DateTime<Utc> {
        self.epoch + chrono::Duration::milliseconds(self.time.now_ms() as i64)
    }

    /// A store timestamp in the world's ms (rounded down).
    pub(crate) fn ms(&self, ts: DateTime<Utc>) -> u64 {
        (ts - self.epoch).num_milliseconds().max(0) as u64
    }

    /// The first of the world's ms at which a store time has come: the store
    /// keeps µs and reads its clock in whole ms, so a job due at 1.4 ms is
    /// due from 2 ms on.
    fn due_ms(&self, ts: DateTime<Utc>) -> u64 {
        let us = (ts - self.epoch).num_microseconds().unwrap_or(i64::MAX).max(0) as u64;
        us.div_ceil(1_000)
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Db> {
        self.db.lock().expect("graphile model")
    }

    /// Ends `txn` without a commit: its writes vanish, its locks are freed.
    fn end_txn(&self, s: &mut Sessions, txn: TxnId, how: Ended) {
        if let Some(open) = s.open.remove(&txn) {
            self.db().rollback(open.session);
            self.ended.notify_waiters();
        }
        s.ended.entry(txn).or_insert(how);
    }

    /// What the server does before each request: transactions idle past
    /// their timeout end, and a newer incarnation of a process means its
    /// older ones' connections are gone.
    fn housekeeping(&self, from: Sender) {
        let now_ms = self.time.now_ms();
        let mut s = self.sessions.lock().expect("sessions");
        let idle: Vec<TxnId> = s
            .open
            .iter()
            .filter(|(_, t)| now_ms >= t.idle_since_ms + self.cfg.txn_timeout_ms)
            .map(|(txn, _)| *txn)
            .collect();
        for txn in idle {
            self.end_txn(&mut s, txn, Ended::IdleTimeout);
        }
        if let Sender::Worker(owner) = from {
            let newest = s.newest.entry(owner.proc).or_insert(owner.incarnation);
            if owner.incarnation > *newest {
                *newest = owner.incarnation;
            }
            let newest = *newest;
            let gone: Vec<TxnId> =
                s.open.keys().filter(|t| t.owner.proc == owner.proc && t.owner.incarnation < newest).copied().collect();
            for txn in gone {
                self.end_txn(&mut s, txn, Ended::Closed);
            }
        }
    }

    /// The session a statement runs on: a fresh one for an autocommit
    /// statement, its transaction's (begun by its first statement).
    fn session_for(&self, txn: Option<TxnId>) -> Result<SessionId, DbError> {
        let mut s = self.sessions.lock().expect("sessions");
        s.next += 1;
        let fresh = s.next;
        let Some(txn) = txn else { return Ok(fresh) };
        if let Some(how) = s.ended.get(&txn) {
            return Err(ended_error(*how));
        }
        let now_ms = self.time.now_ms();
        let open = s.open.entry(txn).or_insert(OpenTxn { session: fresh, idle_since_ms: now_ms });
        let session = open.session;
        if session == fresh {
            drop(s);
            self.db().begin(session, self.now())?;
        }
        Ok(session)
    }

    /// The transaction's statement finished: it is idle from now.
    fn touch(&self, txn: Option<TxnId>) {
        if let Some(txn) = txn {
            let now_ms = self.time.now_ms();
            if let Some(open) = self.sessions.lock().expect("sessions").open.get_mut(&txn) {
                open.idle_since_ms = now_ms;
            }
        }
    }

    /// Runs one statement, waiting for locks as PostgreSQL does.
    async fn run(&self, txn: Option<TxnId>, sql: &str, params: &graphile_worker_database::DbParams) -> Answer {
        let session = self.session_for(txn)?;
        // An autocommit statement keeps the now() of its first try.
        let now = self.now();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.cfg.lock_timeout_ms);
        loop {
            let notified = self.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let exec = self.db().execute(session, sql, params, now);
            match exec {
                Exec::Done(answer) => {
                    if txn.is_none() {
                        // The autocommit statement's connection goes back to the pool.
                        self.db().rollback(session);
                    }
                    self.touch(txn);
                    self.after(sql, &answer);
                    return answer;
                }
                Exec::Blocked { .. } => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    if tokio::time::timeout(left, notified).await.is_err() {
                        return Err(self.lock_timeout(txn, session));
                    }
                }
            }
        }
    }

    /// A lock wait gave up: the statement fails, and with it its
    /// transaction (the block is aborted until the client rolls it back).
    fn lock_timeout(&self, txn: Option<TxnId>, session: SessionId) -> DbError {
        match txn {
            None => self.db().rollback(session),
            Some(txn) => {
                let mut s = self.sessions.lock().expect("sessions");
                self.end_txn(&mut s, txn, Ended::Aborted);
            }
        }
        DbError::with_code("canceling statement due to lock timeout", "55P03")
    }

    /// What the store learns from an answer: the attempt number of every
    /// grant a claim made, and any statement the model does not know (a
    /// gap in the model is a failure of the run, never silently answered).
    fn after(&self, sql: &str, answer: &Answer) {
        let stmt = self.db().statement_kind(sql);
        if let (Some(stmt), Ok(Output::Rows(rows))) = (stmt, answer) {
            if matches!(stmt, Stmt::GetJob(_) | Stmt::BatchGetJobs(_)) {
                for row in rows {
                    let (Some(DbCell::I64(id)), Some(DbCell::TimestampTz(at)), Some(DbCell::Text(by))) =
                        (row.get("id"), row.get("locked_at"), row.get("locked_by"))
                    else {
                        continue;
                    };
                    if let Some(owner) = self.book.owner_of(by) {
                        self.book.grant(*id as TaskId, micros(*at), owner);
                    }
                }
            }
        }
        if let Some(gap) = self.db().unmodelled().first() {
            panic!("leasesim's graphile model does not model a statement graphile sent: {gap}");
        }
    }

    async fn commit(&self, txn: TxnId) -> Answer {
        let mut s = self.sessions.lock().expect("sessions");
        let Some(open) = s.open.remove(&txn) else {
            // A transaction that never ran a statement commits nothing; one
            // the server ended answers as PostgreSQL's dead connection does.
            return match s.ended.get(&txn) {
                Some(Ended::ByClient) | None => Ok(Output::Affected(0)),
                Some(how) => Err(ended_error(*how)),
            };
        };
        s.ended.insert(txn, Ended::ByClient);
        drop(s);
        let committed = self.db().commit(open.session);
        self.ended.notify_waiters();
        committed.map(|_| Output::Affected(0))
    }

    fn rollback(&self, txn: TxnId) -> Answer {
        let mut s = self.sessions.lock().expect("sessions");
        self.end_txn(&mut s, txn, Ended::ByClient);
        Ok(Output::Affected(0))
    }

    /// A job row in the harness's words.
    fn row(&self, j: &JobRow) -> Row {
        let id = j.id as TaskId;
        let holder = j.locked_by.as_deref().and_then(|by| self.book.owner_of(by));
        let state = match (&j.locked_by, j.attempts >= j.max_attempts) {
            (Some(_), _) => TaskState::Leased,
            (None, true) => TaskState::Dead,
            (None, false) => TaskState::Ready,
        };
        let attempt = match j.locked_at {
            Some(at) => self.book.attempt(id, micros(at)).unwrap_or_else(|| self.book.granted(id)),
            None => self.book.granted(id),
        };
        // Attempts count every grant not taken back by a recovery; while
        // one is running it is not a failure (yet).
        let failures = if j.locked_by.is_some() { j.attempts - 1 } else { j.attempts };
        Row {
            id,
            spec: spec_of(j),
            state,
            owner: holder,
            attempt,
            lease_expiry_ms: None,
            retries: failures.max(0) as u32,
            retry_at_ms: self.due_ms(j.run_at),
            updated_ms: self.ms(j.locked_at.unwrap_or(j.updated_at)),
            repair_count: 0,
        }
    }

    /// A named queue's lock row in the harness's words.
    fn queue_row(&self, q: &leasesim_graphile_model::QueueRow) -> (QueueId, QueueRow) {
        let holder = q.locked_by.as_deref().and_then(|by| self.book.owner_of(by));
        (queue_id(&q.queue_name), QueueRow { holder, locked_ms: q.locked_at.map(|at| self.ms(at)) })
    }
}

/// The harness's spec of a job (graphile jobs are all plain jobs; a named
/// queue is `q{n}`).
fn spec_of(j: &JobRow) -> TaskSpec {
    TaskSpec {
        kind: TaskKind::Job,
        group: None,
        stage: None,
        index: None,
        not_before_ms: 0,
        queue: j.queue_name.as_deref().map(queue_id),
    }
}

/// The harness's number of a queue named `q{n}` (other names: 0).
pub fn queue_id(name: &str) -> QueueId {
    name.strip_prefix('q').and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The name graphile is given for queue `n`.
pub fn queue_name(n: QueueId) -> String {
    format!("q{n}")
}

pub(crate) fn micros(ts: DateTime<Utc>) -> i64 {
    ts.timestamp_micros()
}

fn ended_error(how: Ended) -> DbError {
    match how {
        Ended::ByClient | Ended::Aborted => DbError::with_code(
            "current transaction is aborted, commands ignored until end of transaction block",
            "25P02",
        ),
        Ended::IdleTimeout => DbError::with_code("terminating connection due to idle-in-transaction timeout", "25P03"),
        Ended::Closed => DbError::with_code("the connection is closed", crate::driver::CONNECTION_FAILURE),
    }
}

/// The SQLSTATE of a refusal the harness answers for the store.
fn sqlstate(why: Refusal) -> (&'static str, &'static str) {
    let message = match why {
        Refusal::Conflict => "could not serialize access due to concurrent update",
        Refusal::TimedOut => "canceling statement due to statement timeout",
        Refusal::LockTimeout => "canceling statement due to lock timeout",
        Refusal::Deadlock => "deadlock detected",
        Refusal::TxnClosed => "current transaction is aborted",
        Refusal::Unavailable => "connection failure",
        _ => "internal error",
    };
    (why.sqlstate().unwrap_or("XX000"), message)
}

/// A SQLSTATE, as the harness names it.
pub fn refusal_of(code: Option<&str>) -> Refusal {
    Refusal::of_sqlstate(code)
}

impl StoreSeam<Graphile> for GraphileStore {
    fn classify(&self, from: Sender, req: &Statement) -> Op {
        let stmt = match req {
            Statement::Run { sql, .. } => self.db().statement_kind(sql),
            Statement::Commit { .. } | Statement::Rollback { .. } => None,
        };
        classify::op(&self.book, from, req, stmt)
    }

    fn arrived(&self, from: Sender) {
        // Not in `classify`: a lock freed here wakes a waiting statement,
        // whose answer the history must show after this arrival (graphile-
        // recovery seed 120712, 56595635367 before the trace change of
        // 2026-12-05: a new incarnation's first request closed the old
        // one's transaction, and the statement it freed was recorded
        // first, as if it had run under the lock).
        self.housekeeping(from);
    }

    fn normalize(&self, op: &Op, resp: &Answer) -> Response {
        classify::response(self, op, resp)
    }

    fn refuse(&self, _op: &Op, why: Refusal, fault: Option<FaultKind>) -> Answer {
        // At READ COMMITTED PostgreSQL never answers 40001: a transaction
        // aborted by a concurrent one is a deadlock (40P01); a write that
        // took too long is a statement timeout (57014).
        let why = match fault {
            Some(FaultKind::SerializationFailure) => Refusal::Deadlock,
            Some(FaultKind::TxnTimeout) | None => Refusal::TimedOut,
            Some(_) => why,
        };
        let (code, message) = sqlstate(why);
        Err(DbError::with_code(message, code))
    }

    fn serve(&self, req: Statement) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            match req {
                // The driver's note is the harness's: the database never sees it.
                Statement::Run { txn, sql, params, .. } => self.run(txn, &sql, &params).await,
                Statement::Commit { txn } => self.commit(txn).await,
                Statement::Rollback { txn } => self.rollback(txn),
            }
        })
    }

    fn abort(&self, txn: TxnId) {
        let mut s = self.sessions.lock().expect("sessions");
        self.end_txn(&mut s, txn, Ended::Aborted);
    }

    fn crash(&self) {
        // Every connection is gone; what committed stays.
        let mut s = self.sessions.lock().expect("sessions");
        let open: Vec<TxnId> = s.open.keys().copied().collect();
        for txn in open {
            self.end_txn(&mut s, txn, Ended::Closed);
        }
    }

    fn may_duplicate(&self, _op: &Op) -> bool {
        // A statement travels on a connection (TCP): the network never
        // delivers it twice. Only a client that sends it again would, and
        // graphile's driver does not.
        false
    }

    fn tap(&self, _op: Option<&Op>) -> Commit {
        // Every commit logs the rows it changed: read those, whatever the
        // request (the scope of a statement is the model's to know).
        let db = self.db();
        let mut mirror = self.mirror.lock().expect("mirror");
        let mut jobs = BTreeSet::new();
        let mut queues = BTreeSet::new();
        for change in db.changes_since(mirror.version) {
            jobs.extend(change.jobs.iter().copied());
            queues.extend(change.queues.iter().copied());
        }
        mirror.version = db.version();
        let mut commit = Commit::default();
        for id in jobs {
            let id = id as TaskId;
            let after = match db.jobs().find(|j| j.id == id as i64) {
                Some(j) => self.row(j),
                // Completed: graphile deletes the row.
                None => match mirror.tasks.get(&id) {
                    Some(before) => Row { state: TaskState::Done, owner: None, ..before.clone() },
                    None => continue,
                },
            };
            let before = mirror.tasks.get(&id).cloned();
            if before.as_ref() != Some(&after) {
                mirror.tasks.insert(id, after.clone());
                commit.tasks.push(TaskChange { before, after });
            }
        }
        for id in queues {
            let Some(q) = db.job_queues().find(|q| q.id == id) else { continue };
            let (queue, after) = self.queue_row(q);
            let before = mirror.queues.get(&id).map(|(_, row)| row.clone());
            if before.as_ref() != Some(&after) {
                mirror.queues.insert(id, (queue, after.clone()));
                commit.queues.push(QueueChange { queue, before, after });
            }
        }
        commit
    }

    fn last_look(&self) -> LastLook {
        let db = self.db();
        let mirror = self.mirror.lock().expect("mirror");
        let mut tasks: BTreeMap<TaskId, Row> = mirror
            .tasks
            .iter()
            .filter(|(_, row)| row.state == TaskState::Done)
            .map(|(id, row)| (*id, row.clone()))
            .collect();
        for j in db.jobs() {
            tasks.insert(j.id as TaskId, self.row(j));
        }
        let queues = db.job_queues().map(|q| self.queue_row(q)).collect();
        LastLook { tasks: tasks.into_values().collect(), stages: Vec::new(), materialized: Vec::new(), queues }
    }
}
