//! EVAL, EVALSHA and SCRIPT: one Lua 5.1 interpreter with Redis 7.0's
//! scripting environment.
//!
//! The environment, as Redis builds it:
//! - the `redis` API, `cjson`, and Redis's `pcall` and `math.random`
//!   (prelude.lua, on Rust primitives defined here);
//! - globals behind a guard: reading a missing global and assigning any
//!   global are errors. Redis marks the globals table read-only (a patch to
//!   its Lua); the model gives scripts an empty proxy whose `__index` is the
//!   real table and whose `__newindex` raises Redis's message;
//! - scripts compiled as chunks named `@user_script`, cached by SHA1;
//! - errors turned into replies by Redis's message handler: a string error
//!   becomes `ERR <message>`, and the position of the user's code that raised
//!   it is appended as ` script: <sha>, on @user_script:<line>.`.
//!
//! A script runs atomically: `apply` is synchronous and every `redis.call`
//! sees the same `now_ms`.
//!
//! Interpreters are lent, not built per server: building one (its libraries
//! and the prelude) and compiling apalis's scripts in it again was about 4%
//! of an apalis world, whose server is new in every world. The process keeps
//! a few in a pool ([`Interp::lend`]); a server borrows one and gives it back
//! when it is dropped. What a server sees is what a new interpreter would
//! show it: its own script cache (`Scripting::loaded`: NOSCRIPT until it
//! loads a script, empty again after SCRIPT FLUSH), while the compiled
//! functions are kept by the interpreter, one per script text; `math.random`
//! starts from its initial state again; and an interpreter whose global or
//! library tables a script changed (the model does not make library tables
//! read-only, as Redis does) is dropped, not lent again (`Interp::pristine`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mlua::{ChunkMode, Function, LightUserData, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::commands::{self, int_arg, is, Ctx, Handler};
use crate::json;
use crate::keyspace::Keyspace;
use crate::num::{c_double_to_i64, format_double_reply, format_g};
use crate::reply::{one_line_error, text, Reply, NOSCRIPT};

const PRELUDE: &str = include_str!("prelude.lua");
/// The prelude's chunk name; its frames are skipped when locating errors.
const PRELUDE_NAME: &str = "=leasesim";
/// Redis's chunk name for scripts; errors print it as `user_script:<line>`.
const SCRIPT_NAME: &str = "@user_script";
/// Stands in for the Lua stack limit when converting deeply nested replies.
const MAX_REPLY_DEPTH: usize = 1000;

/// A server's scripting: an interpreter lent by this thread's pool, and
/// the server's script cache.
pub(crate) struct Scripting {
    /// Always `Some` but while being dropped.
    interp: Option<Interp>,
    /// SHA1 (lowercase hex) of every script this server has loaded since it
    /// started or last flushed them; the interpreter has compiled each.
    loaded: BTreeSet<String>,
}

/// A Lua interpreter with Redis's environment, and every script compiled
/// in it.
struct Interp {
    lua: Lua,
    /// The real globals table (scripts see it through a read-only proxy).
    globals: Table,
    xpcall: Function,
    handler: Function,
    /// SHA1 (lowercase hex) -> compiled script, for every server it served.
    compiled: BTreeMap<String, Function>,
    /// `math.random`'s state.
    rand: Arc<AtomicU64>,
    /// Whether the globals and library tables are as built (see `pristine`).
    unchanged: Function,
}

/// How many interpreters the process keeps for its next servers (a
/// campaign's worlds run one per job, each on a thread of its own).
const POOL_SIZE: usize = 16;

static POOL: Mutex<Vec<Interp>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Interp>> {
    // The pool is only pushed to and popped from: a panic elsewhere cannot
    // leave it half-changed.
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting").field("cached_scripts", &self.loaded).finish()
    }
}

impl Drop for Scripting {
    fn drop(&mut self) {
        let Some(interp) = self.interp.take() else { return };
        if !interp.pristine() {
            return;
        }
        let mut pool = pool();
        if pool.len() < POOL_SIZE {
            pool.push(interp);
        }
    }
}

/// SHA1 as lowercase hex, as Redis names scripts.
pub(crate) fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

