//! What one command a process sends means, in apalis's terms: which of
//! apalis's scripts it runs (recognized by the keys apalis's own `Config`
//! names for them, never by the script's text) and on which tasks.
//!
//! apalis-redis sends each state change as one Lua script by EVALSHA (EVAL
//! after a NOSCRIPT), a few plain commands (ZRANGE for its queue list, ZREM
//! when a worker closes) and reads. The keys of a script's call say which
//! script it is: every script takes a fixed list of the queue's keys, in an
//! order of its own ([`Keys`]). A call whose keys match no script of apalis's
//! is [`Call::Unknown`], never a guess.

use apalis_redis::Config;

/// The queue's keys, as apalis's `Config` names them.
#[derive(Debug, Clone)]
pub struct Keys {
    pub workers: String,
    pub active: String,
    pub inflight: String,
    pub data: String,
    pub meta: String,
    pub scheduled: String,
    pub signal: String,
    pub done: String,
    pub dead: String,
    pub failed: String,
    pub idempotency: String,
}

impl Keys {
    pub fn of(config: &Config) -> Keys {
        Keys {
            workers: config.workers_set(),
            active: config.active_jobs_list(),
            inflight: config.inflight_jobs_set(),
            data: config.job_data_hash(),
            meta: config.job_meta_hash(),
            scheduled: config.scheduled_jobs_set(),
            signal: config.signal_list(),
            done: config.done_jobs_set(),
            dead: config.dead_jobs_set(),
            failed: config.failed_jobs_set(),
            idempotency: config.idempotency_key_set(),
        }
    }

    /// Whether the harness's rows are read from `key` (see the seam's
    /// `rows`): the job data, the queue's lists and sets, any in-flight set.
    pub fn holds_rows(&self, key: &[u8]) -> bool {
        let Ok(key) = std::str::from_utf8(key) else { return false };
        let sets = [&self.data, &self.meta, &self.active, &self.scheduled, &self.done, &self.dead, &self.failed];
        sets.iter().any(|k| k.as_str() == key) || self.inflight_of(key).is_some()
    }

    /// The worker whose in-flight set `key` is.
    fn inflight_of<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.inflight.as_str())?.strip_prefix(':')
    }

    /// Whether `key` is some worker's in-flight set.
    fn is_inflight(&self, key: &[u8]) -> bool {
        self.inflight_of(&String::from_utf8_lossy(key)).is_some()
    }
}

/// A task's result as `handle_results` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub task: String,
    /// apalis's `Status` name: `Done`, `Failed`, `Pending`, `Killed`...
    pub status: String,
    pub attempt: u32,
}

/// A task as `batch_push` creates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub task: String,
    pub attempts: u32,
    pub max_attempts: u32,
    /// Seconds since the epoch, on the pusher's clock.
    pub run_at_s: u64,
}

/// One command, in apalis's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Push {
        tasks: Vec<Pushed>,
    },
    Register {
        worker: String,
    },
    KeepAlive {
        worker: String,
    },
    /// `reenqueue_orphaned`: the in-flight tasks of workers silent since
    /// `expired_before_s` go back to the active list (`only`: just that
    /// worker, if it is silent).
    Reenqueue {
        expired_before_s: u64,
        only: Option<String>,
    },
    Fetch {
        worker: String,
        max: u32,
    },
    Lock {
        worker: String,
        tasks: Vec<String>,
    },
    Renew {
        worker: String,
        tasks: Vec<String>,
    },
    Results {
        worker: String,
        outcomes: Vec<Outcome>,
    },
    /// `release_leases`: tasks handed back (every in-flight one if empty).
    Release {
        worker: String,
        tasks: Vec<String>,
    },
    /// `ZREM workers <member>` when a worker closes.
    Deregister {
        member: String,
    },
    /// A read, a script load, a dashboard's list or stats: changes no task.
    Read {
        what: String,
    },
    /// Keys no script of apalis's takes, or a write apalis never sends.
    Unknown {
        what: String,
    },
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn num<T: std::str::FromStr + Default>(bytes: Option<&Vec<u8>>) -> T {
    bytes.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or_default()
}

/// Classifies one command.
pub fn classify(keys: &Keys, argv: &[Vec<u8>]) -> Call {
    let first = argv.first().map(Vec::as_slice).unwrap_or_default();
    // apalis's state changes are scripts: known before any text is made.
    if first.eq_ignore_ascii_case(b"EVALSHA") || first.eq_ignore_ascii_case(b"EVAL") {
        return script(keys, argv);
    }
    let name = text(first).to_ascii_uppercase();
    match name.as_str() {
        "ZREM" if argv.get(1).is_some_and(|k| k == keys.workers.as_bytes()) && argv.len() == 3 => {
            Call::Deregister { member: text(&argv[2]) }
        }
        "SCRIPT" | "ZRANGE" | "ZSCORE" | "ZCARD" | "HGET" | "HGETALL" | "HMGET" | "LRANGE" | "LLEN" | "SMEMBERS"
        | "SCARD" | "GET" | "EXISTS" | "TYPE" | "PING" | "TIME" => Call::Read { what: name },
        _ => Call::Unknown { what: name },
    }
}

