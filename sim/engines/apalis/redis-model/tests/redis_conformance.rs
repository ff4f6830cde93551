//! Checks the Redis model against a real redis-server: the same command
//! sequences go to both, and every reply, then the whole keyspace, must be
//! equal after every step.
//!
//! Phases, each from a seeded generator (the seed is printed on a mismatch;
//! LEASESIM_REDIS_SEED replays it):
//! 1. plain commands over a small alphabet (collisions, wrong types, empty
//!    collections, bad arguments, wrong arities);
//! 2. generated Lua scripts (EVAL, EVALSHA, SCRIPT), mixed with plain
//!    commands;
//! 3. apalis-redis 1.0.0's own scripts over a state they build themselves;
//! 4. expiry on the clock: keys that expire while the test waits.
//!
//! The model's clock is the test's wall clock, read right before each
//! command, so TTLs agree with the server's to within the round trip; they
//! are compared with a tolerance.
//!
//! Where Redis leaves an order unspecified (SMEMBERS, KEYS, HKEYS, HVALS,
//! HGETALL, and HGETALL results inside apalis's replies), replies are
//! compared as multisets. When an apalis script pushes SMEMBERS results onto
//! a list, the server's list order is its hash table's: the test then adopts
//! the server's order into the model (and counts it), after checking the
//! lists hold the same elements.

mod conformance;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conformance::apalis::{Apalis, Shape};
use conformance::resp::Connection;
use conformance::rng::Rng;
use conformance::{plain, scripts, server};
use leasesim_redis_model::{Redis, Reply, Value};

const DEFAULT_SEED: u64 = 0x1ea5_e51a;
const PLAIN_STEPS: usize = 12_000;
const SCRIPT_STEPS: usize = 3_000;
const APALIS_STEPS: usize = 3_000;

/// Reads the whole keyspace in one round trip: each key with its type,
/// PTTL and contents (sets, hashes and keys in the server's order; the test
/// sorts them).
const DUMP_SCRIPT: &str = r#"
local out = {}
for _, k in ipairs(redis.call('keys', '*')) do
  local t = redis.call('type', k).ok
  local v
  if t == 'string' then v = {redis.call('get', k)}
  elseif t == 'list' then v = redis.call('lrange', k, 0, -1)
  elseif t == 'set' then v = redis.call('smembers', k)
  elseif t == 'zset' then v = redis.call('zrange', k, 0, -1, 'withscores')
  elseif t == 'hash' then v = redis.call('hgetall', k)
  else v = {} end
  out[#out + 1] = {k, t, redis.call('pttl', k), v}
end
return out
"#;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as u64
}

fn args(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// How a reply is compared.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compare {
    Exact,
    /// An array whose order Redis leaves unspecified.
    Unordered,
    /// A flat field/value array whose pair order is unspecified.
    Pairs,
    /// An integer TTL that may differ by the round trip.
    Ttl(i64),
    /// TIME: seconds within 2.
    Time,
    /// An apalis reply carrying HGETALL results.
    TasksWithMeta,
}

fn compare_mode(argv: &[Vec<u8>]) -> Compare {
    match String::from_utf8_lossy(&argv[0]).to_ascii_lowercase().as_str() {
        "smembers" | "keys" | "hkeys" | "hvals" => Compare::Unordered,
        "hgetall" => Compare::Pairs,
        "ttl" => Compare::Ttl(1),
        "pttl" => Compare::Ttl(1_500),
        "time" => Compare::Time,
        _ => Compare::Exact,
    }
}

/// The reply with unspecified orders made canonical.
fn canonical(reply: &Reply, mode: Compare) -> Reply {
    match (mode, reply) {
        (Compare::Unordered, Reply::Array(Some(items))) => {
            let mut items = items.clone();
            items.sort_by_key(|r| format!("{r:?}"));
            Reply::Array(Some(items))
        }
        (Compare::Pairs, Reply::Array(Some(items))) => Reply::Array(Some(sorted_pairs(items))),
        (Compare::TasksWithMeta, Reply::Array(Some(parts))) if parts.len() == 2 => {
            let meta = match &parts[1] {
                Reply::Array(Some(entries)) => Reply::Array(Some(entries.iter().map(canonical_meta_entry).collect())),
                other => other.clone(),
            };
            Reply::Array(Some(vec![parts[0].clone(), meta]))
        }
        _ => reply.clone(),
    }
}

