//! Every store request as SQL, written the way an engine team would write it
//! on PostgreSQL: one transaction per request at READ COMMITTED (a statement
//! of a transaction that spans round trips runs in that transaction's
//! session instead, `sessions.rs`), the store
//! time passed as a parameter (nothing reads `now()`), claims with
//! `FOR UPDATE SKIP LOCKED`, fenced writes as one `UPDATE ... WHERE` on task,
//! attempt, owner and state, followed (only when nothing matched) by one read
//! that names the rejection.
//!
//! A new request is one new function here and one arm in [`PgStore::apply`]
//! (whose match is exhaustive, so a new `Request` variant does not compile
//! until it has its SQL).

use super::sessions::{Sessions, TxnCounts};
use super::Rows;
use leasesim::config::{EngineConfig, MaintenanceKind};
use leasesim::handler::TaskError;
use leasesim::ids::{Fence, IndexId, Owner, StageRef, TaskId};
use leasesim::proto::{Grant, Rejection, Request, Response};
use leasesim::store::StageRow;
use leasesim::task::{Task, TaskKind, TaskSpec, TaskState};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Row, SimpleQueryMessage, SimpleQueryRow, Statement};
use std::collections::HashMap;
use std::fmt::Debug;
use std::str::FromStr;

pub type Error = postgres::Error;
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The fence, in the `WHERE` of every attempt-scoped statement: the task's
/// current attempt, still leased to the fence's owner. Parameters: $1 task,
/// $2 attempt, $3 owner process, $4 owner incarnation.
macro_rules! fenced {
    () => {
        "id = $1 AND attempt = $2 AND owner_proc = $3 AND owner_incarnation = $4 AND state = 'leased'"
    };
}

/// Back to ready without an outcome, at store time $1. The attempt stays:
/// the next claim makes a new one, which fences off the old owner's writes.
macro_rules! release {
    () => {
        "state = 'ready', owner_proc = NULL, owner_incarnation = NULL, lease_expiry_ms = NULL, updated_ms = $1"
    };
}

/// Is stage `s` due: no task linked, not done, and the previous stage
/// (`prev`, outer-joined) done? Stage 0 has no previous stage.
macro_rules! stage_due {
    () => {
        "(s.task_id IS NULL AND NOT s.done AND (s.stage_index = 0 OR coalesce(prev.done, false)))"
    };
}

macro_rules! stages_with_prev {
    () => {
        "stages s LEFT JOIN stages prev ON prev.pipeline = s.pipeline AND prev.stage_index = s.stage_index - 1"
    };
}

pub struct PgStore {
    /// The connection of requests that are one transaction each (and of the
    /// row reads, which see committed rows only).
    main: Conn,
    cfg: EngineConfig,
    /// Transactions that span round trips: a session each.
    sessions: Sessions,
}

/// One connection and the statements prepared on it, by their text.
pub(super) struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

/// How long a statement waits for a row lock another session holds. The
/// test is one thread: a lock another session holds is never released while
/// someone waits for it, so any wait at all ends in 55P03, which is what the
/// model answers for a request that waits (`Rejected{TimedOut}`). Short, as
/// every wait costs this much.
const LOCK_TIMEOUT: &str = "SET lock_timeout = '5ms'";

impl Conn {
    pub(super) fn new(mut client: Client) -> Result<Conn, Error> {
        client.batch_execute(LOCK_TIMEOUT)?;
        Ok(Conn { client, statements: HashMap::new() })
    }

    pub(super) fn begin(&mut self) -> Result<(), Error> {
        self.client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
    }

    /// `COMMIT` or `ROLLBACK`.
    pub(super) fn end(&mut self, how: &str) -> Result<(), Error> {
        self.client.batch_execute(how)
    }

