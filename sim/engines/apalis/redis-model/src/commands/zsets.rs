//! Sorted-set commands, following t_zset.c's argument handling order.

use super::{int_arg, is, reply, Ctx};
use crate::num::{format_double_reply, parse_f64_strict, strtod};
use crate::reply::{Reply, NOT_A_FLOAT, RANGE_NOT_FLOAT, SYNTAX};
use crate::value::ZSet;

#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

pub(crate) fn zadd(c: &mut Ctx) -> Reply {
    reply(zadd_generic(c, false))
}

/// ZINCRBY is ZADD with INCR set; its option parsing is ZADD's (so
/// `ZINCRBY z nx m` is a syntax error, as in Redis).
pub(crate) fn zincrby(c: &mut Ctx) -> Reply {
    reply(zadd_generic(c, true))
}

/// Options, then the score/member pairs (all scores parsed before anything
/// changes), then the key.
fn zadd_generic(c: &mut Ctx, incr: bool) -> Result<Reply, Reply> {
    let mut f = AddFlags { incr, ..AddFlags::default() };
    let mut first = 2;
    while first < c.argv.len() {
        let opt = c.arg(first);
        match () {
            _ if is(opt, "nx") => f.nx = true,
            _ if is(opt, "xx") => f.xx = true,
            _ if is(opt, "ch") => f.ch = true,
            _ if is(opt, "incr") => f.incr = true,
            _ if is(opt, "gt") => f.gt = true,
            _ if is(opt, "lt") => f.lt = true,
            _ => break,
        }
        first += 1;
    }
    let pairs = &c.argv[first..];
    if pairs.is_empty() || pairs.len() % 2 == 1 {
        return Err(Reply::error(SYNTAX));
    }
    if f.nx && f.xx {
        return Err(Reply::error("ERR XX and NX options at the same time are not compatible"));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(Reply::error("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if f.incr && pairs.len() > 2 {
        return Err(Reply::error("ERR INCR option supports a single increment-element pair"));
    }
    let scores = pairs
        .chunks(2)
        .map(|p| parse_f64_strict(&p[0]).ok_or_else(|| Reply::error(NOT_A_FLOAT)))
        .collect::<Result<Vec<f64>, Reply>>()?;
    let key = c.arg(1).to_vec();
    if c.ks.read::<ZSet>(c.now_ms, &key)?.is_none() && f.xx {
        return Ok(if f.incr { Reply::nil() } else { Reply::Int(0) });
    }
    let z = c.ks.write_or_create::<ZSet>(c.now_ms, &key)?;
    let mut outcome = Outcome::default();
    let mut result = Ok(());
    for (pair, score) in pairs.chunks(2).zip(scores) {
        result = add_one(z, &f, &pair[1], score, &mut outcome);
        if result.is_err() {
            break;
        }
    }
    // A set created here always gained its first member.
    if outcome.added + outcome.updated > 0 {
        c.ks.wrote(&key);
    }
    result?;
    Ok(if f.incr {
        outcome
            .last_score
            .filter(|_| outcome.processed > 0)
            .map_or_else(Reply::nil, |s| Reply::bulk(format_double_reply(s)))
    } else {
        Reply::Int(if f.ch { outcome.added + outcome.updated } else { outcome.added })
    })
}

#[derive(Default)]
struct Outcome {
    added: i64,
    updated: i64,
    processed: i64,
    last_score: Option<f64>,
}

/// `zsetAdd`: one member under the flags. A NaN result of INCR is an error.
fn add_one(z: &mut ZSet, f: &AddFlags, member: &[u8], score: f64, out: &mut Outcome) -> Result<(), Reply> {
    match z.score(member) {
        Some(current) => {
            if f.nx {
                return Ok(());
            }
            let score = if f.incr { score + current } else { score };
            if score.is_nan() {
                return Err(Reply::error("ERR resulting score is not a number (NaN)"));
            }
            if (f.lt && score >= current) || (f.gt && score <= current) {
                return Ok(());
            }
            out.processed += 1;
            out.last_score = Some(score);
            // Equal scores (including 0 and -0) leave the member untouched.
            if score != current {
                z.insert(member.to_vec(), score);
                out.updated += 1;
            }
        }
        None if f.xx => {}
        None => {
            z.insert(member.to_vec(), score);
            out.added += 1;
            out.processed += 1;
            out.last_score = Some(score);
        }
    }
    Ok(())
}

pub(crate) fn zrem(c: &mut Ctx) -> Reply {
    let key = c.arg(1).to_vec();
    let z = match c.ks.write::<ZSet>(c.now_ms, &key) {
        Ok(Some(z)) => z,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let removed = c.argv[2..].iter().filter(|m| z.remove(m)).count();
    if removed > 0 {
        c.ks.wrote(&key);
    }
    Reply::Int(removed as i64)
}

pub(crate) fn zscore(c: &mut Ctx) -> Reply {
    let member = c.arg(2).to_vec();
    match c.ks.read::<ZSet>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(z) => z.and_then(|z| z.score(&member)).map_or_else(Reply::nil, |s| Reply::bulk(format_double_reply(s))),
    }
}

pub(crate) fn zcard(c: &mut Ctx) -> Reply {
    match c.ks.read::<ZSet>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(z) => Reply::Int(z.map_or(0, |z| z.len()) as i64),
    }
}

pub(crate) fn zrank(c: &mut Ctx) -> Reply {
    let member = c.arg(2).to_vec();
    match c.ks.read::<ZSet>(c.now_ms, c.arg(1)) {
        Err(e) => e,
        Ok(z) => z.and_then(|z| z.rank(&member)).map_or_else(Reply::nil, |r| Reply::Int(r as i64)),
    }
}

/// A score interval as `zslParseRange` reads it.
#[derive(Clone, Copy)]
struct ScoreRange {
    min: f64,
    max: f64,
    min_ex: bool,
    max_ex: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        let (min, min_ex) = parse_bound(min).ok_or_else(|| Reply::error(RANGE_NOT_FLOAT))?;
        let (max, max_ex) = parse_bound(max).ok_or_else(|| Reply::error(RANGE_NOT_FLOAT))?;
        Ok(ScoreRange { min, max, min_ex, max_ex })
    }

    fn contains(&self, score: f64) -> bool {
        let above_min = if self.min_ex { score > self.min } else { score >= self.min };
        let below_max = if self.max_ex { score < self.max } else { score <= self.max };
        above_min && below_max
    }
}

