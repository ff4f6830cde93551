//! apalis-redis 1.0.0: a restarted worker's task is marked done by its
//! previous incarnation's late acknowledgement, and the restarted worker
//! then dies on its own.
//!
//! A worker is known by its name, and a supervisor restarts a worker under
//! the same name. `handle_results.lua` takes a task out of the name's
//! in-flight set and records its result, checking only that the task is in
//! that set (`SREM` answered 1), not which run of the name fetched it.
//!
//! Steps, with apalis's own worker on real tokio against a throwaway
//! redis-server (leasesim found this in `apalis-recovery` seed 16):
//! 1. worker A, named `w1`, runs job J2; its acknowledgement
//!    (`handle_results`) is held on the way to Redis, A's connection gives
//!    up on it (a response timeout), and A's worker stops on that error;
//! 2. the supervisor starts worker B under the same name; its registration
//!    re-enqueues the name's orphans (`reenqueue_orphaned`, only `w1`), J2
//!    among them, and B fetches and starts J2 again;
//! 3. A's held acknowledgement reaches Redis: J2 is in `w1`'s in-flight set
//!    again (B's fetch put it there), so it is removed and J2 is recorded
//!    `Done` while B runs it;
//! 4. B's next write for J2 finds it gone from the set: its lease
//!    acquisition ("task not held by this worker", `acquire_leases.lua`) or
//!    its acknowledgement ("task not executed by worker"), and B's worker
//!    stops too: one late command has stopped two workers and run J2 twice.
//!
//! The hold is made at apalis's documented connection seam:
//! `RedisStorage<Args, Conn>` takes any `redis::aio::ConnectionLike`. A's
//! connection (`Gate`) forwards every command to a real `ConnectionManager`
//! but holds its acknowledgement of J2 (J1's has loaded the script) until
//! the test releases it, answering A with the I/O timeout the `redis`
//! crate gives after its response timeout: a command slowed on the network
//! or behind a slow script, executed after its client gave up, as Redis
//! does.
//!
//! Run: `cargo test --manifest-path sim/engines/apalis/repro/Cargo.toml -- --ignored --nocapture`

#[path = "server.rs"]
mod server;

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use server::Server;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

const HEARTBEAT: Duration = Duration::from_secs(1);
/// The `redis` crate's default response timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// B's run of J2: long enough for A's held acknowledgement to land inside it.
const SECOND_RUN: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(15);

/// A's connection: a real one, but the first `handle_results` once armed
/// is held until `release`, and A is told it timed out.
#[derive(Clone)]
struct Gate {
    inner: ConnectionManager,
    done_set: String,
    armed: Arc<AtomicBool>,
    release: Arc<Notify>,
    held: Arc<Mutex<Option<tokio::task::JoinHandle<RedisResult<Value>>>>>,
}

impl Gate {
    /// `EVALSHA sha 5 <inflight> <done> ...`: `handle_results`.
    fn is_ack(&self, cmd: &Cmd) -> bool {
        let words: Vec<Vec<u8>> = cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect();
        words.first().is_some_and(|w| w.eq_ignore_ascii_case(b"EVALSHA"))
            && words.get(2).is_some_and(|n| n == b"5")
            && words.get(4).is_some_and(|k| k == self.done_set.as_bytes())
    }
}

impl ConnectionLike for Gate {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.is_ack(cmd) && self.armed.swap(false, Ordering::SeqCst) {
            let (mut inner, release, cmd) = (self.inner.clone(), self.release.clone(), cmd.clone());
            let late = tokio::spawn(async move {
                release.notified().await;
                inner.req_packed_command(&cmd).await
            });
            *self.held.lock().unwrap() = Some(late);
            return Box::pin(async {
                tokio::time::sleep(RESPONSE_TIMEOUT).await;
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "response timed out").into())
            });
        }
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// How often J2 started, and whether B's run of it is still going.
static J2_RUNS: AtomicUsize = AtomicUsize::new(0);
static J2_SECOND_RUNNING: AtomicBool = AtomicBool::new(false);
static J2_SECOND_STARTED: Notify = Notify::const_new();