    /// Runs one request in this connection's open transaction (`in_txn`: a
    /// statement of a transaction that spans round trips). `None`: it waited
    /// for a row lock another session holds until `lock_timeout` (55P03).
    /// A failed request's transaction is rolled back.
    pub(super) fn run(
        &mut self,
        cfg: &EngineConfig,
        now_ms: u64,
        in_txn: bool,
        req: &Request,
    ) -> Result<Option<Response>, Error> {
        let mut tx = Tx { client: &mut self.client, statements: &mut self.statements, cfg, now_ms: db(now_ms), in_txn };
        let result = tx.apply(req);
        if result.is_err() {
            // An error aborts the transaction; the connection goes on.
            self.end("ROLLBACK")?;
        }
        match result {
            Ok(resp) => Ok(Some(resp)),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One request's transaction, or one statement of a transaction that spans
/// round trips, on its connection.
struct Tx<'a> {
    client: &'a mut Client,
    statements: &'a mut HashMap<&'static str, Statement>,
    cfg: &'a EngineConfig,
    now_ms: i64,
    /// A statement of a transaction that spans round trips: what it locks
    /// stays locked until its session commits or rolls back.
    in_txn: bool,
}

impl PgStore {
    /// Creates the schema in the connected (empty) database; sessions for
    /// transactions that span round trips connect with `conninfo`.
    pub fn create(client: Client, conninfo: String) -> Result<PgStore, Error> {
        let mut main = Conn::new(client)?;
        main.client.batch_execute(include_str!("schema.sql"))?;
        for (name, sql) in TABLES {
            main.client.batch_execute(&format!("PREPARE {name} AS {sql}"))?;
        }
        Ok(PgStore { main, cfg: EngineConfig::default(), sessions: Sessions::new(conninfo) })
    }

    pub fn server_version(&mut self) -> Result<String, Error> {
        Ok(self.main.client.query_one("SHOW server_version", &[])?.get(0))
    }

    /// What the transactions that span round trips did so far (all sequences).
    pub fn txn_counts(&self) -> TxnCounts {
        self.sessions.counts
    }

    /// Empties the store and restarts task ids at 1, as `Store::new(cfg)`.
    /// Open sessions roll back first (their row locks would hold the deletes).
    pub fn reset(&mut self, cfg: &EngineConfig) -> Result<(), Error> {
        const KINDS: &str =
            "INSERT INTO task_kinds (kind, lease_ttl_ms) SELECT * FROM unnest($1::text[], $2::bigint[])";
        self.sessions.reset()?;
        // DELETE, not TRUNCATE: on tables this small it is twice as fast
        // (TRUNCATE makes new files for every table and index).
        self.main.client.batch_execute(
            "DELETE FROM stages; DELETE FROM built_indexes; DELETE FROM tasks; DELETE FROM heartbeats; DELETE FROM left_owners; DELETE FROM materialized_indexes;
             DELETE FROM group_repair; DELETE FROM task_kinds;
             SELECT setval(pg_get_serial_sequence('tasks', 'id'), 1, false)",
        )?;
        let kinds: Vec<&str> = TaskKind::ALL.iter().map(|k| k.name()).collect();
        let ttls: Vec<Option<i64>> = TaskKind::ALL.iter().map(|&k| cfg.lease_ttl.for_kind(k).map(db)).collect();
        self.main.client.execute(KINDS, &[&kinds, &ttls])?;
        self.cfg = cfg.clone();
        Ok(())
    }

    /// Applies one request at `now_ms`: a statement of a transaction that
    /// spans round trips in that transaction's session, anything else as one
    /// READ COMMITTED transaction. A request that waited for a row lock
    /// another session holds is `Rejected{TimedOut}` with nothing applied.
    pub fn apply(&mut self, now_ms: u64, req: &Request) -> Result<Response, Error> {
        self.sessions.follow_store_time(now_ms, req)?;
        match req {
            Request::Exec { txn, stmt, commit } => self.sessions.exec(&self.cfg, now_ms, *txn, stmt, *commit),
            Request::Rollback { txn } => self.sessions.rollback(*txn),
            _ => {
                self.main.begin()?;
                let Some(resp) = self.main.run(&self.cfg, now_ms, false, req)? else {
                    self.sessions.counts.lock_waits += 1;
                    return Ok(Response::Rejected { reason: Rejection::TimedOut });
                };
                self.main.end("COMMIT")?;
                Ok(resp)
            }
        }
    }
}

impl Tx<'_> {
    fn apply(&mut self, req: &Request) -> Result<Response, Error> {
        match req {
            Request::Enqueue { spec, key } => enqueue(self, spec, *key),
            Request::CreatePipeline { pipeline, stages } => create_pipeline(self, *pipeline, *stages),
            Request::Claim { owner, .. } | Request::Heartbeat { owner } if has_left(self, *owner)? => Ok(match req {
                Request::Claim { .. } => Response::Claimed { grants: Vec::new() },
                _ => Response::Ack,
            }),
            Request::Claim { owner, max, .. } => claim(self, *owner, *max),
            Request::Heartbeat { owner } => heartbeat(self, *owner),
            Request::Deregister { owner } => deregister(self, *owner),
            Request::Renew { fence } => renew(self, fence),
            Request::LeaseValid { fence } => lease_valid(self, fence),
            Request::Complete { fence } => complete(self, fence),
            Request::Fail { fence, error } => fail(self, fence, *error),
            Request::ClearStageLink { fence } => clear_stage_link(self, fence),
            Request::ReleaseDead { .. } => release_dead(self),
            Request::ReleaseOrphans { owner, running, older_than_ms, as_of_ms } => {
                release_orphans(self, *owner, running, *older_than_ms, *as_of_ms)
            }
            Request::ReclaimExpired { .. } => reclaim_expired(self),
            Request::Repair { .. } => repair(self),
            Request::Maintain { kind, timeout_ms, .. } => maintain(self, *kind, *timeout_ms),
            Request::PipelineSnapshot { .. } => pipeline_snapshot(self),
            Request::EnqueueStage { stage } => enqueue_stage(self, *stage),
            Request::QueryIndex { index, .. } => query_index(self, *index),
            // `PgStore::apply` runs them in their sessions.
            Request::Exec { .. } | Request::Rollback { .. } => {
                unreachable!("pg store: {} is not one statement", req.op_name())
            }
        }
    }

    fn prepared(&mut self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    fn query(&mut self, sql: &'static str, params: Params) -> Result<Vec<Row>, Error> {
        let statement = self.prepared(sql)?;
        self.client.query(&statement, params)
    }

    fn query_one(&mut self, sql: &'static str, params: Params) -> Result<Row, Error> {
        let statement = self.prepared(sql)?;
        self.client.query_one(&statement, params)
    }

    fn query_opt(&mut self, sql: &'static str, params: Params) -> Result<Option<Row>, Error> {
        let statement = self.prepared(sql)?;
        self.client.query_opt(&statement, params)
    }

    fn execute(&mut self, sql: &'static str, params: Params) -> Result<u64, Error> {
        let statement = self.prepared(sql)?;
        self.client.execute(&statement, params)
    }
}

// ---------------------------------------------------------------------------
// The requests, one function each.
// ---------------------------------------------------------------------------

/// An enqueue. With an idempotency key, one statement either inserts the
/// task or answers the task the key created: the `INSERT ... SELECT ... WHERE
/// NOT EXISTS` inserts only for a key not seen, so a repeated key draws no
/// identity value (a plain `INSERT ... ON CONFLICT DO NOTHING` would burn one
/// per repeat); `ON CONFLICT` settles a race with a concurrent enqueue of the
/// same key, which the statement's snapshot does not see, and then the
/// second read (a new snapshot) finds that enqueue's task.
fn enqueue(tx: &mut Tx, spec: &TaskSpec, key: Option<u64>) -> Result<Response, Error> {
    const KEYED: &str = "
        WITH created AS (
            INSERT INTO tasks (kind, grp, stage_pipeline, stage_index, index_id, not_before_ms, state, retry_at_ms,
                               updated_ms, enqueue_key)
            SELECT $2, $3, $4, $5, $6, $7, 'ready', $7, $1, $8
            WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE enqueue_key = $8)
            ON CONFLICT (enqueue_key) DO NOTHING
            RETURNING id)
        SELECT id FROM created
        UNION ALL
        SELECT id FROM tasks WHERE enqueue_key = $8";
    const RACED: &str = "SELECT id FROM tasks WHERE enqueue_key = $1";
    let Some(key) = key else {
        return Ok(Response::Enqueued { task: insert_task(tx, spec)? });
    };
    let key = db(key);
    let [now, pipeline, index, built, not_before] = task_params(tx, spec);
    let (kind, group) = (spec.kind.name(), spec.group.map(db));
    let params: Params = &[&now, &kind, &group, &pipeline, &index, &built, &not_before, &key];
    let row = match tx.query_opt(KEYED, params)? {
        Some(row) => row,
        None => tx.query_one(RACED, &[&key])?,
    };
    Ok(Response::Enqueued { task: num(row.get(0)) })
}

/// A task insert without a key (plain enqueues, stage tasks).
fn insert_task(tx: &mut Tx, spec: &TaskSpec) -> Result<TaskId, Error> {
    const SQL: &str = "
        INSERT INTO tasks (kind, grp, stage_pipeline, stage_index, index_id, not_before_ms, state, retry_at_ms, updated_ms)
        VALUES ($2, $3, $4, $5, $6, $7, 'ready', $7, $1)
        RETURNING id";
    let [now, pipeline, index, built, not_before] = task_params(tx, spec);
    let (kind, group) = (spec.kind.name(), spec.group.map(db));
    let params: Params = &[&now, &kind, &group, &pipeline, &index, &built, &not_before];
    let row = tx.query_one(SQL, params)?;
    Ok(num(row.get(0)))
}

/// now, stage pipeline, stage index, index built, not before.
fn task_params(tx: &Tx, spec: &TaskSpec) -> [Option<i64>; 5] {
    [
        Some(tx.now_ms),
        spec.stage.map(|s| db(s.pipeline)),
        spec.stage.map(|s| i64::from(s.index)),
        spec.index.map(db),
        Some(db(spec.not_before_ms)),
    ]
}

/// Creates the stages that do not exist. `NOT EXISTS` first: `ON CONFLICT`
/// alone waits for a transaction that holds an existing stage row (one
/// finishing the stage's task) to end, although the row exists whatever
/// it does; it still settles a race with a concurrent create.
fn create_pipeline(tx: &mut Tx, pipeline: u64, stages: u32) -> Result<Response, Error> {
    const SQL: &str = "
        INSERT INTO stages (pipeline, stage_index)
        SELECT $1::bigint, i FROM generate_series(0::bigint, $2::bigint - 1) AS i
        WHERE NOT EXISTS (SELECT 1 FROM stages WHERE pipeline = $1 AND stage_index = i)
        ON CONFLICT DO NOTHING";
    tx.execute(SQL, &[&db(pipeline), &i64::from(stages)])?;
    Ok(Response::Ack)
}

fn claim(tx: &mut Tx, owner: Owner, max: u32) -> Result<Response, Error> {
    // A claim is a sign of life: the first one counts as a heartbeat.
    const LIFE: &str = "
        INSERT INTO heartbeats (proc, incarnation, last_ms) VALUES ($2, $3, $1) ON CONFLICT DO NOTHING";
    const CLAIM: &str = "
        WITH due AS (
            SELECT id FROM tasks
            WHERE state = 'ready' AND retry_at_ms <= $1
            ORDER BY retry_at_ms, id
            LIMIT $4
            FOR UPDATE SKIP LOCKED)
        UPDATE tasks t
        SET attempt = t.attempt + 1, state = 'leased', owner_proc = $2, owner_incarnation = $3,
            lease_expiry_ms = $1 + k.lease_ttl_ms, updated_ms = $1
        FROM due, task_kinds k
        WHERE t.id = due.id AND k.kind = t.kind
        RETURNING t.id, t.attempt, t.kind, t.lease_expiry_ms, t.retry_at_ms, t.grp";
    // A group whose task was claimed changed: its next repair look is due now.
    const REPAIR_NOW: &str = "
        INSERT INTO group_repair (grp, misses, next_at_ms)
        SELECT DISTINCT g, 0, $1::bigint FROM unnest($2::bigint[]) AS g
        ON CONFLICT (grp) DO UPDATE SET misses = 0, next_at_ms = excluded.next_at_ms";
    let (now, proc, incarnation) = (tx.now_ms, i64::from(owner.proc), i64::from(owner.incarnation));
    tx.execute(LIFE, &[&now, &proc, &incarnation])?;
    let mut rows = tx.query(CLAIM, &[&now, &proc, &incarnation, &i64::from(max)])?;
    // RETURNING has no order: grants go out in claim order.
    rows.sort_by_key(|row| (row.get::<_, i64>(4), row.get::<_, i64>(0)));
    let groups: Vec<i64> = rows.iter().filter_map(|row| row.get(5)).collect();
    if !groups.is_empty() {
        tx.execute(REPAIR_NOW, &[&now, &groups])?;
    }
    let grant = |row: &Row| Grant {
        fence: Fence { task: num(row.get(0)), attempt: num(row.get(1)), owner },
        kind: kind(row.get(2)),
        lease_expiry_ms: row.get::<_, Option<i64>>(3).map(num),
    };
    Ok(Response::Claimed { grants: rows.iter().map(grant).collect() })
}

fn has_left(tx: &mut Tx, owner: Owner) -> Result<bool, Error> {
    const SQL: &str = "SELECT 1 FROM left_owners WHERE proc = $1 AND incarnation = $2";
    Ok(tx.query_opt(SQL, &[&i64::from(owner.proc), &i64::from(owner.incarnation)])?.is_some())
}

fn deregister(tx: &mut Tx, owner: Owner) -> Result<Response, Error> {
    const GONE: &str = "UPDATE heartbeats SET gone = true WHERE proc = $1 AND incarnation = $2";
    const LEFT: &str = "INSERT INTO left_owners (proc, incarnation) VALUES ($1, $2) ON CONFLICT DO NOTHING";
    let (proc, incarnation) = (i64::from(owner.proc), i64::from(owner.incarnation));
    tx.execute(GONE, &[&proc, &incarnation])?;
    tx.execute(LEFT, &[&proc, &incarnation])?;
    Ok(Response::Ack)
}

fn heartbeat(tx: &mut Tx, owner: Owner) -> Result<Response, Error> {
    const SQL: &str = "
        INSERT INTO heartbeats (proc, incarnation, last_ms) VALUES ($2, $3, $1)
        ON CONFLICT (proc, incarnation) DO UPDATE SET last_ms = excluded.last_ms";
    let now = tx.now_ms;
    tx.execute(SQL, &[&now, &i64::from(owner.proc), &i64::from(owner.incarnation)])?;
    Ok(Response::Ack)
}

fn renew(tx: &mut Tx, fence: &Fence) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "UPDATE tasks SET lease_expiry_ms = $5 + (SELECT lease_ttl_ms FROM task_kinds k WHERE k.kind = tasks.kind)
         WHERE ",
        fenced!(),
        " RETURNING lease_expiry_ms"
    );
    let now = tx.now_ms;
    let [id, attempt, proc, incarnation] = fence_params(fence);
    match tx.query_opt(SQL, &[&id, &attempt, &proc, &incarnation, &now])? {
        // Heartbeat-owned kinds have no lease: the owner's heartbeat is the lease.
        Some(row) => Ok(Response::Renewed { lease_expiry_ms: row.get::<_, Option<i64>>(0).map_or(u64::MAX, num) }),
        None => rejected(tx, fence),
    }
}

