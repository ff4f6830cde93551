//! One world: the model and a PostgreSQL database side by side, the same
//! sessions on both, the same clock. Every statement is sent to both and
//! their answers compared; after every step, every committed row.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use graphile_worker_database::{DbCell, DbParams};
use leasesim_graphile_model::calls::Call;
use leasesim_graphile_model::{cell_eq, Db, Exec, JobRow, Output, QueueRow, SessionId, Stmt, TaskRow, Ts, WorkerRow};

use super::pg::{self, Outcome, PgError, PgOut, Session};

pub const SCHEMA: &str = "gw";
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longer than the cluster's `deadlock_timeout`: see [`World::respect_deadlock_timeout`].
const DEADLOCK_MARGIN: Duration = Duration::from_millis(30);

/// What the conformance run did, over all worlds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub statements: u64,
    pub transactions: u64,
    pub commits: u64,
    pub lock_waits: u64,
    pub retries: u64,
    pub errors: u64,
    pub deadlocks: u64,
    pub claims: u64,
    pub claims_skipping_locked: u64,
    pub tie_breaks: u64,
    /// Statements not sent because their wait would race another (see [`World::would_race`]).
    pub skipped_races: u64,
}

/// A statement queued on a session, and where it came from.
#[derive(Debug, Clone)]
enum Item {
    Begin,
    Commit,
    Statement { sql: String, params: DbParams, stmt: Stmt },
}

/// A session's statement that waits for a lock (on both sides).
#[derive(Clone)]
struct Waiting {
    since: Instant,
    sql: String,
    params: DbParams,
    stmt: Stmt,
}

pub struct World {
    pub db: Db,
    pub now: Ts,
    sessions: Vec<Session>,
    monitor: postgres::Client,
    /// Statements still to send on a session, after the one it waits on.
    queued: BTreeMap<SessionId, VecDeque<Item>>,
    waiting: BTreeMap<SessionId, Waiting>,
    /// FIFO order of the waits.
    wait_order: Vec<SessionId>,
    /// The `leasesim.now` last set on each PostgreSQL session (outside transactions).
    clock_set: BTreeMap<SessionId, Ts>,
    pub counts: Counts,
    /// A log of what was sent, for failure messages.
    pub trace: Vec<String>,
}

pub type Failure = String;

fn text_ts(ts: Ts) -> String {
    ts.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string()
}

impl World {
    pub fn new(monitor: postgres::Client, sessions: Vec<Session>, server_version: &str, now: Ts) -> World {
        let mut db = Db::new(SCHEMA);
        db.set_server_version_num(server_version);
        World {
            db,
            now,
            sessions,
            monitor,
            queued: BTreeMap::new(),
            waiting: BTreeMap::new(),
            wait_order: Vec::new(),
            clock_set: BTreeMap::new(),
            counts: Counts::default(),
            trace: Vec::new(),
        }
    }

    pub fn busy(&self, session: SessionId) -> bool {
        self.waiting.contains_key(&session)
    }

    pub fn in_transaction(&self, session: SessionId) -> bool {
        self.db.in_transaction(session)
    }

    /// Ends every session's transaction and empties every table, on both
    /// sides, for the next sequence (and gives the world a fresh model).
    pub fn reset(&mut self, server_version: &str, now: Ts) -> Result<(), Failure> {
        // Rolling back every idle session frees every waiting one; then it is rolled back too.
        // A freed statement may still wait out PostgreSQL's deadlock_timeout.
        let mut left: Vec<usize> = (0..self.sessions.len()).collect();
        let mut patience = 0;
        while !left.is_empty() {
            let before = left.len();
            let wait = Duration::from_millis(if patience == 0 { 20 } else { 500 });
            left.retain(|&i| {
                let s = &mut self.sessions[i];
                if s.pending && s.reply_within(wait).is_none() {
                    return true;
                }
                s.simple("ROLLBACK").is_err()
            });
            patience = if left.len() == before { patience + 1 } else { 0 };
            if patience > 10 {
                return Err(format!("sessions {left:?} stay busy at the end of a sequence"));
            }
        }
        // The jobs' heap is truncated, not deleted from: each sequence starts
        // on an empty heap, in which a scan without ORDER BY meets rows in the
        // order they were written, as the model assumes (see DESIGN.md). The
        // other tables are emptied with DELETE, which is quicker.
        let mut sql = format!("truncate {SCHEMA}._private_job_retirements, {SCHEMA}._private_jobs restart identity;");
        for t in ["_private_job_queues", "_private_tasks", "_private_workers", "_private_known_crontabs"] {
            sql.push_str(&format!("delete from {SCHEMA}.{t};"));
        }
        for t in ["_private_job_queues", "_private_tasks"] {
            sql.push_str(&format!("alter table {SCHEMA}.{t} alter column id restart with 1;"));
        }
        self.monitor.batch_execute(&sql).map_err(|e| e.to_string())?;
        self.db = Db::new(SCHEMA);
        self.db.set_server_version_num(server_version);
        self.now = now;
        self.queued.clear();
        self.waiting.clear();
        self.wait_order.clear();
        self.clock_set.clear();
        self.trace.clear();
        Ok(())
    }

