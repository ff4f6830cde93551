//! Set commands. Members come back in byte order; Redis leaves the order
//! unspecified (a hash table's, for sets that are not all integers).

use std::collections::BTreeSet;

use super::Ctx;
use crate::reply::Reply;

type Set = BTreeSet<Vec<u8>>;

pub(crate) fn sadd(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    let set = match c.ks.write_or_create::<Set>(c.now_ms, &key) {
        Ok(set) => set,
        Err(e) => return e,
    };
    let added = c.argv[2..].iter().filter(|m| set.insert(m.to_vec())).count();
    c.ks.wrote(&key);
    Reply::Int(added as i64)
}

pub(crate) fn srem(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    let set = match c.ks.write::<Set>(c.now_ms, &key) {
        Ok(Some(set)) => set,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let removed = c.argv[2..].iter().filter(|m| set.remove(m.as_slice())).count();
    if removed > 0 {
        c.ks.wrote(&key);
    }
    Reply::Int(removed as i64)
}

pub(crate) fn smembers(c: &mut Ctx) -> Reply {
    match c.ks.read::<Set>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(None) => Reply::empty_array(),
        Ok(Some(set)) => Reply::bulks(set.iter().cloned()),
    }
}

pub(crate) fn sismember(c: &mut Ctx) -> Reply {
    let member = c.arg(2).to_vec();
    match c.ks.read::<Set>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(set) => Reply::Int(set.is_some_and(|s| s.contains(&member)) as i64),
    }
}

pub(crate) fn scard(c: &mut Ctx) -> Reply {
    match c.ks.read::<Set>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(set) => Reply::Int(set.map_or(0, |s| s.len()) as i64),
    }
}
