//! graphile_worker 0.14.1: a worker that was silent past the sweep threshold
//! completes a job that recovery already gave to another worker, and its
//! `complete_job` (`delete ... where id = $1`, no owner check) deletes the job
//! under its new owner. Outside leasesim's simulation: graphile's own,
//! unmodified worker, on real tokio, against a real PostgreSQL (a throwaway
//! cluster, `tests/pg/cluster.rs` of the main repository).
//!
//! Two workers, A and B, built by graphile's own `WorkerOptions` (recovery on,
//! short intervals), each with its own pool from graphile's tokio-postgres
//! driver. Only the documented database seam is wrapped ([`Gate`]): a
//! `DatabaseDriver` that forwards every call to the real driver, records the
//! statements that matter, and, while A is "cut off", makes A's calls wait,
//! as a network partition or a SIGSTOP of A's process does. The task handler
//! reports each run and waits until the test releases it with an outcome.
//!
//! Run: `cargo test --manifest-path sim/engines/graphile-worker/repro/Cargo.toml -- --ignored --nocapture`
//! (from the main repository; `--nocapture` shows the reports).

#[path = "../../../../../tests/pg/cluster.rs"]
mod cluster;

use cluster::Cluster;
use graphile_worker::tokio_postgres::TokioPostgresDatabase;
use graphile_worker::{
    BoxFuture, Database, DatabaseDriver, DbError, DbExecutor, DbParams, DbRow, DbTransaction, DbValue,
    IntoTaskHandlerResult, JobSpec, NotificationStream, TaskHandler, TransactionDriver, Worker, WorkerContext,
    WorkerOptions, WorkerRecoveryConfig, WorkerShutdownConfig, WorkerUtils,
};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// graphile's schema (its default).
const SCHEMA: &str = "graphile_worker";
/// Worker recovery, as a user configures it, with short intervals.
const HEARTBEAT: Duration = Duration::from_millis(200);
const SWEEP: Duration = Duration::from_millis(300);
const THRESHOLD: Duration = Duration::from_secs(1);
const RECOVERY_DELAY: Duration = Duration::ZERO;
const POLL: Duration = Duration::from_millis(100);
/// Connections per worker pool (the cluster allows 10 in all).
const POOL: usize = 3;
/// The longest any awaited step may take before the test fails.
const STEP: Duration = Duration::from_secs(15);
/// How long the test watches for something that must not happen. Longer than
/// exp(1) s, the delay after which graphile retries a job whose first
/// attempt failed, and than the sweep threshold.
const WATCH: Duration = Duration::from_millis(3_500);

// ---------------------------------------------------------------------------
// The task: one identifier; each run reports itself and waits for the test.

/// One run of a job's handler, as it reported itself.
struct Run {
    worker: &'static str,
    job: i64,
    attempts: i16,
    /// The handler returns what is sent here (`Err`: the job failed).
    release: oneshot::Sender<Result<(), String>>,
}

/// What the handler finds in its worker's extensions.
#[derive(Clone)]
struct Hand {
    worker: &'static str,
    runs: mpsc::Sender<Run>,
}

impl std::fmt::Debug for Hand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hand({})", self.worker)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Probe {}

impl TaskHandler for Probe {
    const IDENTIFIER: &'static str = "stale_completion_probe";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        let Some(hand) = ctx.get_ext::<Hand>().cloned() else {
            return Err("the worker has no Hand extension".to_string());
        };
        let (release, outcome) = oneshot::channel();
        let run = Run { worker: hand.worker, job: *ctx.job().id(), attempts: *ctx.job().attempts(), release };
        if hand.runs.send(run).is_err() {
            return Err("the test is gone".to_string());
        }
        outcome.await.unwrap_or_else(|_| Err("the test dropped this run without an outcome".to_string()))
    }
}

// ---------------------------------------------------------------------------
// The journal: the statements of graphile's that matter here, as they went.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Stmt {
    GetJob,
    CompleteJob,
    FailJob,
    RecoverDeadWorkerJobs,
    Heartbeat,
}

/// Which of graphile's statements `sql` is (its SQL as graphile 0.14.1 sends it).
fn classify(sql: &str) -> Option<Stmt> {
    let first = sql.split_whitespace().next()?.to_ascii_lowercase();
    if !matches!(first.as_str(), "select" | "with" | "delete" | "update") {
        return None; // migrations and the rest
    }
    if sql.contains("recover_dead_worker_jobs(") {
        Some(Stmt::RecoverDeadWorkerJobs)
    } else if sql.contains("worker_heartbeat(") {
        Some(Stmt::Heartbeat)
    } else if sql.contains("attempts = jobs.attempts + 1") {
        Some(Stmt::GetJob)
    } else if sql.contains("delete from") && sql.contains("_private_jobs") {
        Some(Stmt::CompleteJob)
    } else if sql.contains("last_error = $2::text") {
        Some(Stmt::FailJob)
    } else {
        None
    }
}

