//! Generator 1: plain commands over a small alphabet of keys, members and
//! values, so keys collide, hold the wrong type, and empty out; arguments
//! include bad integers and floats, and some commands get the wrong arity,
//! an unknown name, or odd casing.
//!
//! Expiry times are either far (>= 100 s, so nothing expires during the
//! run and the clocks of model and server need not agree to the ms) or not
//! in the future (so the key goes at once, in both).

use super::rng::Rng;

pub const KEYS: &[&str] = &["a", "b", "c", "d", "e", "k:1", ""];
const MEMBERS: &[&str] = &["x", "y", "z", "1", "2", "10", "-3", "1.5", ""];
const VALUES: &[&str] =
    &["v", "1", "-5", "0", "9223372036854775807", "-9223372036854775808", "abc", "", "007", " 1", "3.0"];
const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "-2",
    "3",
    "10",
    "-10",
    "x",
    "1.5",
    "",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "+1",
    "007",
];
const SCORES: &[&str] = &[
    "0",
    "1",
    "-1",
    "1.5",
    "-0",
    "inf",
    "-inf",
    "+inf",
    "1e3",
    "0x10",
    "abc",
    "",
    "1e400",
    "nan",
    " 2",
    "2.5",
    "3",
    "0.1",
    "1e-400",
    "-2.5e2",
    "1e20",
    "123456789.123",
];
const BOUNDS: &[&str] = &[
    "-inf", "+inf", "inf", "0", "(0", "1", "(1", "2.5", "(2.5", "x", "(", "", "-1", " 1", "1e400", "(-inf", "nan", "3",
    "(3",
];
const LEX: &[&str] = &["-", "+", "[a", "(x", "[", "x", "[1", "(2", "[z"];
const PATTERNS: &[&str] = &["*", "a*", "?", "[a-c]", "*:*", "k:?", "\\*", "[^a]*", "*b*", "[", "k\\:1"];
const SECONDS: &[&str] = &["100", "1000", "-1", "0", "x", "99999999999999999", "3600"];
const MILLIS: &[&str] = &["100000", "0", "-5", "x", "5000000", ""];

fn s(v: impl AsRef<str>) -> String {
    v.as_ref().to_string()
}

/// One command: its name (cased at random) and arguments, sometimes with
/// an argument dropped or added.
pub fn command(rng: &mut Rng, now_s: u64) -> Vec<Vec<u8>> {
    let (name, mut args) = pick(rng, now_s);
    if rng.chance(3) && !args.is_empty() {
        args.pop();
    } else if rng.chance(3) {
        args.push(s(rng.pick(VALUES)));
    }
    let mut argv = vec![rng.casing(name).into_bytes()];
    argv.extend(args.into_iter().map(String::into_bytes));
    argv
}

fn key(rng: &mut Rng) -> String {
    s(rng.pick(KEYS))
}

fn member(rng: &mut Rng) -> String {
    s(rng.pick(MEMBERS))
}

fn int(rng: &mut Rng) -> String {
    s(rng.pick(INTS))
}