/// Jobs 1 and 2; J2's second run is slow.
async fn job(n: u32) -> Result<(), BoxDynError> {
    if n == 2 && J2_RUNS.fetch_add(1, Ordering::SeqCst) == 1 {
        J2_SECOND_RUNNING.store(true, Ordering::SeqCst);
        J2_SECOND_STARTED.notify_one();
        tokio::time::sleep(SECOND_RUN).await;
        J2_SECOND_RUNNING.store(false, Ordering::SeqCst);
    } else {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The one task id in the done set, or all of them.
async fn done(conn: &mut ConnectionManager, config: &Config) -> Vec<String> {
    redis::cmd("SMEMBERS").arg(config.done_jobs_set()).query_async(conn).await.expect("SMEMBERS")
}

async fn wait_until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server; run by .ci/run"]
async fn a_late_ack_of_the_previous_run_completes_the_restarted_workers_task() {
    let server = Server::start();
    let config = Config::default().queue("stale-ack").heartbeat_interval(HEARTBEAT).emit_events(false);
    let mut conn = apalis_redis::connect(server.url()).await.expect("connect");
    let gate = Gate {
        inner: conn.clone(),
        done_set: config.done_jobs_set(),
        armed: Arc::new(AtomicBool::new(false)),
        release: Arc::new(Notify::new()),
        held: Arc::new(Mutex::new(None)),
    };
    let mut sink = RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone());

    // A runs J1 (its acknowledgement loads the script), then J2.
    sink.push(1).await.expect("push J1");
    let a = WorkerBuilder::new("w1").backend(RedisStorage::<u32, _>::new(gate.clone()).with_config(config.clone()));
    let a = tokio::spawn(a.build(job).run());
    wait_until("J1 done", async || done(&mut conn, &config).await.len() == 1).await;
    gate.armed.store(true, Ordering::SeqCst);
    sink.push(2).await.expect("push J2");
    let a_result = tokio::time::timeout(WAIT, a).await.expect("A stops").expect("A's task");
    println!("A (w1) stopped: {a_result:?}");
    assert!(a_result.is_err(), "A should stop on its acknowledgement's timeout");
    assert!(gate.held.lock().unwrap().is_some(), "A's acknowledgement of J2 was not held");
    assert_eq!(done(&mut conn, &config).await.len(), 1, "J2 done before A's acknowledgement applied");

    // The supervisor restarts w1 once its registration is allowed again.
    tokio::time::sleep(2 * HEARTBEAT + Duration::from_millis(500)).await;
    let b = WorkerBuilder::new("w1").backend(RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone()));
    let b = tokio::spawn(b.build(job).run());
    tokio::time::timeout(WAIT, J2_SECOND_STARTED.notified()).await.expect("B runs J2 again");
    println!("B (w1, restarted) runs J2 (run {})", J2_RUNS.load(Ordering::SeqCst));

    // A's acknowledgement reaches Redis now.
    gate.release.notify_one();
    let late = gate.held.lock().unwrap().take().expect("held");
    let applied = late.await.expect("the late command's task");
    let done_now = done(&mut conn, &config).await;
    let b_running = J2_SECOND_RUNNING.load(Ordering::SeqCst);
    println!(
        "A's late acknowledgement of J2 answered {applied:?}; done set {done_now:?}; B still running J2: {b_running}"
    );
    assert_eq!(applied.expect("the late acknowledgement ran"), Value::Int(1), "it acknowledged one task");
    assert_eq!(done_now.len(), 2, "J2 recorded done");
    assert!(b_running, "B's run of J2 had already ended");

    // B's next write for J2 then fails, and B's worker stops. Which write
    // comes first is a race of real time: its acknowledgement (the results
    // script) or its heartbeat's lease renewal (the renew script, whose
    // lease A's acknowledgement deleted). Either names the task it lost.
    let b_result = tokio::time::timeout(WAIT, b).await.expect("B stops").expect("B's task");
    println!("B (w1) stopped: {b_result:?}");
    let error = format!("{:?}", b_result.expect_err("B should stop on its write for J2"));
    let gone = ["task not held by this worker", "task not executed by worker", "lease not held for task"];
    assert!(gone.iter().any(|g| error.contains(g)), "B stopped for another reason: {error}");
}
