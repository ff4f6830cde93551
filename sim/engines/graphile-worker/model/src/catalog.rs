//! Which statement a text is. The texts are not written here: [`Catalog::capture`]
//! obtains them at run time by calling graphile's own public builders
//! (graphile_worker_queries, graphile_worker_utils, graphile_worker_migrations)
//! against a capturing executor that records each statement and answers
//! nothing, then keys each kind by the text with its whitespace collapsed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::DateTime;
use futures::executor::block_on;
use graphile_worker_database::{
    BoxFuture, Database, DatabaseDriver, DbError, DbExecutor, DbParams, DbRow, DbTransaction, NotificationStream,
    Schema, TransactionDriver,
};
use graphile_worker_job::{DbJob, DbJobData, Job};
use graphile_worker_job_spec::JobSpec;
use graphile_worker_queries as q;
use graphile_worker_utils::types::{CleanupTask, RescheduleJobOptions};
use graphile_worker_utils::WorkerUtils;

/// graphile_worker 0.14.1's migrations: (number, breaking).
pub(crate) const MIGRATIONS: [(i32, bool); 22] = [
    (1, true),
    (2, false),
    (3, true),
    (4, false),
    (5, false),
    (6, false),
    (7, false),
    (8, false),
    (9, false),
    (10, false),
    (11, true),
    (12, false),
    (13, true),
    (14, true),
    (15, false),
    (16, true),
    (17, false),
    (18, false),
    (19, false),
    (20, false),
    (21, false),
    (22, false),
];

/// The shape of a claim statement: which flag filters it binds, and whether
/// it binds the worker's clock (`use_local_time`) instead of calling `now()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimShape {
    pub forbidden: bool,
    pub accepted: bool,
    pub allowlist: bool,
    pub local_time: bool,
}

impl ClaimShape {
    fn all() -> impl Iterator<Item = ClaimShape> {
        (0..16u8).map(|bits| ClaimShape {
            forbidden: bits & 1 != 0,
            accepted: bits & 2 != 0,
            allowlist: bits & 4 != 0,
            local_time: bits & 8 != 0,
        })
    }
}

/// Every statement the model answers, named after what graphile sends it for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stmt {
    /// `fetch_and_check_postgres_version` (schema install only).
    ServerVersion,
    /// `migrate`'s `get_last_migration`.
    LastMigration,
    /// `get_tasks_details`: insert the missing identifiers.
    RegisterTasks,
    /// `get_tasks_details`: read their ids.
    SelectTasks,
    GetJob(ClaimShape),
    BatchGetJobs(ClaimShape),
    CompleteJob {
        queued: bool,
    },
    FailJob {
        queued: bool,
    },
    /// The failure batcher's `fail_jobs`.
    FailJobs {
        queued: bool,
    },
    AddJob,
    AddJobs,
    WorkerHeartbeat,
    WorkerDeregister,
    TrySweepLock,
    ListStaleWorkers,
    ListOrphanLockedWorkers,
    HoldsResilientLocks,
    WorkerLastHeartbeat,
    RecoverDeadWorkerJobs,
    DeleteStaleWorkers,
    LockedJobsForRecovery,
    ListActiveWorkers,
    /// `_private_return_jobs(worker, ids)`: local queue returns at shutdown.
    ReturnJobs,
    /// `_private_return_jobs(worker, array[id], delay_ms, error, true)`.
    ReturnJobForRecovery,
    RemoveJob,
    CompleteJobs,
    PermanentlyFailJobs,
    RescheduleJobs,
    ForceUnlockWorkers,
    /// cleanup `DeletePermanentlyFailedJobs`.
    CleanupPermanentlyFailed,
    /// cleanup `GcJobQueues`: its DELETE.
    CleanupJobQueues,
    /// cleanup `GcTaskIdentifiers`: its DELETE.
    CleanupTasks,
    /// cleanup's `SET TRANSACTION ISOLATION LEVEL READ COMMITTED`: the model's
    /// only level; PostgreSQL accepts it after queries too when the level does not change.
    SetIsolationReadCommitted,
    /// cleanup's `SET LOCAL lock_timeout`: accepted, no effect (waits are the harness's).
    SetLocalLockTimeout,
    LockQueuesTable,
    LockTasksTable,
}

impl Stmt {
    pub(crate) fn is_claim(self) -> bool {
        matches!(self, Stmt::GetJob(_) | Stmt::BatchGetJobs(_))
    }

