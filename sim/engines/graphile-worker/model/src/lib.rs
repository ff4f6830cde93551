//! A deterministic, synchronous, in-memory model of the PostgreSQL database
//! that graphile_worker 0.14.1 talks to, at its latest migration (m000022).
//!
//! [`Db`] answers graphile's own statements, recognized by their text as
//! graphile's public builders produce it (captured at [`Db::new`], see
//! [`catalog`]), with the rows, counts and SQLSTATEs PostgreSQL would give,
//! for sessions that run autocommit statements and explicit READ COMMITTED
//! transactions spanning round trips, with row locks, lock waits
//! ([`Exec::Blocked`]), `SKIP LOCKED`, advisory locks and sequences.
//! Anything else is refused with SQLSTATE 0A000 and recorded in
//! [`Db::unmodelled`]. DESIGN.md says how, and where it differs from PostgreSQL.

pub mod calls;
pub mod catalog;
mod params;
pub mod rows;
mod stmts;
mod store;
pub mod time;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
pub use graphile_worker_database::{DbCell, DbError, DbParams, DbRow, DbValue};

pub use catalog::Stmt;
pub use rows::{cell_eq, JobRow, MigrationRow, QueueRow, Row, TaskRow, WorkerRow};
use store::{Ctx, Seqs, Tables, Txn};
pub use time::Ts;

/// One database connection.
pub type SessionId = u64;

/// The answer to one statement.
#[derive(Debug)]
pub enum Exec {
    Done(Result<Output, DbError>),
    /// The statement waits for a lock `holder`'s transaction holds (or is
    /// queued behind `holder`'s earlier request). Its writes are undone; the
    /// locks and identity values it took before the wait stay taken, as in
    /// PostgreSQL. Send the same statement again on the same session once
    /// `holder`'s transaction ended; the session sends nothing else meanwhile
    /// (ROLLBACK, or closing the connection, abandons it). An autocommit
    /// statement keeps the `now()` of its first try.
    Blocked {
        holder: SessionId,
    },
}

/// What a statement that ran answers.
#[derive(Debug)]
pub enum Output {
    /// A statement that returns rows (SELECT, or DML with RETURNING). The
    /// driver's `execute` reports `rows.len()`, as PostgreSQL's "SELECT n".
    Rows(Vec<Row>),
    /// DML without RETURNING: the rows of the primary statement, as the
    /// command tag reports them. Also `SELECT f(..)` of a `void` function
    /// (one row: a real driver's `fetch_all` of it would fail to decode `void`).
    Affected(u64),
}

/// Why a statement did not run to completion.
#[derive(Debug)]
pub(crate) enum Fail {
    Blocked(SessionId),
    Error(DbError),
    /// A statement graphile would never send this way (a parameter of the
    /// wrong type): refused like an unmodelled one.
    Bad(DbError),
}

impl From<DbError> for Fail {
    fn from(error: DbError) -> Fail {
        Fail::Error(error)
    }
}

/// The rows one commit changed, for an incremental tap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub version: u64,
    pub jobs: Vec<i64>,
    pub queues: Vec<i32>,
    pub tasks: Vec<i32>,
    pub workers: Vec<String>,
}

#[derive(Debug, Default, Clone)]
struct Session {
    txn: Option<Txn>,
    /// In a transaction block whose transaction failed: statements are
    /// refused (25P02) until COMMIT or ROLLBACK ends the block.
    aborted: bool,
    /// The table lock a Blocked statement waits for (later requests queue behind it).
    wants_table_lock: Option<(store::Table, store::TableLock)>,
    /// It waited for it while being parsed, outside a transaction block.
    waited_at_parse: bool,
    /// The implicit transaction of an autocommit statement answered Blocked:
    /// the locks it took before it had to wait, which PostgreSQL keeps while
    /// it waits (its writes are not kept: the retry runs it again).
    pending: Option<Txn>,
    /// Identity values the Blocked statement drew, for its retry.
    reserved: store::Drawn,
    /// The step of a function the Blocked statement waited in.
    resume_step: u8,
    /// The committed jobs the Blocked statement's first try saw, when it is a
    /// single SQL statement (see [`Stmt::keeps_snapshot`]).
    snapshot_jobs: Option<BTreeSet<i64>>,
    /// The row the Blocked statement waited for: once its holder is gone,
    /// PostgreSQL locks the row's latest version before it re-checks it, and
    /// keeps that lock even if the row no longer qualifies.
    waited_row: Option<store::RowKey>,
}

