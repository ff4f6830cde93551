//! Generic key commands and the few server commands a client may send.

use super::{int_arg, is, reply, Ctx};
use crate::glob;
use crate::reply::{Reply, SYNTAX};

pub(crate) fn del(c: &mut Ctx) -> Reply {
    let removed = c.argv[1..].iter().filter(|k| c.ks.remove(c.now_ms, k)).count();
    Reply::Int(removed as i64)
}

/// Counts a key once per mention, as Redis does (`EXISTS k k` is 2).
pub(crate) fn exists(c: &mut Ctx) -> Reply {
    let found = c.argv[1..].iter().filter(|k| c.ks.exists(c.now_ms, k)).count();
    Reply::Int(found as i64)
}

pub(crate) fn type_(c: &mut Ctx) -> Reply {
    let name = c.ks.lookup(c.now_ms, c.arg(1)).map_or("none", |v| v.type_name());
    Reply::Status(name.to_string())
}

pub(crate) fn expire(c: &mut Ctx) -> Reply {
    reply(expire_generic(c, 1000))
}

pub(crate) fn pexpire(c: &mut Ctx) -> Reply {
    reply(expire_generic(c, 1))
}

#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

/// `parseExtendedExpireArgumentsOrReply`.
fn expire_flags(options: &[Vec<u8>]) -> Result<ExpireFlags, Reply> {
    let mut f = ExpireFlags::default();
    for opt in options {
        match () {
            _ if is(opt, "nx") => f.nx = true,
            _ if is(opt, "xx") => f.xx = true,
            _ if is(opt, "gt") => f.gt = true,
            _ if is(opt, "lt") => f.lt = true,
            _ => return Err(Reply::Error(format!("ERR Unsupported option {}", crate::reply::text(opt)))),
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if f.gt && f.lt {
        return Err(Reply::error("ERR GT and LT options at the same time are not compatible"));
    }
    Ok(f)
}

/// `expireGenericCommand` with a relative time in `unit_ms` units. A time
/// at or before now deletes the key.
fn expire_generic(c: &mut Ctx, unit_ms: i64) -> Result<Reply, Reply> {
    let invalid = || {
        Reply::Error(format!(
            "ERR invalid expire time in '{}' command",
            if unit_ms == 1 { "pexpire" } else { "expire" }
        ))
    };
    let flags = expire_flags(&c.argv[3..])?;
    let amount = int_arg(c.arg(2))?;
    let when_ms = amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    let now = c.now_ms as i64;
    let when_ms = when_ms.checked_add(now).ok_or_else(invalid)?;
    let key = c.arg(1).to_vec();
    if !c.ks.exists(c.now_ms, &key) {
        return Ok(Reply::Int(0));
    }
    let current = c.ks.expiry_ms(c.now_ms, &key).map(|t| t as i64);
    let refused = (flags.nx && current.is_some())
        || (flags.xx && current.is_none())
        || (flags.gt && current.is_none_or(|cur| when_ms <= cur))
        || (flags.lt && current.is_some_and(|cur| when_ms >= cur));
    if refused {
        return Ok(Reply::Int(0));
    }
    if when_ms <= now {
        c.ks.remove(c.now_ms, &key);
    } else {
        c.ks.set_expiry(c.now_ms, &key, Some(when_ms as u64));
    }
    Ok(Reply::Int(1))
}

pub(crate) fn ttl(c: &mut Ctx) -> Reply {
    ttl_generic(c, false)
}

pub(crate) fn pttl(c: &mut Ctx) -> Reply {
    ttl_generic(c, true)
}

/// -2 for no key, -1 for no expiry, else the time left (seconds rounded to
/// nearest, as Redis rounds).
fn ttl_generic(c: &mut Ctx, in_ms: bool) -> Reply {
    let key = c.arg(1);
    if !c.ks.exists(c.now_ms, key) {
        return Reply::Int(-2);
    }
    match c.ks.expiry_ms(c.now_ms, key) {
        None => Reply::Int(-1),
        Some(at) => {
            let left = at.saturating_sub(c.now_ms) as i64;
            Reply::Int(if in_ms { left } else { (left + 500) / 1000 })
        }
    }
}

pub(crate) fn persist(c: &mut Ctx) -> Reply {
    let key = c.arg(1);
    if c.ks.expiry_ms(c.now_ms, key).is_none() {
        return Reply::Int(0);
    }
    c.ks.set_expiry(c.now_ms, key, None);
    Reply::Int(1)
}

pub(crate) fn keys(c: &mut Ctx) -> Reply {
    let pattern = c.arg(1);
    let all = pattern == b"*";
    let found: Vec<Vec<u8>> = c.ks.live_keys(c.now_ms).filter(|k| all || glob::matches(pattern, k)).cloned().collect();
    Reply::bulks(found)
}

/// `FLUSHALL [SYNC|ASYNC]`.
pub(crate) fn flushall(c: &mut Ctx) -> Reply {
    match c.argv.len() {
        1 => {}
        2 if is(c.arg(1), "sync") || is(c.arg(1), "async") => {}
        _ => return Reply::error(SYNTAX),
    }
    c.ks.flush();
    Reply::ok()
}

/// Live keys only: Redis also counts expired keys its background cycle has
/// not reclaimed yet.
pub(crate) fn dbsize(c: &mut Ctx) -> Reply {
    Reply::Int(c.ks.live_keys(c.now_ms).count() as i64)
}

/// `[unix seconds, microseconds]` of the model's clock.
pub(crate) fn time(c: &mut Ctx) -> Reply {
    let secs = c.now_ms / 1000;
    let micros = (c.now_ms % 1000) * 1000;
    Reply::bulks([secs.to_string(), micros.to_string()])
}

pub(crate) fn ping(c: &mut Ctx) -> Reply {
    match c.argv.len() {
        1 => Reply::Status("PONG".to_string()),
        2 => Reply::bulk(c.arg(1)),
        _ => Reply::wrong_arity("ping"),
    }
}

pub(crate) fn echo(c: &mut Ctx) -> Reply {
    Reply::bulk(c.arg(1))
}

/// The model has only db 0; it answers as a server started with
/// `--databases 1` would.
pub(crate) fn select(c: &mut Ctx) -> Reply {
    match int_arg(c.arg(1)) {
        Err(e) => e,
        Ok(0) => Reply::ok(),
        Ok(_) => Reply::error("ERR DB index is out of range"),
    }
}

/// A minimal INFO: the server section's version line, so that clients that
/// probe the version find one.
pub(crate) fn info(_c: &mut Ctx) -> Reply {
    Reply::bulk("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n")
}

/// Recorded for the caller; nobody subscribes in the model, so 0 receivers.
pub(crate) fn publish(c: &mut Ctx) -> Reply {
    c.ks.publish(c.arg(1).to_vec(), c.arg(2).to_vec());
    Reply::Int(0)
}
