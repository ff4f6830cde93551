//! List commands.

use std::collections::VecDeque;

use super::{int_arg, is, reply, Ctx};
use crate::reply::{Reply, SYNTAX};

type List = VecDeque<Vec<u8>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

fn push(c: &mut Ctx, end: End) -> Reply {
    let key = c.arg(1).to_vec();
    let list = match c.ks.write_or_create::<List>(c.now_ms, &key) {
        Ok(list) => list,
        Err(e) => return e,
    };
    for item in &c.argv[2..] {
        match end {
            End::Left => list.push_front(item.clone()),
            End::Right => list.push_back(item.clone()),
        }
    }
    let len = list.len();
    c.ks.wrote(&key);
    Reply::Int(len as i64)
}

pub(crate) fn lpush(c: &mut Ctx) -> Reply {
    push(c, End::Left)
}

pub(crate) fn rpush(c: &mut Ctx) -> Reply {
    push(c, End::Right)
}

pub(crate) fn lpop(c: &mut Ctx) -> Reply {
    reply(pop(c, End::Left))
}

pub(crate) fn rpop(c: &mut Ctx) -> Reply {
    reply(pop(c, End::Right))
}

/// `LPOP key [count]`: without a count one element or nil; with one an
/// array, or a nil array when there is no key.
fn pop(c: &mut Ctx, end: End) -> Result<Reply, Reply> {
    if c.argv.len() > 3 {
        return Err(Reply::wrong_arity(if end == End::Left { "lpop" } else { "rpop" }));
    }
    let count = match c.argv.get(2) {
        None => None,
        Some(arg) => match int_arg(arg) {
            Ok(n) if n >= 0 => Some(n as usize),
            _ => return Err(Reply::error("ERR value is out of range, must be positive")),
        },
    };
    let key = c.arg(1).to_vec();
    let Some(list) = c.ks.write::<List>(c.now_ms, &key)? else {
        return Ok(if count.is_some() { Reply::Array(None) } else { Reply::nil() });
    };
    let take = count.unwrap_or(1).min(list.len());
    let popped: Vec<Vec<u8>> = (0..take)
        .map(|_| match end {
            End::Left => list.pop_front(),
            End::Right => list.pop_back(),
        })
        .map(|item| item.expect("took no more than the length"))
        .collect();
    if take > 0 {
        c.ks.wrote(&key);
    }
    Ok(match count {
        None => Reply::bulk(popped.into_iter().next().expect("lists are never empty")),
        Some(_) => Reply::bulks(popped),
    })
}

pub(crate) fn llen(c: &mut Ctx) -> Reply {
    match c.ks.read::<List>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(list) => Reply::Int(list.map_or(0, |l| l.len()) as i64),
    }
}

/// Redis's index arithmetic for LRANGE and LTRIM: the inclusive range
/// `start..=end` of a list of `len` elements, or None when empty.
fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

pub(crate) fn lrange(c: &mut Ctx) -> Reply {
    reply(lrange_generic(c))
}

fn lrange_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let (start, end) = (int_arg(c.arg(2))?, int_arg(c.arg(3))?);
    let Some(list) = c.ks.read::<List>(c.now_ms, c.arg(1))? else {
        return Ok(Reply::empty_array());
    };
    Ok(match clamp_range(start, end, list.len()) {
        None => Reply::empty_array(),
        Some((from, to)) => Reply::bulks(list.range(from..=to).cloned()),
    })
}

pub(crate) fn ltrim(c: &mut Ctx) -> Reply {
    reply(ltrim_generic(c))
}

fn ltrim_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let (start, end) = (int_arg(c.arg(2))?, int_arg(c.arg(3))?);
    let key = c.arg(1).to_vec();
    let Some(list) = c.ks.write::<List>(c.now_ms, &key)? else {
        return Ok(Reply::ok());
    };
    let before = list.len();
    match clamp_range(start, end, list.len()) {
        None => list.clear(),
        Some((from, to)) => {
            list.truncate(to + 1);
            list.drain(..from);
        }
    }
    if list.len() != before {
        c.ks.wrote(&key);
    }
    Ok(Reply::ok())
}

