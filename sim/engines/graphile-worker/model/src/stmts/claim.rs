//! get_job and batch_get_jobs: claim the first available jobs in
//! `ORDER BY priority, run_at` that the worker handles, skipping rows and
//! named queues other transactions hold (`FOR UPDATE SKIP LOCKED`).

use std::collections::BTreeSet;

use graphile_worker_database::{DbCell, DbValue};

use super::{any_of, error, has_any_key};
use crate::catalog::ClaimShape;
use crate::params::Params;
use crate::rows::{opt, JobRow, Row};
use crate::store::{Ctx, RowKey, Table, TableLock};
use crate::{Fail, Output, Ts};

/// The bound values of a claim, in graphile's parameter order.
struct Claim {
    worker: Option<String>,
    task_ids: Vec<i32>,
    forbidden: Option<Vec<String>>,
    accepted: Option<Vec<String>>,
    allowlist: Option<Vec<String>>,
    /// The worker's clock, or `now()`.
    now: Option<Ts>,
}

fn claim_params(ctx: &Ctx, shape: ClaimShape, values: &[DbValue], first_filter: usize) -> Result<Claim, Fail> {
    let filters = usize::from(shape.forbidden) + usize::from(shape.accepted) + usize::from(shape.allowlist);
    let p = Params::new(values, first_filter + filters + usize::from(shape.local_time))?;
    let mut at = first_filter;
    let mut next_filter = |on: bool| -> Result<Option<Vec<String>>, Fail> {
        if !on {
            return Ok(None);
        }
        at += 1;
        p.text_array_opt(at - 1)
    };
    let forbidden = next_filter(shape.forbidden)?;
    let accepted = next_filter(shape.accepted)?;
    let allowlist = next_filter(shape.allowlist)?;
    let now = if shape.local_time { p.ts_opt(first_filter + filters)? } else { Some(ctx.now) };
    Ok(Claim { worker: p.text_opt(0)?, task_ids: p.i32_array(1)?, forbidden, accepted, allowlist, now })
}

/// The flag predicates of graphile's `JobFlagFilter`, with SQL's NULLs.
fn flags_pass(claim: &Claim, shape: ClaimShape, job: &JobRow) -> bool {
    let flags = job.flags.as_ref();
    if shape.forbidden && has_any_key(flags, claim.forbidden.as_deref()) == Some(true) {
        return false;
    }
    if shape.accepted && has_any_key(flags, claim.accepted.as_deref()) != Some(true) {
        return false;
    }
    if shape.allowlist {
        let allowed = match flags {
            None => true,
            Some(serde_json::Value::Object(map)) => {
                claim.allowlist.as_ref().is_some_and(|list| map.keys().all(|k| list.contains(k)))
            }
            Some(_) => false,
        };
        if !allowed {
            return false;
        }
    }
    true
}

/// A candidate as a claim orders and filters it: copied out of its row, so
/// that the rows themselves are copied only when taken (a claim runs every
/// poll, and copying every candidate row was most of its cost).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    id: i64,
    job_queue_id: Option<i32>,
    priority: i16,
    run_at: Ts,
}

impl Candidate {
    fn of(job: &JobRow) -> Candidate {
        Candidate { id: job.id, job_queue_id: job.job_queue_id, priority: job.priority, run_at: job.run_at }
    }

    /// Its row as this statement sees it.
    fn row(self, ctx: &Ctx) -> JobRow {
        ctx.job(&self.id).cloned().expect("a candidate's row stays visible to its statement")
    }
}

/// Jobs passing the claim's predicates other than the named-queue test, in
/// the claim's order; ties on (priority, run_at) in heap order, as an index
/// scan of `jobs_main_index` meets equal keys (by heap TID).
fn candidates(ctx: &Ctx, claim: &Claim, shape: ClaimShape) -> Vec<Candidate> {
    let Some(now) = claim.now else { return Vec::new() };
    let mut jobs: Vec<Candidate> = ctx
        .visible_jobs()
        .into_iter()
        .filter(|j| j.is_available() && j.run_at <= now && any_of(Some(&j.task_id), Some(&claim.task_ids)))
        .filter(|j| flags_pass(claim, shape, j))
        .map(Candidate::of)
        .collect();
    // Cached: a place is a lookup through three maps, once per job, not per comparison.
    jobs.sort_by_cached_key(|j| (j.priority, j.run_at, ctx.place(&RowKey::Job(j.id))));
    jobs
}