/// A lease check. In a transaction it is `SELECT ... FOR UPDATE`: a lease
/// found valid stays locked until the transaction ends; on its own it is the
/// same statement in a transaction of its own. Either way it waits for a
/// lock another session holds on a row it selects.
fn lease_valid(tx: &mut Tx, fence: &Fence) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "SELECT true FROM tasks WHERE ",
        fenced!(),
        " AND (lease_expiry_ms IS NULL OR lease_expiry_ms > $5) FOR UPDATE"
    );
    let now = tx.now_ms;
    let [id, attempt, proc, incarnation] = fence_params(fence);
    let row = tx.query_opt(SQL, &[&id, &attempt, &proc, &incarnation, &now])?;
    Ok(Response::Valid { valid: row.is_some() })
}

/// A completion, which records the attempt that made it. When the fence
/// does not hold, the same attempt's retried completion (its first answer
/// was lost) is answered "applied" again with nothing changed; anything else
/// is rejected.
/// The completion of this very attempt, tried again after a lost answer.
const COMPLETED_BY: &str = "
    SELECT retries FROM tasks
    WHERE id = $1 AND state = 'done' AND attempt = $2 AND completed_proc = $3 AND completed_incarnation = $4";

fn complete(tx: &mut Tx, fence: &Fence) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "UPDATE tasks SET state = 'done', owner_proc = NULL, owner_incarnation = NULL, lease_expiry_ms = NULL,
             updated_ms = $5, completed_proc = $3, completed_incarnation = $4
         WHERE ",
        fenced!(),
        " RETURNING retries, kind, index_id, stage_pipeline, stage_index"
    );
    // Built, unless already materialized; the first build of an index is the
    // one a later pass finalizes.
    const BUILT: &str = "
        INSERT INTO built_indexes (index_id, task_id)
        SELECT $1, $2 WHERE NOT EXISTS (SELECT 1 FROM materialized_indexes WHERE index_id = $1)
        ON CONFLICT (index_id) DO NOTHING";
    let now = tx.now_ms;
    let [id, attempt, proc, incarnation] = fence_params(fence);
    let Some(row) = tx.query_opt(SQL, &[&id, &attempt, &proc, &incarnation, &now])? else {
        return match tx.query_opt(COMPLETED_BY, &[&id, &attempt, &proc, &incarnation])? {
            Some(row) => Ok(Response::Applied { retries: num(row.get(0)), retry_at_ms: None }),
            None => rejected(tx, fence),
        };
    };
    // Completion effects commit in the same transaction as the task.
    if let (TaskKind::IndexBuild, Some(index)) = (kind(row.get(1)), row.get::<_, Option<i64>>(2)) {
        tx.execute(BUILT, &[&index, &id])?;
    }
    finish_stage(tx, id, row.get(3), row.get(4))?;
    Ok(Response::Applied { retries: num(row.get(0)), retry_at_ms: None })
}