impl Interp {
    /// An interpreter as new: from this thread's pool, or built.
    fn lend() -> Interp {
        let pooled = pool().pop();
        match pooled {
            Some(interp) => {
                interp.rand.store(RAND48_INITIAL, Ordering::Relaxed);
                interp.globals.raw_set("KEYS", Value::Nil).expect("a raw set of a global");
                interp.globals.raw_set("ARGV", Value::Nil).expect("a raw set of a global");
                interp
            }
            None => Interp::build().expect("the scripting environment is built from fixed code"),
        }
    }

    /// Whether no script changed the globals, a library table or the string
    /// metatable (KEYS and ARGV aside): then the interpreter is as built, but
    /// for its compiled scripts, and may serve another server.
    fn pristine(&self) -> bool {
        self.unchanged.call::<bool>(()).unwrap_or(false)
    }

    fn build() -> mlua::Result<Interp> {
        // Base (always loaded), table, string and math: what Redis exposes
        // of Lua's own libraries (it loads debug too, then removes it).
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::new())?;
        let globals = lua.globals();
        let prim = primitives(&lua)?;
        let raising: Table =
            lua.load(PRELUDE).set_name(PRELUDE_NAME).set_environment(globals.clone()).call(prim.clone())?;
        for library in ["redis", "cjson", "math"] {
            let target: Table = globals.raw_get(library)?;
            for pair in raising.raw_get::<Table>(library)?.pairs::<String, Function>() {
                let (name, logic) = pair?;
                target.raw_set(name, c_wrapper(&lua, logic)?)?;
            }
        }
        let xpcall: Function = globals.raw_get("xpcall")?;
        let handler = error_handler(&lua, globals.raw_get("tostring")?)?;
        protect_globals(&lua, &globals)?;
        let unchanged = watch_globals(&lua, &globals)?;
        let rand = prim_rand(&prim)?;
        Ok(Interp { lua, globals, xpcall, handler, compiled: BTreeMap::new(), rand, unchanged })
    }

    /// `body` compiled (once per text) as Redis compiles a script.
    fn compile(&mut self, sha: &str, body: &[u8]) -> Result<Function, Reply> {
        if let Some(f) = self.compiled.get(sha) {
            return Ok(f.clone());
        }
        let code = strip_shebang(body)?;
        let compiled = self.lua.load(code).set_name(SCRIPT_NAME).set_mode(ChunkMode::Text).into_function();
        let func = compiled.map_err(|e| {
            let message = match &e {
                mlua::Error::SyntaxError { message, .. } => message.clone(),
                other => other.to_string(),
            };
            Reply::Error(one_line_error(&format!("ERR Error compiling script (new function): {message}")))
        })?;
        self.compiled.insert(sha.to_string(), func.clone());
        Ok(func)
    }
}

impl Scripting {
    pub(crate) fn new() -> Scripting {
        Scripting { interp: Some(Interp::lend()), loaded: BTreeSet::new() }
    }

    fn interp(&mut self) -> &mut Interp {
        self.interp.as_mut().expect("an interpreter until dropped")
    }

    /// EVAL, EVALSHA or SCRIPT, already past the arity check.
    pub(crate) fn command(
        &mut self,
        kind: commands::ScriptCommand,
        ks: &mut Keyspace,
        now_ms: u64,
        argv: &[Vec<u8>],
    ) -> Reply {
        match kind {
            commands::ScriptCommand::Eval => self.eval(ks, now_ms, argv, false),
            commands::ScriptCommand::EvalSha => self.eval(ks, now_ms, argv, true),
            commands::ScriptCommand::Script => self.script(argv),
        }
    }

    fn eval(&mut self, ks: &mut Keyspace, now_ms: u64, argv: &[Vec<u8>], by_sha: bool) -> Reply {
        if by_sha && argv[1].len() != 40 {
            return Reply::error(NOSCRIPT);
        }
        let numkeys = match int_arg(&argv[2]) {
            Ok(n) => n,
            Err(e) => return e,
        };
        if numkeys > argv.len() as i64 - 3 {
            return Reply::error("ERR Number of keys can't be greater than number of args");
        }
        if numkeys < 0 {
            return Reply::error("ERR Number of keys can't be negative");
        }
        let sha = if by_sha { text(&argv[1]).to_ascii_lowercase() } else { sha1_hex(&argv[1]) };
        let func = if self.loaded.contains(&sha) {
            self.interp().compiled[&sha].clone()
        } else if by_sha {
            return Reply::error(NOSCRIPT);
        } else {
            match self.create(&argv[1]) {
                Ok((_, f)) => f,
                Err(e) => return e,
            }
        };
        let split = 3 + numkeys as usize;
        self.run(ks, now_ms, &sha, func, &argv[3..split], &argv[split..])
    }