    /// Whether the model answers it with rows ([`crate::Output::Rows`]) rather
    /// than a count: graphile reads these with `fetch_*`, the others with `execute`.
    pub fn returns_rows(self) -> bool {
        matches!(
            self,
            Stmt::ServerVersion
                | Stmt::LastMigration
                | Stmt::SelectTasks
                | Stmt::GetJob(_)
                | Stmt::BatchGetJobs(_)
                | Stmt::AddJob
                | Stmt::AddJobs
                | Stmt::TrySweepLock
                | Stmt::ListStaleWorkers
                | Stmt::ListOrphanLockedWorkers
                | Stmt::HoldsResilientLocks
                | Stmt::WorkerLastHeartbeat
                | Stmt::RecoverDeadWorkerJobs
                | Stmt::LockedJobsForRecovery
                | Stmt::ListActiveWorkers
                | Stmt::CompleteJobs
                | Stmt::PermanentlyFailJobs
                | Stmt::RescheduleJobs
        )
    }

    /// Whether it is one SQL statement reading `_private_jobs` with one
    /// snapshot: after a wait PostgreSQL goes on with that snapshot (and
    /// re-checks only the row it waited for), so the model's retry does not
    /// see jobs committed meanwhile. Functions made of several statements
    /// take a snapshot per statement, so their retry sees them.
    pub(crate) fn keeps_snapshot(self) -> bool {
        matches!(
            self,
            Stmt::CompleteJob { .. }
                | Stmt::FailJob { .. }
                | Stmt::FailJobs { .. }
                | Stmt::CompleteJobs
                | Stmt::PermanentlyFailJobs
                | Stmt::CleanupPermanentlyFailed
        )
    }

    /// Whether PostgreSQL leaves the order of its rows open (no ORDER BY, or
    /// ties in it): such answers are compared as multisets.
    pub fn unordered(self) -> bool {
        !matches!(self, Stmt::LockedJobsForRecovery)
    }
}

/// Collapses every run of whitespace to one space and trims the ends.
pub fn normalize(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a statement text is to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Text {
    Begin,
    Commit,
    Rollback,
    Stmt(Stmt),
    Unknown,
}

/// At most this many distinct texts are remembered: graphile sends a fixed
/// set of a few dozen, so the bound only matters for a client that builds
/// texts with values in them (those are classified afresh each time).
const SEEN_MAX: usize = 4096;

#[derive(Debug)]
pub(crate) struct Catalog {
    /// Shared by every catalog of one schema in the process: capturing the
    /// texts runs graphile's builders, about 2% of a graphile world's cost
    /// when every world did it again.
    by_text: Arc<BTreeMap<String, Stmt>>,
    /// Texts already classified, by their exact bytes. Collapsing the
    /// whitespace of every statement (twice: the store and the seam both
    /// ask) was a third of a graphile world's cost. Ordered, not hashed:
    /// hashing a statement's whole text costs more than the few `memcmp`s
    /// that tell the texts apart.
    seen: Mutex<Seen>,
}

/// The texts classified so far, and the last few looked up: one statement
/// is classified three times (on arrival, when it runs, after it ran), and
/// a text of the same length as one just seen is told apart by one
/// `memcmp` instead of a walk of the tree.
#[derive(Debug, Default)]
struct Seen {
    all: BTreeMap<Arc<str>, Text>,
    recent: [Option<(Arc<str>, Text)>; RECENT],
    next: usize,
}

const RECENT: usize = 4;

impl Seen {
    fn get(&mut self, sql: &str) -> Option<Text> {
        let recent = self.recent.iter().flatten().find(|(t, _)| t.len() == sql.len() && **t == *sql);
        if let Some((_, text)) = recent {
            return Some(*text);
        }
        let (t, text) = self.all.get_key_value(sql).map(|(t, text)| (t.clone(), *text))?;
        self.remember((t, text));
        Some(text)
    }

    fn remember(&mut self, entry: (Arc<str>, Text)) {
        self.recent[self.next] = Some(entry);
        self.next = (self.next + 1) % RECENT;
    }
}

impl Catalog {
    pub(crate) fn capture(schema: &str) -> Catalog {
        static CAPTURED: Mutex<BTreeMap<String, Arc<BTreeMap<String, Stmt>>>> = Mutex::new(BTreeMap::new());
        let by_text = CAPTURED
            .lock()
            .expect("captured catalogs")
            .entry(schema.to_string())
            .or_insert_with(|| Arc::new(Self::texts_of(schema)))
            .clone();
        Catalog { by_text, seen: Mutex::new(Seen::default()) }
    }

    /// Every statement graphile's builders send for `schema`, by its text.
    fn texts_of(schema: &str) -> BTreeMap<String, Stmt> {
        let mut by_text = BTreeMap::new();
        for (stmt, sql) in captured_statements(&Schema::new(schema)) {
            let text = normalize(&sql);
            if let Some(old) = by_text.insert(text.clone(), stmt) {
                assert_eq!(old, stmt, "two statements share one text: {text}");
            }
        }
        by_text
    }

    pub(crate) fn recognize(&self, normalized: &str) -> Option<Stmt> {
        self.by_text.get(normalized).copied()
    }

    /// What `sql` is: a transaction control word (BEGIN, COMMIT, ROLLBACK
    /// and their synonyms, as graphile's drivers may send them as
    /// statements), a known statement, or neither.
    pub(crate) fn classify(&self, sql: &str) -> Text {
        if let Some(text) = self.seen.lock().expect("seen").get(sql) {
            return text;
        }
        let normalized = normalize(sql);
        let text = match normalized.trim_end_matches(';').to_ascii_lowercase().as_str() {
            "begin" | "start transaction" => Text::Begin,
            "commit" | "end" => Text::Commit,
            "rollback" | "abort" => Text::Rollback,
            _ => self.recognize(&normalized).map_or(Text::Unknown, Text::Stmt),
        };
        let mut seen = self.seen.lock().expect("seen");
        if seen.all.len() < SEEN_MAX {
            let sql: Arc<str> = sql.into();
            seen.all.insert(sql.clone(), text);
            seen.remember((sql, text));
        }
        text
    }

    /// Every recognized text with its kind (for documentation and tests).
    pub fn texts(&self) -> impl Iterator<Item = (&str, Stmt)> {
        self.by_text.iter().map(|(text, stmt)| (text.as_str(), *stmt))
    }
}

/// The statements graphile's builders send, as a capturing driver saw them.
pub fn statement_texts(schema: &str) -> Vec<(Stmt, String)> {
    captured_statements(&Schema::new(schema))
}

type Log = Arc<Mutex<Vec<(String, DbParams)>>>;

/// Records every statement and its parameters; answers `execute` with 0
/// rows and `fetch_all` with an error, so that a builder stops right after a
/// query whose rows it would decode (no builder reaches for the wall clock
/// or needs a canned row). Also a `DatabaseDriver`, for WorkerUtils and migrate.
#[derive(Clone, Default)]
pub struct Capture {
    log: Log,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capture")
    }
}