fn fail(tx: &mut Tx, fence: &Fence, error: TaskError) -> Result<Response, Error> {
    // Dead when fatal or out of retries; else ready again after a backoff of
    // base * 2^(retries - 1), capped (the shift stops at 20, as the engine's).
    // SET expressions read the row before the update: `retries` is the old count.
    const SQL: &str = concat!(
        "UPDATE tasks SET
             retries = retries + 1, owner_proc = NULL, owner_incarnation = NULL, lease_expiry_ms = NULL,
             updated_ms = $5,
             state = CASE WHEN $6 OR retries + 1 > $7 THEN 'dead' ELSE 'ready' END,
             retry_at_ms = CASE WHEN $6 OR retries + 1 > $7 THEN retry_at_ms
                           ELSE $5 + LEAST($8 * (1::bigint << LEAST(retries, 20)::int), $9) END
         WHERE ",
        fenced!(),
        " RETURNING retries, state, retry_at_ms"
    );
    let now = tx.now_ms;
    let [id, attempt, proc, incarnation] = fence_params(fence);
    let (fatal, max_retries) = (error == TaskError::Fatal, i64::from(tx.cfg.max_retries));
    let (base, cap) = (db(tx.cfg.retry_base_ms), db(tx.cfg.retry_cap_ms));
    let params: Params = &[&id, &attempt, &proc, &incarnation, &now, &fatal, &max_retries, &base, &cap];
    let Some(row) = tx.query_opt(SQL, params)? else {
        return rejected(tx, fence);
    };
    let retry_at_ms = (row.get::<_, &str>(1) == "ready").then(|| num(row.get(2)));
    Ok(Response::Applied { retries: num(row.get(0)), retry_at_ms })
}

