//! Data-driven unit tests: Lua conversions and script errors (expected
//! replies as redis-server 7.0.15 gave them), and key expiry on the model's
//! clock.

use super::*;

fn argv(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn bulk(s: &str) -> Reply {
    Reply::bulk(s)
}

fn err(s: &str) -> Reply {
    Reply::error(s)
}

fn arr(items: Vec<Reply>) -> Reply {
    Reply::Array(Some(items))
}

/// One script run: its setup commands, the script with KEYS and ARGV, and
/// the reply; `<sha>` in an expected error stands for the script's SHA1.
struct ScriptCase {
    setup: &'static [&'static [&'static str]],
    script: &'static str,
    keys: &'static [&'static str],
    args: &'static [&'static str],
    want: fn() -> Reply,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn script_cases() -> Vec<ScriptCase> {
    let case = |script, want| ScriptCase { setup: &[], script, keys: &[], args: &[], want };
    vec![
        // Lua -> Redis
        case("return 1", || Reply::Int(1)),
        case("return 3.99", || Reply::Int(3)),
        case("return -3.99", || Reply::Int(-3)),
        case("return 1e30", || Reply::Int(i64::MIN)),
        case("return 'x'", || bulk("x")),
        case("return true", || Reply::Int(1)),
        case("return false", Reply::nil),
        case("return nil", Reply::nil),
        case("return {1, 2, 3.7, 'x', nil, 4}", || arr(vec![Reply::Int(1), Reply::Int(2), Reply::Int(3), bulk("x")])),
        case("return {1, {ok='x'}, {err='y'}, false, true}", || {
            arr(vec![Reply::Int(1), Reply::Status("x".into()), err("y"), Reply::nil(), Reply::Int(1)])
        }),
        case("return {ok=5}", || arr(vec![])),
        case("return {double=0.1}", || bulk("0.10000000000000001")),
        case("return redis.status_reply('fine')", || Reply::Status("fine".into())),
        case("return redis.status_reply('a\\r\\nb')", || Reply::Status("a  b".into())),
        case("return redis.error_reply('boom')", || err("ERR boom")),
        case("return redis.error_reply('-XX boom')", || err("XX boom")),
        case("return redis.error_reply('-FOO')", || err("ERR FOO")),
        case("return redis.error_reply('')", || err("ERR ")),
        case("return redis.error_reply(5)", || err("ERR wrong number or type of arguments")),
        case("return {err='boom'}", || err("boom")),
        // Redis -> Lua
        case("return redis.call('ping')", || Reply::Status("PONG".into())),
        case("return redis.call('ping').ok", || bulk("PONG")),
        case("return type(redis.call('get', 'nokey'))", || bulk("boolean")),
        case("return redis.call('get', 'nokey')", Reply::nil),
        case("return {KEYS[1], ARGV[1], #KEYS, #ARGV}", || arr(vec![])),
        ScriptCase {
            setup: &[],
            script: "return {KEYS[1], ARGV[1], #KEYS, #ARGV}",
            keys: &["k"],
            args: &["a", "b"],
            want: || arr(vec![bulk("k"), bulk("a"), Reply::Int(1), Reply::Int(2)]),
        },
        ScriptCase {
            setup: &[&["set", "s", "x"]],
            script: "return redis.pcall('incr', KEYS[1])",
            keys: &["s"],
            args: &[],
            want: || err("ERR value is not an integer or out of range"),
        },
        ScriptCase {
            setup: &[&["set", "s", "x"]],
            script: "return {pcall(redis.call, 'incr', KEYS[1])}",
            keys: &["s"],
            args: &[],
            want: || arr(vec![Reply::nil(), bulk("ERR value is not an integer or out of range")]),
        },
        ScriptCase {
            setup: &[&["set", "s", "x"]],
            script: "local t = redis.pcall('incr', KEYS[1]); local s = ''\n\
                     for k, v in pairs(t) do s = s .. k .. '=' .. tostring(v) .. ';' end return s",
            keys: &["s"],
            args: &[],
            want: || bulk("ignore_error_stats_update=true;err=ERR value is not an integer or out of range;"),
        },
        ScriptCase {
            setup: &[&["set", "s", "x"]],
            script: "return redis.call('lpush', KEYS[1], 'a')",
            keys: &["s"],
            args: &[],
            want: || err(&format!("{WRONGTYPE} script: <sha>, on @user_script:1.")),
        },
        case("return redis.call('set', 'k', 1.5) and redis.call('get', 'k')", || bulk("1.5")),
        case("return redis.call('set', 'k', 0.1) and redis.call('get', 'k')", || bulk("0.10000000000000001")),
        case("return redis.call('set', 'k', {})", || {
            err("ERR Lua redis lib command arguments must be strings or integers script: <sha>, on @user_script:1.")
        }),
        case("return redis.call('nosuch')", || {
            err("ERR Unknown Redis command called from script script: <sha>, on @user_script:1.")
        }),
        case("return redis.call('get')", || {
            err("ERR Wrong number of args calling Redis command from script script: <sha>, on @user_script:1.")
        }),
        case("return redis.pcall('eval', 'return 1', '0')", || {
            err("ERR This Redis command is not allowed from script")
        }),
        case("return redis.pcall()", || err("ERR Please specify at least one argument for this redis lib call")),
        // Script errors
        case("error('boom')", || err("ERR user_script:1: boom script: <sha>, on @user_script:1.")),
        case("\nerror('a\\nb')", || err("ERR user_script:2: a b script: <sha>, on @user_script:2.")),
        case("error({err='MYERR boom'})", || err("MYERR boom script: <sha>, on @user_script:1.")),
        case("error({err=5})", || err("5 script: <sha>, on @user_script:1.")),
        case("return x", || {
            err("ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: <sha>, on @user_script:1.")
        }),
        case("x = 1", || {
            err("ERR user_script:1: Attempt to modify a readonly table script: <sha>, on @user_script:1.")
        }),
        case("return type(os) ", || {
            err("ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: <sha>, on @user_script:1.")
        }),
        case("return syntax error here", || {
            err("ERR Error compiling script (new function): user_script:1: '<eof>' expected near 'error'")
        }),
        case("return redis.sha1hex()", || err("ERR wrong number of arguments script: <sha>, on @user_script:1.")),
        // Libraries
        case("return redis.sha1hex('')", || bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")),
        case("return cjson.encode({1, 2, {a=1}, 'x/y', 1.5, 1e15, 123456789012, true, cjson.null})", || {
            bulk(r#"[1,2,{"a":1},"x\/y",1.5,1e+15,123456789012,true,null]"#)
        }),
        case("return cjson.encode({})", || bulk("{}")),
        case("return cjson.encode({b=1, a=2, c=3, d={}, e='q'})", || bulk(r#"{"a":2,"c":3,"b":1,"e":"q","d":{}}"#)),
        case("return type(cjson.decode('{\"a\":null}').a)", || bulk("userdata")),
        case("return cjson.decode('[1,\"x\",[true]]')[3][1]", || Reply::Int(1)),
        case("return table.getn({1, 2})", || Reply::Int(2)),
        case("return type(loadstring)", || bulk("function")),
        case("return tostring(1e15) .. ',' .. tostring(0.1)", || bulk("1e+15,0.1")),
        case("return redis.REDIS_VERSION", || bulk("7.0.15")),
    ]
}

#[test]
fn lua_conversions_and_errors() {
    for case in script_cases() {
        let mut redis = Redis::new();
        for cmd in case.setup {
            redis.apply(0, &argv(cmd));
        }
        let mut cmd = argv(&["eval", case.script, &case.keys.len().to_string()]);
        cmd.extend(argv(case.keys));
        cmd.extend(argv(case.args));
        let sha = script::sha1_hex(case.script.as_bytes());
        let want = match (case.want)() {
            Reply::Error(e) => Reply::Error(e.replace("<sha>", &sha)),
            other => other,
        };
        assert_eq!(redis.apply(0, &cmd), want, "script {:?}", case.script);
    }
}

/// Redis's math.random draws from one lrand48 sequence, never reseeded
/// between scripts: a fresh server gives 40, 85, 36 for math.random(100).
#[test]
fn math_random_follows_redis() {
    let mut redis = Redis::new();
    let draws: Vec<Reply> = (0..3).map(|_| redis.apply(0, &argv(&["eval", "return math.random(100)", "0"]))).collect();
    assert_eq!(draws, vec![Reply::Int(40), Reply::Int(85), Reply::Int(36)]);
}

#[test]
fn script_writes_before_an_error_stay() {
    let mut redis = Redis::new();
    let reply = redis.apply(0, &argv(&["eval", "redis.call('set', KEYS[1], '1') error('late')", "1", "a"]));
    assert!(reply.is_error());
    assert_eq!(redis.apply(0, &argv(&["get", "a"])), bulk("1"));
}

#[test]
fn evalsha_and_the_script_cache() {
    let mut redis = Redis::new();
    let body = "return 7";
    let sha = script::sha1_hex(body.as_bytes());
    let steps: Vec<(Vec<Vec<u8>>, Reply)> = vec![
        (argv(&["evalsha", &sha, "0"]), err("NOSCRIPT No matching script. Please use EVAL.")),
        (argv(&["script", "exists", &sha, "nope"]), arr(vec![Reply::Int(0), Reply::Int(0)])),
        (argv(&["script", "load", body]), bulk(&sha)),
        (argv(&["evalsha", &sha.to_uppercase(), "0"]), Reply::Int(7)),
        (argv(&["script", "flush"]), Reply::ok()),
        (argv(&["evalsha", &sha, "0"]), err("NOSCRIPT No matching script. Please use EVAL.")),
        (argv(&["eval", body, "0"]), Reply::Int(7)),
        (argv(&["script", "exists", &sha]), arr(vec![Reply::Int(1)])),
        (argv(&["eval", body, "1"]), err("ERR Number of keys can't be greater than number of args")),
        (argv(&["eval", body, "-1"]), err("ERR Number of keys can't be negative")),
        (argv(&["script", "foo"]), err("ERR unknown subcommand 'foo'. Try SCRIPT HELP.")),
        (argv(&["script", "load"]), err("ERR wrong number of arguments for 'script|load' command")),
    ];
    for (cmd, want) in steps {
        assert_eq!(redis.apply(0, &cmd), want, "{cmd:?}");
    }
}

/// Steps at given times, with the reply expected of each.
fn expiry_steps() -> Vec<(u64, Vec<Vec<u8>>, Reply)> {
    vec![
        (1_000, argv(&["set", "k", "v", "px", "100"]), Reply::ok()),
        (1_099, argv(&["get", "k"]), bulk("v")),
        (1_099, argv(&["pttl", "k"]), Reply::Int(1)),
        (1_100, argv(&["get", "k"]), Reply::nil()),
        (1_100, argv(&["exists", "k"]), Reply::Int(0)),
        (2_000, argv(&["set", "k", "v", "ex", "10"]), Reply::ok()),
        (2_000, argv(&["ttl", "k"]), Reply::Int(10)),
        (7_499, argv(&["ttl", "k"]), Reply::Int(5)),
        (7_500, argv(&["ttl", "k"]), Reply::Int(5)),
        (7_501, argv(&["pttl", "k"]), Reply::Int(4_499)),
        (8_000, argv(&["persist", "k"]), Reply::Int(1)),
        (8_000, argv(&["ttl", "k"]), Reply::Int(-1)),
        (8_000, argv(&["persist", "k"]), Reply::Int(0)),
        (8_000, argv(&["expire", "k", "0"]), Reply::Int(1)),
        (8_000, argv(&["ttl", "k"]), Reply::Int(-2)),
        (8_000, argv(&["rpush", "l", "a"]), Reply::Int(1)),
        (8_000, argv(&["pexpire", "l", "500"]), Reply::Int(1)),
        (8_000, argv(&["expire", "l", "100", "nx"]), Reply::Int(0)),
        (8_000, argv(&["expire", "l", "100", "gt"]), Reply::Int(1)),
        (8_000, argv(&["pexpire", "l", "500", "lt"]), Reply::Int(1)),
        (8_499, argv(&["lrange", "l", "0", "-1"]), arr(vec![bulk("a")])),
        (8_500, argv(&["rpush", "l", "b"]), Reply::Int(1)),
        (8_500, argv(&["ttl", "l"]), Reply::Int(-1)),
        (9_000, argv(&["set", "n", "1", "px", "1000"]), Reply::ok()),
        (9_100, argv(&["incr", "n"]), Reply::Int(2)),
        (9_999, argv(&["get", "n"]), bulk("2")),
        (10_000, argv(&["incr", "n"]), Reply::Int(1)),
        (10_000, argv(&["expire", "nokey", "10"]), Reply::Int(0)),
        (10_000, argv(&["set", "q", "v", "pxat", "10001"]), Reply::ok()),
        (10_001, argv(&["keys", "*"]), arr(vec![bulk("l"), bulk("n")])),
        (10_001, argv(&["dbsize"]), Reply::Int(2)),
        (10_001, argv(&["time"]), arr(vec![bulk("10"), bulk("1000")])),
        // A script sees one time for its whole run.
        (
            20_000,
            argv(&[
                "eval",
                "redis.call('set', 'e', 'v', 'px', '1') return {redis.call('get', 'e'), redis.call('time')[2]}",
                "0",
            ]),
            arr(vec![bulk("v"), bulk("0")]),
        ),
        (20_001, argv(&["get", "e"]), Reply::nil()),
    ]
}

#[test]
fn expiry_follows_the_callers_clock() {
    let mut redis = Redis::new();
    for (now_ms, cmd, want) in expiry_steps() {
        assert_eq!(redis.apply(now_ms, &cmd), want, "at {now_ms} ms: {cmd:?}");
    }
}

#[test]
fn dump_and_get_leave_out_expired_keys() {
    let mut redis = Redis::new();
    redis.apply(0, &argv(&["set", "a", "1", "px", "10"]));
    redis.apply(0, &argv(&["set", "b", "2"]));
    assert_eq!(redis.dump(9).len(), 2);
    assert_eq!(redis.expires_at_ms(9, b"a"), Some(10));
    assert_eq!(redis.dump(10).into_keys().collect::<Vec<_>>(), vec![b"b".to_vec()]);
    assert_eq!(redis.get(10, b"a"), None);
    assert_eq!(redis.get(10, b"b"), Some(&Value::String(b"2".to_vec())));
}

#[test]
fn dirty_keys_and_published_messages() {
    let mut redis = Redis::new();
    redis.take_dirty();
    redis.apply(0, &argv(&["set", "a", "1"]));
    redis.apply(0, &argv(&["rpush", "l", "x"]));
    redis.apply(0, &argv(&["get", "a"]));
    redis.apply(0, &argv(&["lpop", "l"]));
    assert_eq!(redis.take_dirty(), vec![b"a".to_vec(), b"l".to_vec()]);
    assert!(redis.take_dirty().is_empty());
    assert_eq!(redis.apply(0, &argv(&["eval", "return redis.call('publish', 'c', 'm')", "0"])), Reply::Int(0));
    assert_eq!(redis.take_published(), vec![(b"c".to_vec(), b"m".to_vec())]);
    assert!(redis.take_dirty().is_empty(), "PUBLISH writes no key");
}

#[test]
fn model_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Redis>();
}

/// A server's interpreter may have served another server before it (see
/// script.rs): nothing of that server shows. Its scripts are not loaded
/// here, `math.random` starts again, and an interpreter a script changed a
/// library table of is not lent again. (Other tests' servers share the
/// pool; none of them changes a library table.)
#[test]
fn a_lent_interpreter_shows_nothing_of_its_last_server() {
    let script = "return math.random(1000000)";
    let sha = script::sha1_hex(script.as_bytes());
    let mut first = Redis::new();
    let drawn = first.apply(0, &argv(&["EVAL", script, "0"]));
    let second = first.apply(0, &argv(&["EVALSHA", &sha, "0"]));
    assert!(matches!(drawn, Reply::Int(_)) && drawn != second, "{drawn:?} {second:?}");
    drop(first);
    for _ in 0..3 {
        let mut next = Redis::new();
        assert_eq!(next.apply(0, &argv(&["SCRIPT", "EXISTS", &sha])), arr(vec![Reply::Int(0)]));
        assert_eq!(next.apply(0, &argv(&["EVALSHA", &sha, "0"])), err(reply::NOSCRIPT));
        assert_eq!(next.apply(0, &argv(&["EVAL", script, "0"])), drawn);
        assert_eq!(next.apply(0, &argv(&["EVALSHA", &sha, "0"])), second);
    }
    let mut changer = Redis::new();
    assert_eq!(changer.apply(0, &argv(&["EVAL", "string.leaked = 1 return string.leaked", "0"])), Reply::Int(1));
    drop(changer);
    for _ in 0..20 {
        let mut next = Redis::new();
        assert_eq!(next.apply(0, &argv(&["EVAL", "return string.leaked", "0"])), Reply::nil());
    }
}
