//! String commands.

use super::{int_arg, is, reply, Ctx};
use crate::num::parse_i64;
use crate::reply::{Reply, NOT_AN_INTEGER, OVERFLOW, SYNTAX};
use crate::value::Value;

type Bytes = Vec<u8>;

pub(crate) fn get(c: &mut Ctx) -> Reply {
    reply(get_generic(c))
}

fn get_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    Ok(match c.ks.read::<Bytes>(c.now_ms, c.arg(1))? {
        Some(v) => Reply::bulk(v.clone()),
        None => Reply::nil(),
    })
}

/// The expiry option of SET.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expire {
    None,
    Ex,
    Px,
    ExAt,
    PxAt,
    KeepTtl,
}

struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    expire: Expire,
    /// Index of the expire argument.
    expire_arg: usize,
}

/// `parseExtendedStringArgumentsOrReply` for SET: repeated options are
/// accepted, conflicting ones (NX with XX, two different expiries) are a
/// syntax error.
fn set_options(argv: &[Vec<u8>]) -> Result<SetOptions, Reply> {
    let mut o = SetOptions { nx: false, xx: false, get: false, expire: Expire::None, expire_arg: 0 };
    let mut j = 3;
    while j < argv.len() {
        let opt = &argv[j];
        let has_next = j + 1 < argv.len();
        let expiry_free = |o: &SetOptions, allowed: Expire| o.expire == Expire::None || o.expire == allowed;
        if is(opt, "nx") && !o.xx {
            o.nx = true;
        } else if is(opt, "xx") && !o.nx {
            o.xx = true;
        } else if is(opt, "get") {
            o.get = true;
        } else if is(opt, "keepttl") && expiry_free(&o, Expire::KeepTtl) {
            o.expire = Expire::KeepTtl;
        } else if let Some(kind) = timed_expire(opt).filter(|k| has_next && expiry_free(&o, *k)) {
            o.expire = kind;
            o.expire_arg = j + 1;
            j += 1;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

fn timed_expire(opt: &[u8]) -> Option<Expire> {
    [("ex", Expire::Ex), ("px", Expire::Px), ("exat", Expire::ExAt), ("pxat", Expire::PxAt)]
        .into_iter()
        .find(|(name, _)| is(opt, name))
        .map(|(_, kind)| kind)
}

/// `getExpireMillisecondsOrReply`: the absolute expiry time in ms.
fn expire_at_ms(kind: Expire, arg: &[u8], now_ms: u64) -> Result<i64, Reply> {
    let invalid = || Reply::error("ERR invalid expire time in 'set' command");
    let value = int_arg(arg)?;
    let seconds = matches!(kind, Expire::Ex | Expire::ExAt);
    if value <= 0 || (seconds && value > i64::MAX / 1000) {
        return Err(invalid());
    }
    let mut ms = if seconds { value * 1000 } else { value };
    if matches!(kind, Expire::Ex | Expire::Px) {
        ms = ms.checked_add(now_ms as i64).ok_or_else(invalid)?;
    }
    Ok(ms)
}

pub(crate) fn set(c: &mut Ctx) -> Reply {
    reply(set_generic(c))
}

fn set_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let o = set_options(c.argv)?;
    let at_ms = match o.expire {
        Expire::None | Expire::KeepTtl => None,
        kind => Some(expire_at_ms(kind, c.arg(o.expire_arg), c.now_ms)?),
    };
    let old = if o.get { Some(get_generic(c)?) } else { None };
    let key = c.arg(1).to_vec();
    let found = c.ks.exists(c.now_ms, &key);
    if (o.nx && found) || (o.xx && !found) {
        return Ok(old.unwrap_or_else(Reply::nil));
    }
    let value = Value::String(c.arg(2).to_vec());
    match at_ms.map(|at| u64::try_from(at).expect("expiry times were checked positive")) {
        None => c.ks.set(c.now_ms, &key, value, o.expire == Expire::KeepTtl),
        Some(at) => {
            c.ks.set(c.now_ms, &key, value, false);
            // A time already past leaves the key logically gone, as in Redis
            // (which keeps it until something looks at it).
            if at > c.now_ms {
                c.ks.set_expiry(c.now_ms, &key, Some(at));
            } else {
                c.ks.remove(c.now_ms, &key);
            }
        }
    }
    Ok(old.unwrap_or_else(Reply::ok))
}

pub(crate) fn setnx(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    if c.ks.exists(c.now_ms, &key) {
        return Reply::Int(0);
    }
    c.ks.set(c.now_ms, &key, Value::String(c.arg(2).to_vec()), false);
    Reply::Int(1)
}

pub(crate) fn incr(c: &mut Ctx) -> Reply {
    reply(incr_by(c, 1))
}

pub(crate) fn incrby(c: &mut Ctx) -> Reply {
    reply(int_arg(c.arg(2)).and_then(|by| incr_by(c, by)))
}

/// INCR/INCRBY: the value must be an integer string; the key keeps its TTL.
fn incr_by(c: &mut Ctx, by: i64) -> Result<Reply, Reply> {
    let key = c.arg(1).to_vec();
    let current = match c.ks.read::<Bytes>(c.now_ms, &key)? {
        None => 0,
        Some(v) => parse_i64(v).ok_or_else(|| Reply::error(NOT_AN_INTEGER))?,
    };
    let next = current.checked_add(by).ok_or_else(|| Reply::error(OVERFLOW))?;
    c.ks.set(c.now_ms, &key, Value::String(next.to_string().into_bytes()), true);
    Ok(Reply::Int(next))
}

/// Values of string keys; nil for missing keys and other types.
pub(crate) fn mget(c: &mut Ctx) -> Reply {
    let now_ms = c.now_ms;
    let items = c.argv[1..]
        .iter()
        .map(|k| match c.ks.lookup(now_ms, k) {
            Some(Value::String(v)) => Reply::bulk(v.clone()),
            _ => Reply::nil(),
        })
        .collect();
    Reply::Array(Some(items))
}