/// First half of a two-step stage completion: the stage is done, the task stays.
fn clear_stage_link(tx: &mut Tx, fence: &Fence) -> Result<Response, Error> {
    // FOR SHARE holds the fence until commit: a release or claim of the task
    // waits for this transaction instead of slipping in before the stage write.
    const SQL: &str = concat!("SELECT retries, stage_pipeline, stage_index FROM tasks WHERE ", fenced!(), " FOR SHARE");
    // In a transaction that spans round trips the row stays locked until it
    // ends, against other transactions' statements too (two FOR SHARE
    // locks would not exclude each other).
    const IN_TXN: &str =
        concat!("SELECT retries, stage_pipeline, stage_index FROM tasks WHERE ", fenced!(), " FOR UPDATE");
    let [id, attempt, proc, incarnation] = fence_params(fence);
    let sql = if tx.in_txn { IN_TXN } else { SQL };
    let Some(row) = tx.query_opt(sql, &[&id, &attempt, &proc, &incarnation])? else {
        // This attempt completed the task, stage and all: its transaction
        // is being tried again after a lost answer.
        return match tx.query_opt(COMPLETED_BY, &[&id, &attempt, &proc, &incarnation])? {
            Some(row) => Ok(Response::Applied { retries: num(row.get(0)), retry_at_ms: None }),
            None => rejected(tx, fence),
        };
    };
    finish_stage(tx, id, row.get(1), row.get(2))?;
    Ok(Response::Applied { retries: num(row.get(0)), retry_at_ms: None })
}

/// Marks the task's stage done, if the stage is still linked to this task.
fn finish_stage(tx: &mut Tx, task: i64, pipeline: Option<i64>, index: Option<i64>) -> Result<(), Error> {
    const SQL: &str = "
        UPDATE stages SET task_id = NULL, done = true WHERE pipeline = $1 AND stage_index = $2 AND task_id = $3";
    if let (Some(pipeline), Some(index)) = (pipeline, index) {
        tx.execute(SQL, &[&pipeline, &index, &task])?;
    }
    Ok(())
}

/// A fenced statement matched nothing: one read names why, in the model's
/// order (missing, terminal, superseded, not the owner).
fn rejected(tx: &mut Tx, fence: &Fence) -> Result<Response, Error> {
    const SQL: &str = "SELECT state, attempt, owner_proc, owner_incarnation FROM tasks WHERE id = $1";
    let Some(row) = tx.query_opt(SQL, &[&db(fence.task)])? else {
        return Ok(Response::Rejected { reason: Rejection::Missing });
    };
    let state = state(row.get(0));
    let owner = owner(row.get(2), row.get(3));
    let reason = if state.is_terminal() {
        Rejection::Terminal
    } else if num::<u32>(row.get(1)) != fence.attempt {
        Rejection::Superseded
    } else if state == TaskState::Leased && owner == Some(fence.owner) {
        // The fence holds now but did not a statement ago: a concurrent claim
        // made a forged future fence current. Retryable, like a write conflict.
        Rejection::Conflict
    } else {
        Rejection::NotOwner
    };
    Ok(Response::Rejected { reason })
}