/// The database. `Clone` copies its whole state (the statement catalog is shared).
#[derive(Clone)]
pub struct Db {
    catalog: std::sync::Arc<catalog::Catalog>,
    tables: Tables,
    seqs: Seqs,
    /// The next heap place of a job version (never reused, never rolled back).
    next_place: u64,
    /// Boxed: a session is large, and every autocommit statement opens and
    /// closes one, which would move its neighbours' entries in the tree.
    sessions: BTreeMap<SessionId, Box<Session>>,
    version: u64,
    log: Vec<Change>,
    unmodelled: Vec<String>,
    /// Sessions answered Blocked, and whom they wait for (deadlock detection).
    waits: BTreeMap<SessionId, SessionId>,
    /// Every session each waiting session waits for (a table lock can wait
    /// for several), the edges deadlock detection follows: holders of a
    /// lock it wants, and (second) waiters queued ahead of it.
    wait_edges: BTreeMap<SessionId, (BTreeSet<SessionId>, BTreeSet<SessionId>)>,
    /// When each waiting session began to wait (a counter), for lock queues.
    wait_started: BTreeMap<SessionId, u64>,
    wait_counter: u64,
    claim_preference: Option<i64>,
    migrations: Vec<MigrationRow>,
    server_version_num: String,
}

const SQLSTATE_NOT_MODELLED: &str = "0A000";

fn aborted_error() -> DbError {
    let msg = "current transaction is aborted, commands ignored until end of transaction block";
    DbError::with_code(msg, "25P02")
}

impl Db {
    /// A database migrated to graphile_worker 0.14.1's latest migration, with
    /// no jobs, for graphile's schema named `schema` (unescaped, as given to
    /// graphile's `WorkerOptions::schema`).
    pub fn new(schema: &str) -> Db {
        let migrations = catalog::MIGRATIONS.iter().map(|&(id, breaking)| MigrationRow { id, breaking }).collect();
        Db {
            catalog: std::sync::Arc::new(catalog::Catalog::capture(schema)),
            tables: Tables::default(),
            seqs: Seqs::default(),
            next_place: 0,
            sessions: BTreeMap::new(),
            version: 0,
            log: Vec::new(),
            unmodelled: Vec::new(),
            waits: BTreeMap::new(),
            wait_edges: BTreeMap::new(),
            wait_started: BTreeMap::new(),
            wait_counter: 0,
            claim_preference: None,
            migrations,
            server_version_num: "150000".to_string(),
        }
    }

    /// The `server_version_num` the model reports (PostgreSQL 15 by default).
    pub fn set_server_version_num(&mut self, version: &str) {
        self.server_version_num = version.to_string();
    }

    /// Runs one statement on `session` (both `fetch_all` and `execute` of the
    /// driver come here). `now` is the store's clock: `now()` of an autocommit
    /// statement; inside a transaction `now()` is the transaction's start.
    pub fn execute(&mut self, session: SessionId, sql: &str, params: &DbParams, now: DateTime<Utc>) -> Exec {
        let now = time::bound(now);
        let stmt = match self.catalog.classify(sql) {
            catalog::Text::Stmt(stmt) => stmt,
            catalog::Text::Begin => return Exec::Done(self.begin(session, now).map(|()| Output::Affected(0))),
            catalog::Text::Commit => return Exec::Done(self.commit(session).map(|()| Output::Affected(0))),
            catalog::Text::Rollback => {
                self.rollback(session);
                return Exec::Done(Ok(Output::Affected(0)));
            }
            catalog::Text::Unknown => {
                let normalized = catalog::normalize(sql);
                let message = format!("statement not modelled by leasesim's graphile model: {normalized}");
                return Exec::Done(Err(self.refuse(session, message)));
            }
        };
        if self.sessions.get(&session).is_some_and(|s| s.aborted) {
            return Exec::Done(Err(aborted_error()));
        }
        self.run(session, stmt, params, now)
    }