    /// SCRIPT LOAD / EXISTS / FLUSH / KILL; the subcommand was checked.
    fn script(&mut self, argv: &[Vec<u8>]) -> Reply {
        let sub = &argv[1];
        if is(sub, "load") {
            match self.create(&argv[2]) {
                Ok((sha, _)) => Reply::bulk(sha),
                Err(e) => e,
            }
        } else if is(sub, "exists") {
            let found =
                argv[2..].iter().map(|sha| Reply::Int(self.loaded.contains(&text(sha).to_ascii_lowercase()) as i64));
            Reply::Array(Some(found.collect()))
        } else if is(sub, "flush") {
            let ok = match argv.len() {
                2 => true,
                3 => is(&argv[2], "sync") || is(&argv[2], "async"),
                _ => false,
            };
            if !ok {
                return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
            // Redis starts a new interpreter; forgetting the scripts is what
            // scripts can observe (global state cannot be written). The
            // interpreter keeps them compiled, for when they are loaded again.
            self.loaded.clear();
            let _ = self.interp().lua.gc_collect();
            Reply::ok()
        } else {
            debug_assert!(is(sub, "kill"), "script_subcommand admits only these");
            Reply::error("NOTBUSY No scripts in execution right now.")
        }
    }

    /// `luaCreateFunction`: compiles `body` and caches it under its SHA1.
    fn create(&mut self, body: &[u8]) -> Result<(String, Function), Reply> {
        let sha = sha1_hex(body);
        let func = self.interp().compile(&sha, body)?;
        self.loaded.insert(sha.clone());
        Ok((sha, func))
    }

    /// Runs a compiled script with KEYS and ARGV under the error handler.
    fn run(
        &mut self,
        ks: &mut Keyspace,
        now_ms: u64,
        sha: &str,
        func: Function,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> Reply {
        let me = self.interp();
        // The keyspace is lent to the interpreter for the run, and `call`
        // (built once per interpreter) finds it there: no function is
        // built and torn down per run, as a scoped borrow would need.
        me.lua.set_app_data(Running { ks: std::mem::take(ks), now_ms });
        let outcome = (|| {
            set_keys_argv(&me.lua, &me.globals, keys, args)?;
            let (ok, value): (bool, Value) = me.xpcall.call((func, me.handler.clone()))?;
            Ok::<_, mlua::Error>(if ok { lua_to_reply(&value, 0) } else { script_error_reply(&me.lua, &value, sha) })
        })();
        *ks = me.lua.remove_app_data::<Running>().expect("lent for the run above").ks;
        // Only a failure of the interpreter itself (out of memory) lands here.
        outcome.unwrap_or_else(|e| Reply::Error(one_line_error(&format!("ERR Error running script {sha}, {e}"))))
    }
}

/// The keyspace a script run has, lent to its interpreter (app data) for
/// the run.
struct Running {
    ks: Keyspace,
    now_ms: u64,
}

/// `redis.call` and `redis.pcall`'s primitive: runs a command on the
/// keyspace lent to the interpreter. Outside a run there is none (a script
/// cannot keep the function for later: `prim` is the prelude's own).
fn call_lent(lua: &Lua, args: MultiValue) -> mlua::Result<(bool, Value)> {
    let Some(mut running) = lua.app_data_mut::<Running>() else {
        return Err(mlua::Error::runtime("redis.call outside a script run"));
    };
    let Running { ks, now_ms } = &mut *running;
    redis_call(lua, ks, *now_ms, args)
}

/// What a prelude function in `raising` asks its C wrapper to do with the
/// value it returns (see prelude.lua).
const STATUS_OK: i64 = 0;
const STATUS_RAISE: i64 = 1;

/// Wraps `logic` (which returns status, value) in a C function, as Redis
/// implements these functions: C functions keep their caller's frame when
/// tail-called, and errors they raise are located at their caller.
fn c_wrapper(lua: &Lua, logic: Function) -> mlua::Result<Function> {
    // SAFETY: pushes one C closure capturing the function `exec_raw` pushed
    // as its argument; `raise_or_return` only uses the Lua C API on its own
    // stack.
    unsafe { lua.exec_raw(logic, |state| mlua::ffi::lua_pushcclosure(state, raise_or_return, 1)) }
}

/// Calls the closure's upvalue with this call's arguments, then returns the
/// value, raises it (a Redis error table), or raises it as `luaL_error`
/// does: prefixed with the position of the code that called us.
///
/// Raising longjmps over this frame, which holds nothing to drop.
unsafe extern "C-unwind" fn raise_or_return(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: standard C API use on this function's own stack frame: the
    // arguments, the upvalue, then the two results of the call.
    unsafe {
        let nargs = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, nargs, 2);
        let status = ffi::lua_tointeger(state, 1) as i64;
        if status == STATUS_OK {
            return 1;
        }
        if status != STATUS_RAISE {
            ffi::luaL_where(state, 1);
            ffi::lua_insert(state, -2);
            ffi::lua_concat(state, 2);
        }
        ffi::lua_error(state)
    }
}

/// Sets the globals `KEYS` and `ARGV`, arrays of strings, in one call into the
/// interpreter: built element by element through mlua's API, they were 8%
/// of an apalis world (a lock, a registry reference and a growing table per
/// element).
fn set_keys_argv(lua: &Lua, globals: &Table, keys: &[Vec<u8>], args: &[Vec<u8>]) -> mlua::Result<()> {
    use mlua::ffi;
    // SAFETY: runs protected (`exec_raw`), so a memory error unwinds to
    // mlua; the stack holds the globals table (index 1), a name and one
    // array, and one string at a time: well inside LUA_MINSTACK.
    unsafe {
        lua.exec_raw::<()>(globals, |state| {
            for (name, items) in [(c"KEYS", keys), (c"ARGV", args)] {
                ffi::lua_pushstring(state, name.as_ptr());
                let len = std::ffi::c_int::try_from(items.len()).expect("a command's words fit a C int");
                ffi::lua_createtable(state, len, 0);
                for (i, item) in items.iter().enumerate() {
                    ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
                    ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
                }
                ffi::lua_rawset(state, 1);
            }
            ffi::lua_settop(state, 0);
        })
    }
}

/// A `#!lua [flags=...]` first line selects the engine and script flags; the
/// flags are validated, not enforced. The line is dropped but its newline
/// kept, so line numbers stay those of the body.
fn strip_shebang(body: &[u8]) -> Result<&[u8], Reply> {
    if !body.starts_with(b"#!") {
        return Ok(body);
    }
    let line_end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let mut parts = body[..line_end].split(|&b| b == b' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or_default();
    if engine != b"#!lua" {
        return Err(Reply::Error(format!("ERR Unexpected engine in script shebang: {}", text(engine))));
    }
    for part in parts {
        let Some(flags) = part.strip_prefix(b"flags=") else {
            return Err(Reply::Error(format!("ERR Unknown lua shebang option: {}", text(part))));
        };
        for flag in flags.split(|&b| b == b',').filter(|f| !f.is_empty()) {
            let known = ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];
            if !known.iter().any(|k| k.as_bytes() == flag) {
                return Err(Reply::Error(format!("ERR Unexpected flag in script shebang: {}", text(flag))));
            }
        }
    }
    Ok(&body[line_end..])
}

/// `luaPushErrorBuff`: a Redis error table. `buffer` is either
/// `-CODE message` or a bare message (which gets the code ERR).
fn error_table(lua: &Lua, buffer: &[u8], ignore_stats: bool) -> mlua::Result<Table> {
    let (code, msg): (&[u8], &[u8]) = match buffer.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", buffer),
    };
    let is_crlf = |b: &u8| *b == b'\r' || *b == b'\n';
    let start = msg.iter().position(|b| !is_crlf(b)).unwrap_or(msg.len());
    let end = msg.iter().rposition(|b| !is_crlf(b)).map_or(start, |i| i + 1);
    let mut text = [code, b" ", &msg[start..end]].concat();
    // The C strings involved end at the first NUL.
    if let Some(nul) = text.iter().position(|&b| b == 0) {
        text.truncate(nul);
    }
    let t = lua.create_table()?;
    t.set("err", lua.create_string(&text)?)?;
    if ignore_stats {
        t.set("ignore_error_stats_update", true)?;
    }
    Ok(t)
}