#[derive(Debug, Clone)]
struct Record {
    at: Duration,
    worker: &'static str,
    stmt: Stmt,
    /// The job the statement names (its first parameter), or claimed.
    job: Option<i64>,
    /// Rows affected (execute), rows returned (get_job), or the count returned
    /// (recover_dead_worker_jobs); `Err`: the statement failed.
    outcome: Result<i64, String>,
    /// The workers a recovery released (labels).
    dead: Vec<String>,
    /// The statement's form for a job of a named queue: a CTE whose outer
    /// UPDATE unlocks the queue (the rows affected are the queue's).
    queued: bool,
}

struct Journal {
    epoch: Instant,
    records: Mutex<Vec<Record>>,
    /// Calls that answered, per worker and statement (heartbeats and polls too).
    calls: Mutex<HashMap<(&'static str, Stmt), u64>>,
    /// graphile's worker ids, named.
    names: Mutex<Vec<(String, &'static str)>>,
}

impl Journal {
    fn new() -> Self {
        Journal { epoch: Instant::now(), records: Mutex::default(), calls: Mutex::default(), names: Mutex::default() }
    }

    fn name(&self, worker_id: &str, label: &'static str) {
        lock(&self.names).push((worker_id.to_string(), label));
    }

    /// A worker id as a label ("A", "B"); other text with every id replaced.
    fn labelled(&self, text: &str) -> String {
        lock(&self.names).iter().fold(text.to_string(), |text, (id, label)| text.replace(id.as_str(), label))
    }

    fn note(
        &self,
        worker: &'static str,
        sql: &str,
        stmt: Stmt,
        params: &DbParams,
        outcome: Result<i64, String>,
        claimed: Option<i64>,
    ) {
        if outcome.is_ok() {
            *lock(&self.calls).entry((worker, stmt)).or_default() += 1;
        }
        let job = match params.values().first() {
            Some(DbValue::I64(id)) => Some(*id),
            _ => claimed,
        };
        let dead = match params.values().first() {
            Some(DbValue::TextArray(ids)) if stmt == Stmt::RecoverDeadWorkerJobs => {
                ids.iter().map(|id| self.labelled(id)).collect()
            }
            _ => Vec::new(),
        };
        let noteworthy = match stmt {
            Stmt::Heartbeat => outcome.is_err(),
            Stmt::GetJob => claimed.is_some() || outcome.is_err(),
            Stmt::RecoverDeadWorkerJobs => !dead.is_empty(),
            Stmt::CompleteJob | Stmt::FailJob => true,
        };
        if noteworthy {
            let at = self.epoch.elapsed();
            let queued = sql.contains("_private_job_queues");
            lock(&self.records).push(Record { at, worker, stmt, job, outcome, dead, queued });
        }
    }

    fn executed(&self, worker: &'static str, sql: &str, params: &DbParams, result: &Result<u64, DbError>) {
        if let Some(stmt) = classify(sql) {
            let outcome = result.as_ref().map(|n| *n as i64).map_err(|e| e.to_string());
            self.note(worker, sql, stmt, params, outcome, None);
        }
    }

    fn fetched(&self, worker: &'static str, sql: &str, params: &DbParams, result: &Result<Vec<DbRow>, DbError>) {
        let Some(stmt) = classify(sql) else { return };
        let (outcome, claimed) = match result {
            Err(e) => (Err(e.to_string()), None),
            Ok(rows) => match stmt {
                Stmt::GetJob => (Ok(rows.len() as i64), rows.first().and_then(|row| row.try_get::<i64>("id").ok())),
                Stmt::RecoverDeadWorkerJobs => {
                    let count = rows.first().and_then(|row| row.try_get::<i32>("recovered_count").ok());
                    (Ok(count.map_or(-1, i64::from)), None)
                }
                _ => (Ok(rows.len() as i64), None),
            },
        };
        self.note(worker, sql, stmt, params, outcome, claimed);
    }

    fn find(&self, worker: &str, stmt: Stmt, job: Option<i64>) -> Option<Record> {
        lock(&self.records).iter().find(|r| r.worker == worker && r.stmt == stmt && r.job == job).cloned()
    }

    fn calls(&self, worker: &'static str, stmt: Stmt) -> u64 {
        lock(&self.calls).get(&(worker, stmt)).copied().unwrap_or(0)
    }

    fn all(&self) -> Vec<Record> {
        lock(&self.records).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A record, without its time.
fn describe(r: &Record) -> String {
    let what = match r.stmt {
        Stmt::GetJob => "get_job".to_string(),
        Stmt::CompleteJob => "complete_job".to_string(),
        Stmt::FailJob => "fail_job".to_string(),
        Stmt::RecoverDeadWorkerJobs => format!("recover_dead_worker_jobs(dead: [{}])", r.dead.join(", ")),
        Stmt::Heartbeat => "worker_heartbeat".to_string(),
    };
    let job = r.job.map(|j| format!(" job {j}")).unwrap_or_default();
    let outcome = match (&r.outcome, r.stmt) {
        (Err(e), _) => format!("error: {e}"),
        (Ok(_), Stmt::GetJob) => format!("claimed job {}", r.job.unwrap_or(-1)),
        (Ok(n), Stmt::RecoverDeadWorkerJobs) => format!("returned recovered_count = {n}"),
        (Ok(n), Stmt::CompleteJob | Stmt::FailJob) if r.queued => {
            format!("Ok, {n} row(s) affected (queue rows unlocked by its outer UPDATE; its CTE's change to the job is not counted)")
        }
        (Ok(n), _) => format!("Ok, {n} row(s) affected"),
    };
    format!("{} {what}{job}: {outcome}", r.worker)
}

/// A record, at its time.
fn describe_at(r: &Record) -> String {
    format!("t={:>5} ms  {}", r.at.as_millis(), describe(r))
}

// ---------------------------------------------------------------------------
// The gate: graphile's database seam, forwarding to its real tokio-postgres
// driver; while cut off, every new call waits.

struct GateState {
    cut: watch::Sender<bool>,
    /// Calls past the gate that have not answered, plus open transactions.
    busy: AtomicUsize,
}

/// One unit of [`GateState::busy`], given back on drop.
struct Busy(Arc<GateState>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct Gate {
    worker: &'static str,
    inner: TokioPostgresDatabase,
    state: Arc<GateState>,
    journal: Arc<Journal>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate({}, {:?})", self.worker, self.inner)
    }
}

impl Gate {
    fn new(worker: &'static str, inner: TokioPostgresDatabase, journal: Arc<Journal>) -> Self {
        let state = Arc::new(GateState { cut: watch::Sender::new(false), busy: AtomicUsize::new(0) });
        Gate { worker, inner, state, journal }
    }

    /// From now on, every call waits (statements of a transaction already
    /// begun still go through, so that it ends).
    fn cut_off(&self) {
        self.state.cut.send_replace(true);
    }

    fn heal(&self) {
        self.state.cut.send_replace(false);
    }

    fn busy(&self) -> usize {
        self.state.busy.load(Ordering::SeqCst)
    }

    /// Waits while cut off.
    async fn pass(&self) -> Busy {
        loop {
            self.state.busy.fetch_add(1, Ordering::SeqCst);
            let busy = Busy(self.state.clone());
            if !*self.state.cut.borrow() {
                return busy;
            }
            drop(busy);
            let mut cut = self.state.cut.subscribe();
            let _ = cut.wait_for(|cut| !*cut).await;
        }
    }
}

impl DbExecutor for Gate {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move {
            let _busy = self.pass().await;
            let kept = params.clone();
            let result = self.inner.execute(sql, params).await;
            self.journal.executed(self.worker, sql, &kept, &result);
            result
        })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        Box::pin(async move {
            let _busy = self.pass().await;
            let kept = params.clone();
            let result = self.inner.fetch_all(sql, params).await;
            self.journal.fetched(self.worker, sql, &kept, &result);
            result
        })
    }
}

impl DatabaseDriver for Gate {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn begin<'a>(&'a self) -> BoxFuture<'a, Result<DbTransaction, DbError>> {
        Box::pin(async move {
            let busy = self.pass().await;
            let inner = self.inner.begin().await?;
            let txn = GateTxn { inner, _busy: busy, worker: self.worker, journal: self.journal.clone() };
            Ok(DbTransaction::new(Box::new(txn)))
        })
    }