/// Releases heartbeat-owned tasks (no lease) of dead owners: superseded by a
/// newer incarnation of their process, or silent longer than dead_after_ms.
/// Like every sweep, it skips rows another transaction holds (SKIP LOCKED):
/// a sweep that waited would stall behind a transaction that spans round
/// trips; the row is looked at again by the next sweep.
fn release_dead(tx: &mut Tx) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "WITH victims AS (
             SELECT id FROM tasks t
             WHERE t.state = 'leased' AND t.lease_expiry_ms IS NULL
               AND (NOT EXISTS (SELECT 1 FROM heartbeats h
                                WHERE h.proc = t.owner_proc AND h.incarnation = t.owner_incarnation
                                  AND $1 - h.last_ms <= $2 AND NOT h.gone)
                    OR EXISTS (SELECT 1 FROM heartbeats h
                               WHERE h.proc = t.owner_proc AND h.incarnation > t.owner_incarnation))
             FOR UPDATE SKIP LOCKED)
         UPDATE tasks t SET ",
        release!(),
        " FROM victims WHERE t.id = victims.id"
    );
    let now = tx.now_ms;
    let released = tx.execute(SQL, &[&now, &db(tx.cfg.dead_after_ms)])?;
    Ok(Response::Released { tasks: num(released as i64) })
}

/// Same-owner recovery: tasks leased to `owner` that it does not run, granted
/// more than `older_than_ms` before its list (the list's time is the owner's
/// clock, never later than the store's).
fn release_orphans(
    tx: &mut Tx,
    owner: Owner,
    running: &[TaskId],
    older_than_ms: u64,
    as_of_ms: u64,
) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "WITH victims AS (
             SELECT id FROM tasks
             WHERE state = 'leased' AND owner_proc = $2 AND owner_incarnation = $3 AND id <> ALL($4)
               AND LEAST($5::bigint, $1) - updated_ms > $6
             FOR UPDATE SKIP LOCKED)
         UPDATE tasks t SET ",
        release!(),
        " FROM victims WHERE t.id = victims.id"
    );
    let now = tx.now_ms;
    let running: Vec<i64> = running.iter().map(|&id| db(id)).collect();
    let (proc, incarnation) = (i64::from(owner.proc), i64::from(owner.incarnation));
    let params: Params = &[&now, &proc, &incarnation, &running, &db(as_of_ms), &db(older_than_ms)];
    let released = tx.execute(SQL, params)?;
    Ok(Response::Released { tasks: num(released as i64) })
}

/// Expired leases of tasks outside any group; groups are repair's business.
fn reclaim_expired(tx: &mut Tx) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "WITH victims AS (
             SELECT id FROM tasks WHERE state = 'leased' AND grp IS NULL AND lease_expiry_ms <= $1
             FOR UPDATE SKIP LOCKED)
         UPDATE tasks t SET ",
        release!(),
        " FROM victims WHERE t.id = victims.id"
    );
    let now = tx.now_ms;
    let released = tx.execute(SQL, &[&now])?;
    Ok(Response::Released { tasks: num(released as i64) })
}

/// Group repair in one statement, so every part reads one snapshot: each
/// group with a leased task that has a lease (rows another transaction holds
/// skipped, as a group without them), whose next look is due, is
/// looked at; its expired leases are released; a group that needed repair is
/// looked at again at once, one that did not backs off, but no later than
/// its next lease expiry, a skipped row's included (read without its lock;
/// one already out: at once), `LEAST` skipping the NULL of a group without one.
fn repair(tx: &mut Tx) -> Result<Response, Error> {
    // One repair pass at a time: a pass reads the schedule, then writes it.
    const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('leasesim.group_repair'))";
    const SQL: &str = concat!(
        "WITH leased AS (
             SELECT id, grp, lease_expiry_ms FROM tasks
             WHERE state = 'leased' AND grp IS NOT NULL AND lease_expiry_ms IS NOT NULL
             FOR UPDATE SKIP LOCKED),
         held AS (
             SELECT grp, min(lease_expiry_ms) AS expiry_ms FROM tasks
             WHERE state = 'leased' AND grp IS NOT NULL AND lease_expiry_ms IS NOT NULL
               AND id NOT IN (SELECT id FROM leased)
             GROUP BY grp),
         looked AS (
             SELECT t.grp,
                    bool_or(t.lease_expiry_ms <= $1) AS needed,
                    min(t.lease_expiry_ms) FILTER (WHERE t.lease_expiry_ms > $1) AS next_expiry_ms,
                    coalesce(max(r.misses), 0) AS misses
             FROM leased t LEFT JOIN group_repair r ON r.grp = t.grp
             WHERE $1 >= coalesce(r.next_at_ms, 0)
             GROUP BY t.grp),
         released AS (
             UPDATE tasks t SET ",
        release!(),
        ", repair_count = t.repair_count + 1
             FROM leased, looked
             WHERE t.id = leased.id AND leased.grp = looked.grp AND leased.lease_expiry_ms <= $1
             RETURNING t.id),
         scheduled AS (
             INSERT INTO group_repair (grp, misses, next_at_ms)
             SELECT looked.grp,
                    CASE WHEN needed THEN 0 ELSE misses + 1 END,
                    CASE WHEN needed THEN $1
                         ELSE LEAST($1 + LEAST($2 * (1::bigint << LEAST(misses, 20)::int), $3), next_expiry_ms,
                                    CASE WHEN held.expiry_ms IS NOT NULL THEN GREATEST(held.expiry_ms, $1) END) END
             FROM looked LEFT JOIN held ON held.grp = looked.grp
             ON CONFLICT (grp) DO UPDATE SET misses = excluded.misses, next_at_ms = excluded.next_at_ms)
         SELECT count(*) FROM released"
    );
    let now = tx.now_ms;
    let (base, cap) = (db(tx.cfg.repair_backoff_base_ms), db(tx.cfg.repair_backoff_cap_ms));
    tx.query_one(LOCK, &[])?;
    let row = tx.query_one(SQL, &[&now, &base, &cap])?;
    Ok(Response::Released { tasks: num(row.get(0)) })
}