/// The named-queue subquery: available queues not locked by another
/// transaction, locked by this one. It runs only when a candidate has a queue.
fn available_queues(ctx: &mut Ctx, candidates: &[Candidate]) -> BTreeSet<i32> {
    if candidates.iter().all(|j| j.job_queue_id.is_none()) {
        return BTreeSet::new();
    }
    let free: Vec<i32> = ctx
        .queues_in_heap_order()
        .into_iter()
        .filter(|q| q.is_available() && ctx.holder(&RowKey::Queue(q.id)).is_none())
        .map(|q| q.id)
        .collect();
    for &id in &free {
        ctx.lock(RowKey::Queue(id)).expect("a queue no other transaction holds");
    }
    free.into_iter().collect()
}

/// Candidates in claim order that pass the queue test and that no other
/// transaction holds (SKIP LOCKED), honouring a preferred job among ties.
fn claimable(ctx: &mut Ctx, claim: &Claim, shape: ClaimShape) -> Vec<Candidate> {
    let jobs = candidates(ctx, claim, shape);
    let queues = available_queues(ctx, &jobs);
    let mut jobs: Vec<Candidate> = jobs
        .into_iter()
        .filter(|j| j.job_queue_id.is_none_or(|q| queues.contains(&q)))
        .filter(|j| ctx.holder(&RowKey::Job(j.id)).is_none())
        .collect();
    if let (Some(preferred), Some(first)) = (ctx.claim_preference, jobs.first()) {
        let tie = (first.priority, first.run_at);
        if let Some(at) = jobs.iter().position(|j| j.id == preferred && (j.priority, j.run_at) == tie) {
            let job = jobs.remove(at);
            jobs.insert(0, job);
        }
    }
    jobs
}

/// Marks a job (and its named queue) as claimed by the worker.
fn take(ctx: &mut Ctx, claim: &Claim, mut job: JobRow) -> Result<JobRow, Fail> {
    ctx.lock(RowKey::Job(job.id))?;
    job.attempts = job.attempts.checked_add(1).ok_or_else(|| error("22003", "smallint out of range"))?;
    job.locked_by = claim.worker.clone();
    job.locked_at = claim.now;
    if let Some(queue_id) = job.job_queue_id {
        let mut queue = ctx.queue(&queue_id).cloned().expect("a claimed job's queue is available");
        queue.locked_by = claim.worker.clone();
        queue.locked_at = claim.now;
        ctx.put_queue(queue);
    }
    ctx.put_job(job.clone());
    Ok(job)
}

pub(crate) fn get_job(ctx: &mut Ctx, shape: ClaimShape, values: &[DbValue]) -> Result<Output, Fail> {
    let claim = claim_params(ctx, shape, values, 2)?;
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    let first = claimable(ctx, &claim, shape).into_iter().next();
    let claimed = first.map(|job| take(ctx, &claim, job.row(ctx))).transpose()?;
    Ok(claimed_rows(claimed.as_slice()))
}

/// `update _private_jobs .. from j .. returning *`: the job's columns, then j's.
fn claimed_rows(jobs: &[JobRow]) -> Output {
    let rows = jobs
        .iter()
        .map(|job| {
            let mut cells = job.cells();
            cells.push(("job_queue_id", opt(job.job_queue_id, DbCell::I32)));
            cells.push(("priority", DbCell::I16(job.priority)));
            cells.push(("run_at", DbCell::TimestampTz(job.run_at)));
            cells.push(("id", DbCell::I64(job.id)));
            Row::new(cells)
        })
        .collect();
    Output::Rows(rows)
}

/// Up to `$3` candidates are locked; of them, one per named queue (the first
/// by priority, run_at, id) and every job without a queue are claimed.
pub(crate) fn batch_get_jobs(ctx: &mut Ctx, shape: ClaimShape, values: &[DbValue]) -> Result<Output, Fail> {
    let claim = claim_params(ctx, shape, values, 3)?;
    let limit = Params::new(values, values.len())?.i32_opt(2)?;
    if limit.is_some_and(|l| l < 0) {
        return Err(error("2201W", "LIMIT must not be negative"));
    }
    ctx.lock_table_at_parse(Table::Jobs, TableLock::RowExclusive)?;
    ctx.lock_table_at_parse(Table::Queues, TableLock::RowExclusive)?;
    let mut locked = claimable(ctx, &claim, shape);
    locked.truncate(limit.map_or(usize::MAX, |l| l as usize));
    for job in &locked {
        ctx.lock(RowKey::Job(job.id))?;
    }
    let mut by_queue = locked.clone();
    by_queue.sort_by_key(|j| (j.job_queue_id.is_none(), j.job_queue_id, j.priority, j.run_at, j.id));
    let mut seen = BTreeSet::new();
    let picked: Vec<Candidate> =
        by_queue.into_iter().filter(|j| j.job_queue_id.is_none_or(|q| seen.insert(q))).collect();
    let mut claimed = Vec::new();
    for job in picked {
        let row = job.row(ctx);
        claimed.push(take(ctx, &claim, row)?);
    }
    claimed.sort_by_key(|j| j.id);
    Ok(claimed_rows(&claimed))
}