/// `(` marks an exclusive bound. The rest goes to strtod as a C string, so
/// leading white space and the empty string (0) are accepted.
fn parse_bound(arg: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, text) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
    let r = strtod(text);
    (r.len == text.len() && !r.value.is_nan()).then_some((r.value, exclusive))
}

/// A lexicographic interval: `-`, `+`, `[inclusive` or `(exclusive`.
#[derive(Clone)]
enum LexBound {
    Min,
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

fn parse_lex(arg: &[u8]) -> Option<LexBound> {
    match arg.split_first() {
        Some((b'+', [])) => Some(LexBound::Max),
        Some((b'-', [])) => Some(LexBound::Min),
        Some((b'[', rest)) => Some(LexBound::Inclusive(rest.to_vec())),
        Some((b'(', rest)) => Some(LexBound::Exclusive(rest.to_vec())),
        _ => None,
    }
}

impl LexBound {
    fn exclusive(&self) -> bool {
        matches!(self, LexBound::Exclusive(_))
    }

    /// `sdscmplex`: `-` below everything, `+` above everything.
    fn cmp(&self, other: &LexBound) -> std::cmp::Ordering {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match (self, other) {
            (LexBound::Min, LexBound::Min) | (LexBound::Max, LexBound::Max) => Equal,
            (LexBound::Min, _) | (_, LexBound::Max) => Less,
            (LexBound::Max, _) | (_, LexBound::Min) => Greater,
            (LexBound::Inclusive(a) | LexBound::Exclusive(a), LexBound::Inclusive(b) | LexBound::Exclusive(b)) => {
                a.cmp(b)
            }
        }
    }
}

fn lex_above_min(member: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Inclusive(m) => member >= m.as_slice(),
        LexBound::Exclusive(m) => member > m.as_slice(),
    }
}