/// A script call: `EVALSHA sha numkeys key... arg...`.
fn script(keys: &Keys, argv: &[Vec<u8>]) -> Call {
    let numkeys: usize = num(argv.get(2));
    let Some(k) = argv.get(3..3 + numkeys) else {
        return Call::Unknown { what: "script with too few keys".into() };
    };
    // Keys are compared as the bytes they are; only what the call names
    // (workers, tasks) is made text.
    let args = &argv[3 + numkeys..];
    let key = |i: usize| k.get(i).map(Vec::as_slice).unwrap_or(b"");
    let is = |i: usize, name: &String| key(i) == name.as_bytes();
    let arg = |i: usize| args.get(i).map(|b| text(b)).unwrap_or_default();
    let rest = |from: usize| args.iter().skip(from).map(|b| text(b)).collect::<Vec<_>>();
    let k0_inflight = keys.is_inflight(key(0));
    match numkeys {
        7 if is(0, &keys.workers) && is(1, &keys.active) => Call::Fetch { worker: arg(2), max: num(args.get(1)) },
        6 if is(0, &keys.data) && is(1, &keys.active) => Call::Push { tasks: pushed(args) },
        1 if is(0, &keys.workers) => Call::KeepAlive { worker: arg(1) },
        2 if is(0, &keys.workers) => Call::Register { worker: arg(1) },
        4 if is(0, &keys.workers) && is(1, &keys.active) => {
            Call::Reenqueue { expired_before_s: num(args.first()), only: args.get(1).map(|b| text(b)) }
        }
        4 if k0_inflight && is(1, &keys.workers) => Call::Lock { worker: arg(0), tasks: rest(3) },
        3 if k0_inflight && is(1, &keys.workers) => Call::Renew { worker: arg(0), tasks: rest(3) },
        5 if k0_inflight && is(1, &keys.done) => {
            let worker = keys.inflight_of(&text(key(0))).unwrap_or_default().to_owned();
            Call::Results { worker, outcomes: outcomes(args) }
        }
        5 if k0_inflight && is(1, &keys.active) => Call::Release { worker: arg(0), tasks: rest(2) },
        _ => Call::Read { what: format!("script with {numkeys} keys, first {}", text(key(0))) },
    }
}

/// `batch_push`'s arguments: ttl, emit, then 7 per task.
fn pushed(args: &[Vec<u8>]) -> Vec<Pushed> {
    args.get(2..)
        .unwrap_or_default()
        .chunks(7)
        .filter(|c| c.len() == 7)
        .map(|c| Pushed {
            task: text(&c[0]),
            attempts: num(c.get(2)),
            max_attempts: num(c.get(3)),
            run_at_s: num(c.get(5)),
        })
        .collect()
}

/// `handle_results`'s arguments: emit, then 5 per task.
fn outcomes(args: &[Vec<u8>]) -> Vec<Outcome> {
    args.get(1..)
        .unwrap_or_default()
        .chunks(5)
        .filter(|c| c.len() == 5)
        .map(|c| Outcome { task: text(&c[0]), status: text(&c[3]), attempt: num(c.get(4)) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn check(words: &[&str], want: Call) {
        let keys = Keys::of(&Config::default().queue("q"));
        assert_eq!(classify(&keys, &argv(words)), want, "{words:?}");
    }

    #[test]
    fn calls_are_known_by_their_keys() {
        let task = |t: &str| t.to_string();
        check(&["EVALSHA", "x", "1", "q:workers", "100", "w1"], Call::KeepAlive { worker: "w1".into() });
        check(
            &["evalsha", "x", "2", "q:workers", "q:workers:metadata:w1", "100", "w1", "20"],
            Call::Register { worker: "w1".into() },
        );
        check(
            &[
                "EVALSHA",
                "x",
                "7",
                "q:workers",
                "q:active",
                "q:inflight:w2",
                "q:data",
                "q:signal",
                "q:meta",
                "q:scheduled",
                "5",
                "10",
                "w2",
            ],
            Call::Fetch { worker: "w2".into(), max: 10 },
        );
        check(
            &["EVALSHA", "x", "4", "q:inflight:w1", "q:workers", "q:meta", "q:active", "w1", "5", "1", "a", "b"],
            Call::Lock { worker: "w1".into(), tasks: vec![task("a"), task("b")] },
        );
        check(
            &["EVALSHA", "x", "3", "q:inflight:w1", "q:workers", "q:meta", "w1", "5", "1"],
            Call::Renew { worker: "w1".into(), tasks: vec![] },
        );
        check(
            &[
                "EVALSHA",
                "x",
                "5",
                "q:inflight:w1",
                "q:done",
                "q:dead",
                "q:scheduled",
                "q:meta",
                "1",
                "a",
                "9",
                "null",
                "Failed",
                "2",
            ],
            Call::Results {
                worker: "w1".into(),
                outcomes: vec![Outcome { task: "a".into(), status: "Failed".into(), attempt: 2 }],
            },
        );
        check(
            &["EVALSHA", "x", "5", "q:inflight:w1", "q:active", "q:signal", "q:workers", "q:meta", "w1", "1"],
            Call::Release { worker: "w1".into(), tasks: vec![] },
        );
        check(
            &["EVALSHA", "x", "4", "q:workers", "q:active", "q:signal", "q:inflight", "95", "w1"],
            Call::Reenqueue { expired_before_s: 95, only: Some("w1".into()) },
        );
        check(&["ZREM", "q:workers", "q:inflight:w1"], Call::Deregister { member: "q:inflight:w1".into() });
        check(&["SCRIPT", "LOAD", "return 1"], Call::Read { what: "SCRIPT".into() });
    }

    #[test]
    fn what_apalis_never_sends_is_unknown_not_guessed() {
        check(&["FLUSHALL"], Call::Unknown { what: "FLUSHALL".into() });
        check(&["EVALSHA", "x", "9", "q:workers"], Call::Unknown { what: "script with too few keys".into() });
        check(&["ZREM", "q:done", "a"], Call::Unknown { what: "ZREM".into() });
    }
}
