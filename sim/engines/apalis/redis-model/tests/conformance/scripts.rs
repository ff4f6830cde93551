//! Generator 2a: small Lua scripts, run with EVAL, EVALSHA (before and
//! after SCRIPT LOAD or FLUSH), exercising the conversions both ways,
//! redis.call/pcall, error_reply/status_reply, cjson, Lua and Redis
//! errors, and writes that stay behind a later error.
//!
//! Replies must not depend on orders Redis leaves unspecified, so scripts
//! sort SMEMBERS results (the server runs in the C locale) or count them,
//! and read no TTLs or TIME.

use super::plain::KEYS;
use super::rng::Rng;

const ARG1: &[&str] = &["v", "1", "-MY err", "", "hello world", "x\ny", "-", "7"];
const ARG2: &[&str] = &["1", "2.5", "-3", "x", "0", "1e3", "0.1", "-0", "1e300"];
const JSON: &[&str] = &[
    r#"{"k":"v","n":1}"#,
    "[1,2,3]",
    r#"{"a":{"b":[true,false,null]},"c":"x\/y"}"#,
    r#"{"k":1.5e300}"#,
    "nope",
    "",
    r#"{"k":"#,
    r#""str""#,
    "12",
    r#"{"z":1,"a":2,"m":3,"b":4,"k":"last"}"#,
    "[1,[2,[3]]]",
    r#"{"e":"\u00e9\ud83d\ude00","t":"a\tb"}"#,
    "null",
    r#"{"k":null}"#,
    "-0",
    "1e5",
    "tru",
    r#"{"k":[1,2],"k":"dup"}"#,
    " [ 1 , 2 ] ",
    "0x1F",
    "[1,]",
    r#"{"n":12345678901234567890}"#,
];

const STATEMENTS: &[&str] = &[
    "redis.call('set', KEYS[1], ARGV[1])",
    "redis.call('incr', KEYS[1])",
    "redis.call('rpush', KEYS[2], ARGV[1], ARGV[2])",
    "redis.call('hset', KEYS[1], 'f', ARGV[1])",
    "redis.pcall('lpush', KEYS[1], 'x')",
    "redis.call('zadd', KEYS[2], tonumber(ARGV[2]) or 0, ARGV[1])",
    "redis.call('zadd', KEYS[2], ARGV[2], 'm')",
    "redis.call('sadd', KEYS[1], ARGV[1])",
    "redis.call('del', KEYS[2])",
    "redis.call('expire', KEYS[1], 1000)",
    "local n = redis.call('llen', KEYS[2])",
    "redis.call('publish', 'ch', ARGV[1])",
    "if redis.call('exists', KEYS[1]) == 1 then redis.call('del', KEYS[1]) end",
    "redis.call('set', KEYS[2], tonumber(ARGV[2]) and tonumber(ARGV[2]) / 3 or 'nan')",
    "redis.call('hincrby', KEYS[1], 'n', 2)",
    "local ok = pcall(redis.call, 'incr', KEYS[2])",
];