fn pick(rng: &mut Rng, now_s: u64) -> (&'static str, Vec<String>) {
    match rng.below(100) {
        0..=3 => ("get", vec![key(rng)]),
        4..=9 => ("set", set_args(rng, now_s)),
        10 => ("setnx", vec![key(rng), s(rng.pick(VALUES))]),
        11..=12 => ("incr", vec![key(rng)]),
        13 => ("incrby", vec![key(rng), int(rng)]),
        14 => ("mget", rng.some(KEYS, 1, 4).into_iter().map(s).collect()),
        15..=16 => ("del", rng.some(KEYS, 1, 3).into_iter().map(s).collect()),
        17 => ("exists", rng.some(KEYS, 1, 3).into_iter().map(s).collect()),
        18 => ("type", vec![key(rng)]),
        19 => ("expire", expire_args(rng, SECONDS)),
        20 => ("pexpire", expire_args(rng, MILLIS)),
        21 => (*rng.pick(&["ttl", "pttl"]), vec![key(rng)]),
        22 => ("persist", vec![key(rng)]),
        23 => ("keys", vec![s(rng.pick(PATTERNS))]),
        24 => server_command(rng),
        25..=28 => (
            *rng.pick(&["lpush", "rpush"]),
            std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect(),
        ),
        29..=30 => (*rng.pick(&["lpop", "rpop"]), pop_args(rng)),
        31 => ("llen", vec![key(rng)]),
        32..=33 => ("lrange", vec![key(rng), int(rng), int(rng)]),
        34 => ("lrem", vec![key(rng), int(rng), member(rng)]),
        35 => ("ltrim", vec![key(rng), int(rng), int(rng)]),
        36 => ("lindex", vec![key(rng), int(rng)]),
        37 => (
            "lmove",
            vec![key(rng), key(rng), s(rng.pick(&["LEFT", "right", "up"])), s(rng.pick(&["left", "RIGHT", "down"]))],
        ),
        38 => ("rpoplpush", vec![key(rng), key(rng)]),
        39..=42 => ("sadd", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
        43..=44 => ("srem", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
        45 => ("smembers", vec![key(rng)]),
        46 => ("sismember", vec![key(rng), member(rng)]),
        47 => ("scard", vec![key(rng)]),
        48..=53 => ("zadd", zadd_args(rng)),
        54 => ("zincrby", vec![key(rng), s(rng.pick(SCORES)), member(rng)]),
        55..=56 => ("zrem", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
        57 => ("zscore", vec![key(rng), member(rng)]),
        58 => ("zcard", vec![key(rng)]),
        59 => ("zcount", vec![key(rng), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))]),
        60 => ("zrank", vec![key(rng), member(rng)]),
        61..=63 => ("zrange", zrange_args(rng)),
        64 => ("zrevrange", with_options(vec![key(rng), int(rng), int(rng)], rng, &["WITHSCORES", "rev"])),
        65..=66 => (*rng.pick(&["zrangebyscore", "zrevrangebyscore"]), by_score_args(rng)),
        67 => ("zremrangebyscore", vec![key(rng), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))]),
        68..=72 => (*rng.pick(&["hset", "hmset"]), hset_args(rng)),
        73 => ("hsetnx", vec![key(rng), member(rng), s(rng.pick(VALUES))]),
        74..=75 => ("hget", vec![key(rng), member(rng)]),
        76 => ("hmget", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
        77 => (*rng.pick(&["hgetall", "hkeys", "hvals", "hlen"]), vec![key(rng)]),
        78..=79 => ("hdel", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
        80 => ("hexists", vec![key(rng), member(rng)]),
        81..=82 => ("hincrby", vec![key(rng), member(rng), int(rng)]),
        83 => ("publish", vec![s(rng.pick(&["ch", "tasks:q"])), member(rng)]),
        84 => (*rng.pick(&["nosuch", "getx", "hsetx"]), rng.some(VALUES, 0, 3).into_iter().map(s).collect()),
        85..=89 => ("zadd", zadd_args(rng)),
        90..=94 => ("hset", hset_args(rng)),
        _ => ("rpush", std::iter::once(key(rng)).chain(rng.some(MEMBERS, 1, 3).into_iter().map(s)).collect()),
    }
}

/// PING, ECHO, DBSIZE, TIME, SELECT and (rarely) FLUSHALL.
fn server_command(rng: &mut Rng) -> (&'static str, Vec<String>) {
    match rng.below(12) {
        0..=2 => ("ping", rng.some(VALUES, 0, 1).into_iter().map(s).collect()),
        3 => ("echo", vec![s(rng.pick(VALUES))]),
        4..=6 => ("dbsize", vec![]),
        7 => ("time", vec![]),
        8..=9 => ("select", vec![s(rng.pick(&["0", "16", "x", "-1", "00"]))]),
        10 if rng.chance(30) => ("flushall", rng.some(&["sync", "ASYNC", "x"], 0, 1).into_iter().map(s).collect()),
        _ => ("ping", vec![]),
    }
}

fn with_options(mut args: Vec<String>, rng: &mut Rng, options: &[&str]) -> Vec<String> {
    for _ in 0..rng.below(3) {
        let option = *rng.pick(options);
        args.push(rng.casing(option));
    }
    args
}

fn set_args(rng: &mut Rng, now_s: u64) -> Vec<String> {
    let mut args = vec![key(rng), s(rng.pick(VALUES))];
    for _ in 0..rng.below(3) {
        match rng.below(12) {
            0 => args.push(rng.casing("nx")),
            1 => args.push(rng.casing("xx")),
            2 => args.push(rng.casing("get")),
            3 => args.push(rng.casing("keepttl")),
            4..=5 => args.extend([rng.casing("ex"), s(rng.pick(SECONDS))]),
            6..=7 => args.extend([rng.casing("px"), s(rng.pick(MILLIS))]),
            8 => args.extend([rng.casing("exat"), (now_s + 1000).to_string()]),
            9 => args.extend([rng.casing("pxat"), ((now_s + 2000) * 1000).to_string()]),
            10 => args.extend([rng.casing("exat"), s(rng.pick(&["0", "-1", "x"]))]),
            _ => args.push(rng.casing("ex")),
        }
    }
    args
}

fn expire_args(rng: &mut Rng, amounts: &[&str]) -> Vec<String> {
    let mut args = vec![key(rng), s(rng.pick(amounts))];
    if rng.chance(40) {
        args.extend(rng.some(&["nx", "XX", "gt", "LT", "bogus"], 1, 2).into_iter().map(s));
    }
    args
}

fn pop_args(rng: &mut Rng) -> Vec<String> {
    let mut args = vec![key(rng)];
    if rng.chance(40) {
        args.push(s(rng.pick(&["0", "1", "2", "5", "-1", "x"])));
    }
    args
}

fn zadd_args(rng: &mut Rng) -> Vec<String> {
    let mut args = vec![key(rng)];
    if rng.chance(40) {
        args.extend(rng.some(&["nx", "XX", "gt", "lt", "CH", "incr"], 1, 2).into_iter().map(|o| rng.casing(o)));
    }
    for _ in 0..1 + rng.below(3) {
        let score = if rng.chance(80) {
            s(rng.pick(&["0", "1", "2", "1.5", "-1", "3", "10", "0.1"]))
        } else {
            s(rng.pick(SCORES))
        };
        args.extend([score, member(rng)]);
    }
    args
}

fn zrange_args(rng: &mut Rng) -> Vec<String> {
    match rng.below(4) {
        0 => with_options(vec![key(rng), int(rng), int(rng)], rng, &["withscores", "rev", "limit"]),
        1 => {
            let mut args = vec![key(rng), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS)), rng.casing("byscore")];
            args = with_options(args, rng, &["withscores", "rev"]);
            if rng.chance(40) {
                args.extend([s("LIMIT"), int(rng), int(rng)]);
            }
            args
        }
        2 => {
            let mut args = vec![key(rng), s(rng.pick(LEX)), s(rng.pick(LEX)), rng.casing("bylex")];
            args = with_options(args, rng, &["rev", "withscores"]);
            if rng.chance(40) {
                args.extend([s("limit"), int(rng), int(rng)]);
            }
            args
        }
        _ => vec![key(rng), s("0"), s("-1"), rng.casing("withscores")],
    }
}

fn by_score_args(rng: &mut Rng) -> Vec<String> {
    let mut args = with_options(vec![key(rng), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))], rng, &["withscores"]);
    if rng.chance(40) {
        args.extend([rng.casing("limit"), int(rng), int(rng)]);
    }
    args
}

fn hset_args(rng: &mut Rng) -> Vec<String> {
    let mut args = vec![key(rng)];
    for _ in 0..1 + rng.below(3) {
        args.extend([member(rng), s(rng.pick(VALUES))]);
    }
    args
}