/// `{id, field, value, ...}`: the id stays first, the pairs are sorted.
fn canonical_meta_entry(entry: &Reply) -> Reply {
    match entry {
        Reply::Array(Some(items)) if items.len() % 2 == 1 => {
            let mut out = vec![items[0].clone()];
            out.extend(sorted_pairs(&items[1..]));
            Reply::Array(Some(out))
        }
        other => other.clone(),
    }
}

fn sorted_pairs(items: &[Reply]) -> Vec<Reply> {
    let mut pairs: Vec<&[Reply]> = items.chunks(2).collect();
    pairs.sort_by_key(|p| format!("{p:?}"));
    pairs.concat()
}

fn replies_match(model: &Reply, server: &Reply, mode: Compare) -> bool {
    match (mode, model, server) {
        (Compare::Ttl(tolerance), Reply::Int(a), Reply::Int(b)) if *a >= 0 && *b >= 0 => (a - b).abs() <= tolerance,
        (Compare::Time, Reply::Array(Some(a)), Reply::Array(Some(b))) if a.len() == 2 && b.len() == 2 => {
            let secs = |r: &Reply| match r {
                Reply::Bulk(Some(s)) => String::from_utf8_lossy(s).parse::<i64>().ok(),
                _ => None,
            };
            matches!((secs(&a[0]), secs(&b[0])), (Some(x), Some(y)) if (x - y).abs() <= 2)
        }
        _ => canonical(model, mode) == canonical(server, mode),
    }
}

/// One key as both sides report it. Sets and hashes are sorted; sorted-set
/// scores are compared as doubles (bit for bit).
#[derive(Clone, Debug, PartialEq)]
enum Contents {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, u64)>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

#[derive(Clone, Debug)]
struct KeyState {
    contents: Contents,
    /// Milliseconds left, or -1 for no expiry.
    pttl: i64,
}

type Keyspace = BTreeMap<Vec<u8>, KeyState>;

fn model_keyspace(model: &Redis, now_ms: u64) -> Keyspace {
    model
        .dump(now_ms)
        .into_iter()
        .map(|(key, value)| {
            let contents = match value {
                Value::String(s) => Contents::String(s),
                Value::List(l) => Contents::List(l.into_iter().collect()),
                Value::Set(s) => Contents::Set(s.into_iter().collect()),
                Value::ZSet(z) => Contents::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s.to_bits())).collect()),
                Value::Hash(h) => Contents::Hash(h.into_iter().collect()),
            };
            let pttl = model.expires_at_ms(now_ms, &key).map_or(-1, |at| (at - now_ms) as i64);
            (key, KeyState { contents, pttl })
        })
        .collect()
}

fn server_keyspace(dump: &Reply) -> Result<Keyspace, String> {
    let bytes = |r: &Reply| match r {
        Reply::Bulk(Some(b)) => Ok(b.clone()),
        other => Err(format!("expected a bulk string in the dump, got {other:?}")),
    };
    let Reply::Array(Some(entries)) = dump else {
        return Err(format!("dump script failed: {dump:?}"));
    };
    let mut out = Keyspace::new();
    for entry in entries {
        let Reply::Array(Some(parts)) = entry else { return Err(format!("bad dump entry {entry:?}")) };
        let (Reply::Int(pttl), Reply::Array(Some(items))) = (&parts[2], &parts[3]) else {
            return Err(format!("bad dump entry {entry:?}"));
        };
        let items: Vec<Vec<u8>> = items.iter().map(bytes).collect::<Result<_, _>>()?;
        let contents = match bytes(&parts[1])?.as_slice() {
            b"string" => Contents::String(items[0].clone()),
            b"list" => Contents::List(items),
            b"set" => Contents::Set(items.into_iter().collect::<BTreeSet<_>>().into_iter().collect()),
            b"zset" => Contents::ZSet(
                items
                    .chunks(2)
                    .map(|p| {
                        let score: f64 = String::from_utf8_lossy(&p[1]).parse().expect("the server's scores parse");
                        (p[0].clone(), score.to_bits())
                    })
                    .collect(),
            ),
            b"hash" => Contents::Hash(
                items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect::<BTreeMap<_, _>>().into_iter().collect(),
            ),
            other => return Err(format!("unknown type {:?}", String::from_utf8_lossy(other))),
        };
        out.insert(bytes(&parts[0])?, KeyState { contents, pttl: *pttl });
    }
    Ok(out)
}