impl Capture {
    /// The statements recorded so far, oldest first, and forgets them.
    pub fn take_all(&self) -> Vec<(String, DbParams)> {
        std::mem::take(&mut *self.log.lock().expect("capture log"))
    }

    fn take(&self) -> Vec<String> {
        self.take_all().into_iter().map(|(sql, _)| sql).collect()
    }

    /// A graphile `Database` over this capture.
    pub fn database(&self) -> Database {
        Database::new(self.clone())
    }
}

/// Runs `f` (typically `block_on` of a graphile builder) against a fresh
/// capture and answers every statement it sent, with its parameters.
pub fn capture(f: impl FnOnce(&Capture)) -> Vec<(String, DbParams)> {
    let capture = Capture::default();
    f(&capture);
    capture.take_all()
}

fn push(log: &Log, sql: &str, params: DbParams) {
    log.lock().expect("capture log").push((sql.to_string(), params));
}

impl DbExecutor for Capture {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        push(&self.log, sql, params);
        Box::pin(async { Ok(0) })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        push(&self.log, sql, params);
        Box::pin(async { Err(DbError::new("captured")) })
    }
}

impl DatabaseDriver for Capture {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn begin<'a>(&'a self) -> BoxFuture<'a, Result<DbTransaction, DbError>> {
        let log = self.log.clone();
        Box::pin(async move { Ok(DbTransaction::new(Box::new(Capture { log }))) })
    }

    fn listen<'a>(&'a self, _channel: &'a str) -> BoxFuture<'a, Result<Option<NotificationStream>, DbError>> {
        Box::pin(async { Ok(None) })
    }
}

impl TransactionDriver for Capture {
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), DbError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A job as the builders need one: only its id and queue matter to them.
fn sample_job(queued: bool) -> Job {
    let epoch = DateTime::UNIX_EPOCH;
    let data = DbJobData {
        id: 1,
        job_queue_id: queued.then_some(1),
        payload: serde_json::json!({}),
        priority: 0,
        run_at: epoch,
        attempts: 1,
        max_attempts: 25,
        last_error: None,
        created_at: epoch,
        updated_at: epoch,
        key: None,
        revision: 0,
        locked_at: None,
        locked_by: None,
        flags: None,
        task_id: 1,
    };
    Job::from_db_job(DbJob::from_data(data), "task".to_string())
}

