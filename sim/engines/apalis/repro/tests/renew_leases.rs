//! apalis-redis 1.0.0 with its `task-tracking` feature: a worker's first
//! heartbeat while it runs a task fails, and the worker stops.
//!
//! `renew_leases` (src/queries/task_lease.rs) invokes `lua/renew_leases.lua`
//! with three keys (the worker's in-flight set, the workers set, the
//! metadata prefix), but the script publishes each renewal on
//! `"tasks:" .. KEYS[4] .. ":heartbeat"`. With events on (`emit_events`,
//! the default) and a task listed, KEYS[4] is nil and the script raises
//! "attempt to concatenate field '?' (a nil value)" after writing the first
//! task's `locked_at` (Redis keeps a script's writes made before an error).
//! `RedisPersistence::heartbeat` returns the error, apalis-core's
//! persistence layer goes `Dead`, and `Worker::run` returns it.
//!
//! Outside leasesim's simulation: apalis's own worker on real tokio, with
//! the `redis` crate's `ConnectionManager` (`apalis_redis::connect`), against
//! a throwaway redis-server this test starts. A control run with events off
//! (`Config::emit_events(false)`) renews without error and finishes the job.
//!
//! Run: `cargo test --manifest-path sim/engines/apalis/repro/Cargo.toml -- --ignored --nocapture`

#[path = "server.rs"]
mod server;

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use server::Server;
use std::time::{Duration, Instant};

/// The heartbeat, short so the test is quick (apalis's default is 30 s).
const HEARTBEAT: Duration = Duration::from_millis(500);
/// The job runs across several heartbeats.
const JOB: Duration = Duration::from_secs(3);
/// The longest the test waits for the worker.
const WAIT: Duration = Duration::from_secs(8);

async fn slow_job(_n: u32) -> Result<(), BoxDynError> {
    tokio::time::sleep(JOB).await;
    Ok(())
}

/// One worker over one pushed job, events on or off: what `run` returned
/// (or `None` if it still ran after `WAIT`), when, and whether the job was
/// recorded done.
async fn one_worker(server: &Server, emit_events: bool) -> (Option<String>, Duration, bool) {
    let queue = format!("repro-{emit_events}");
    let config = Config::default().queue(&queue).heartbeat_interval(HEARTBEAT).emit_events(emit_events);
    let conn = apalis_redis::connect(server.url()).await.expect("connect");
    let mut storage = RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone());
    storage.push(7).await.expect("push");
    let worker = WorkerBuilder::new(format!("w-{emit_events}")).backend(storage).build(slow_job);
    let started = Instant::now();
    let result = tokio::time::timeout(WAIT, worker.run()).await;
    let elapsed = started.elapsed();
    let mut conn = conn;
    let done: u32 = redis::cmd("SCARD").arg(config.done_jobs_set()).query_async(&mut conn).await.expect("SCARD");
    let error = match result {
        Ok(Err(e)) => Some(format!("{e:?}")),
        Ok(Ok(())) => Some("stopped without an error".into()),
        Err(_) => None,
    };
    (error, elapsed, done == 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server; run by .ci/run"]
async fn first_heartbeat_during_a_task_kills_the_worker() {
    let server = Server::start();
    let (error, elapsed, done) = one_worker(&server, true).await;
    println!("events on: worker returned {error:?} after {elapsed:?}; job done: {done}");
    let error = error.expect("the worker should have stopped within the wait");
    assert!(error.contains("attempt to concatenate"), "stopped for another reason: {error}");
    assert!(elapsed < JOB, "it stopped only after the job ({elapsed:?})");
    assert!(!done, "the job was recorded done although its worker died mid-run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server; run by .ci/run"]
async fn with_events_off_the_same_worker_renews_and_finishes() {
    let server = Server::start();
    let (error, elapsed, done) = one_worker(&server, false).await;
    println!("events off: worker returned {error:?} after {elapsed:?}; job done: {done}");
    assert!(error.is_none(), "the worker stopped: {error:?}");
    assert!(done, "the job was not recorded done within {WAIT:?}");
}