/// The Rust side of `redis.call`/`redis.pcall`: (failed, reply as Lua value).
fn redis_call(lua: &Lua, ks: &mut Keyspace, now_ms: u64, args: MultiValue) -> mlua::Result<(bool, Value)> {
    let failure = |t: Table| Ok((true, Value::Table(t)));
    if args.is_empty() {
        return failure(error_table(lua, b"Please specify at least one argument for this redis lib call", false)?);
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in &args {
        match arg {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            // Redis formats numbers itself, with more digits than Lua's %.14g.
            Value::Integer(_) | Value::Number(_) => {
                argv.push(format_g(json::number_of(arg).expect("a number"), 17).into_bytes())
            }
            _ => {
                return failure(error_table(
                    lua,
                    b"Lua redis lib command arguments must be strings or integers",
                    false,
                )?)
            }
        }
    }
    let reply = match script_command(&argv) {
        Err(message) => return failure(error_table(lua, message.as_bytes(), true)?),
        Ok(run) => run(&mut Ctx { ks, now_ms, argv: &argv }),
    };
    match reply {
        Reply::Error(e) => failure(error_table(lua, &[b"-", e.as_bytes()].concat(), true)?),
        other => Ok((false, reply_to_lua(lua, other)?)),
    }
}

/// `scriptCall`'s checks: the command must exist, have the right arity and
/// be allowed in scripts.
fn script_command(argv: &[Vec<u8>]) -> Result<fn(&mut Ctx) -> Reply, &'static str> {
    let unknown = "Unknown Redis command called from script";
    let cmd = commands::lookup(&argv[0]).ok_or(unknown)?;
    let arity_ok = match (cmd.handler, argv.get(1)) {
        (Handler::Scripting(commands::ScriptCommand::Script), Some(sub)) => {
            let (_, arity) = script_subcommand(sub).ok_or(unknown)?;
            arity_fits(arity, argv.len())
        }
        _ => cmd.arity_ok(argv.len()),
    };
    if !arity_ok {
        return Err("Wrong number of args calling Redis command from script");
    }
    match cmd.handler {
        Handler::Data(run) => Ok(run),
        Handler::Scripting(_) => Err("This Redis command is not allowed from script"),
    }
}