/// The keys whose state differs; PTTLs agree within 1.5 s.
fn keyspace_differences(model: &Keyspace, server: &Keyspace) -> Vec<Vec<u8>> {
    let keys: BTreeSet<&Vec<u8>> = model.keys().chain(server.keys()).collect();
    keys.into_iter()
        .filter(|k| match (model.get(*k), server.get(*k)) {
            (Some(m), Some(s)) => {
                m.contents != s.contents || (m.pttl < 0) != (s.pttl < 0) || (m.pttl - s.pttl).abs() > 1_500
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// Both sides, and the bookkeeping for counts and mismatch reports.
struct Checker {
    model: Redis,
    conn: Connection,
    seed: u64,
    phase: &'static str,
    step: usize,
    history: VecDeque<String>,
    commands: usize,
    script_runs: usize,
    adopted_orders: usize,
    /// Per apalis script: runs that replied normally, and with an error.
    apalis_outcomes: BTreeMap<&'static str, (usize, usize)>,
}

fn show(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| {
            let text = String::from_utf8_lossy(a);
            let text: String = text.chars().take(160).collect();
            format!("{text:?}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Checker {
    /// Runs one command on both sides and compares the replies and the
    /// keyspaces; returns the server's reply.
    fn step(&mut self, argv: &[Vec<u8>], mode: Compare, adopt_list_order: bool) -> Reply {
        self.step += 1;
        self.history.push_back(show(argv));
        if self.history.len() > 12 {
            self.history.pop_front();
        }
        let is_script = matches!(String::from_utf8_lossy(&argv[0]).to_ascii_lowercase().as_str(), "eval" | "evalsha");
        if is_script {
            self.script_runs += 1;
        } else {
            self.commands += 1;
        }
        let now = now_ms();
        let before = self.model.dump(now);
        let expiries_before: BTreeMap<Vec<u8>, Option<u64>> =
            before.keys().map(|k| (k.clone(), self.model.expires_at_ms(now, k))).collect();
        self.model.take_dirty();
        let model_reply = self.model.apply(now, argv);
        let dump_cmd = args(&["EVAL", DUMP_SCRIPT, "0"]);
        let mut replies = self.conn.pipeline(&[argv, &dump_cmd]).expect("talk to redis-server");
        let server_dump = replies.pop().expect("two replies");
        let server_reply = replies.pop().expect("two replies");
        if !replies_match(&model_reply, &server_reply, mode) {
            self.fail("replies differ", &format!("model:  {model_reply:?}\nserver: {server_reply:?}"));
        }
        self.check_dirty(now, &before, &expiries_before);
        self.model.take_published();
        self.compare_keyspaces(now, &server_dump, adopt_list_order);
        server_reply
    }

    /// Every key whose value or expiry changed must be reported by take_dirty.
    fn check_dirty(&mut self, now: u64, before: &BTreeMap<Vec<u8>, Value>, expiries: &BTreeMap<Vec<u8>, Option<u64>>) {
        let after = self.model.dump(now);
        let dirty: BTreeSet<Vec<u8>> = self.model.take_dirty().into_iter().collect();
        let keys: BTreeSet<&Vec<u8>> = before.keys().chain(after.keys()).collect();
        for key in keys {
            let changed = before.get(key) != after.get(key)
                || expiries.get(key).copied().flatten() != self.model.expires_at_ms(now, key);
            if changed && !dirty.contains(key) {
                self.fail("take_dirty missed a changed key", &format!("key {:?}", String::from_utf8_lossy(key)));
            }
        }
    }

    fn compare_keyspaces(&mut self, now: u64, server_dump: &Reply, adopt_list_order: bool) {
        let server = server_keyspace(server_dump).unwrap_or_else(|e| self.fail("bad server dump", &e));
        let model = model_keyspace(&self.model, now);
        let differing = keyspace_differences(&model, &server);
        if differing.is_empty() {
            return;
        }
        if adopt_list_order && differing.iter().all(|k| same_list_elements(model.get(k), server.get(k))) {
            for key in differing {
                let Some(KeyState { contents: Contents::List(items), .. }) = server.get(&key) else { unreachable!() };
                let mut rpush = vec![b"RPUSH".to_vec(), key.clone()];
                rpush.extend(items.iter().cloned());
                self.model.apply(now, &[b"DEL".to_vec(), key.clone()]);
                self.model.apply(now, &rpush);
                self.adopted_orders += 1;
            }
            self.model.take_dirty();
            return;
        }
        let details: Vec<String> = differing
            .iter()
            .map(|k| {
                format!(
                    "key {:?}\n  model:  {:?}\n  server: {:?}",
                    String::from_utf8_lossy(k),
                    model.get(k),
                    server.get(k)
                )
            })
            .collect();
        self.fail("keyspaces differ", &details.join("\n"));
    }

    fn fail(&self, what: &str, details: &str) -> ! {
        panic!(
            "redis_conformance: {what} in phase {}, step {} (seed {}; replay with LEASESIM_REDIS_SEED={})\n\
             command: {}\n{details}\nrecent steps, oldest first:\n  {}",
            self.phase,
            self.step,
            self.seed,
            self.seed,
            self.history.back().map_or("", String::as_str),
            self.history.iter().cloned().collect::<Vec<_>>().join("\n  "),
        )
    }
}

/// Lists holding the same elements in another order.
fn same_list_elements(model: Option<&KeyState>, server: Option<&KeyState>) -> bool {
    match (model.map(|s| &s.contents), server.map(|s| &s.contents)) {
        (Some(Contents::List(a)), Some(Contents::List(b))) => {
            let (mut a, mut b) = (a.clone(), b.clone());
            a.sort();
            b.sort();
            a == b
        }
        _ => false,
    }
}

fn plain_phase(c: &mut Checker, seed: u64) {
    c.phase = "plain commands";
    let mut rng = Rng::new(seed);
    for _ in 0..PLAIN_STEPS {
        let argv = plain::command(&mut rng, now_ms() / 1000);
        c.step(&argv, compare_mode(&argv), false);
    }
}

fn script_phase(c: &mut Checker, seed: u64) {
    c.phase = "generated scripts";
    let mut rng = Rng::new(seed);
    let mut seen = Vec::new();
    let mut runs = 0;
    while runs < SCRIPT_STEPS {
        if rng.chance(25) {
            let argv = plain::command(&mut rng, now_ms() / 1000);
            c.step(&argv, compare_mode(&argv), false);
        } else {
            let argv = scripts::command(&mut rng, &mut seen);
            c.step(&argv, Compare::Exact, false);
            runs += 1;
        }
    }
}

/// apalis's scripts, by EVALSHA when the script is loaded (as redis-rs
/// does), else or sometimes by EVAL; NOSCRIPT sends it again with EVAL.
fn apalis_phase(c: &mut Checker, seed: u64) {
    c.phase = "apalis scripts";
    let mut rng = Rng::new(seed);
    let mut apalis = Apalis::load(now_ms() / 1000);
    c.step(&args(&["FLUSHALL"]), Compare::Exact, false);
    for _ in 0..APALIS_STEPS {
        if rng.chance(1) {
            c.step(&args(&["SCRIPT", "FLUSH"]), Compare::Exact, false);
        }
        let run = apalis.next(&mut rng, &c.model, now_ms());
        let body = apalis.sources[run.name].clone();
        let mode = if run.shape == Shape::TasksWithMeta { Compare::TasksWithMeta } else { Compare::Exact };
        let argv_with = |verb: &str, first: &str| {
            let mut argv = vec![verb.to_string(), first.to_string(), run.keys.len().to_string()];
            argv.extend(run.keys.iter().cloned());
            argv.extend(run.args.iter().cloned());
            argv.into_iter().map(String::into_bytes).collect::<Vec<_>>()
        };
        let mut reply = None;
        if rng.chance(70) {
            let first = c.step(&argv_with("EVALSHA", &scripts::sha1_hex(&body)), mode, run.set_order_into_list);
            if !matches!(&first, Reply::Error(e) if e.starts_with("NOSCRIPT")) {
                reply = Some(first);
            } else if rng.chance(50) {
                c.step(&args(&["SCRIPT", "LOAD", &body]), Compare::Exact, false);
                reply = Some(c.step(&argv_with("EVALSHA", &scripts::sha1_hex(&body)), mode, run.set_order_into_list));
            }
        }
        let reply = reply.unwrap_or_else(|| c.step(&argv_with("EVAL", &body), mode, run.set_order_into_list));
        let outcome = c.apalis_outcomes.entry(run.name).or_default();
        if reply.is_error() {
            outcome.1 += 1;
        } else {
            outcome.0 += 1;
        }
    }
}

/// Keys that expire while the test waits, far from the boundary (the two
/// clocks differ by the round trip).
fn expiry_phase(c: &mut Checker) {
    c.phase = "expiry";
    for round in 0..3 {
        let key = format!("exp:{round}");
        c.step(&args(&["SET", &key, "v", "PX", "300"]), Compare::Exact, false);
        c.step(&args(&["RPUSH", "exp:list", "a", "b"]), Compare::Exact, false);
        c.step(&args(&["PEXPIRE", "exp:list", "250"]), Compare::Exact, false);
        c.step(&args(&["PTTL", &key]), Compare::Ttl(1_500), false);
        c.step(&args(&["EVAL", "return redis.call('get', KEYS[1])", "1", &key]), Compare::Exact, false);
        std::thread::sleep(Duration::from_millis(700));
        c.step(&args(&["GET", &key]), Compare::Exact, false);
        c.step(&args(&["LLEN", "exp:list"]), Compare::Exact, false);
        c.step(&args(&["TTL", &key]), Compare::Exact, false);
        c.step(&args(&["DBSIZE"]), Compare::Exact, false);
    }
}

fn server_version(conn: &mut Connection) -> String {
    match conn.call(&args(&["INFO", "server"])) {
        Ok(Reply::Bulk(Some(info))) => String::from_utf8_lossy(&info)
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
            .unwrap_or_else(|| "?".into()),
        _ => "?".into(),
    }
}

#[test]
fn model_matches_redis_server() {
    let Some(binary) = server::find_binary() else {
        let message = "redis_conformance: skipped: no redis-server (install the Debian package redis-server, or set REDIS_SERVER)";
        assert!(std::env::var_os("CI").is_none(), "{message}; CI is set, so this is a failure");
        println!("{message}");
        return;
    };
    let server = server::Server::start(&binary);
    let mut conn = Connection::open(server.port).expect("connect to redis-server");
    let version = server_version(&mut conn);
    let seed = std::env::var("LEASESIM_REDIS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let mut c = Checker {
        model: Redis::new(),
        conn,
        seed,
        phase: "start",
        step: 0,
        history: VecDeque::new(),
        commands: 0,
        script_runs: 0,
        adopted_orders: 0,
        apalis_outcomes: BTreeMap::new(),
    };
    plain_phase(&mut c, seed);
    script_phase(&mut c, seed.wrapping_add(1));
    apalis_phase(&mut c, seed.wrapping_add(2));
    expiry_phase(&mut c);
    println!(
        "redis_conformance: {} commands, {} script runs ({} apalis scripts) compared against redis-server {version}: \
         all equal (seed {seed}; {} list orders adopted from the server after SMEMBERS-fed pushes)",
        c.commands,
        c.script_runs,
        c.apalis_outcomes.len(),
        c.adopted_orders,
    );
    let outcomes: Vec<String> =
        c.apalis_outcomes.iter().map(|(name, (ok, err))| format!("{name} {ok}/{err}")).collect();
    println!("redis_conformance: apalis script runs (replied/errored): {}", outcomes.join(", "));
    drop(server);
}
