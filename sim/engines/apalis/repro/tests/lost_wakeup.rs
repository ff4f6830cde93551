//! apalis-core 1.0.0 with apalis-redis 1.0.0: an idle worker whose
//! heartbeat falls due while a fetch is out stops for good.
//!
//! apalis-core's persistence layer (`backend/persistence/mod.rs`) polls the
//! heartbeat timer only in `poll_ready`'s `State::Ready`. While a fetch is
//! out the state is `Fetch`, and `poll_ready` returns at once without
//! polling the timer. When the timer fires then, its wake-up is spent on
//! that poll; the fetch then answers empty, `poll_next` parks the worker
//! (`register_waker`) and nothing is left to wake it: the timer has fired,
//! and an idle worker has no other source of wake-ups. It sends nothing
//! more, neither heartbeats nor fetches, and runs no job pushed later, while
//! its process is alive. Its name's heartbeat score stops, so other workers
//! (if any) eventually treat it as dead.
//!
//! leasesim found this in `apalis-quiet` seed 6 (`keepalive`): p1.1's
//! heartbeat was due at 45.26 s while its fetch sent at 45.25 s was out;
//! p1.1 was silent from then on.
//!
//! Outside the simulation: apalis's own worker on real tokio against a
//! throwaway redis-server. A fetch is made to take longer than the
//! heartbeat interval (a slow Redis or network: `Slow` delays each
//! `fetch_next` call at apalis's documented connection seam), so the timer
//! falls due during one. A control run without the delay runs a job pushed
//! late.
//!
//! Run: `cargo test --manifest-path sim/engines/apalis/repro/Cargo.toml -- --ignored --nocapture`

#[path = "server.rs"]
mod server;

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use server::Server;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HEARTBEAT: Duration = Duration::from_secs(1);
/// A slow fetch: longer than the heartbeat interval.
const SLOW_FETCH: Duration = Duration::from_millis(1_500);
/// How long the worker idles before the job is pushed.
const IDLE: Duration = Duration::from_secs(4);
const WAIT: Duration = Duration::from_secs(8);

/// A real connection whose `fetch_next` calls (`EVALSHA sha 7 ...`) each
/// take `delay` longer; it counts the commands the worker sends.
#[derive(Clone)]
struct Slow {
    inner: ConnectionManager,
    delay: Duration,
    sent: Arc<AtomicUsize>,
}

fn is_fetch(cmd: &Cmd) -> bool {
    let mut words = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(b) => Some(b),
        _ => None,
    });
    let first = words.next().is_some_and(|w| w.eq_ignore_ascii_case(b"EVALSHA"));
    first && words.nth(1).is_some_and(|n| n == b"7")
}

impl ConnectionLike for Slow {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let delay = if is_fetch(cmd) { self.delay } else { Duration::ZERO };
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            self.inner.req_packed_command(cmd).await
        })
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

async fn job(_n: u32) -> Result<(), BoxDynError> {
    Ok(())
}

/// One idle worker; a job pushed after `IDLE`. Returns whether the job was
/// done within `WAIT`, and how many commands the worker sent in the last
/// half of its idle time and while the job waited.
async fn idle_worker(server: &Server, fetch_delay: Duration) -> (bool, usize) {
    let queue = format!("lost-wakeup-{}", fetch_delay.as_millis());
    let config = Config::default().queue(&queue).heartbeat_interval(HEARTBEAT).emit_events(false);
    let mut conn = apalis_redis::connect(server.url()).await.expect("connect");
    let slow = Slow { inner: conn.clone(), delay: fetch_delay, sent: Arc::new(AtomicUsize::new(0)) };
    let worker = WorkerBuilder::new(format!("w-{}", fetch_delay.as_millis()))
        .backend(RedisStorage::<u32, _>::new(slow.clone()).with_config(config.clone()))
        .build(job);
    let running = tokio::spawn(worker.run());
    tokio::time::sleep(IDLE / 2).await;
    let before = slow.sent.load(Ordering::SeqCst);
    tokio::time::sleep(IDLE / 2).await;
    let mut sink = RedisStorage::<u32, _>::new(conn.clone()).with_config(config.clone());
    sink.push(1).await.expect("push");
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut done = false;
    while !done && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n: u32 = redis::cmd("SCARD").arg(config.done_jobs_set()).query_async(&mut conn).await.expect("SCARD");
        done = n == 1;
    }
    let sent = slow.sent.load(Ordering::SeqCst) - before;
    assert!(!running.is_finished(), "the worker stopped: {:?}", running.await);
    running.abort();
    (done, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server; run by .ci/run"]
async fn a_heartbeat_due_during_a_fetch_leaves_the_worker_asleep() {
    let server = Server::start();
    let (done, sent) = idle_worker(&server, SLOW_FETCH).await;
    println!("fetches {SLOW_FETCH:?} slow: job done {done}; commands sent in the last {:?}: {sent}", IDLE / 2 + WAIT);
    assert!(!done, "the worker ran the job pushed late");
    assert_eq!(sent, 0, "the worker still sent commands (heartbeats or fetches)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server; run by .ci/run"]
async fn with_quick_fetches_the_idle_worker_runs_a_late_job() {
    let server = Server::start();
    let (done, sent) = idle_worker(&server, Duration::ZERO).await;
    println!("quick fetches: job done {done}; commands sent in the last {:?}: {sent}", IDLE / 2 + WAIT);
    assert!(done, "the job pushed late was not run within {WAIT:?}");
}
