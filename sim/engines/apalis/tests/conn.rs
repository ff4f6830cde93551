//! The connection seam on its own: a command whose answer never comes fails
//! with an I/O error after the response timeout, as the `redis` crate's
//! connection does, and the next command is answered; commands are answered
//! in the order they were sent.

use futures::future::BoxFuture;
use leasesim_apalis::conn::{SimRedis, Wire, RESPONSE_TIMEOUT_MS};
use leasesim_redis_model::{Redis, Reply};
use redis::aio::ConnectionLike;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Answers every command from a model after `delay_ms`, except the
/// `lose`-th (1-based), whose answer never comes.
struct Line {
    redis: Mutex<Redis>,
    sent: AtomicU32,
    lose: u32,
    delay_ms: u64,
}

impl Wire for Line {
    fn call(&self, argv: Vec<Vec<u8>>) -> BoxFuture<'static, Reply> {
        let n = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        let reply = self.redis.lock().unwrap().apply(0, &argv);
        let (lose, delay) = (n == self.lose, Duration::from_millis(self.delay_ms));
        Box::pin(async move {
            if lose {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(delay).await;
            reply
        })
    }
}

fn in_sim<F: std::future::Future<Output = ()> + Send + 'static>(f: F) {
    let rt = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    std::thread::spawn(move || rt.block_on(f)).join().expect("sim thread");
}

#[test]
fn a_lost_answer_fails_at_the_response_timeout_and_the_next_command_is_answered() {
    in_sim(async {
        let line = Arc::new(Line { redis: Mutex::new(Redis::new()), sent: AtomicU32::new(0), lose: 1, delay_ms: 3 });
        let mut conn = SimRedis::new(line, RESPONSE_TIMEOUT_MS);
        let started = tokio::time::Instant::now();
        let lost = redis::cmd("INCR").arg("k").query_async::<i64>(&mut conn).await;
        let waited = started.elapsed();
        let err = lost.expect_err("no answer came");
        assert!(err.is_io_error() && err.is_timeout(), "{err:?}");
        // (madsim advances its clock by a few ns per poll: whole ms compared.)
        assert_eq!(waited.as_millis(), u128::from(RESPONSE_TIMEOUT_MS), "failed at the timeout, not before or after");
        // The lost command ran at the store: the next INCR sees it.
        let next = redis::cmd("INCR").arg("k").query_async::<i64>(&mut conn).await.expect("answered");
        assert_eq!(next, 2);
        assert_eq!(conn.get_db(), 0);
    });
}

#[test]
fn commands_of_one_connection_are_answered_in_the_order_sent() {
    in_sim(async {
        let line = Arc::new(Line { redis: Mutex::new(Redis::new()), sent: AtomicU32::new(0), lose: 0, delay_ms: 7 });
        let conn = SimRedis::new(line, RESPONSE_TIMEOUT_MS);
        let calls = (0..5).map(|i| {
            let mut c = conn.clone();
            async move { redis::cmd("RPUSH").arg("l").arg(i).query_async::<i64>(&mut c).await.expect("answered") }
        });
        let lengths = futures::future::join_all(calls).await;
        assert_eq!(lengths, vec![1, 2, 3, 4, 5]);
    });
}
