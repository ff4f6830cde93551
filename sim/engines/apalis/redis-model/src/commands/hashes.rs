//! Hash commands. Fields come back in byte order; Redis returns small hashes
//! (listpacks) in insertion order and large ones in hash-table order.

use std::collections::BTreeMap;

use super::{int_arg, reply, Ctx};
use crate::num::parse_i64;
use crate::reply::{Reply, OVERFLOW};

type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

/// HSET and HMSET: field/value pairs after the key; returns how many fields
/// were new.
fn set_pairs(c: &mut Ctx, name: &str) -> Result<i64, Reply> {
    if c.argv.len() % 2 == 1 {
        return Err(Reply::wrong_arity(name));
    }
    let key = c.arg(1).to_vec();
    let hash = c.ks.write_or_create::<Hash>(c.now_ms, &key)?;
    let mut added = 0;
    for pair in c.argv[2..].chunks(2) {
        if hash.insert(pair[0].clone(), pair[1].clone()).is_none() {
            added += 1;
        }
    }
    c.ks.wrote(&key);
    Ok(added)
}

pub(crate) fn hset(c: &mut Ctx) -> Reply {
    reply(set_pairs(c, "hset").map(Reply::Int))
}

pub(crate) fn hmset(c: &mut Ctx) -> Reply {
    reply(set_pairs(c, "hmset").map(|_| Reply::ok()))
}

pub(crate) fn hsetnx(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    let hash = match c.ks.write_or_create::<Hash>(c.now_ms, &key) {
        Ok(hash) => hash,
        Err(e) => return e,
    };
    let field = c.argv[2].clone();
    let set = !hash.contains_key(&field);
    if set {
        hash.insert(field, c.argv[3].clone());
        c.ks.wrote(&key);
    }
    Reply::Int(set as i64)
}

pub(crate) fn hget(c: &mut Ctx) -> Reply {
    let field = c.arg(2).to_vec();
    match c.ks.read::<Hash>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(hash) => Reply::Bulk(hash.and_then(|h| h.get(&field)).cloned()),
    }
}

pub(crate) fn hmget(c: &mut Ctx) -> Reply {
    let hash = match c.ks.read::<Hash>(c.now_ms, &c.argv[1]) {
        Err(e) => return e,
        Ok(hash) => hash,
    };
    let items = c.argv[2..].iter().map(|f| Reply::Bulk(hash.and_then(|h| h.get(f)).cloned())).collect();
    Reply::Array(Some(items))
}

/// HGETALL, HKEYS and HVALS: what to list of each field/value pair.
fn list(c: &mut Ctx, pick: fn(&Vec<u8>, &Vec<u8>) -> Vec<Vec<u8>>) -> Reply {
    match c.ks.read::<Hash>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(None) => Reply::empty_array(),
        Ok(Some(hash)) => Reply::bulks(hash.iter().flat_map(|(f, v)| pick(f, v))),
    }
}

pub(crate) fn hgetall(c: &mut Ctx) -> Reply {
    list(c, |f, v| vec![f.clone(), v.clone()])
}

pub(crate) fn hkeys(c: &mut Ctx) -> Reply {
    list(c, |f, _| vec![f.clone()])
}

pub(crate) fn hvals(c: &mut Ctx) -> Reply {
    list(c, |_, v| vec![v.clone()])
}

pub(crate) fn hdel(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    let hash = match c.ks.write::<Hash>(c.now_ms, &key) {
        Ok(Some(hash)) => hash,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let removed = c.argv[2..].iter().filter(|f| hash.remove(f.as_slice()).is_some()).count();
    if removed > 0 {
        c.ks.wrote(&key);
    }
    Reply::Int(removed as i64)
}

pub(crate) fn hlen(c: &mut Ctx) -> Reply {
    match c.ks.read::<Hash>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(hash) => Reply::Int(hash.map_or(0, |h| h.len()) as i64),
    }
}

pub(crate) fn hexists(c: &mut Ctx) -> Reply {
    let field = c.arg(2).to_vec();
    match c.ks.read::<Hash>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(hash) => Reply::Int(hash.is_some_and(|h| h.contains_key(&field)) as i64),
    }
}

pub(crate) fn hincrby(c: &mut Ctx) -> Reply {
    reply(hincrby_generic(c))
}

/// The increment is parsed first, then the key created if missing (so an
/// error about the field's value leaves an existing hash as it was).
fn hincrby_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let by = int_arg(c.arg(3))?;
    let key = c.arg(1).to_vec();
    let field = c.arg(2).to_vec();
    let hash = c.ks.write_or_create::<Hash>(c.now_ms, &key)?;
    let current = match hash.get(&field) {
        None => Ok(0),
        Some(v) => parse_i64(v).ok_or_else(|| Reply::error("ERR hash value is not an integer")),
    };
    // An error needs an existing field, so no empty hash is left behind.
    let next = current.and_then(|cur| cur.checked_add(by).ok_or_else(|| Reply::error(OVERFLOW)))?;
    hash.insert(field, next.to_string().into_bytes());
    c.ks.wrote(&key);
    Ok(Reply::Int(next))
}