/// Runs `f` against a fresh capture and returns the one statement it sent.
fn one(f: impl FnOnce(&Capture)) -> String {
    let mut all = several(f);
    assert_eq!(all.len(), 1, "expected one statement, got {all:?}");
    all.remove(0)
}

fn several(f: impl FnOnce(&Capture)) -> Vec<String> {
    let capture = Capture::default();
    f(&capture);
    capture.take()
}

fn captured_statements(schema: &Schema) -> Vec<(Stmt, String)> {
    let mut out = Vec::new();
    out.extend(startup(schema));
    out.extend(claims(schema));
    out.extend(releases(schema));
    out.extend(adds(schema));
    out.extend(recovery(schema));
    out.extend(utils(schema));
    out
}

fn startup(schema: &Schema) -> Vec<(Stmt, String)> {
    let version = one(|c| drop(block_on(graphile_worker_migrations::pg_version::fetch_and_check_postgres_version(c))));
    let last = one(|c| drop(block_on(graphile_worker_migrations::migrate(Database::new(c.clone()), schema))));
    let tasks = several(|c| drop(block_on(q::task_identifiers::get_tasks_details(c, schema, vec!["t".into()]))));
    assert_eq!(tasks.len(), 2, "get_tasks_details sends an insert and a select");
    vec![
        (Stmt::ServerVersion, version),
        (Stmt::LastMigration, last),
        (Stmt::RegisterTasks, tasks[0].clone()),
        (Stmt::SelectTasks, tasks[1].clone()),
    ]
}

fn claims(schema: &Schema) -> Vec<(Stmt, String)> {
    let details = q::task_identifiers::TaskDetails::new();
    let labels = vec!["flag".to_string()];
    let now = Some(DateTime::UNIX_EPOCH);
    let mut out = Vec::new();
    for shape in ClaimShape::all() {
        let forbidden: &[String] = if shape.forbidden { &labels } else { &[] };
        let accepted: &[String] = if shape.accepted { &labels } else { &[] };
        let filter = || {
            let filter = q::flag_filter::JobFlagFilter::new(forbidden, accepted);
            if shape.allowlist {
                filter.with_allowlist(labels.as_slice())
            } else {
                filter
            }
        };
        let now = now.filter(|_| shape.local_time);
        let get = one(|c| drop(block_on(q::get_job::get_job_with_filter(c, &details, schema, "w", filter(), now))));
        let batch = one(|c| {
            let fut = q::batch_get_jobs::batch_get_jobs_with_filter(c, &details, schema, "w", filter(), 10, now);
            drop(block_on(fut))
        });
        out.push((Stmt::GetJob(shape), get));
        out.push((Stmt::BatchGetJobs(shape), batch));
    }
    out
}

fn releases(schema: &Schema) -> Vec<(Stmt, String)> {
    let mut out = Vec::new();
    for queued in [false, true] {
        let job = sample_job(queued);
        let complete = one(|c| drop(block_on(q::complete_job::complete_job(c, &job, "w", schema))));
        let fail = one(|c| drop(block_on(q::fail_job::single::fail_job(c, &job, schema, "w", "e", None))));
        let failed = [q::fail_job::batch::FailedJob { job: &job, error: "e" }];
        let fail_batch = one(|c| drop(block_on(q::fail_job::batch::fail_jobs(c, &failed, schema, "w"))));
        out.push((Stmt::CompleteJob { queued }, complete));
        out.push((Stmt::FailJob { queued }, fail));
        out.push((Stmt::FailJobs { queued }, fail_batch));
    }
    let job = sample_job(false);
    let jobs = [job.clone()];
    let returned = one(|c| drop(block_on(q::return_jobs::batch::return_jobs(c, &jobs, schema, "w"))));
    let recovered = one(|c| {
        let delay = Some(Duration::from_millis(1));
        drop(block_on(q::return_jobs::recovery::return_job_for_recovery(c, &job, schema, "w", delay, Some("e"))))
    });
    out.push((Stmt::ReturnJobs, returned));
    out.push((Stmt::ReturnJobForRecovery, recovered));
    out
}