    /// Records an unmodelled (or malformed) statement and answers 0A000; a
    /// transaction it was sent in fails, as on any error.
    fn refuse(&mut self, session: SessionId, message: String) -> DbError {
        self.unmodelled.push(message.clone());
        self.fail_transaction(session);
        DbError::with_code(message, SQLSTATE_NOT_MODELLED)
    }

    fn fail_transaction(&mut self, session: SessionId) {
        let state = self.sessions.entry(session).or_default();
        if state.txn.take().is_some() {
            state.aborted = true;
        }
        state.pending = None;
        state.reserved = store::Drawn::default();
        state.resume_step = 0;
        state.waited_row = None;
        state.snapshot_jobs = None;
        state.waited_at_parse = false;
        self.stop_waiting(session);
    }

    fn run(&mut self, session: SessionId, stmt: Stmt, params: &DbParams, now: Ts) -> Exec {
        let state = self.sessions.entry(session).or_default();
        let explicit = state.txn.is_some();
        let mut txn = match state.txn.take() {
            Some(txn) => txn,
            None => state.pending.take().unwrap_or_else(|| Txn::new(now)),
        };
        let parse_wait = state.wants_table_lock.filter(|_| !explicit && state.waited_at_parse);
        if let Some((table, mode)) = parse_wait {
            // Still waiting (a retry before its time) keeps its place in line.
            if let Some(holder) = self.table_lock_holder(session, &txn, table, mode) {
                self.sessions.entry(session).or_default().pending = Some(txn);
                self.waits.insert(session, holder);
                return Exec::Blocked { holder };
            }
            // The drivers prepare a statement (Parse, Sync) before they run it:
            // an autocommit statement that waited for a table lock while being
            // parsed lets its locks go at that Sync and asks again, last in line.
            self.sessions.entry(session).or_default().waited_at_parse = false;
            txn = Txn::new(txn.start);
            self.wait_counter += 1;
            self.wait_started.insert(session, self.wait_counter);
        }
        let state = self.sessions.entry(session).or_default();
        let reserved = std::mem::take(&mut state.reserved);
        let resume_step = std::mem::take(&mut state.resume_step);
        let waited_row = state.waited_row.take();
        let snapshot_jobs = state.snapshot_jobs.take();
        let others: Vec<(SessionId, &Txn)> = self
            .sessions
            .iter()
            .filter_map(|(id, s)| s.txn.as_ref().or(s.pending.as_ref()).map(|t| (*id, t)))
            .collect();
        let mut ctx = Ctx::new(&self.tables, others, &txn, self.seqs, explicit);
        ctx.reserved = reserved;
        ctx.next_place = self.next_place;
        ctx.resume_step = resume_step;
        // A retry that must wait again before it runs keeps the step it had reached.
        ctx.step = resume_step;
        ctx.claim_preference = self.claim_preference;
        ctx.snapshot_jobs = snapshot_jobs.as_ref();
        ctx.queue_table_locks(self.queued_table_locks(session));
        let relock = waited_row.filter(|row| ctx.row_exists(row)).map_or(Ok(()), |row| ctx.lock(row));
        let result = relock
            .and_then(|()| stmts::run(stmt, &mut ctx, params.values(), &self.server_version_num, &self.migrations));
        // A statement that waited while being parsed takes its snapshot after the wait.
        let parsing = ctx.wants_table_lock.is_some_and(|(_, _, at_parse)| at_parse);
        let seen_jobs = (stmt.keeps_snapshot() && !parsing).then(|| ctx.visible_committed_jobs());
        // Identity values drawn stay drawn whatever happens next, as in PostgreSQL.
        self.seqs = ctx.seqs;
        self.next_place = ctx.next_place;
        // A try that waits before using all its reserved values keeps the rest.
        let drawn = ctx.drawn.then(ctx.reserved);
        let step = ctx.step;
        let waits_for_row = ctx.waits_for_row.clone();
        let blockers = (std::mem::take(&mut ctx.blockers), std::mem::take(&mut ctx.queued_ahead));
        let wants_table_lock = ctx.wants_table_lock;
        let (writes, locks, advisory, table_locks) = (ctx.writes, ctx.locks, ctx.advisory, ctx.table_locks);
        let touched = ctx.touched;
        match result {
            Ok(out) => {
                txn.writes.merge(writes);
                txn.touched.extend(touched);
                store::absorb(&mut txn.row_locks, locks);
                store::absorb(&mut txn.advisory, advisory);
                store::absorb(&mut txn.table_locks, table_locks);
                if stmt.is_claim() {
                    self.claim_preference = None;
                }
                self.stop_waiting(session);
                let state = self.sessions.entry(session).or_default();
                state.wants_table_lock = None;
                if explicit {
                    state.txn = Some(txn);
                } else {
                    self.install(txn);
                }
                Exec::Done(Ok(out))
            }
            Err(Fail::Blocked(holder)) => {
                // What it locked before the wait stays locked, and the index
                // entries of what it wrote stay; its writes themselves are undone.
                store::absorb(&mut txn.row_locks, locks);
                txn.touched.extend(touched);
                store::absorb(&mut txn.advisory, advisory);
                store::absorb(&mut txn.table_locks, table_locks);
                let state = self.sessions.entry(session).or_default();
                state.reserved = drawn;
                state.resume_step = step;
                state.waited_row = waits_for_row;
                state.snapshot_jobs = seen_jobs;
                state.wants_table_lock = wants_table_lock.map(|(t, m, _)| (t, m));
                state.waited_at_parse = !explicit && wants_table_lock.is_some_and(|(_, _, at_parse)| at_parse);
                self.blocked(session, holder, blockers, txn, explicit)
            }
            Err(Fail::Error(error)) => {
                self.sessions.entry(session).or_default().txn = explicit.then_some(txn);
                self.error(session, error)
            }
            Err(Fail::Bad(error)) => {
                self.sessions.entry(session).or_default().txn = explicit.then_some(txn);
                let message = format!("{error} (statement {stmt:?})");
                Exec::Done(Err(self.refuse(session, message)))
            }
        }
    }

