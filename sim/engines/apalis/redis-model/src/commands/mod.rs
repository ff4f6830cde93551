//! The command table: names, arities, and the functions that run them.
//!
//! Every data command takes a [`Ctx`] (the keyspace, the clock, the
//! arguments) and returns its reply. EVAL, EVALSHA and SCRIPT need the Lua
//! engine as well; the table only marks them, and `Redis::apply` runs them.

mod hashes;
mod keys;
mod lists;
mod sets;
mod strings;
mod zsets;

use crate::keyspace::Keyspace;
use crate::num::parse_i64;
use crate::reply::{Reply, NOT_AN_INTEGER};

/// What a command needs to run.
pub(crate) struct Ctx<'a> {
    pub ks: &'a mut Keyspace,
    pub now_ms: u64,
    /// The whole command line; `argv[0]` is the name as the client sent it.
    pub argv: &'a [Vec<u8>],
}

impl<'a> Ctx<'a> {
    /// Argument `i`, borrowed from the command line rather than from the
    /// context, so the keyspace stays free to borrow mutably.
    pub fn arg(&self, i: usize) -> &'a [u8] {
        &self.argv[i]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScriptCommand {
    Eval,
    EvalSha,
    Script,
}

#[derive(Clone, Copy)]
pub(crate) enum Handler {
    Data(fn(&mut Ctx) -> Reply),
    /// Needs the script engine; Redis refuses these inside scripts.
    Scripting(ScriptCommand),
}

/// One row of Redis's command table.
pub(crate) struct Command {
    /// The lowercase name, as arity errors print it.
    pub name: &'static str,
    /// Exact argument count (name included) when positive, minimum when negative.
    pub arity: i32,
    pub handler: Handler,
}

impl Command {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i32;
        if self.arity > 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

macro_rules! data {
    ($name:literal, $arity:expr, $f:path) => {
        Command { name: $name, arity: $arity, handler: Handler::Data($f) }
    };
}

static COMMANDS: &[Command] = &[
    // keys and server
    data!("del", -2, keys::del),
    data!("exists", -2, keys::exists),
    data!("type", 2, keys::type_),
    data!("expire", -3, keys::expire),
    data!("pexpire", -3, keys::pexpire),
    data!("ttl", 2, keys::ttl),
    data!("pttl", 2, keys::pttl),
    data!("persist", 2, keys::persist),
    data!("keys", 2, keys::keys),
    data!("flushall", -1, keys::flushall),
    data!("dbsize", 1, keys::dbsize),
    data!("time", 1, keys::time),
    data!("ping", -1, keys::ping),
    data!("echo", 2, keys::echo),
    data!("select", 2, keys::select),
    data!("info", -1, keys::info),
    data!("publish", 3, keys::publish),
    // strings
    data!("get", 2, strings::get),
    data!("set", -3, strings::set),
    data!("setnx", 3, strings::setnx),
    data!("incr", 2, strings::incr),
    data!("incrby", 3, strings::incrby),
    data!("mget", -2, strings::mget),
    // lists
    data!("lpush", -3, lists::lpush),
    data!("rpush", -3, lists::rpush),
    data!("lpop", -2, lists::lpop),
    data!("rpop", -2, lists::rpop),
    data!("llen", 2, lists::llen),
    data!("lrange", 4, lists::lrange),
    data!("lrem", 4, lists::lrem),
    data!("ltrim", 4, lists::ltrim),
    data!("lindex", 3, lists::lindex),
    data!("lmove", 5, lists::lmove),
    data!("rpoplpush", 3, lists::rpoplpush),
    // sets
    data!("sadd", -3, sets::sadd),
    data!("srem", -3, sets::srem),
    data!("smembers", 2, sets::smembers),
    data!("sismember", 3, sets::sismember),
    data!("scard", 2, sets::scard),
    // sorted sets
    data!("zadd", -4, zsets::zadd),
    data!("zincrby", 4, zsets::zincrby),
    data!("zrem", -3, zsets::zrem),
    data!("zscore", 3, zsets::zscore),
    data!("zcard", 2, zsets::zcard),
    data!("zcount", 4, zsets::zcount),
    data!("zrank", 3, zsets::zrank),
    data!("zrange", -4, zsets::zrange),
    data!("zrevrange", -4, zsets::zrevrange),
    data!("zrangebyscore", -4, zsets::zrangebyscore),
    data!("zrevrangebyscore", -4, zsets::zrevrangebyscore),
    data!("zremrangebyscore", 4, zsets::zremrangebyscore),
    // hashes
    data!("hset", -4, hashes::hset),
    data!("hmset", -4, hashes::hmset),
    data!("hsetnx", 4, hashes::hsetnx),
    data!("hget", 3, hashes::hget),
    data!("hmget", -3, hashes::hmget),
    data!("hgetall", 2, hashes::hgetall),
    data!("hdel", -3, hashes::hdel),
    data!("hkeys", 2, hashes::hkeys),
    data!("hvals", 2, hashes::hvals),
    data!("hlen", 2, hashes::hlen),
    data!("hexists", 3, hashes::hexists),
    data!("hincrby", 4, hashes::hincrby),
    // scripting
    Command { name: "eval", arity: -3, handler: Handler::Scripting(ScriptCommand::Eval) },
    Command { name: "evalsha", arity: -3, handler: Handler::Scripting(ScriptCommand::EvalSha) },
    Command { name: "script", arity: -2, handler: Handler::Scripting(ScriptCommand::Script) },
];

/// The command named `name`, in any case.
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Redis 7's reply to an unknown command: the name and the first arguments,
/// each quoted and followed by a space, within 128 bytes.
pub(crate) fn unknown_command(argv: &[Vec<u8>]) -> Reply {
    let mut args = String::new();
    for arg in &argv[1..] {
        if args.len() >= 128 {
            break;
        }
        let room = 128 - args.len();
        let shown = &arg[..arg.len().min(room)];
        args.push_str(&format!("'{}' ", String::from_utf8_lossy(shown)));
    }
    let name = &argv[0][..argv[0].len().min(128)];
    let text = format!("ERR unknown command '{}', with args beginning with: {args}", String::from_utf8_lossy(name));
    Reply::Error(crate::reply::one_line_error(&text))
}

/// `getLongLongFromObjectOrReply`.
pub(crate) fn int_arg(bytes: &[u8]) -> Result<i64, Reply> {
    parse_i64(bytes).ok_or_else(|| Reply::error(NOT_AN_INTEGER))
}

/// Whether `arg` spells `word`, in any case (`strcasecmp`).
pub(crate) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// `Ok` of a `Result<Reply, Reply>`: lets handlers use `?` on errors.
pub(crate) fn reply(result: Result<Reply, Reply>) -> Reply {
    result.unwrap_or_else(|e| e)
}