fn pipeline_snapshot(tx: &mut Tx) -> Result<Response, Error> {
    const SQL: &str = concat!(
        "SELECT s.pipeline, s.stage_index FROM ",
        stages_with_prev!(),
        " WHERE ",
        stage_due!(),
        " ORDER BY s.pipeline, s.stage_index"
    );
    let rows = tx.query(SQL, &[])?;
    let due = rows.iter().map(|row| StageRef { pipeline: num(row.get(0)), index: num(row.get(1)) }).collect();
    Ok(Response::Snapshot { due })
}

/// The guarded insert of a stage's task, linked in the same transaction.
fn enqueue_stage(tx: &mut Tx, stage: StageRef) -> Result<Response, Error> {
    // The stage row stays locked until commit: a second enqueue of the same
    // stage waits, then sees this one's link. A stage the committed rows
    // show not due is refused without the lock: whoever holds its row (a
    // transaction finishing its task) cannot make it due, so waiting for
    // that transaction to end would only delay the same answer.
    const CHECK: &str = concat!(
        "SELECT ",
        stage_due!(),
        " FROM ",
        stages_with_prev!(),
        " WHERE s.pipeline = $1 AND s.stage_index = $2"
    );
    const GUARD: &str = concat!(
        "SELECT ",
        stage_due!(),
        " FROM ",
        stages_with_prev!(),
        " WHERE s.pipeline = $1 AND s.stage_index = $2 FOR UPDATE OF s"
    );
    const LINK: &str = "UPDATE stages SET task_id = $3 WHERE pipeline = $1 AND stage_index = $2";
    let (pipeline, index) = (db(stage.pipeline), i64::from(stage.index));
    for guard in [CHECK, GUARD] {
        match tx.query_opt(guard, &[&pipeline, &index])? {
            None => return Ok(Response::Rejected { reason: Rejection::Missing }),
            Some(row) if !row.get::<_, bool>(0) => return Ok(Response::Rejected { reason: Rejection::StageGuard }),
            Some(_) => {}
        }
    }
    let not_before_ms = num(tx.now_ms);
    let spec =
        TaskSpec { kind: TaskKind::Stage, group: Some(stage.pipeline), stage: Some(stage), index: None, not_before_ms };
    let task = insert_task(tx, &spec)?;
    tx.execute(LINK, &[&pipeline, &index, &db(task)])?;
    Ok(Response::Enqueued { task })
}

/// One maintenance pass of one kind, as one statement under the request's
/// statement timeout (`SET LOCAL`: it ends with the transaction). The index
/// pass moves every built index to materialized; other kinds change nothing
/// in the store. A pass that times out raises 57014 and rolls back whole.
fn maintain(tx: &mut Tx, kind: MaintenanceKind, timeout_ms: Option<u64>) -> Result<Response, Error> {
    const TIMEOUT: &str = "SELECT set_config('statement_timeout', $1, true)";
    const FINALIZE: &str = "
        WITH finalized AS (DELETE FROM built_indexes RETURNING index_id)
        INSERT INTO materialized_indexes (index_id) SELECT index_id FROM finalized ON CONFLICT DO NOTHING";
    // Under its statement timeout a pass waits for locks as long as that
    // allows, not the connection's short lock_timeout.
    const NO_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', '0', true)";
    if let Some(timeout_ms) = timeout_ms {
        tx.query_one(TIMEOUT, &[&format!("{timeout_ms}ms")])?;
        if timeout_ms > 0 {
            tx.query_one(NO_LOCK_TIMEOUT, &[])?;
        }
    }
    if kind == MaintenanceKind::Index {
        tx.execute(FINALIZE, &[])?;
    }
    Ok(Response::Ack)
}

fn query_index(tx: &mut Tx, index: IndexId) -> Result<Response, Error> {
    const SQL: &str = "SELECT EXISTS (SELECT 1 FROM materialized_indexes WHERE index_id = $1)";
    let row = tx.query_one(SQL, &[&db(index)])?;
    Ok(Response::Query { materialized: row.get(0) })
}