    /// Who a table lock request of `session` would wait for now, if anyone.
    fn table_lock_holder(
        &self,
        session: SessionId,
        txn: &Txn,
        table: store::Table,
        mode: store::TableLock,
    ) -> Option<SessionId> {
        let others: Vec<(SessionId, &Txn)> = self
            .sessions
            .iter()
            .filter(|(id, _)| **id != session)
            .filter_map(|(id, s)| s.txn.as_ref().or(s.pending.as_ref()).map(|t| (*id, t)))
            .collect();
        let mut ctx = Ctx::new(&self.tables, others, txn, self.seqs, false);
        ctx.queue_table_locks(self.queued_table_locks(session));
        match ctx.lock_table_at_parse(table, mode) {
            Err(Fail::Blocked(holder)) => Some(holder),
            _ => None,
        }
    }

    fn stop_waiting(&mut self, session: SessionId) {
        self.waits.remove(&session);
        self.wait_edges.remove(&session);
        self.wait_started.remove(&session);
        if let Some(state) = self.sessions.get_mut(&session) {
            state.wants_table_lock = None;
        }
    }

    /// The table locks other sessions wait for, oldest wait first.
    fn queued_table_locks(&self, session: SessionId) -> Vec<(SessionId, store::Table, store::TableLock)> {
        // A retry keeps its place in the queue: only earlier waits come first.
        let mine = self.wait_started.get(&session).copied().unwrap_or(u64::MAX);
        let mut queued: Vec<_> = self
            .waits
            .keys()
            .filter(|s| **s != session && self.wait_started.get(s).is_some_and(|at| *at < mine))
            .filter_map(|s| self.sessions.get(s)?.wants_table_lock.map(|(t, m)| (*s, t, m)))
            .collect();
        queued.sort_by_key(|(s, _, _)| self.wait_started.get(s).copied());
        queued
    }