fn arity_fits(arity: i32, argc: usize) -> bool {
    let argc = argc as i32;
    if arity > 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// SCRIPT's subcommands the model implements: full name and arity.
pub(crate) fn script_subcommand(name: &[u8]) -> Option<(&'static str, i32)> {
    [("script|load", 3), ("script|exists", -3), ("script|flush", -2), ("script|kill", 2)]
        .into_iter()
        .find(|(full, _)| name.eq_ignore_ascii_case(&full.as_bytes()[7..]))
}

/// Checks SCRIPT's subcommand the way Redis's command lookup does.
pub(crate) fn check_script_subcommand(argv: &[Vec<u8>]) -> Result<(), Reply> {
    let Some((full, arity)) = script_subcommand(&argv[1]) else {
        let sub = text(&argv[1][..argv[1].len().min(128)]);
        let container = text(&argv[0]).to_ascii_uppercase();
        return Err(Reply::Error(one_line_error(&format!("ERR unknown subcommand '{sub}'. Try {container} HELP."))));
    };
    if arity_fits(arity, argv.len()) {
        Ok(())
    } else {
        Err(Reply::wrong_arity(full))
    }
}

/// Redis reply -> Lua value, as Redis documents it: integers to numbers,
/// bulk strings to strings, nil bulk and nil array to false, arrays to
/// tables, status to {ok=...}, errors to {err=...}.
fn reply_to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(Some(b)) => Value::String(lua.create_string(&b)?),
        Reply::Bulk(None) | Reply::Array(None) => Value::Boolean(false),
        Reply::Array(Some(items)) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.set(i + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", lua.create_string(&s)?)?;
            Value::Table(t)
        }
        Reply::Error(e) => Value::Table(error_table(lua, &[b"-", e.as_bytes()].concat(), true)?),
    })
}

