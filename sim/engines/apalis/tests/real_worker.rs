//! apalis's real worker on the simulator, against the Redis model, before
//! any fault: the seams hold (its timers are simulated time, its commands
//! travel the wire, its scripts run in the model's Lua), every job pushed
//! by apalis's own sink is done by apalis's own workers, and the same seed
//! gives the same run, command for command.

use apalis_core::backend::TaskSink;
use apalis_core::error::BoxDynError;
use apalis_core::worker::builder::WorkerBuilder;
use apalis_redis::{Config, RedisStorage};
use futures::future::BoxFuture;
use leasesim_apalis::call::{classify, Call, Keys};
use leasesim_apalis::conn::{SimRedis, Wire, RESPONSE_TIMEOUT_MS};
use leasesim_redis_model::{Redis, Reply};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const JOBS: u32 = 25;

/// A direct line to one shared model: a seeded 1-10 ms hop each way, every
/// command logged as it is applied.
struct Line {
    redis: Arc<Mutex<Redis>>,
    log: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    replies: Arc<Mutex<Vec<Reply>>>,
    origin: tokio::time::Instant,
}

fn hop() -> Duration {
    Duration::from_millis(madsim::rand::thread_rng().gen_range(1..=10))
}

impl Wire for Line {
    fn call(&self, argv: Vec<Vec<u8>>) -> BoxFuture<'static, Reply> {
        let (redis, log, replies, origin) = (self.redis.clone(), self.log.clone(), self.replies.clone(), self.origin);
        Box::pin(async move {
            tokio::time::sleep(hop()).await;
            let now_ms = origin.elapsed().as_millis() as u64;
            let reply = redis.lock().unwrap().apply(now_ms, &argv);
            log.lock().unwrap().push(argv);
            replies.lock().unwrap().push(reply.clone());
            tokio::time::sleep(hop()).await;
            reply
        })
    }
}

/// A job as the application pushes it, with an id it chose: apalis would
/// draw the ULID's random part from the OS, which no seed replays (madsim
/// cannot intercept getrandom on Linux), so the application draws it from
/// the simulator's seeded generator.
fn job_with_seeded_id(n: u32) -> apalis_core::task::Task<u32> {
    let random: u128 = madsim::rand::thread_rng().gen();
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let id = apalis_core::task::task_id::TaskId::Ulid(ulid::Ulid::from_parts(ms, random));
    apalis_core::task::builder::TaskBuilder::new(n).task_id(id).build()
}

async fn job(n: u32) -> Result<u32, BoxDynError> {
    tokio::time::sleep(Duration::from_millis(50 + u64::from(n % 7) * 30)).await;
    Ok(n)
}

/// One world: jobs pushed, two workers, 60 simulated seconds. Returns the
/// command log and how many jobs the store holds as done. Each world runs
/// on a fresh thread, as the harness runs each seed: thread-locals (a
/// `rand::ThreadRng` seeded on first use) must not carry over.
fn world(seed: u64) -> (Vec<Vec<Vec<u8>>>, i64) {
    let (log, _, done) = world_with_replies(seed);
    (log, done)
}

fn world_with_replies(seed: u64) -> (Vec<Vec<Vec<u8>>>, Vec<Reply>, i64) {
    std::thread::spawn(move || world_here(seed)).join().expect("world thread")
}

fn world_here(seed: u64) -> (Vec<Vec<Vec<u8>>>, Vec<Reply>, i64) {
    let rt = madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
    rt.block_on(async move {
        let line = Arc::new(Line {
            redis: Arc::new(Mutex::new(Redis::new())),
            log: Arc::new(Mutex::new(Vec::new())),
            replies: Arc::new(Mutex::new(Vec::new())),
            origin: tokio::time::Instant::now(),
        });
        let conn = || SimRedis::new(line.clone(), RESPONSE_TIMEOUT_MS);
        let config = Config::default().queue("q").heartbeat_interval(Duration::from_secs(5));
        let mut sink = RedisStorage::<u32, SimRedis>::new(conn()).with_config(config.clone());
        for n in 0..JOBS {
            sink.push_task(job_with_seeded_id(n)).await.expect("push");
        }
        for name in ["w1", "w2"] {
            let storage = RedisStorage::<u32, SimRedis>::new(conn()).with_config(config.clone());
            let worker = WorkerBuilder::new(name).backend(storage).build(job);
            tokio::spawn(async move {
                let _ = worker.run().await;
            });
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        let done = line
            .redis
            .lock()
            .unwrap()
            .apply(line.origin.elapsed().as_millis() as u64, &[b"SCARD".to_vec(), b"q:done".to_vec()]);
        let log = line.log.lock().unwrap().clone();
        let replies = line.replies.lock().unwrap().clone();
        match done {
            Reply::Int(n) => (log, replies, n),
            other => panic!("SCARD answered {other:?}"),
        }
    })
}

#[test]
fn every_pushed_job_is_done_by_apalis_own_workers() {
    let (log, done) = world(7);
    let scripts = log.iter().filter(|argv| argv[0].eq_ignore_ascii_case(b"EVALSHA")).count();
    assert_eq!(done, i64::from(JOBS), "{} commands, {scripts} EVALSHA", log.len());
    assert!(scripts > 0, "apalis runs its work as scripts");
}

/// Every command apalis sent is one the classifier knows, and together they
/// tell the story: pushed, registered, fetched, locked, each job's result.
#[test]
fn every_command_is_classified() {
    let (log, replies, _) = world_with_replies(7);
    let keys = Keys::of(&Config::default().queue("q"));
    let calls: Vec<Call> = log.iter().map(|argv| classify(&keys, argv)).collect();
    let unknown: Vec<&Call> = calls.iter().filter(|c| matches!(c, Call::Unknown { .. })).collect();
    assert!(unknown.is_empty(), "unclassified: {unknown:?}");
    // A script call answered NOSCRIPT ran nothing; apalis loads the script
    // and sends the same call again.
    let ran: Vec<&Call> =
        calls.iter().zip(&replies).filter(|(_, reply)| !matches!(reply, Reply::Error(_))).map(|(c, _)| c).collect();
    let pushed: usize = ran.iter().map(|c| if let Call::Push { tasks } = c { tasks.len() } else { 0 }).sum();
    assert_eq!(pushed, JOBS as usize);
    let done: usize = ran
        .iter()
        .map(|c| match c {
            Call::Results { outcomes, .. } => outcomes.iter().filter(|o| o.status == "Done").count(),
            _ => 0,
        })
        .sum();
    assert_eq!(done, JOBS as usize, "one applied Done result per job");
    for want in ["Register", "Fetch", "Lock", "KeepAlive"] {
        assert!(calls.iter().any(|c| format!("{c:?}").starts_with(want)), "no {want} call");
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let (a, _) = world(11);
    let (b, _) = world(11);
    assert_eq!(a.len(), b.len());
    assert!(a == b, "same seed, different commands");
    let (c, _) = world(12);
    assert!(a != c, "another seed should draw other hops");
}