    fn error(&mut self, session: SessionId, error: DbError) -> Exec {
        self.fail_transaction(session);
        Exec::Done(Err(error))
    }

    /// A statement that must wait: nothing it did is kept. A wait that would
    /// close a cycle of waits is a deadlock, answered 40P01 to this statement.
    fn blocked(
        &mut self,
        session: SessionId,
        holder: SessionId,
        blockers: (BTreeSet<SessionId>, BTreeSet<SessionId>),
        txn: Txn,
        explicit: bool,
    ) -> Exec {
        let (mut holders, queued) = blockers;
        if !queued.contains(&holder) {
            holders.insert(holder);
        }
        assert_ne!(holder, session, "a session never waits for itself");
        let state = self.sessions.entry(session).or_default();
        if explicit {
            state.txn = Some(txn);
        } else {
            state.pending = Some(txn);
        }
        let all: Vec<SessionId> = holders.iter().chain(&queued).copied().collect();
        if let Some(&other) = all.iter().find(|b| self.waits_for(**b, session)) {
            let msg = format!("deadlock detected: session {session} waits for {other}, which waits for it");
            return self.error(session, DbError::with_code(msg, "40P01"));
        }
        self.waits.insert(session, holder);
        self.wait_edges.insert(session, (holders, queued));
        if !self.wait_started.contains_key(&session) {
            self.wait_counter += 1;
            self.wait_started.insert(session, self.wait_counter);
        }
        Exec::Blocked { holder }
    }

    /// Whether `from` waits, directly or through others, for `target`, along
    /// the edges that still hold: to a session that still has a transaction
    /// (or a waiting statement's locks), or to a waiter still queued ahead.
    fn waits_for(&self, from: SessionId, target: SessionId) -> bool {
        let holds = |s: &SessionId| self.sessions.get(s).is_some_and(|st| st.txn.is_some() || st.pending.is_some());
        let ahead = |a: SessionId, b: &SessionId| {
            let (Some(at_a), Some(at_b)) = (self.wait_started.get(&a), self.wait_started.get(b)) else { return false };
            at_b < at_a
        };
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(at) = todo.pop() {
            if at == target {
                return true;
            }
            if !seen.insert(at) {
                continue;
            }
            if let Some((holders, queued)) = self.wait_edges.get(&at) {
                todo.extend(holders.iter().filter(|s| holds(s)).copied());
                todo.extend(queued.iter().filter(|s| ahead(at, s)).copied());
            }
        }
        false
    }

    /// Commits a transaction's writes and logs what they changed.
    fn install(&mut self, txn: Txn) {
        if txn.writes.is_empty() {
            return;
        }
        self.version += 1;
        let writes = txn.writes;
        self.log.push(Change {
            version: self.version,
            jobs: writes.jobs.keys().copied().collect(),
            queues: writes.queues.keys().copied().collect(),
            tasks: writes.tasks.keys().copied().collect(),
            workers: writes.workers.keys().cloned().collect(),
        });
        self.tables.apply(writes);
    }

    /// BEGIN. A session already in a transaction block stays in it (PostgreSQL
    /// only warns); in a failed block, BEGIN fails like any command (25P02).
    pub fn begin(&mut self, session: SessionId, now: DateTime<Utc>) -> Result<(), DbError> {
        let state = self.sessions.entry(session).or_default();
        if state.aborted {
            return Err(aborted_error());
        }
        if state.txn.is_none() {
            state.txn = Some(Txn::new(time::bound(now)));
        }
        Ok(())
    }