/// Lua value -> Redis reply (`luaReplyToRedisReply`, RESP2): numbers to
/// integers (truncated), strings to bulk, true to 1, false and nil to nil,
/// tables by their `err`/`ok`/`double`/`big_number`/`verbatim_string`/`map`/
/// `set` field, else as an array up to the first nil.
fn lua_to_reply(value: &Value, depth: usize) -> Reply {
    if depth > MAX_REPLY_DEPTH {
        return Reply::error("ERR reached lua stack limit");
    }
    match value {
        Value::String(s) => Reply::bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(c_double_to_i64(*n)),
        Value::Table(t) => {
            table_to_reply(t, depth).unwrap_or_else(|e| Reply::Error(one_line_error(&format!("ERR {e}"))))
        }
        _ => Reply::nil(),
    }
}

fn table_to_reply(t: &Table, depth: usize) -> mlua::Result<Reply> {
    let field = |name: &str| t.raw_get::<Value>(name);
    if let Value::String(err) = field("err")? {
        let err: Value = t.get("err").unwrap_or(Value::String(err));
        return Ok(Reply::Error(error_text(&err)));
    }
    if let Value::String(ok) = field("ok")? {
        return Ok(Reply::Status(text(&ok.as_bytes()).replace(['\r', '\n'], " ")));
    }
    if let Some(d) = json::number_of(&field("double")?) {
        return Ok(Reply::bulk(format_double_reply(d)));
    }
    if let Value::String(n) = field("big_number")? {
        return Ok(Reply::bulk(
            n.as_bytes().iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect::<Vec<u8>>(),
        ));
    }
    if let Value::Table(v) = field("verbatim_string")? {
        if let (Value::String(_), Value::String(s)) = (v.raw_get::<Value>("format")?, v.raw_get::<Value>("string")?) {
            return Ok(Reply::bulk(s.as_bytes().to_vec()));
        }
    }
    if let Value::Table(map) = field("map")? {
        let mut items = Vec::new();
        for pair in map.pairs::<Value, Value>() {
            let (k, v) = pair?;
            items.push(lua_to_reply(&k, depth + 1));
            items.push(lua_to_reply(&v, depth + 1));
        }
        return Ok(Reply::Array(Some(items)));
    }
    if let Value::Table(set) = field("set")? {
        let items = set.pairs::<Value, Value>().map(|p| p.map(|(k, _)| lua_to_reply(&k, depth + 1)));
        return Ok(Reply::Array(Some(items.collect::<mlua::Result<_>>()?)));
    }
    let mut items = Vec::new();
    for i in 1.. {
        let item: Value = t.raw_get(i)?;
        if item.is_nil() {
            break;
        }
        items.push(lua_to_reply(&item, depth + 1));
    }
    Ok(Reply::Array(Some(items)))
}

/// An error reply's text from a Lua string or number: `-<text>`, made one
/// protocol line (a leading `-` in the text stays, as Redis sends `--...`).
fn error_text(value: &Value) -> String {
    let raw = match value {
        Value::String(s) => text(&s.as_bytes()),
        other => json::number_of(other).map_or_else(String::new, |n| format_g(n, 14)),
    };
    one_line_error(&raw)
}

/// The reply for a script that raised an error: the handler made it a
/// table with `err`, `source` and `line` (see `error_handler`).
fn script_error_reply(lua: &Lua, value: &Value, sha: &str) -> Reply {
    let Value::Table(t) = value else {
        let msg = lua
            .coerce_string(value.clone())
            .ok()
            .flatten()
            .map_or("execution failure".to_string(), |s| text(&s.as_bytes()));
        return Reply::Error(one_line_error(&format!("ERR Error running script {sha}, {msg}")));
    };
    let string_field = |name: &str| -> Option<String> {
        match t.get::<Value>(name).ok()? {
            v @ (Value::String(_) | Value::Integer(_) | Value::Number(_)) => Some(error_text(&v)),
            _ => None,
        }
    };
    // Redis crashes on an error table without a string `err`; the model
    // answers with an empty message.
    let mut message = string_field("err").unwrap_or_default();
    if let (Some(source), Some(line)) = (string_field("source"), string_field("line")) {
        message.push_str(&format!(" script: {sha}, on {source}:{line}."));
    }
    Reply::Error(one_line_error(&message))
}

