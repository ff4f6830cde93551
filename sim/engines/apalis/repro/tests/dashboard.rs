//! apalis-redis 1.0.0's dashboard calls (an operator's view of a queue:
//! `Metrics`, `ListTasks`, `ListWorkers` from apalis-core's `backend`),
//! against a queue with one done job and a running worker: every one of
//! them answers wrongly or fails.
//!
//! Outside leasesim's simulation: apalis's own storage and worker on real
//! tokio, with the `redis` crate's `ConnectionManager`, against a throwaway
//! redis-server this test starts.
//!
//! Run: `cargo test --manifest-path sim/engines/apalis/repro/Cargo.toml -- --ignored --nocapture`

#[path = "server.rs"]
mod server;

use apalis_core::backend::{Filter, ListTasks, ListWorkers, Metrics, TaskSink};
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use server::Server;
use std::time::Duration;

async fn quick(_n: u32) -> Result<(), BoxDynError> {
    Ok(())
}

#[tokio::test]
#[ignore = "starts a redis-server: run with -- --ignored (.ci/run does)"]
async fn an_operators_view_of_a_queue_with_a_done_job() {
    let server = Server::start();
    let config = Config::default().queue("dash").heartbeat_interval(Duration::from_millis(500)).emit_events(false);
    let mut conn = apalis_redis::connect(server.url()).await.expect("connect");
    let mut storage = RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone());
    // 0. Statistics of a queue with nothing done yet: `overview_by_queue.lua`
    //    reads the time from ARGV[1], which `fetch_by_queue` never passes.
    let empty = format!("{:?}", storage.fetch_by_queue().await);
    println!("Metrics::fetch_by_queue, nothing done yet: {empty}");
    storage.push(1).await.expect("push");
    let worker =
        WorkerBuilder::new("w1").backend(RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone()));
    let worker = tokio::spawn(worker.build(quick).run());
    let mut done = 0u32;
    for _ in 0..100 {
        done = redis::cmd("SCARD").arg(config.done_jobs_set()).query_async(&mut conn).await.expect("SCARD");
        if done == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(done, 1, "the job was not done: the test proves nothing");
    let jobs: u32 = redis::cmd("HLEN").arg(config.job_data_hash()).query_async(&mut conn).await.expect("HLEN");
    println!("the queue holds {jobs} job(s), {done} done, and worker w1 runs");

    // 1. Global statistics: every count 0 (`Metrics::global` reads the
    //    queues from `core:apalis:queues`; `register_worker.lua` writes
    //    them to `core:apalis:queues:list`).
    let global = storage.global().await.expect("global statistics");
    let done_jobs = global.iter().find(|s| s.title == "DONE_JOBS").map(|s| s.value.clone());
    println!("Metrics::global: DONE_JOBS = {done_jobs:?}");
    // 2. Statistics of this queue: WRONGTYPE (`overview_by_queue.lua`
    //    counts the done set, a set, with a sorted-set command).
    let by_queue = storage.fetch_by_queue().await;
    println!("Metrics::fetch_by_queue: {by_queue:?}");
    // 3. The queue's tasks: none (`list_tasks.lua` is given the bare queue
    //    name, not a key that holds its tasks).
    let listed = storage.list_tasks(&Filter { status: None, page: 1, page_size: None }).await.expect("list_tasks");
    println!("ListTasks::list_tasks: {} task(s)", listed.len());
    // 4. The queue's workers: an error decoding a worker's record
    //    (`list_workers.lua` reads the record under another key than the
    //    one `register_worker.lua` writes, so its fields come back `false`).
    let workers = storage.list_workers().await;
    println!("ListWorkers::list_workers: {workers:?}");
    worker.abort();

    assert!(empty.contains("a nil value"), "queue statistics answer on an empty queue (fixed upstream?): {empty}");
    assert_eq!(done_jobs.as_deref(), Some("0"), "global statistics count the done job (fixed upstream?)");
    let by_queue = format!("{by_queue:?}");
    assert!(by_queue.contains("WRONGTYPE"), "queue statistics answer (fixed upstream?): {by_queue}");
    assert!(listed.is_empty(), "list_tasks lists the queue's job (fixed upstream?)");
    assert!(workers.is_err(), "list_workers answers (fixed upstream?): {workers:?}");
}