    fn listen<'a>(&'a self, channel: &'a str) -> BoxFuture<'a, Result<Option<NotificationStream>, DbError>> {
        Box::pin(async move {
            let _busy = self.pass().await;
            self.inner.listen(channel).await
        })
    }
}

/// A transaction of the real driver; open, it keeps its gate busy.
struct GateTxn {
    inner: DbTransaction,
    _busy: Busy,
    worker: &'static str,
    journal: Arc<Journal>,
}

impl DbExecutor for GateTxn {
    fn execute<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<u64, DbError>> {
        Box::pin(async move {
            let kept = params.clone();
            let result = self.inner.execute(sql, params).await;
            self.journal.executed(self.worker, sql, &kept, &result);
            result
        })
    }

    fn fetch_all<'a>(&'a self, sql: &'a str, params: DbParams) -> BoxFuture<'a, Result<Vec<DbRow>, DbError>> {
        Box::pin(async move {
            let kept = params.clone();
            let result = self.inner.fetch_all(sql, params).await;
            self.journal.fetched(self.worker, sql, &kept, &result);
            result
        })
    }
}

impl TransactionDriver for GateTxn {
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), DbError>> {
        let GateTxn { inner, _busy, .. } = *self;
        Box::pin(async move {
            let committed = inner.commit().await;
            drop(_busy);
            committed
        })
    }
}