    /// COMMIT. A failed transaction block is rolled back (PostgreSQL answers
    /// COMMIT there without an error); outside a block it does nothing.
    pub fn commit(&mut self, session: SessionId) -> Result<(), DbError> {
        let state = self.sessions.entry(session).or_default();
        state.aborted = false;
        let txn = state.txn.take();
        self.stop_waiting(session);
        if let Some(txn) = txn {
            self.install(txn);
        }
        Ok(())
    }

    /// ROLLBACK, or the connection closed.
    pub fn rollback(&mut self, session: SessionId) {
        if let Some(state) = self.sessions.get_mut(&session) {
            state.txn = None;
            state.pending = None;
            state.reserved = store::Drawn::default();
            state.resume_step = 0;
            state.waited_row = None;
            state.snapshot_jobs = None;
            state.waited_at_parse = false;
            state.aborted = false;
        }
        self.stop_waiting(session);
        // Nothing is left of it: its entry goes, so the sessions a statement
        // looks through are the live ones, not every autocommit statement
        // the run has sent (a fresh session each).
        self.sessions.remove(&session);
    }

    /// Whether the session is in a transaction block (open or failed).
    pub fn in_transaction(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.txn.is_some() || s.aborted)
    }

    /// Committed jobs, by id, with their queue names and task identifiers.
    pub fn jobs(&self) -> impl Iterator<Item = &JobRow> {
        self.tables.jobs.values()
    }

    pub fn job_queues(&self) -> impl Iterator<Item = &QueueRow> {
        self.tables.queues.values()
    }

    pub fn workers(&self) -> impl Iterator<Item = &WorkerRow> {
        self.tables.workers.values()
    }

    pub fn tasks(&self) -> impl Iterator<Item = &TaskRow> {
        self.tables.tasks.values()
    }

    /// Ids of jobs with a committed `_private_job_retirements` marker.
    pub fn retired_jobs(&self) -> impl Iterator<Item = i64> + '_ {
        self.tables.retirements.keys().copied()
    }

    pub fn migrations(&self) -> &[MigrationRow] {
        &self.migrations
    }

    /// Every statement refused as not modelled (or malformed), in order.
    pub fn unmodelled(&self) -> &[String] {
        &self.unmodelled
    }

    /// The version of the latest commit that changed a row (0: none yet).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Commits after `version`, oldest first, with the rows each changed.
    pub fn changes_since(&self, version: u64) -> impl Iterator<Item = &Change> {
        let start = self.log.partition_point(|c| c.version <= version);
        self.log[start..].iter()
    }

    /// The next claim (get_job) takes job `id` if it is among the candidates
    /// that tie on graphile's `ORDER BY priority, run_at`: PostgreSQL takes
    /// such ties in the order its plan meets them, the model in heap order
    /// (an index scan's order for equal keys) unless told.
    pub fn prefer_claim(&mut self, id: Option<i64>) {
        self.claim_preference = id;
    }

    /// The kind of a statement text, if the model recognizes it.
    pub fn statement_kind(&self, sql: &str) -> Option<Stmt> {
        match self.catalog.classify(sql) {
            catalog::Text::Stmt(stmt) => Some(stmt),
            _ => None,
        }
    }

    /// Every statement text the model recognizes (whitespace collapsed), with its kind.
    pub fn recognized(&self) -> impl Iterator<Item = (&str, Stmt)> {
        self.catalog.texts()
    }

    /// The table lock a waiting session asked for, if it waits for one
    /// ("RowExclusive" or "ShareRowExclusive"), rather than for a row.
    pub fn waits_for_table_lock(&self, session: SessionId) -> Option<&'static str> {
        let (_, mode) = self.sessions.get(&session)?.wants_table_lock?;
        Some(match mode {
            store::TableLock::RowExclusive => "RowExclusive",
            store::TableLock::ShareRowExclusive => "ShareRowExclusive",
        })
    }

    /// Sessions answered Blocked that have not retried yet, and whom each waits for.
    pub fn waiting(&self) -> impl Iterator<Item = (SessionId, SessionId)> + '_ {
        self.waits.iter().map(|(s, h)| (*s, *h))
    }
}
