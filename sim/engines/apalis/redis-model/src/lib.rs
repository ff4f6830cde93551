//! A model of a Redis 7.0 server for leasesim's simulated worlds.
//!
//! [`Redis`] holds one database and a Lua 5.1 interpreter. Commands arrive
//! as argument vectors with the store time `now_ms` (the caller's clock:
//! it drives key expiry and TIME), and are answered with RESP2 [`Reply`]s
//! that match Redis 7.0.15's, error texts included. Scripts (EVAL, EVALSHA,
//! SCRIPT) run in an environment built like Redis's, so that apalis-redis's
//! Lua scripts behave as against the real server.
//!
//! Everything is deterministic: no wall clock, no OS randomness, and no
//! hash-map order reaches a reply (sets and hashes list their members in
//! byte order, where Redis leaves the order unspecified).
//!
//! tests/redis_conformance.rs checks the model against a real redis-server.
//!
//! # Where the model knowingly differs from Redis 7.0
//!
//! - Orders Redis leaves unspecified are byte order: SMEMBERS, KEYS, HKEYS,
//!   HVALS, HGETALL (Redis: insertion order for small hashes, hash-table
//!   order otherwise; numeric order for small all-integer sets).
//! - One database: SELECT of any index but 0 answers "ERR DB index is out of
//!   range", as a server started with `--databases 1` would.
//! - Expiry is lazy only. DBSIZE counts live keys; Redis also counts expired
//!   keys its background cycle has not reclaimed yet.
//! - A score of -0 is stored as 0, as in the listpack encoding of small
//!   sorted sets (large, skiplist-encoded sets keep -0 in Redis). Lex ranges
//!   over members with unequal scores (unspecified in Redis) follow the
//!   listpack walk.
//! - Only the commands apalis-redis needs, and their neighbours, exist;
//!   others (MULTI/EXEC, blocking commands, SUBSCRIBE, ...) are unknown
//!   commands. INFO is a stub.
//! - Scripts: RESP2 only (`redis.setresp(3)` is an error); no `bit`,
//!   `struct`, `cmsgpack`, `cjson.new`, and cjson settings cannot change;
//!   shebang flags are checked but not enforced; no script timeout (a script
//!   that never ends hangs `apply`); SCRIPT HELP/DEBUG are unknown. Globals
//!   cannot be created or assigned, but library tables (`string`, `redis`)
//!   are not read-only as in Redis. An error table without an `err` string
//!   crashes Redis 7.0.15; the model answers with an empty message.

mod commands;
mod glob;
mod json;
mod keyspace;
mod num;
mod reply;
mod script;
mod value;

use std::collections::BTreeMap;

pub use reply::Reply;
pub use value::{Value, ZSet};

use commands::{Ctx, Handler};
use keyspace::Keyspace;
use script::Scripting;

/// A Redis server: the keyspace (db 0), the script cache and the Lua
/// interpreter scripts run in.
#[derive(Debug)]
pub struct Redis {
    keyspace: Keyspace,
    scripting: Scripting,
}

impl Default for Redis {
    fn default() -> Redis {
        Redis::new()
    }
}

impl Redis {
    pub fn new() -> Redis {
        Redis { keyspace: Keyspace::default(), scripting: Scripting::new() }
    }

    /// Runs one command (`argv[0]` is its name, in any case) at store time
    /// `now_ms`, and returns its reply. A script runs to its end inside this
    /// call, seeing `now_ms` throughout.
    pub fn apply(&mut self, now_ms: u64, argv: &[Vec<u8>]) -> Reply {
        let Some(name) = argv.first() else {
            // Redis ignores an empty command line; there is no reply to copy.
            return Reply::error("ERR empty command");
        };
        let Some(cmd) = commands::lookup(name) else {
            return commands::unknown_command(argv);
        };
        if cmd.name == "script" && argv.len() >= 2 {
            if let Err(e) = script::check_script_subcommand(argv) {
                return e;
            }
        } else if !cmd.arity_ok(argv.len()) {
            return Reply::wrong_arity(cmd.name);
        }
        let reply = match cmd.handler {
            Handler::Data(run) => run(&mut Ctx { ks: &mut self.keyspace, now_ms, argv }),
            Handler::Scripting(kind) => self.scripting.command(kind, &mut self.keyspace, now_ms, argv),
        };
        self.check_invariants(now_ms);
        reply
    }

    /// The live keyspace at `now_ms` (expired keys left out), sorted by key.
    pub fn dump(&self, now_ms: u64) -> BTreeMap<Vec<u8>, Value> {
        self.keyspace.live_entries(now_ms).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// The live value of `key` at `now_ms`.
    pub fn get(&self, now_ms: u64, key: &[u8]) -> Option<&Value> {
        self.keyspace.peek(now_ms, key)
    }

    /// When `key` expires (ms, same clock as `now_ms`), if it is live and
    /// has an expiry.
    pub fn expires_at_ms(&self, now_ms: u64, key: &[u8]) -> Option<u64> {
        self.keyspace.peek_expiry_ms(now_ms, key)
    }

    /// Keys written (created, changed, given or cleared an expiry, deleted,
    /// or found expired) since the last call, sorted; lets a caller read back
    /// only what commands changed.
    pub fn take_dirty(&mut self) -> Vec<Vec<u8>> {
        self.keyspace.take_dirty()
    }

    /// PUBLISH messages since the last call, as (channel, message). The model
    /// has no subscribers: PUBLISH answers 0.
    pub fn take_published(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.keyspace.take_published()
    }

    fn check_invariants(&self, now_ms: u64) {
        if cfg!(debug_assertions) {
            for (key, value) in self.keyspace.live_entries(now_ms) {
                assert!(
                    !value.is_empty_collection(),
                    "key {:?} holds an empty collection",
                    String::from_utf8_lossy(key)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
