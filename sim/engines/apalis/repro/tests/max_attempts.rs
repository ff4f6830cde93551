//! apalis-redis 1.0.0: a job pushed with `max_attempts(2)` is run far more
//! than twice.
//!
//! apalis-core's `TaskBuilder::max_attempts` sets the job's attempt budget,
//! and apalis-redis's `push_tasks` sends it to `batch_push.lua`, which
//! stores it in the job's metadata. But `handle_results.lua` decides a
//! failed job's fate by a hard-coded bound (`attempt < 25`, under a
//! "TODO ... check max_attempt so we hardcode 25"): the job's own budget is
//! never read, so a failing job is rescheduled until its 25th attempt
//! whatever the application asked for.
//!
//! Outside leasesim's simulation: apalis's own worker on real tokio, with
//! the `redis` crate's `ConnectionManager` (`apalis_redis::connect`), against
//! a throwaway redis-server this test starts.
//!
//! Run: `cargo test --manifest-path sim/engines/apalis/repro/Cargo.toml -- --ignored --nocapture`

#[path = "server.rs"]
mod server;

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::task::builder::TaskBuilder;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use server::Server;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The budget the application gives the job.
const MAX_ATTEMPTS: usize = 2;
/// Runs seen before the test concludes: one more than the budget.
const PAST_BUDGET: u32 = MAX_ATTEMPTS as u32 + 1;
/// A failed job is due again `attempt` seconds later: the third run comes
/// about 3 s after the first.
const WAIT: Duration = Duration::from_secs(20);

static RUNS: AtomicU32 = AtomicU32::new(0);

async fn always_fails(_n: u32) -> Result<(), BoxDynError> {
    let run = RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    println!("run {run} of a job whose budget is {MAX_ATTEMPTS} attempts: fails");
    Err("the job fails".into())
}

#[tokio::test]
#[ignore = "starts a redis-server: run with -- --ignored (.ci/run does)"]
async fn a_failing_job_runs_past_its_max_attempts() {
    let server = Server::start();
    let config = Config::default().queue("max-attempts").heartbeat_interval(Duration::from_millis(500));
    let conn = apalis_redis::connect(server.url()).await.expect("connect");
    let mut sink = RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone());
    let task = TaskBuilder::new(1u32).max_attempts(MAX_ATTEMPTS).build();
    sink.push_task(task).await.expect("push");
    let worker = WorkerBuilder::new("w1").backend(RedisStorage::<u32, _>::new(conn.clone()).with_config(config));
    let worker = tokio::spawn(worker.build(always_fails).run());
    let deadline = tokio::time::Instant::now() + WAIT;
    while RUNS.load(Ordering::SeqCst) < PAST_BUDGET && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker.abort();
    let runs = RUNS.load(Ordering::SeqCst);
    println!("the job ran {runs} times with max_attempts({MAX_ATTEMPTS})");
    assert!(runs >= 1, "the job never ran: the test proves nothing");
    assert!(runs >= PAST_BUDGET, "the job ran {runs} times: its budget of {MAX_ATTEMPTS} was kept (fixed upstream?)");
}