const ENDINGS: &[&str] = &[
    "return redis.call('get', KEYS[1])",
    "return {1, 'two', 3.5, false, nil, 'x'}",
    "return {tonumber(ARGV[2]) or -1, ARGV[1], {ARGV[2], {true}}}",
    "return redis.status_reply('S ' .. ARGV[1])",
    "return redis.error_reply('E ' .. ARGV[1])",
    "return redis.error_reply(ARGV[1])",
    "return {err = ARGV[1]}",
    "return redis.pcall('incr', KEYS[2])",
    "return redis.call('incr', KEYS[2])",
    "return cjson.encode({a = ARGV[1], b = {1, 2, 3}, c = tonumber(ARGV[2])})",
    "return cjson.encode(cjson.decode(ARGV[3]))",
    "return {pcall(cjson.decode, ARGV[3])}",
    "return cjson.encode({[1] = 'a', [3] = 'c'})",
    "return cjson.encode({ARGV[1], x = 1})",
    "return cjson.encode({[20] = 1})",
    "return cjson.encode({1, {2, {3, {4, {5, {6, {7, {8, {9, {10, {11, {12, {13, {14, {15, {16, {17, {18, {19, {20, {21}}}}}}}}}}}}}}}}}}}}})",
    "return cjson.encode(1 / 0)",
    "local t = cjson.decode(ARGV[3])\nreturn type(t) == 'table' and t.k or t",
    "error('boom ' .. ARGV[1])",
    "error({err = 'CUSTOM ' .. ARGV[1]})",
    "return redis.call('zrange', KEYS[2], 0, -1, 'withscores')",
    "return redis.call('lrange', KEYS[2], 0, -1)",
    "return redis.call('exists', KEYS[1], KEYS[2])",
    "return tonumber(ARGV[2]) * 2.5",
    "return #redis.call('keys', '*')",
    "local t = redis.call('smembers', KEYS[1])\ntable.sort(t)\nreturn t",
    "local t = redis.call('hgetall', KEYS[1])\nreturn #t",
    "return redis.sha1hex(ARGV[1])",
    "return math.random(10)",
    "return math.random()",
    "return math.random(3, 7)",
    "return x",
    "y = 1",
    "return redis.call('nosuch')",
    "return redis.call('get')",
    "return redis.call('get', {})",
    "return redis.pcall('eval', 'return 1', 0)",
    "return redis.pcall('script', 'load', 'return 1')",
    "return redis.pcall()",
    "return {redis.call('ping')}",
    "return redis.call('type', KEYS[1])",
    "return {double = tonumber(ARGV[2]) or 0}",
    "return {map = {a = 1}}",
    "return {set = {x = true}}",
    "return string.format('%d-%s-%.3f', 3, ARGV[1], 1 / 3)",
    "return redis.call('hget', KEYS[1], 'f')",
    "return redis.call('echo', 0.1 + 0.2)",
    "return redis.call('echo', -0.0)",
    "return redis.call('echo', 1 / 0)",
    "return redis.call('echo', 2 ^ 53 + 1)",
    "return redis.call('echo', 1.5e300)",
    "return redis.call('echo', tonumber(ARGV[2]) or 0)",
    "local function f()\n  return redis.call('incr', KEYS[1])\nend\nreturn f()",
    "return redis.log(redis.LOG_WARNING, 'from a test')",
    "return redis.log('x')",
    "return redis.setresp(2)",
    "return redis.replicate_commands()",
    "return redis.REDIS_VERSION_NUM",
    "return table.getn({1, 2, 3})",
    "return unpack({1, 2})",
    "return select('#', 1, nil, 3)",
    "return tostring(tonumber(ARGV[2]))",
    "return ARGV[1] .. ARGV[2]",
    "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]}",
    "return redis.status_reply(5)",
    "return {err = 5}",
    "return {ok = 5}",
    "return redis.call('set', KEYS[1], 'v', 'get')",
    "return 1e30",
    "return -3.7",
];

const BROKEN: &[&str] = &["return (", "local = 1", "return 'unterminated", "end", "x ="];

/// One script body: a few statements, then an ending.
pub fn body(rng: &mut Rng) -> String {
    if rng.chance(3) {
        return rng.pick(BROKEN).to_string();
    }
    let mut lines: Vec<&str> = (0..rng.below(4)).map(|_| *rng.pick(STATEMENTS)).collect();
    lines.push(*rng.pick(ENDINGS));
    lines.join("\n")
}

/// What to send: an EVAL of a fresh body, an EVALSHA of a body seen
/// before, or a SCRIPT subcommand. `seen` collects bodies for EVALSHA.
pub fn command(rng: &mut Rng, seen: &mut Vec<String>) -> Vec<Vec<u8>> {
    let keys = [rng.pick(KEYS).to_string(), rng.pick(KEYS).to_string()];
    let args = [rng.pick(ARG1).to_string(), rng.pick(ARG2).to_string(), rng.pick(JSON).to_string()];
    let call_args = |name: &str, first: String, numkeys: &str| {
        let mut argv = vec![name.to_string(), first, numkeys.to_string()];
        argv.extend(keys.iter().cloned());
        argv.extend(args.iter().cloned());
        argv
    };
    let argv = match rng.below(100) {
        0..=69 => {
            let b = body(rng);
            seen.push(b.clone());
            call_args("EVAL", b, "2")
        }
        70..=84 if !seen.is_empty() => {
            let b = rng.pick(seen).clone();
            let sha = sha1_hex(&b);
            let sha = if rng.chance(20) { sha.to_uppercase() } else { sha };
            call_args("EVALSHA", sha, "2")
        }
        85..=89 => {
            let b = body(rng);
            seen.push(b.clone());
            vec!["SCRIPT".into(), "LOAD".into(), b]
        }
        90..=94 if !seen.is_empty() => {
            let mut argv = vec!["script".to_string(), "exists".to_string()];
            for _ in 0..1 + rng.below(3) {
                let b = rng.pick(seen).clone();
                argv.push(sha1_hex(&b));
            }
            argv
        }
        95 => vec!["SCRIPT".into(), "FLUSH".into()],
        96 => call_args("EVALSHA", "0123".into(), "2"),
        _ => {
            let b = body(rng);
            let numkeys = *rng.pick(&["-1", "6", "x", "0"]);
            call_args("eval", b, numkeys)
        }
    };
    argv.into_iter().map(String::into_bytes).collect()
}

/// SHA1 hex of a script, as the server names it (the test's own
/// implementation, independent of the model's).
pub fn sha1_hex(body: &str) -> String {
    sha1_smol::Sha1::from(body.as_bytes()).digest().to_string()
}