fn adds(schema: &Schema) -> Vec<(Stmt, String)> {
    let add = one(|c| {
        let fut = q::add_job::single::add_job(c, schema, "t", serde_json::json!({}), JobSpec::default(), false);
        drop(block_on(fut))
    });
    let spec = JobSpec::default();
    let batch = one(|c| {
        let jobs = [q::add_job::types::JobToAdd { identifier: "t", payload: serde_json::json!({}), spec: &spec }];
        let details = q::task_identifiers::TaskDetails::new();
        drop(block_on(q::add_job::batch::add_jobs(c, schema, &jobs, &details, false, false)))
    });
    vec![(Stmt::AddJob, add), (Stmt::AddJobs, batch)]
}

fn recovery(schema: &Schema) -> Vec<(Stmt, String)> {
    use q::worker_heartbeat::{active, lock, registration, stale};
    let ids = vec!["w".to_string()];
    let flags = vec!["f".to_string()];
    let threshold = Duration::from_secs(1);
    vec![
        (Stmt::WorkerHeartbeat, one(|c| drop(block_on(registration::worker_heartbeat(c, schema, "w", None))))),
        (Stmt::WorkerDeregister, one(|c| drop(block_on(registration::worker_deregister(c, schema, "w"))))),
        (Stmt::TrySweepLock, one(|c| drop(block_on(lock::try_acquire_sweep_lock(c))))),
        (Stmt::ListStaleWorkers, one(|c| drop(block_on(stale::list_stale_workers(c, schema, threshold))))),
        (
            Stmt::ListOrphanLockedWorkers,
            one(|c| drop(block_on(stale::list_orphan_locked_workers(c, schema, threshold)))),
        ),
        (
            Stmt::HoldsResilientLocks,
            one(|c| drop(block_on(stale::worker_holds_resilient_locks(c, schema, "w", &flags)))),
        ),
        (Stmt::WorkerLastHeartbeat, one(|c| drop(block_on(stale::get_worker_last_heartbeat(c, schema, "w"))))),
        (Stmt::DeleteStaleWorkers, one(|c| drop(block_on(stale::delete_stale_workers(c, schema, &ids))))),
        (Stmt::ListActiveWorkers, one(|c| drop(block_on(active::list_active_workers(c, schema, threshold))))),
        (
            Stmt::RecoverDeadWorkerJobs,
            one(|c| drop(block_on(q::recover_workers::recover_dead_worker_jobs(c, schema, &ids, threshold)))),
        ),
        (
            Stmt::LockedJobsForRecovery,
            one(|c| drop(block_on(q::recover_workers::get_locked_jobs_for_recovery(c, schema, &ids)))),
        ),
    ]
}

fn utils(schema: &Schema) -> Vec<(Stmt, String)> {
    let run = |f: &dyn Fn(&WorkerUtils)| {
        several(|c| {
            let utils = WorkerUtils::new(Database::new(c.clone()), schema);
            f(&utils);
        })
    };
    let single = |f: &dyn Fn(&WorkerUtils)| {
        let mut all = run(f);
        assert_eq!(all.len(), 1, "expected one statement, got {all:?}");
        all.remove(0)
    };
    let mut out = vec![
        (Stmt::RemoveJob, single(&|u| drop(block_on(u.remove_job("k"))))),
        (Stmt::CompleteJobs, single(&|u| drop(block_on(u.complete_jobs(&[1]))))),
        (Stmt::PermanentlyFailJobs, single(&|u| drop(block_on(u.permanently_fail_jobs(&[1], "r"))))),
        (Stmt::RescheduleJobs, single(&|u| drop(block_on(u.reschedule_jobs(&[1], RescheduleJobOptions::default()))))),
        (Stmt::ForceUnlockWorkers, single(&|u| drop(block_on(u.force_unlock_workers(&["w"]))))),
        (
            Stmt::CleanupPermanentlyFailed,
            single(&|u| drop(block_on(u.cleanup(&[CleanupTask::DeletePermanentlyFailedJobs])))),
        ),
    ];
    for (task, lock, delete) in [
        (CleanupTask::GcJobQueues, Stmt::LockQueuesTable, Stmt::CleanupJobQueues),
        (CleanupTask::GcTaskIdentifiers, Stmt::LockTasksTable, Stmt::CleanupTasks),
    ] {
        let sent = run(&|u| drop(block_on(u.cleanup(&[task]))));
        assert_eq!(sent.len(), 4, "a table cleanup sends SET, SET LOCAL, LOCK and DELETE: {sent:?}");
        out.push((Stmt::SetIsolationReadCommitted, sent[0].clone()));
        out.push((Stmt::SetLocalLockTimeout, sent[1].clone()));
        out.push((lock, sent[2].clone()));
        out.push((delete, sent[3].clone()));
    }
    out
}