fn lex_below_max(member: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Inclusive(m) => member <= m.as_slice(),
        LexBound::Exclusive(m) => member < m.as_slice(),
    }
}

pub(crate) fn zcount(c: &mut Ctx) -> Reply {
    reply(zcount_generic(c))
}

fn zcount_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let range = ScoreRange::parse(c.arg(2), c.arg(3))?;
    let Some(z) = c.ks.read::<ZSet>(c.now_ms, c.arg(1))? else {
        return Ok(Reply::Int(0));
    };
    Ok(Reply::Int(z.iter().filter(|(_, s)| range.contains(*s)).count() as i64))
}

pub(crate) fn zremrangebyscore(c: &mut Ctx) -> Reply {
    reply(zremrangebyscore_generic(c))
}

fn zremrangebyscore_generic(c: &mut Ctx) -> Result<Reply, Reply> {
    let range = ScoreRange::parse(c.arg(2), c.arg(3))?;
    let key = c.arg(1).to_vec();
    let Some(z) = c.ks.write::<ZSet>(c.now_ms, &key)? else {
        return Ok(Reply::Int(0));
    };
    let doomed: Vec<Vec<u8>> = z.iter().filter(|(_, s)| range.contains(*s)).map(|(m, _)| m.to_vec()).collect();
    for m in &doomed {
        z.remove(m);
    }
    if !doomed.is_empty() {
        c.ks.wrote(&key);
    }
    Ok(Reply::Int(doomed.len() as i64))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeBy {
    Auto,
    Rank,
    Score,
    Lex,
}

pub(crate) fn zrange(c: &mut Ctx) -> Reply {
    reply(zrange_generic(c, RangeBy::Auto, None))
}

pub(crate) fn zrevrange(c: &mut Ctx) -> Reply {
    reply(zrange_generic(c, RangeBy::Rank, Some(true)))
}

pub(crate) fn zrangebyscore(c: &mut Ctx) -> Reply {
    reply(zrange_generic(c, RangeBy::Score, Some(false)))
}

pub(crate) fn zrevrangebyscore(c: &mut Ctx) -> Reply {
    reply(zrange_generic(c, RangeBy::Score, Some(true)))
}

/// The options after `key min max` that ZRANGE and its older forms share.
struct RangeOptions {
    by: RangeBy,
    reverse: bool,
    with_scores: bool,
    offset: i64,
    /// Negative: no limit.
    limit: i64,
}

/// Step 1 of `zrangeGenericCommand`: options, in any order; `reverse` is
/// fixed (Some) for the commands whose name says the direction.
fn range_options(argv: &[Vec<u8>], mut by: RangeBy, reverse: Option<bool>) -> Result<RangeOptions, Reply> {
    let mut o = RangeOptions { by, reverse: reverse.unwrap_or(false), with_scores: false, offset: 0, limit: -1 };
    let mut j = 4;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let opt = &argv[j];
        if is(opt, "withscores") {
            o.with_scores = true;
        } else if is(opt, "limit") && left >= 2 {
            o.offset = int_arg(&argv[j + 1])?;
            o.limit = int_arg(&argv[j + 2])?;
            j += 2;
        } else if reverse.is_none() && !o.reverse && is(opt, "rev") {
            o.reverse = true;
        } else if by == RangeBy::Auto && is(opt, "bylex") {
            by = RangeBy::Lex;
        } else if by == RangeBy::Auto && is(opt, "byscore") {
            by = RangeBy::Score;
        } else {
            return Err(Reply::error(SYNTAX));
        }
        j += 1;
    }
    o.by = if by == RangeBy::Auto { RangeBy::Rank } else { by };
    if o.limit != -1 && o.by == RangeBy::Rank {
        return Err(Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if o.with_scores && o.by == RangeBy::Lex {
        return Err(Reply::error("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    Ok(o)
}

/// The parsed interval of step 2.
enum Interval {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexBound, LexBound),
}

fn zrange_generic(c: &mut Ctx, by: RangeBy, reverse: Option<bool>) -> Result<Reply, Reply> {
    let o = range_options(c.argv, by, reverse)?;
    // Score and lex ranges are written max first when reversed.
    let (lo, hi) = if o.reverse && o.by != RangeBy::Rank { (c.arg(3), c.arg(2)) } else { (c.arg(2), c.arg(3)) };
    let interval = match o.by {
        RangeBy::Score => Interval::Score(ScoreRange::parse(lo, hi)?),
        RangeBy::Lex => match (parse_lex(lo), parse_lex(hi)) {
            (Some(min), Some(max)) => Interval::Lex(min, max),
            _ => return Err(Reply::error("ERR min or max not valid string range item")),
        },
        _ => Interval::Rank(int_arg(lo)?, int_arg(hi)?),
    };
    let Some(z) = c.ks.read::<ZSet>(c.now_ms, c.arg(1))? else {
        return Ok(Reply::empty_array());
    };
    let picked: Vec<(&[u8], f64)> = match interval {
        Interval::Rank(start, end) => by_rank(z, start, end, o.reverse),
        Interval::Score(r) => {
            let empty = r.min > r.max || (r.min == r.max && (r.min_ex || r.max_ex));
            let above = |_: &[u8], s: f64| if r.min_ex { s > r.min } else { s >= r.min };
            let below = |_: &[u8], s: f64| if r.max_ex { s < r.max } else { s <= r.max };
            by_run(z, &o, empty, above, below)
        }
        Interval::Lex(min, max) => {
            let order = min.cmp(&max);
            let empty = order.is_gt() || (order.is_eq() && (min.exclusive() || max.exclusive()));
            by_run(z, &o, empty, |m, _| lex_above_min(m, &min), |m, _| lex_below_max(m, &max))
        }
    };
    let mut items = Vec::with_capacity(picked.len() * 2);
    for (member, score) in picked {
        items.push(Reply::bulk(member));
        if o.with_scores {
            items.push(Reply::bulk(format_double_reply(score)));
        }
    }
    Ok(Reply::Array(Some(items)))
}

/// `genericZrangebyrankCommand`'s index arithmetic.
fn by_rank(z: &ZSet, start: i64, end: i64, reverse: bool) -> Vec<(&[u8], f64)> {
    let len = z.len() as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return Vec::new();
    }
    let (start, end) = (start as usize, end.min(len - 1) as usize);
    let take = end - start + 1;
    if reverse {
        z.iter().rev().skip(start).take(take).collect()
    } else {
        z.iter().skip(start).take(take).collect()
    }
}

/// `genericZrangebyscoreCommand` and `genericZrangebylexCommand` as they
/// walk a listpack (the encoding of the small sets the model is used with):
/// check that the range can hold anything at all, find the first element
/// (in the walking direction) past the near bound, then skip `offset`
/// elements and take up to `limit` while the far bound holds. For scores
/// this is the elements in range; for a lex range over unequal scores
/// (where Redis leaves the result unspecified) it is what Redis returns.
/// A negative offset selects nothing, a negative limit everything.
fn by_run<'z>(
    z: &'z ZSet,
    o: &RangeOptions,
    empty: bool,
    above_min: impl Fn(&[u8], f64) -> bool,
    below_max: impl Fn(&[u8], f64) -> bool,
) -> Vec<(&'z [u8], f64)> {
    if o.offset > 0 && o.offset >= z.len() as i64 {
        return Vec::new();
    }
    let (Some(first), Some(last)) = (z.iter().next(), z.iter().next_back()) else {
        return Vec::new();
    };
    if empty || !above_min(last.0, last.1) || !below_max(first.0, first.1) {
        return Vec::new();
    }
    let walk: Vec<(&[u8], f64)> = if o.reverse { z.iter().rev().collect() } else { z.iter().collect() };
    type Bound<'b> = &'b dyn Fn(&[u8], f64) -> bool;
    let (near, far): (Bound, Bound) = if o.reverse { (&below_max, &above_min) } else { (&above_min, &below_max) };
    let Some(start) = walk.iter().position(|(m, s)| near(m, *s)) else {
        return Vec::new();
    };
    if !far(walk[start].0, walk[start].1) || o.offset < 0 {
        return Vec::new();
    }
    let limit = usize::try_from(o.limit).unwrap_or(usize::MAX);
    walk[start..].iter().skip(o.offset as usize).take(limit).take_while(|(m, s)| far(m, *s)).copied().collect()
}