pub(crate) fn lrem(c: &mut Ctx) -> Reply {
    reply(lrem_generic(c))
}

/// Removes up to `count` copies of the element: from the head when count is
/// positive, from the tail when negative, all when 0.
fn lrem_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let count = int_arg(c.arg(2))?;
    let key = c.arg(1).to_vec();
    let element = c.arg(3).to_vec();
    let Some(list) = c.ks.write::<List>(c.now_ms, &key)? else {
        return Ok(Reply::Int(0));
    };
    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
    let matching = (0..list.len()).filter(|&i| list[i] == element);
    let mut doomed: Vec<usize> =
        if count < 0 { matching.rev().take(limit).collect() } else { matching.take(limit).collect() };
    // Remove from the back so earlier positions stay valid.
    doomed.sort_unstable_by(|a, b| b.cmp(a));
    for &i in &doomed {
        list.remove(i);
    }
    let removed = doomed.len() as i64;
    if removed > 0 {
        c.ks.wrote(&key);
    }
    Ok(Reply::Int(removed))
}

pub(crate) fn lindex(c: &mut Ctx) -> Reply {
    reply(lindex_generic(c))
}

/// The key is looked up before the index is parsed, as in Redis.
fn lindex_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let index_arg = c.arg(2).to_vec();
    let Some(list) = c.ks.read::<List>(c.now_ms, c.arg(1))? else {
        return Ok(Reply::nil());
    };
    let index = int_arg(&index_arg)?;
    let len = list.len() as i64;
    let index = if index < 0 { len + index } else { index };
    Ok(match usize::try_from(index).ok().and_then(|i| list.get(i)) {
        Some(item) => Reply::bulk(item.clone()),
        None => Reply::nil(),
    })
}

fn end_arg(arg: &[u8]) -> Result<End, Reply> {
    if is(arg, "left") {
        Ok(End::Left)
    } else if is(arg, "right") {
        Ok(End::Right)
    } else {
        Err(Reply::error(SYNTAX))
    }
}

pub(crate) fn lmove(c: &mut Ctx) -> Reply {
    reply(end_arg(c.arg(3)).and_then(|from| end_arg(c.arg(4)).and_then(|to| lmove_generic(c, from, to))))
}

pub(crate) fn rpoplpush(c: &mut Ctx) -> Reply {
    reply(lmove_generic(c, End::Right, End::Left))
}

/// Pops from the source and pushes onto the destination (which may be the
/// same list). The destination's type is checked before anything moves.
fn lmove_generic(c: &mut Ctx, from: End, to: End) -> Result<Reply, Reply> {
    let (src, dst) = (c.arg(1).to_vec(), c.arg(2).to_vec());
    if c.ks.read::<List>(c.now_ms, &src)?.is_none() {
        return Ok(Reply::nil());
    }
    c.ks.read::<List>(c.now_ms, &dst)?;
    let list = c.ks.write::<List>(c.now_ms, &src)?.expect("source was just found");
    let item = match from {
        End::Left => list.pop_front(),
        End::Right => list.pop_back(),
    }
    .expect("lists are never empty");
    if src == dst {
        // A rotation: the list is never empty in between, so the key (and
        // its expiry) stays.
        match to {
            End::Left => list.push_front(item.clone()),
            End::Right => list.push_back(item.clone()),
        }
        c.ks.wrote(&src);
        return Ok(Reply::bulk(item));
    }
    c.ks.wrote(&src);
    let target = c.ks.write_or_create::<List>(c.now_ms, &dst)?;
    match to {
        End::Left => target.push_front(item.clone()),
        End::Right => target.push_back(item.clone()),
    }
    c.ks.wrote(&dst);
    Ok(Reply::bulk(item))
}