// ---------------------------------------------------------------------------
// What graphile logs, captured for the report.

struct Capture {
    lines: Mutex<Vec<String>>,
    epoch: Mutex<Instant>,
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture =
            Box::leak(Box::new(Capture { lines: Mutex::default(), epoch: Mutex::new(Instant::now()) }));
        let installed = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .without_time()
            .with_writer(move || LogLine { capture, buf: Vec::new() })
            .try_init();
        if let Err(e) = installed {
            println!("(graphile's log is not captured: {e})");
        }
        capture
    })
}

/// One event's formatted text, kept when dropped.
struct LogLine {
    capture: &'static Capture,
    buf: Vec<u8>,
}

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buf).trim().to_string();
        if !text.is_empty() {
            let at = lock(&self.capture.epoch).elapsed();
            lock(&self.capture.lines).push(format!("t={:>5} ms {text}", at.as_millis()));
        }
    }
}

// ---------------------------------------------------------------------------
// The world: a cluster, two workers, an application that enqueues, and the
// test's own connection for looking at rows.

#[derive(Debug)]
struct JobRow {
    locked_by: Option<String>,
    attempts: i16,
    last_error: Option<String>,
    due: bool,
    available: bool,
}

#[derive(Debug, PartialEq)]
struct QueueRow {
    locked_by: Option<String>,
    locked_at: Option<String>,
}

/// What `Worker::run` returned, as text.
type RunResult = Result<(), String>;

struct World {
    title: &'static str,
    journal: Arc<Journal>,
    gate_a: Gate,
    a: Arc<Worker>,
    b: Arc<Worker>,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<RunResult>)>,
    runs: mpsc::Receiver<Run>,
    utils: WorkerUtils,
    /// Declared after the workers, before the cluster: dropped in this order.
    rt: Option<tokio::runtime::Runtime>,
    pg: postgres::Client,
    _cluster: Cluster,
}

/// The tests take turns: they share 2 cores, and the log capture.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    lock(&SERIAL)
}

fn options(gate: Gate, hand: Hand) -> WorkerOptions {
    let recovery = WorkerRecoveryConfig::default()
        .heartbeat_interval(HEARTBEAT)
        .sweep_interval(SWEEP)
        .sweep_threshold(THRESHOLD)
        .recovery_delay(RECOVERY_DELAY)
        .enabled(true);
    WorkerOptions::default()
        .database(Database::new(gate))
        .schema(SCHEMA)
        .concurrency(1)
        .poll_interval(POLL)
        .use_notification_delivery(false)
        .define_job::<Probe>()
        .add_extension(hand)
        .worker_recovery(recovery)
        .worker_shutdown(WorkerShutdownConfig::default().listen_os_shutdown_signals(false))
}