/// Redis's `__redis__err__handler`: makes every error a table
/// `{err=..., source=..., line=...}`; a non-table error `e` becomes
/// `{err="ERR " .. tostring(e)}`. The position is that of the function that
/// raised the error, or of its caller when that was a C function (the
/// prelude's Lua wrappers count as C functions here).
fn error_handler(lua: &Lua, tostring: Function) -> mlua::Result<Function> {
    lua.create_function(move |lua, err: Value| {
        let table = match err {
            Value::Table(t) => t,
            other => {
                let described: mlua::String = tostring.call(other)?;
                let t = lua.create_table()?;
                t.set("err", lua.create_string([&b"ERR "[..], &described.as_bytes()].concat())?)?;
                t
            }
        };
        if let Some((source, line)) = error_origin(lua) {
            table.set("source", source)?;
            table.set("line", line)?;
        }
        Ok(table)
    })
}

/// The user code position an error is reported at; see `error_handler`.
fn error_origin(lua: &Lua) -> Option<(String, i64)> {
    let frame = |level: usize| {
        lua.inspect_stack(level, |d| {
            let source = d.source();
            (
                source.what,
                source.source.map(|s| s.into_owned()).unwrap_or_default(),
                d.current_line().map_or(-1, |l| l as i64),
            )
        })
    };
    // Level 0 is this handler; level 1 raised the error.
    let mut level = 1;
    if frame(level)?.0 == "C" {
        level += 1;
    }
    loop {
        let (_, source, line) = frame(level)?;
        if source != PRELUDE_NAME {
            return Some((source, line));
        }
        level += 1;
    }
}

/// Scripts see the globals through a proxy: reads fall through to the real
/// table (a missing name is an error), writes are refused. The interpreter's
/// globals become the proxy, so chunks loaded later see only it.
fn protect_globals(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let guard: Table = lua
        .load(
            r#"
            local globals, error, tostring = ...
            setmetatable(globals, { __index = function(_, name)
                error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
            end })
            local proxy = setmetatable({}, {
                __index = globals,
                __newindex = function() error('Attempt to modify a readonly table', 2) end,
                __metatable = false,
            })
            rawset(globals, '_G', proxy)
            return proxy
            "#,
        )
        .set_name(PRELUDE_NAME)
        .call((globals.clone(), globals.raw_get::<Function>("error")?, globals.raw_get::<Function>("tostring")?))?;
    lua.set_globals(guard)
}