/// An error with its SQLSTATE and message (the client's `Display` says "db error").
pub fn describe(e: &Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Reading every row back, and the conversions.
// ---------------------------------------------------------------------------

/// The reads of every table, prepared once per session ([`PgStore::create`])
/// and executed together by [`PgStore::rows`] after every request: one round
/// trip, no planning (a third of the test's time when planned every time).
const TABLES: [(&str, &str); 6] = [
    (
        "rows_tasks",
        "SELECT id, kind, grp, stage_pipeline, stage_index, index_id, not_before_ms, state, owner_proc,
                owner_incarnation, attempt, lease_expiry_ms, retries, retry_at_ms, updated_ms, repair_count,
                enqueue_key, completed_proc, completed_incarnation
         FROM tasks ORDER BY id",
    ),
    ("rows_stages", "SELECT pipeline, stage_index, task_id, done FROM stages ORDER BY pipeline, stage_index"),
    ("rows_built", "SELECT index_id, task_id FROM built_indexes ORDER BY index_id"),
    ("rows_materialized", "SELECT index_id FROM materialized_indexes ORDER BY index_id"),
    ("rows_heartbeats", "SELECT proc, incarnation, last_ms FROM heartbeats WHERE NOT gone ORDER BY proc, incarnation"),
    ("rows_repair", "SELECT grp, misses, next_at_ms FROM group_repair ORDER BY grp"),
];

impl PgStore {
    /// Every row of every table, in one round trip (text protocol).
    pub fn rows(&mut self) -> Result<Rows, Error> {
        let sql: String = TABLES.iter().map(|(name, _)| format!("EXECUTE {name};")).collect();
        let mut tables: Vec<Vec<SimpleQueryRow>> = vec![Vec::new()];
        for message in self.main.client.simple_query(&sql)? {
            match message {
                SimpleQueryMessage::Row(row) => tables.last_mut().expect("a table is open").push(row),
                SimpleQueryMessage::CommandComplete(_) => tables.push(Vec::new()),
                _ => {}
            }
        }
        let table = |i: usize| tables[i].iter();
        // Keys and completions are columns of tasks: one scan reads all three.
        let mut keys: Vec<(u64, TaskId)> = table(0).filter_map(|r| Some((opt_text(r, 16)?, text(r, 0)))).collect();
        keys.sort_unstable();
        Ok(Rows {
            tasks: table(0).map(task_row).collect(),
            keys,
            completions: table(0).filter_map(completion_row).collect(),
            stages: table(1).map(stage_row).collect(),
            built: table(2).map(|r| (text(r, 0), text(r, 1))).collect(),
            materialized: table(3).map(|r| text(r, 0)).collect(),
            heartbeats: table(4).map(|r| (Owner { proc: text(r, 0), incarnation: text(r, 1) }, text(r, 2))).collect(),
            repair: table(5).map(|r| (text(r, 0), text(r, 1), text(r, 2))).collect(),
        })
    }
}

fn task_row(r: &SimpleQueryRow) -> Task {
    let stage = opt_text(r, 3).map(|pipeline| StageRef { pipeline, index: text(r, 4) });
    let spec = TaskSpec {
        kind: kind(r.get(1).expect("kind")),
        group: opt_text(r, 2),
        stage,
        index: opt_text(r, 5),
        not_before_ms: text(r, 6),
    };
    Task {
        id: text(r, 0),
        spec,
        state: state(r.get(7).expect("state")),
        owner: opt_text(r, 8).map(|proc| Owner { proc, incarnation: text(r, 9) }),
        attempt: text(r, 10),
        lease_expiry_ms: opt_text(r, 11),
        retries: text(r, 12),
        retry_at_ms: text(r, 13),
        updated_ms: text(r, 14),
        repair_count: text(r, 15),
    }
}

/// The completion recorded on a task row (read by [`PgStore::rows`]), if any.
fn completion_row(r: &SimpleQueryRow) -> Option<Fence> {
    let owner = Owner { proc: opt_text(r, 17)?, incarnation: text(r, 18) };
    Some(Fence { task: text(r, 0), attempt: text(r, 10), owner })
}

fn stage_row(r: &SimpleQueryRow) -> (StageRef, StageRow) {
    let stage = StageRef { pipeline: text(r, 0), index: text(r, 1) };
    (stage, StageRow { task: opt_text(r, 2), done: r.get(3) == Some("t") })
}

/// A column of the text protocol, parsed; a NULL is `None`.
fn opt_text<T: FromStr<Err: Debug>>(row: &SimpleQueryRow, i: usize) -> Option<T> {
    row.get(i).map(|s| s.parse().unwrap_or_else(|e| panic!("column {i}: {s:?}: {e:?}")))
}

fn text<T: FromStr<Err: Debug>>(row: &SimpleQueryRow, i: usize) -> T {
    opt_text(row, i).unwrap_or_else(|| panic!("column {i} is NULL"))
}

/// A u64 of the model as a bigint. Store times and ids stay far below
/// i64::MAX; a larger one is a documented limit, not a silent wrap.
fn db(x: u64) -> i64 {
    i64::try_from(x).unwrap_or_else(|_| panic!("{x} does not fit a bigint (see docs/store-fidelity.md)"))
}

/// A bigint as the model's integer type (u64 or u32).
fn num<T: TryFrom<i64>>(x: i64) -> T {
    T::try_from(x).unwrap_or_else(|_| panic!("{x} does not fit the model's integer type"))
}

fn fence_params(fence: &Fence) -> [i64; 4] {
    [db(fence.task), fence.attempt.into(), fence.owner.proc.into(), fence.owner.incarnation.into()]
}

fn owner(proc: Option<i64>, incarnation: Option<i64>) -> Option<Owner> {
    Some(Owner { proc: num(proc?), incarnation: num(incarnation?) })
}

fn kind(name: &str) -> TaskKind {
    TaskKind::ALL.into_iter().find(|k| k.name() == name).unwrap_or_else(|| panic!("unknown task kind {name:?}"))
}

fn state(name: &str) -> TaskState {
    match name {
        "ready" => TaskState::Ready,
        "leased" => TaskState::Leased,
        "done" => TaskState::Done,
        "dead" => TaskState::Dead,
        other => panic!("unknown task state {other:?}"),
    }
}