    pub fn advance(&mut self, micros: i64) {
        self.now = leasesim_graphile_model::time::plus_micros(self.now, micros.max(0));
        self.trace.push(format!("clock -> {}", text_ts(self.now)));
    }

    /// BEGIN on a session (queued behind a waiting statement, if any).
    pub fn begin(&mut self, session: SessionId) -> Result<(), Failure> {
        self.enqueue(session, vec![Item::Begin])
    }

    pub fn commit(&mut self, session: SessionId) -> Result<(), Failure> {
        self.enqueue(session, vec![Item::Commit])
    }

    /// ROLLBACK: never queued; a session waiting for a lock is not sent one.
    pub fn rollback(&mut self, session: SessionId) -> Result<(), Failure> {
        if self.busy(session) {
            return Ok(());
        }
        self.trace.push(format!("s{session}: ROLLBACK"));
        self.db.rollback(session);
        self.sessions[session as usize].simple("ROLLBACK").map_err(|e| e.message)?;
        self.resolve_waiters()
    }

    /// Sends a graphile call's statements on a session.
    pub fn call(&mut self, session: SessionId, call: &Call) -> Result<(), Failure> {
        let mut items = Vec::new();
        let own = call.own_transaction() && !self.db.in_transaction(session);
        if own {
            items.push(Item::Begin);
        }
        for (sql, params) in call.statements(SCHEMA) {
            let stmt = self.db.statement_kind(&sql).ok_or_else(|| format!("not recognized: {sql}"))?;
            items.push(Item::Statement { sql, params, stmt });
        }
        if own {
            items.push(Item::Commit);
        }
        self.trace.push(format!("s{session}: {call:?}"));
        self.enqueue(session, items)
    }

    fn enqueue(&mut self, session: SessionId, items: Vec<Item>) -> Result<(), Failure> {
        self.queued.entry(session).or_default().extend(items);
        if !self.busy(session) {
            self.drain(session)?;
        }
        self.resolve_waiters()
    }

    /// Runs a session's queued items until it waits or has none left.
    fn drain(&mut self, session: SessionId) -> Result<(), Failure> {
        while !self.busy(session) {
            let Some(item) = self.queued.get_mut(&session).and_then(VecDeque::pop_front) else { return Ok(()) };
            match item {
                Item::Begin => self.send_begin(session)?,
                Item::Commit => self.send_commit(session)?,
                Item::Statement { sql, params, stmt } => self.statement(session, sql, params, stmt, None)?,
            }
        }
        Ok(())
    }