/// A function answering whether the real globals table, every table it
/// holds, and the string metatable still hold what they hold now (one level
/// deep, by identity; KEYS and ARGV aside), and the string metatable is
/// still the same table.
fn watch_globals(lua: &Lua, globals: &Table) -> mlua::Result<Function> {
    lua.load(
        r#"
        local globals, rawget, rawequal, next, type, getmetatable = ...
        local ignored = { KEYS = true, ARGV = true }
        local function fields(t)
            local copy = {}
            for k, v in next, t do
                if not ignored[k] then copy[k] = v end
            end
            return copy
        end
        local function same(t, copy)
            for k, v in next, t do
                if not ignored[k] and not rawequal(copy[k], v) then return false end
            end
            for k, v in next, copy do
                if not rawequal(rawget(t, k), v) then return false end
            end
            return true
        end
        local string_meta = getmetatable('')
        local watched = { { globals, fields(globals) }, { string_meta, fields(string_meta) } }
        for _, v in next, globals do
            if type(v) == 'table' then watched[#watched + 1] = { v, fields(v) } end
        end
        return function()
            for i = 1, #watched do
                if not same(watched[i][1], watched[i][2]) then return false end
            end
            return rawequal(getmetatable(''), string_meta)
        end
        "#,
    )
    .set_name(PRELUDE_NAME)
    .call((
        globals.clone(),
        globals.raw_get::<Function>("rawget")?,
        globals.raw_get::<Function>("rawequal")?,
        globals.raw_get::<Function>("next")?,
        globals.raw_get::<Function>("type")?,
        globals.raw_get::<Function>("getmetatable")?,
    ))
}

/// `math.random`'s state, as `primitives` made it.
fn prim_rand(prim: &Table) -> mlua::Result<Arc<AtomicU64>> {
    let state: mlua::AnyUserData = prim.raw_get("rand_state")?;
    let state = state.borrow::<RandState>()?;
    Ok(Arc::clone(&state.0))
}

/// `math.random`'s state, kept in the primitives table so the interpreter
/// can start it again.
struct RandState(Arc<AtomicU64>);

impl mlua::UserData for RandState {}

/// The Rust functions behind the prelude: the per-run `call` slot, error
/// tables, SHA1, cjson and Redis's random generator.
fn primitives(lua: &Lua) -> mlua::Result<Table> {
    let prim = lua.create_table()?;
    prim.set("null", Value::LightUserData(LightUserData(std::ptr::null_mut())))?;
    prim.set("call", lua.create_function(call_lent)?)?;
    prim.set("error_table", lua.create_function(|lua, text: mlua::String| error_table(lua, &text.as_bytes(), false))?)?;
    prim.set("sha1hex", lua.create_function(|_, text: mlua::String| Ok(sha1_hex(&text.as_bytes())))?)?;
    prim.set(
        "json_encode",
        lua.create_function(|lua, value: Value| {
            Ok(match json::encode(&value) {
                Ok(bytes) => (true, Value::String(lua.create_string(&bytes)?)),
                Err(message) => (false, Value::String(lua.create_string(&message)?)),
            })
        })?,
    )?;
    prim.set(
        "json_decode",
        lua.create_function(|lua, text: mlua::String| {
            Ok(match json::decode(lua, &text.as_bytes()) {
                Ok(value) => (true, value),
                Err(message) => (false, Value::String(lua.create_string(&message)?)),
            })
        })?,
    )?;
    prim.set("acl_check", lua.create_function(acl_check)?)?;
    let state = Arc::new(AtomicU64::new(RAND48_INITIAL));
    prim.set("rand_state", RandState(Arc::clone(&state)))?;
    let next = Arc::clone(&state);
    prim.set("random", lua.create_function(move |_, ()| Ok(rand48_unit(&next)))?)?;
    prim.set(
        "randomseed",
        lua.create_function(move |_, seed: i64| {
            state.store(rand48_seeded(seed as i32), Ordering::Relaxed);
            Ok(())
        })?,
    )?;
    Ok(prim)
}

/// `redis.acl_check_cmd`: (failed, error table) or (false, known command?).
fn acl_check(lua: &Lua, args: MultiValue) -> mlua::Result<(bool, Value)> {
    let mut argv = Vec::new();
    for arg in &args {
        match arg {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(_) | Value::Number(_) => argv.push(Vec::new()),
            _ => {
                let t = error_table(lua, b"Lua redis lib command arguments must be strings or integers", false)?;
                return Ok((true, Value::Table(t)));
            }
        }
    }
    let Some(name) = argv.first() else {
        let t = error_table(lua, b"Please specify at least one argument for this redis lib call", false)?;
        return Ok((true, Value::Table(t)));
    };
    let known = match commands::lookup(name) {
        None => false,
        Some(cmd) if cmd.name == "script" && argv.len() >= 2 => script_subcommand(&argv[1]).is_some(),
        Some(_) => true,
    };
    Ok((false, Value::Boolean(known)))
}

/// redisLrand48's state before any seeding: lrand48's default seed.
const RAND48_INITIAL: u64 = 0x1234_ABCD_330E;

/// The next `(lrand48() % INT32_MAX) / INT32_MAX`, as Redis's math.random draws.
fn rand48_unit(state: &AtomicU64) -> f64 {
    let x = state.load(Ordering::Relaxed);
    let next = x.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & ((1 << 48) - 1);
    state.store(next, Ordering::Relaxed);
    let drawn = next >> 17;
    (drawn % i32::MAX as u64) as f64 / i32::MAX as f64
}

/// `redisSrand48(seed)`.
fn rand48_seeded(seed: i32) -> u64 {
    (u64::from(seed as u32) << 16) | 0x330E
}