impl World {
    fn start(title: &'static str) -> World {
        println!("\n=== {title} ===");
        let capture = capture();
        lock(&capture.lines).clear();
        let bindir = cluster::find_bindir()
            .unwrap_or_else(|| panic!("no PostgreSQL server binaries on this machine ({})", cluster::INSTALL_HINT));
        let mut pg_cluster = Cluster::start(&bindir).unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"));
        let pg = pg_cluster.connect().unwrap_or_else(|e| panic!("cannot connect to PostgreSQL: {e}"));
        let conninfo = pg_cluster.conninfo();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
        let pool = |size| {
            TokioPostgresDatabase::from_url(&conninfo, size).unwrap_or_else(|e| panic!("cannot make a pool: {e}"))
        };
        let journal = Arc::new(Journal::new());
        *lock(&capture.epoch) = journal.epoch;
        let (runs_tx, runs) = mpsc::channel();
        let gate_a = Gate::new("A", pool(POOL), journal.clone());
        let gate_b = Gate::new("B", pool(POOL), journal.clone());
        let init = |gate: Gate, worker: &'static str| {
            let hand = Hand { worker, runs: runs_tx.clone() };
            let worker = rt
                .block_on(options(gate, hand).init())
                .unwrap_or_else(|e| panic!("graphile's WorkerOptions::init failed for worker {worker}: {e}"));
            Arc::new(worker)
        };
        let a = init(gate_a.clone(), "A");
        let b = init(gate_b, "B");
        journal.name(a.worker_id(), "A");
        journal.name(b.worker_id(), "B");
        let utils = WorkerUtils::new(Database::from(pool(1)), SCHEMA);
        println!(
            "graphile_worker 0.14.1, tokio-postgres driver; PostgreSQL at {}; recovery: heartbeat {HEARTBEAT:?}, \
             sweep {SWEEP:?}, threshold {THRESHOLD:?}, recovery delay {RECOVERY_DELAY:?}; concurrency 1, poll {POLL:?}",
            bindir.display()
        );
        println!("worker A = {}, worker B = {}", a.worker_id(), b.worker_id());
        let mut world = World {
            title,
            journal,
            gate_a,
            a,
            b,
            tasks: Vec::new(),
            runs,
            utils,
            rt: Some(rt),
            pg,
            _cluster: pg_cluster,
        };
        world.spawn("A");
        world
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives as long as the world")
    }

    fn say(&self, line: impl AsRef<str>) {
        println!("t={:>5} ms  {}", self.journal.epoch.elapsed().as_millis(), self.journal.labelled(line.as_ref()));
    }

    /// `worker.run()`, as an application's main runs it.
    fn spawn(&mut self, label: &'static str) {
        let worker = if label == "A" { self.a.clone() } else { self.b.clone() };
        let task = self.rt().spawn(async move { worker.run().await.map_err(|e| e.to_string()) });
        self.tasks.push((label, task));
        self.say(format!("worker {label} runs (Worker::run)"));
    }

    fn add_job(&mut self, queue: Option<&str>) -> i64 {
        let spec = JobSpec { queue_name: queue.map(str::to_string), ..JobSpec::default() };
        let job = self
            .rt()
            .block_on(self.utils.add_job(Probe {}, spec))
            .unwrap_or_else(|e| panic!("WorkerUtils::add_job failed: {e}"));
        let id = *job.id();
        self.say(format!("added job {id} (queue {})", queue.unwrap_or("none")));
        id
    }

    /// The next run to start must be `worker`'s of `job`.
    fn expect_run(&mut self, worker: &str, job: i64) -> Run {
        let run = match self.runs.recv_timeout(STEP) {
            Ok(run) => run,
            Err(RecvTimeoutError::Timeout) => {
                let state = self.state(job);
                panic!("{}: worker {worker} did not start job {job} within {STEP:?}; {state}", self.title)
            }
            Err(RecvTimeoutError::Disconnected) => panic!("{}: every worker's handler is gone", self.title),
        };
        assert!(
            run.worker == worker && run.job == job,
            "{}: expected worker {worker} to start job {job}, but worker {} started job {} (attempt {})",
            self.title,
            run.worker,
            run.job,
            run.attempts
        );
        self.say(format!("worker {worker}'s handler started job {job} (attempts = {})", run.attempts));
        run
    }

    /// No handler may start for `span`.
    fn expect_no_run(&mut self, span: Duration, why: &str) {
        match self.runs.recv_timeout(span) {
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => panic!("{}: every worker's handler is gone", self.title),
            Ok(run) => panic!(
                "{}: {why}, but worker {}'s handler started job {} (attempts {})",
                self.title, run.worker, run.job, run.attempts
            ),
        }
    }

    fn release(&self, run: Run, outcome: Result<(), String>) {
        let shown = format!("{outcome:?}");
        let (worker, job) = (run.worker, run.job);
        if run.release.send(outcome).is_err() {
            panic!("{}: worker {worker}'s handler for job {job} no longer waits", self.title);
        }
        self.say(format!("worker {worker}'s handler for job {job} returns {shown}"));
    }

    /// Cuts A off and waits until nothing of A's is in flight: from then on A
    /// says nothing to the database (its heartbeats and sweeps wait).
    fn cut_off_a(&mut self) {
        self.gate_a.cut_off();
        let deadline = Instant::now() + STEP;
        while self.gate_a.busy() > 0 {
            assert!(Instant::now() < deadline, "{}: A still has a call in flight after {STEP:?}", self.title);
            std::thread::sleep(Duration::from_millis(5));
        }
        self.say("worker A cut off: every call of A's to the database now waits (a partition, or a paused process)");
    }

    fn heal_a(&self) {
        self.gate_a.heal();
        self.say("worker A healed: its waiting calls go through");
    }

    /// Polls `probe` until it answers `Ok`; `Err` describes what it saw.
    fn wait_for<T>(&mut self, what: &str, mut probe: impl FnMut(&mut World) -> Result<T, String>) -> T {
        let deadline = Instant::now() + STEP;
        loop {
            match probe(self) {
                Ok(value) => return value,
                Err(seen) if Instant::now() > deadline => {
                    panic!("{}: timed out after {STEP:?} waiting for {what}; last seen: {seen}", self.title)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The journal's record of `worker`'s `stmt` for `job`, once there is one.
    fn wait_record(&mut self, worker: &str, stmt: Stmt, job: i64) -> Record {
        let what = format!("worker {worker}'s {stmt:?} of job {job}");
        let record = self.wait_for(&what, |w| {
            w.journal.find(worker, stmt, Some(job)).ok_or_else(|| format!("no such statement yet; {}", w.state(job)))
        });
        self.say(format!("graphile sent: {}", describe(&record)));
        record
    }

    /// The first recovery that released `dead`'s jobs and queues.
    fn recovery_of(&self, dead: &str) -> Record {
        let record = self
            .journal
            .all()
            .into_iter()
            .find(|r| r.stmt == Stmt::RecoverDeadWorkerJobs && r.dead.iter().any(|d| d == dead))
            .unwrap_or_else(|| panic!("{}: no recovery released worker {dead}'s jobs", self.title));
        self.say(format!("graphile sent: {}", describe(&record)));
        record
    }

    fn job_row(&mut self, id: i64) -> Option<JobRow> {
        let sql = format!(
            "select locked_by, attempts, last_error, run_at <= now(), is_available \
             from {SCHEMA}._private_jobs where id = $1"
        );
        let row = self.pg.query_opt(&sql, &[&id]).unwrap_or_else(|e| panic!("{sql}: {e}"))?;
        Some(JobRow {
            locked_by: row.get(0),
            attempts: row.get(1),
            last_error: row.get(2),
            due: row.get(3),
            available: row.get(4),
        })
    }

    fn queue_row(&mut self, name: &str) -> Option<QueueRow> {
        let sql = format!("select locked_by, locked_at::text from {SCHEMA}._private_job_queues where queue_name = $1");
        let row = self.pg.query_opt(&sql, &[&name]).unwrap_or_else(|e| panic!("{sql}: {e}"))?;
        Some(QueueRow { locked_by: row.get(0), locked_at: row.get(1) })
    }

    /// Each registered worker and how long ago it last heartbeat (ms).
    fn workers(&mut self) -> Vec<(String, i64)> {
        let sql = format!(
            "select id, (extract(epoch from now() - last_heartbeat_at) * 1000)::bigint \
             from {SCHEMA}._private_workers order by id"
        );
        let rows = self.pg.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.iter().map(|r| (self.journal.labelled(r.get(0)), r.get(1))).collect()
    }

    fn jobs_left(&mut self) -> i64 {
        let sql = format!("select count(*) from {SCHEMA}._private_jobs");
        self.pg.query_one(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }

    fn show_job(&mut self, id: i64) -> String {
        match self.job_row(id) {
            None => format!("job {id}: no row"),
            Some(j) => self.journal.labelled(&format!(
                "job {id}: locked_by {}, attempts {}, last_error {:?}, due {}, is_available {}",
                j.locked_by.as_deref().unwrap_or("null"),
                j.attempts,
                j.last_error,
                j.due,
                j.available
            )),
        }
    }

    fn show_queue(&mut self, name: &str) -> String {
        match self.queue_row(name) {
            None => format!("queue {name}: no row"),
            Some(q) => self.journal.labelled(&format!(
                "queue {name}: locked_by {}, locked_at {}",
                q.locked_by.as_deref().unwrap_or("null"),
                q.locked_at.as_deref().unwrap_or("null")
            )),
        }
    }

    fn show_workers(&mut self) -> String {
        let workers = self.workers();
        let shown: Vec<String> = workers.iter().map(|(w, age)| format!("{w} (heartbeat {age} ms ago)")).collect();
        format!("workers registered: [{}]", shown.join(", "))
    }

    /// For failure messages: a job's row and the workers' rows.
    fn state(&mut self, job: i64) -> String {
        let job = self.show_job(job);
        format!("{job}; {}", self.show_workers())
    }

    fn label(&self, worker_id: Option<&str>) -> String {
        worker_id.map_or("null".to_string(), |id| self.journal.labelled(id))
    }

    /// Stops `label`'s worker gracefully (`request_shutdown`) and reports
    /// what its `run()` returned.
    fn stop(&mut self, label: &str) {
        let worker = if label == "A" { &self.a } else { &self.b };
        worker.request_shutdown();
        let Some(index) = self.tasks.iter().position(|(l, _)| *l == label) else { return };
        let (_, task) = self.tasks.remove(index);
        let result = self.rt().block_on(async { tokio::time::timeout(STEP, task).await });
        let shown = match result {
            Err(_) => panic!("{}: worker {label} did not stop within {STEP:?}", self.title),
            Ok(Err(join)) => format!("its task failed: {join}"),
            Ok(Ok(result)) => format!("Worker::run returned {result:?}"),
        };
        self.say(format!("worker {label} stopped (request_shutdown): {shown}"));
    }

    fn finish(mut self) {
        for label in ["A", "B"] {
            self.stop(label);
        }
        println!("--- what graphile sent (statements that decide a job's fate), in order:");
        for record in self.journal.all() {
            println!("  {}", describe_at(&record));
        }
        println!("--- what graphile logged (INFO and above; migrations and enqueues left out; span context cut):");
        for line in lock(&capture().lines).iter() {
            let Some(target) = line.find("graphile_worker") else { continue };
            if line.contains("graphile_worker_migrations") || line.contains("Job added to queue") {
                continue;
            }
            let head = line.split_inclusive(" ms ").next().unwrap_or_default();
            let level = line[head.len()..].split_whitespace().next().unwrap_or_default();
            println!("  {head}{level} {}", self.journal.labelled(&line[target..]));
        }
        println!("=== {}: done ===", self.title);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            self.a.request_shutdown();
            self.b.request_shutdown();
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

// ---------------------------------------------------------------------------
// The scenarios.

/// Scenario A: the lost failure. A's stale completion deletes J while B runs
/// it; B's failure of J then updates nothing, and J is never retried.
#[test]
#[ignore = "starts PostgreSQL and two graphile workers; run with --ignored"]
fn stale_completion_deletes_the_job_of_its_new_owner_and_its_failure_is_lost() {
    let _serial = serial();
    let mut w = World::start("scenario A: lost failure");

    let j = w.add_job(None);
    let a_run = w.expect_run("A", j);
    let row = w.job_row(j).unwrap_or_else(|| panic!("job {j} has no row while A runs it"));
    assert_eq!(w.label(row.locked_by.as_deref()), "A", "job {j} must be locked by A while A runs it");

    w.cut_off_a();
    w.spawn("B");
    let b_run = w.expect_run("B", j);
    let recovery = w.recovery_of("A");
    assert_eq!((recovery.worker, recovery.outcome.clone()), ("B", Ok(1)), "B's sweep recovers A's one job");
    let shown = w.show_job(j);
    w.say(format!("row: {shown}"));
    let row = w.job_row(j).unwrap_or_else(|| panic!("job {j} has no row while B runs it"));
    assert_eq!(w.label(row.locked_by.as_deref()), "B", "after recovery, B's claim locks job {j}");
    let shown = w.show_workers();
    w.say(shown);

    // A resumes; its handler returns Ok: graphile's complete_job.
    w.heal_a();
    w.release(a_run, Ok(()));
    let a_done = w.wait_record("A", Stmt::CompleteJob, j);
    assert_eq!(a_done.outcome, Ok(1), "A's complete_job of job {j} (delete by id alone) deletes B's job row");
    let shown = w.show_job(j);
    w.say(format!("row: {shown}  <- while B's handler for job {j} still runs (the test holds its release)"));
    assert!(w.job_row(j).is_none(), "A's stale complete_job must have deleted job {j}");
    assert!(
        w.journal.find("B", Stmt::CompleteJob, Some(j)).is_none()
            && w.journal.find("B", Stmt::FailJob, Some(j)).is_none(),
        "B must not have released job {j} yet"
    );

    // B's attempt fails: graphile's fail_job finds no row owned by B.
    w.release(b_run, Err("B's attempt of the job failed".to_string()));
    let b_done = w.wait_record("B", Stmt::FailJob, j);
    assert_eq!(b_done.outcome, Ok(0), "B's fail_job of job {j} must update nothing (its row is gone)");
    let failed_logged = w.wait_for("graphile's log line for B's failure", |_| {
        let lines = lock(&capture().lines);
        lines.iter().find(|l| l.contains("Failed task")).cloned().ok_or_else(|| format!("{} lines", lines.len()))
    });
    w.say(format!("graphile logged: {}", w.journal.labelled(&failed_logged)));
    w.expect_no_run(WATCH, &format!("job {j}'s failure was lost: nothing may retry it"));
    let left = w.jobs_left();
    let shown = w.show_job(j);
    w.say(format!("{WATCH:?} later: {shown}; jobs left in {SCHEMA}._private_jobs: {left}"));
    assert!(w.job_row(j).is_none(), "job {j} must be gone for good");
    assert_eq!(left, 0, "no job may be left: the failure of job {j} is recorded nowhere");
    w.say(format!(
        "=> job {j} ran twice at once (A, B); its latest attempt (B's) failed; graphile recorded no failure, \
         will never retry it, and has no row, no last_error, no trace of it"
    ));
    w.finish();
}

/// Scenario B: the stuck queue. A's stale completion of J1 deletes it while
/// B holds J1 and the queue's lock; B's own completion then finds no row and
/// unlocks nothing: the queue stays locked by B, and J2 never runs, while
/// both workers are alive, polling and heartbeating.
#[test]
#[ignore = "starts PostgreSQL and two graphile workers; run with --ignored"]
fn stale_completion_leaves_the_named_queue_locked_by_its_new_owner() {
    let _serial = serial();
    let mut w = World::start("scenario B: stuck queue");

    let j1 = w.add_job(Some("q1"));
    let a_run = w.expect_run("A", j1);
    let shown = w.show_queue("q1");
    w.say(shown);

    w.cut_off_a();
    w.spawn("B");
    let b_run = w.expect_run("B", j1);
    let recovery = w.recovery_of("A");
    assert_eq!((recovery.worker, recovery.outcome.clone()), ("B", Ok(1)), "B's sweep recovers A's one job");
    let q = w.queue_row("q1").unwrap_or_else(|| panic!("queue q1 has no row"));
    assert_eq!(w.label(q.locked_by.as_deref()), "B", "B's claim of job {j1} locks queue q1");
    let shown = w.show_queue("q1");
    w.say(shown);

    let j2 = w.add_job(Some("q1"));

    w.heal_a();
    w.release(a_run, Ok(()));
    let a_done = w.wait_record("A", Stmt::CompleteJob, j1);
    assert_eq!(a_done.outcome, Ok(0), "A's complete_job unlocks no queue (q1 is locked by B, not A)");
    assert!(w.job_row(j1).is_none(), "A's stale complete_job must have deleted job {j1} (its CTE deletes by id)");
    let (shown_job, shown_queue) = (w.show_job(j1), w.show_queue("q1"));
    w.say(format!("rows: {shown_job}; {shown_queue}  <- while B still runs job {j1}"));

    w.release(b_run, Ok(()));
    let b_done = w.wait_record("B", Stmt::CompleteJob, j1);
    assert_eq!(b_done.outcome, Ok(0), "B's complete_job finds no job {j1} row, so its CTE unlocks nothing");
    let stuck = w.queue_row("q1").unwrap_or_else(|| panic!("queue q1 has no row"));
    assert_eq!(w.label(stuck.locked_by.as_deref()), "B", "queue q1 must still be locked by B");
    let shown = w.show_queue("q1");
    w.say(format!("after both completions: {shown}"));

    // Watch: both workers alive and polling, B heartbeating, J2 due.
    let polls = (w.journal.calls("A", Stmt::GetJob), w.journal.calls("B", Stmt::GetJob));
    let beats = w.journal.calls("B", Stmt::Heartbeat);
    w.say(format!("watching for {WATCH:?}: job {j2} is due and available; queue q1 is locked by B"));
    w.expect_no_run(WATCH, &format!("job {j2} must not run while queue q1 is locked by B"));
    let polled = (w.journal.calls("A", Stmt::GetJob) - polls.0, w.journal.calls("B", Stmt::GetJob) - polls.1);
    let beat = w.journal.calls("B", Stmt::Heartbeat) - beats;
    let workers = w.workers();
    let shown = (w.show_job(j2), w.show_queue("q1"), w.show_workers());
    w.say(format!(
        "after {WATCH:?}: {}; {}; {}; get_job polls in the window: A {}, B {}; B's heartbeats: {beat}",
        shown.0, shown.1, shown.2, polled.0, polled.1
    ));
    assert_eq!(w.queue_row("q1"), Some(stuck), "queue q1 must stay locked by B, its lock untouched");
    let row = w.job_row(j2).unwrap_or_else(|| panic!("job {j2} has no row"));
    assert!(row.locked_by.is_none() && row.attempts == 0, "job {j2} must never have been claimed: {row:?}");
    assert!(row.due && row.available, "job {j2} must be due and available: {row:?}");
    assert!(polled.0 >= 10 && polled.1 >= 10, "both workers must poll all along: {polled:?}");
    assert!(beat >= 5, "B must heartbeat all along: {beat} heartbeats");
    for worker in ["A", "B"] {
        let age = workers.iter().find(|(w, _)| w == worker).map(|(_, age)| *age);
        assert!(
            age.is_some_and(|age| age < THRESHOLD.as_millis() as i64),
            "worker {worker} must be registered and fresh: {workers:?}"
        );
    }
    w.say(format!("=> queue q1 is stuck: job {j2} waits behind a lock held by B, which holds no job of q1"));

    // The way out: B leaves. Only then does a sweep unlock q1.
    w.stop("B");
    let a_run2 = w.expect_run("A", j2);
    let recovery = w.recovery_of("B");
    assert_eq!(recovery.worker, "A", "A's sweep releases the lock of B, which left");
    w.release(a_run2, Ok(()));
    w.wait_for("job j2's row to go and queue q1 to unlock", |w| match (w.job_row(j2), w.queue_row("q1")) {
        (None, Some(QueueRow { locked_by: None, .. })) => Ok(()),
        _ => Err(format!("{}; {}", w.show_job(j2), w.show_queue("q1"))),
    });
    let shown = w.show_queue("q1");
    w.say(format!("after B left: job {j2} ran on A and completed; {shown}"));
    w.finish();
}