    fn send_begin(&mut self, session: SessionId) -> Result<(), Failure> {
        self.trace.push(format!("s{session}: BEGIN at {}", text_ts(self.now)));
        let fresh = !self.db.in_transaction(session);
        self.counts.transactions += u64::from(fresh);
        let model = self.db.begin(session, self.now);
        // A BEGIN inside a transaction block only warns: the block keeps its start time.
        let sql = if fresh {
            format!("BEGIN; SELECT set_config('leasesim.now', '{}', true)", text_ts(self.now))
        } else {
            "BEGIN".to_string()
        };
        let pg = self.sessions[session as usize].simple(&sql);
        match (&model, &pg) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(m), Err(p)) if m.code() == p.code.as_deref() => Ok(()),
            _ => Err(format!("BEGIN: model {model:?}, PostgreSQL {pg:?}")),
        }
    }

    fn send_commit(&mut self, session: SessionId) -> Result<(), Failure> {
        self.trace.push(format!("s{session}: COMMIT"));
        if self.db.in_transaction(session) {
            self.counts.commits += 1;
        }
        let model = self.db.commit(session);
        let pg = self.sessions[session as usize].simple("COMMIT");
        match (model, pg) {
            (Ok(()), Ok(())) => Ok(()),
            (m, p) => Err(format!("COMMIT: model {m:?}, PostgreSQL {p:?}")),
        }
    }

    /// Brings the PostgreSQL session's clock to the world's, outside a transaction.
    fn set_clock(&mut self, session: SessionId) -> Result<(), Failure> {
        if self.db.in_transaction(session) || self.clock_set.get(&session) == Some(&self.now) {
            return Ok(());
        }
        let sql = format!("SET leasesim.now = '{}'", text_ts(self.now));
        self.sessions[session as usize].simple(&sql).map_err(|e| e.message)?;
        self.clock_set.insert(session, self.now);
        Ok(())
    }

    /// One statement on both sides (`retry`: the wait it retries after).
    fn statement(
        &mut self,
        session: SessionId,
        sql: String,
        params: DbParams,
        stmt: Stmt,
        retry: Option<&Waiting>,
    ) -> Result<(), Failure> {
        let claim = matches!(stmt, Stmt::GetJob(_) | Stmt::BatchGetJobs(_));
        if retry.is_none() && self.would_race(session, &sql, &params) {
            self.counts.skipped_races += 1;
            self.queued.remove(&session);
            self.trace.push(format!("s{session}: not sent: its wait would race another"));
            return Ok(());
        }
        let pg = if claim {
            // PostgreSQL first: its pick among jobs that tie on the ORDER BY is physical.
            let pg = self.send_pg(session, &sql, &params, stmt, retry)?;
            self.prefer_pg_pick(&pg, session, &sql, &params);
            Some(pg)
        } else {
            None
        };
        let model = self.db.execute(session, &sql, &params, self.now);
        let deadlock = matches!(&model, Exec::Done(Err(e)) if e.code() == Some("40P01"));
        if deadlock {
            self.respect_deadlock_timeout();
        }
        let mut pg = match pg {
            Some(pg) => pg,
            None => self.send_pg(session, &sql, &params, stmt, retry)?,
        };
        if deadlock && matches!(pg, Outcome::Waiting(_)) {
            // PostgreSQL finds the deadlock once its deadlock_timeout has run out.
            let reply = self.sessions[session as usize].reply_within(Duration::from_secs(5));
            pg = reply.map_or(pg, Outcome::Replied);
        }
        if matches!(pg, Outcome::Replied(Err(_))) {
            self.await_abort(session);
        }
        self.counts.statements += u64::from(retry.is_none());
        self.counts.retries += u64::from(retry.is_some());
        if claim {
            self.count_claim(&model);
        }
        self.compare(session, &sql, &params, stmt, model, pg, retry)
    }

    /// PostgreSQL reports an error before it aborts the statement's
    /// transaction and releases its locks: wait until the backend is idle
    /// again, or another session could still be seen waiting for it.
    fn await_abort(&mut self, session: SessionId) {
        let pid = self.sessions[session as usize].pid;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let state: Option<String> = self
                .monitor
                .query_one("select state from pg_stat_activity where pid = $1", &[&pid])
                .ok()
                .and_then(|row| row.get(0));
            if state.as_deref().is_some_and(|s| s.starts_with("idle")) {
                return;
            }
            assert!(Instant::now() < deadline, "session {session} stays busy after an error");
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Whether the statement would wait for a transaction another statement
    /// waits for too, such that both would go on at once when it ends:
    /// PostgreSQL then runs them concurrently, in no order the test can
    /// know. Two waits for conflicting table locks are queued, not raced.
    /// Asked of a copy of the model, so nothing happens if it would.
    fn would_race(&self, session: SessionId, sql: &str, params: &DbParams) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        let mut probe = self.db.clone();
        let Exec::Blocked { holder } = probe.execute(session, sql, params, self.now) else { return false };
        let mine = probe.waits_for_table_lock(session);
        let others: Vec<SessionId> =
            probe.waiting().filter(|(w, h)| *w != session && *h == holder).map(|(w, _)| w).collect();
        others.into_iter().any(|w| {
            let theirs = probe.waits_for_table_lock(w);
            let both_table = mine.is_some() && theirs.is_some();
            let queued = both_table && !(mine == Some("RowExclusive") && theirs == Some("RowExclusive"));
            !queued
        })
    }

    fn send_pg(
        &mut self,
        session: SessionId,
        sql: &str,
        params: &DbParams,
        stmt: Stmt,
        retry: Option<&Waiting>,
    ) -> Result<Outcome, Failure> {
        if retry.is_some() {
            // Already sent: only see how it stands now.
            return Ok(pg::settle(&mut self.sessions[session as usize], &mut self.monitor, SETTLE_TIMEOUT));
        }
        self.set_clock(session)?;
        let s = &mut self.sessions[session as usize];
        s.send(sql, params.values(), stmt.returns_rows());
        Ok(pg::settle(s, &mut self.monitor, SETTLE_TIMEOUT))
    }

    fn prefer_pg_pick(&mut self, pg: &Outcome, session: SessionId, sql: &str, params: &DbParams) {
        let picked = match pg {
            Outcome::Replied(Ok(PgOut::Rows(rows))) => first_id(rows),
            _ => None,
        };
        // How often PostgreSQL's pick among tied candidates is not the model's own.
        let mut probe = self.db.clone();
        probe.prefer_claim(None);
        if let Exec::Done(Ok(Output::Rows(rows))) = probe.execute(session, sql, params, self.now) {
            let cells: Vec<Vec<(String, DbCell)>> =
                rows.iter().map(|r| r.columns().iter().map(|(n, c)| (n.to_string(), c.clone())).collect()).collect();
            let own = first_id(&cells);
            self.counts.tie_breaks += u64::from(picked.is_some() && own.is_some() && own != picked);
        }
        self.trace.push(format!("  PostgreSQL's claim took {picked:?}"));
        self.db.prefer_claim(picked);
    }

    fn count_claim(&mut self, model: &Exec) {
        self.counts.claims += 1;
        let others_hold_rows =
            self.db.in_transaction(0) || (1..self.sessions.len() as u64).any(|s| self.db.in_transaction(s));
        if others_hold_rows && matches!(model, Exec::Done(Ok(_))) {
            self.counts.claims_skipping_locked += 1;
        }
    }

    /// PostgreSQL picks a deadlock's victim among the waiters whose
    /// `deadlock_timeout` runs out while the cycle exists: the model's victim
    /// is the statement that closes the cycle, which PostgreSQL picks too once
    /// every earlier waiter has passed its own check.
    fn respect_deadlock_timeout(&mut self) {
        let newest = self.waiting.values().map(|w| w.since).max();
        if let Some(since) = newest {
            let waited = since.elapsed();
            if waited < DEADLOCK_MARGIN {
                std::thread::sleep(DEADLOCK_MARGIN - waited);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn compare(
        &mut self,
        session: SessionId,
        sql: &str,
        params: &DbParams,
        stmt: Stmt,
        model: Exec,
        pg: Outcome,
        retry: Option<&Waiting>,
    ) -> Result<(), Failure> {
        let what = || format!("s{session} {stmt:?} {}", &sql[..sql.len().min(160)]);
        match (model, pg) {
            (Exec::Blocked { holder }, Outcome::Waiting(pids)) => {
                let holder_pid = self.sessions[holder as usize].pid;
                let behind_waiter = pids.iter().all(|p| self.waiting_pid(*p));
                if !pids.contains(&holder_pid) && !behind_waiter {
                    return Err(format!(
                        "{}: model waits for s{holder} (pid {holder_pid}), PostgreSQL for {pids:?}",
                        what()
                    ));
                }
                if retry.is_none() {
                    self.counts.lock_waits += 1;
                    let waiting = Waiting { since: Instant::now(), sql: sql.to_string(), params: params.clone(), stmt };
                    self.waiting.insert(session, waiting);
                    self.wait_order.push(session);
                }
                self.trace.push(format!("s{session}: waits for s{holder}"));
                Ok(())
            }
            (Exec::Done(model), Outcome::Replied(pg)) => {
                if retry.is_some() {
                    self.waiting.remove(&session);
                    self.wait_order.retain(|s| *s != session);
                    self.trace.push(format!("s{session}: wait over"));
                }
                compare_answers(stmt, &model, &pg).map_err(|e| format!("{}: {e}", what()))?;
                if model.is_err() {
                    self.counts.errors += 1;
                    if model.as_ref().err().and_then(|e| e.code()) == Some("40P01") {
                        self.counts.deadlocks += 1;
                    }
                }
                Ok(())
            }
            (Exec::Blocked { holder }, Outcome::Replied(pg)) => {
                Err(format!("{}: model waits for s{holder}, PostgreSQL answered {pg:?}", what()))
            }
            (Exec::Done(model), Outcome::Waiting(pids)) => {
                Err(format!("{}: model answered {model:?}, PostgreSQL waits for {pids:?}", what()))
            }
        }
    }

    fn waiting_pid(&self, pid: i32) -> bool {
        self.waiting.keys().any(|s| self.sessions[*s as usize].pid == pid)
    }

    /// Retries every waiting statement, oldest wait first, until none moves.
    fn resolve_waiters(&mut self) -> Result<(), Failure> {
        loop {
            let mut moved = false;
            for session in self.wait_order.clone() {
                let Some(w) = self.waiting.get(&session).cloned() else { continue };
                self.statement(session, w.sql.clone(), w.params.clone(), w.stmt, Some(&w))?;
                if !self.busy(session) {
                    moved = true;
                    self.drain(session)?;
                }
            }
            if !moved {
                return Ok(());
            }
        }
    }

    /// Every committed row of every table, on both sides.
    pub fn compare_tables(&mut self) -> Result<(), Failure> {
        let pg = read_tables(&mut self.monitor)?;
        let model = Tables {
            jobs: self.db.jobs().cloned().collect(),
            queues: self.db.job_queues().cloned().collect(),
            tasks: self.db.tasks().cloned().collect(),
            workers: self.db.workers().cloned().collect(),
            retirements: self.db.retired_jobs().collect(),
            known_crontabs: 0,
            migrations: self.db.migrations().iter().map(|m| (m.id, m.breaking)).collect(),
        };
        model.difference(&pg).map_or(Ok(()), Err)
    }
}

/// The `id` of a claim's first row.
fn first_id(rows: &[Vec<(String, DbCell)>]) -> Option<i64> {
    let cell = rows.first()?.iter().find(|(n, _)| n == "id")?;
    if let DbCell::I64(id) = cell.1 {
        Some(id)
    } else {
        None
    }
}

fn sqlstate(e: &PgError) -> Option<&str> {
    e.code.as_deref()
}

fn canonical(cells: &[(String, DbCell)]) -> String {
    format!("{cells:?}")
}

fn compare_answers(
    stmt: Stmt,
    model: &Result<Output, graphile_worker_database::DbError>,
    pg: &Result<PgOut, PgError>,
) -> Result<(), String> {
    match (model, pg) {
        (Ok(Output::Affected(n)), Ok(PgOut::Count(m))) if n == m => Ok(()),
        (Ok(Output::Rows(rows)), Ok(PgOut::Rows(pg_rows))) => {
            let mut model_rows: Vec<Vec<(String, DbCell)>> =
                rows.iter().map(|r| r.columns().iter().map(|(n, c)| (n.to_string(), c.clone())).collect()).collect();
            let mut pg_rows = pg_rows.clone();
            if stmt.unordered() {
                model_rows.sort_by_key(|r| canonical(r));
                pg_rows.sort_by_key(|r| canonical(r));
            }
            if model_rows.len() != pg_rows.len() {
                return Err(format!(
                    "{} rows from the model, {} from PostgreSQL:\n  model: {model_rows:?}\n  PostgreSQL: {pg_rows:?}",
                    model_rows.len(),
                    pg_rows.len()
                ));
            }
            for (m, p) in model_rows.iter().zip(&pg_rows) {
                let same =
                    m.len() == p.len() && m.iter().zip(p).all(|((mn, mc), (pn, pc))| mn == pn && cell_eq(mc, pc));
                if !same {
                    return Err(format!("rows differ:\n  model:      {m:?}\n  PostgreSQL: {p:?}"));
                }
            }
            Ok(())
        }
        (Err(m), Err(p)) if m.code() == sqlstate(p) => Ok(()),
        _ => Err(format!("answers differ:\n  model:      {model:?}\n  PostgreSQL: {pg:?}")),
    }
}

/// Every table, as plain rows.
#[derive(Debug, PartialEq)]
struct Tables {
    jobs: Vec<JobRow>,
    queues: Vec<QueueRow>,
    tasks: Vec<TaskRow>,
    workers: Vec<WorkerRow>,
    retirements: Vec<i64>,
    known_crontabs: i64,
    migrations: Vec<(i32, bool)>,
}

fn first_difference<T: PartialEq + std::fmt::Debug>(table: &str, model: &[T], pg: &[T]) -> Option<String> {
    if model == pg {
        return None;
    }
    let i = model.iter().zip(pg).take_while(|(m, p)| m == p).count();
    Some(format!("{table}, row {i}:\n  model:      {:?}\n  PostgreSQL: {:?}", model.get(i), pg.get(i)))
}

impl Tables {
    fn difference(&self, pg: &Tables) -> Option<String> {
        first_difference("_private_jobs", &self.jobs, &pg.jobs)
            .or_else(|| first_difference("_private_job_queues", &self.queues, &pg.queues))
            .or_else(|| first_difference("_private_tasks", &self.tasks, &pg.tasks))
            .or_else(|| first_difference("_private_workers", &self.workers, &pg.workers))
            .or_else(|| first_difference("_private_job_retirements", &self.retirements, &pg.retirements))
            .or_else(|| first_difference("_private_known_crontabs", &[self.known_crontabs], &[pg.known_crontabs]))
            .or_else(|| first_difference("migrations", &self.migrations, &pg.migrations))
    }
}

fn get<T: for<'a> postgres::types::FromSql<'a>>(row: &postgres::Row, name: &str) -> T {
    row.get(name)
}

fn read_tables(monitor: &mut postgres::Client) -> Result<Tables, Failure> {
    let q = |monitor: &mut postgres::Client, sql: &str| monitor.query(sql, &[]).map_err(|e| format!("{sql}: {e}"));
    let jobs_sql = format!(
        "select j.*, q.queue_name, t.identifier as task_identifier from {SCHEMA}._private_jobs j \
         left join {SCHEMA}._private_job_queues q on q.id = j.job_queue_id \
         left join {SCHEMA}._private_tasks t on t.id = j.task_id order by j.id"
    );
    let mut jobs = Vec::new();
    for r in q(monitor, &jobs_sql)? {
        let job = JobRow {
            id: get(&r, "id"),
            job_queue_id: get(&r, "job_queue_id"),
            queue_name: get(&r, "queue_name"),
            task_id: get(&r, "task_id"),
            task_identifier: get::<Option<String>>(&r, "task_identifier").unwrap_or_default(),
            payload: get(&r, "payload"),
            priority: get(&r, "priority"),
            run_at: get(&r, "run_at"),
            attempts: get(&r, "attempts"),
            max_attempts: get(&r, "max_attempts"),
            last_error: get(&r, "last_error"),
            created_at: get(&r, "created_at"),
            updated_at: get(&r, "updated_at"),
            key: get(&r, "key"),
            locked_at: get(&r, "locked_at"),
            locked_by: get(&r, "locked_by"),
            revision: get(&r, "revision"),
            flags: get(&r, "flags"),
        };
        let available: bool = get(&r, "is_available");
        if available != job.is_available() {
            return Err(format!("PostgreSQL's is_available {available} disagrees with the model's rule for {job:?}"));
        }
        jobs.push(job);
    }
    let queues = q(monitor, &format!("select * from {SCHEMA}._private_job_queues order by id"))?
        .iter()
        .map(|r| QueueRow {
            id: get(r, "id"),
            queue_name: get(r, "queue_name"),
            locked_at: get(r, "locked_at"),
            locked_by: get(r, "locked_by"),
        })
        .collect();
    let tasks = q(monitor, &format!("select * from {SCHEMA}._private_tasks order by id"))?
        .iter()
        .map(|r| TaskRow { id: get(r, "id"), identifier: get(r, "identifier") })
        .collect();
    let workers = q(monitor, &format!("select * from {SCHEMA}._private_workers order by id"))?
        .iter()
        .map(|r| WorkerRow {
            id: get(r, "id"),
            last_heartbeat_at: get(r, "last_heartbeat_at"),
            started_at: get(r, "started_at"),
            metadata: get(r, "metadata"),
        })
        .collect();
    let retirements = q(monitor, &format!("select id from {SCHEMA}._private_job_retirements order by id"))?
        .iter()
        .map(|r| get(r, "id"))
        .collect();
    let known_crontabs = q(monitor, &format!("select count(*) from {SCHEMA}._private_known_crontabs"))?[0].get(0);
    let migrations = q(monitor, &format!("select id, breaking from {SCHEMA}.migrations order by id"))?
        .iter()
        .map(|r| (get(r, "id"), get(r, "breaking")))
        .collect();
    Ok(Tables { jobs, queues, tasks, workers, retirements, known_crontabs, migrations })
}
