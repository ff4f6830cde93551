//! add_job and add_jobs (m000022's `add_jobs` function and m000021's `add_job`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{check_job, error, flags_object, job_rows, smallint};
use crate::params::Params;
use crate::rows::{JobRow, QueueRow, TaskRow};
use crate::store::{Advisory, Ctx, RowKey, Table, TableLock};
use crate::time::{self, Ts};
use crate::{Fail, Output};

/// One `job_spec` value. `payload: None` is SQL NULL.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    identifier: Option<String>,
    payload: Option<Value>,
    queue_name: Option<String>,
    run_at: Option<Ts>,
    max_attempts: Option<i16>,
    job_key: Option<String>,
    priority: Option<i16>,
    flags: Option<Vec<String>>,
}

/// `select * from add_job(identifier => $1, payload => $2, ..., job_key_mode => $9)`.
pub(crate) fn add_job(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let job_key = p.text_opt(5)?;
    let mode = p.text_opt(8)?;
    let spec = Spec {
        identifier: p.text_opt(0)?,
        payload: p.json_opt(1)?,
        queue_name: p.text_opt(2)?,
        run_at: p.ts_opt(3)?,
        max_attempts: smallint(p.i32_opt(4)?)?,
        job_key,
        priority: smallint(p.i32_opt(6)?)?,
        flags: p.text_array_opt(7)?,
    };
    let replace = spec.job_key.is_none() || mode.as_deref().is_none_or(|m| m == "replace" || m == "preserve_run_at");
    if replace {
        let preserve = mode.as_deref() == Some("preserve_run_at");
        let key = spec.job_key.clone();
        let job = add_jobs(ctx, vec![spec], preserve)?.into_iter().next();
        let Some(job) = job else {
            let shown = key.unwrap_or_else(|| "<null>".into());
            return Err(error("GWNOR", &format!("Unable to schedule job for key \"{shown}\"")));
        };
        return Ok(job_rows(&[job]));
    }
    if mode.as_deref() == Some("unsafe_dedupe") {
        return Ok(job_rows(&[add_unsafe_dedupe(ctx, spec)?]));
    }
    Err(error("GWBKM", "Invalid job_key_mode value, expected 'replace', 'preserve_run_at' or 'unsafe_dedupe'."))
}

/// `select * from add_jobs(array(select json_populate_recordset(null::job_spec, $1::json)), $2::boolean)`.
pub(crate) fn add_jobs_statement(ctx: &mut Ctx, p: &Params) -> Result<Output, Fail> {
    let specs = match p.json_opt(0)? {
        Some(json) => specs_from_json(&json)?,
        None => Vec::new(),
    };
    let preserve = p.bool_opt(1)? == Some(true);
    Ok(job_rows(&add_jobs(ctx, specs, preserve)?))
}

fn bad(message: String) -> Fail {
    Fail::Bad(graphile_worker_database::DbError::new(format!("leasesim graphile model: add_jobs specs: {message}")))
}

/// `json_populate_recordset(null::job_spec, ..)` of the specs graphile writes:
/// a JSON `null` is SQL NULL (also for `payload`), a timestamp is parsed from
/// chrono's text as PostgreSQL parses it.
fn specs_from_json(json: &Value) -> Result<Vec<Spec>, Fail> {
    let Value::Array(items) = json else { return Err(bad(format!("not an array: {json}"))) };
    items.iter().map(spec_from_json).collect()
}

fn spec_from_json(item: &Value) -> Result<Spec, Fail> {
    let Value::Object(fields) = item else { return Err(bad(format!("not an object: {item}"))) };
    let text = |name: &str| -> Result<Option<String>, Fail> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(bad(format!("{name} is not a string: {other}"))),
        }
    };
    let small = |name: &str| -> Result<Option<i16>, Fail> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                v.as_i64().and_then(|n| i16::try_from(n).ok()).map(Some).ok_or_else(|| bad(format!("{name}: {v}")))
            }
        }
    };
    let run_at = match text("run_at")? {
        None => None,
        Some(s) => {
            let parsed = chrono::DateTime::parse_from_rfc3339(&s).map_err(|e| bad(format!("run_at {s:?}: {e}")))?;
            Some(time::parsed_from_json_text(parsed.with_timezone(&chrono::Utc)))
        }
    };
    let flags = match fields.get("flags") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| bad(format!("flag {v}"))))
                .collect::<Result<_, _>>()?,
        ),
        Some(other) => return Err(bad(format!("flags: {other}"))),
    };
    Ok(Spec {
        identifier: text("identifier")?,
        payload: fields.get("payload").filter(|v| !v.is_null()).cloned(),
        queue_name: text("queue_name")?,
        run_at,
        max_attempts: small("max_attempts")?,
        job_key: text("job_key")?,
        priority: small("priority")?,
        flags,
    })
}

fn check_length(value: &str, table: &str, constraint: &str) -> Result<(), Fail> {
    if value.chars().count() > 128 {
        let msg = format!("new row for relation \"{table}\" violates check constraint \"{constraint}\"");
        return Err(error("23514", &msg));
    }
    Ok(())
}

/// `insert into _private_tasks (identifier) select .. where not exists (..) on conflict do nothing`.
pub(crate) fn ensure_task(ctx: &mut Ctx, identifier: Option<&str>) -> Result<(), Fail> {
    let Some(identifier) = identifier else {
        return Err(error("23502", "null value in column \"identifier\" of relation \"_private_tasks\""));
    };
    if task_id(ctx, identifier).is_some() {
        return Ok(());
    }
    // The identity value is drawn before the constraint and conflict checks.
    let id = ctx.next_task_id();
    check_length(identifier, "_private_tasks", "tasks_identifier_check")?;
    if let Some(holder) = ctx.task_identifier_holder(identifier) {
        return Err(Fail::Blocked(holder));
    }
    ctx.lock(RowKey::Task(id))?;
    ctx.put_task(TaskRow { id, identifier: identifier.to_string() });
    Ok(())
}

pub(crate) fn task_id(ctx: &Ctx, identifier: &str) -> Option<i32> {
    ctx.all_tasks().into_iter().find(|t| t.identifier == identifier).map(|t| t.id)
}

fn queue_id(ctx: &Ctx, name: &str) -> Option<i32> {
    ctx.all_queues().into_iter().find(|q| q.queue_name == name).map(|q| q.id)
}

/// `insert into _private_job_queues (queue_name) select .. where not exists (..) on conflict do nothing`.
fn ensure_queue(ctx: &mut Ctx, name: &str) -> Result<(), Fail> {
    if queue_id(ctx, name).is_some() {
        return Ok(());
    }
    let id = ctx.next_queue_id();
    check_length(name, "_private_job_queues", "job_queues_queue_name_check")?;
    if let Some(holder) = ctx.queue_name_holder(name) {
        return Err(Fail::Blocked(holder));
    }
    ctx.lock(RowKey::Queue(id))?;
    ctx.put_queue(QueueRow { id, queue_name: name.to_string(), locked_at: None, locked_by: None });
    Ok(())
}

fn jobs_with_key(ctx: &Ctx, keys: &BTreeSet<String>) -> Vec<JobRow> {
    ctx.jobs_in_heap_order().into_iter().filter(|j| j.key.as_ref().is_some_and(|k| keys.contains(k))).cloned().collect()
}

/// The add_jobs function, statement by statement.
pub(crate) fn add_jobs(ctx: &mut Ctx, specs: Vec<Spec>, preserve_run_at: bool) -> Result<Vec<JobRow>, Fail> {
    let keys: BTreeSet<String> = specs.iter().filter_map(|s| s.job_key.clone()).collect();
    for key in &keys {
        ctx.advisory_lock(Advisory::Text(key.clone()), true)?;
    }
    for job in jobs_with_key(ctx, &keys) {
        ctx.lock(RowKey::Job(job.id))?;
    }
    ctx.lock_table(Table::Tasks, TableLock::RowExclusive)?;
    let identifiers: BTreeSet<Option<String>> = specs.iter().map(|s| s.identifier.clone()).collect();
    for identifier in &identifiers {
        ensure_task(ctx, identifier.as_deref())?;
    }
    ctx.lock_table(Table::Queues, TableLock::RowExclusive)?;
    let queues: BTreeSet<String> = specs.iter().filter_map(|s| s.queue_name.clone()).collect();
    for name in &queues {
        ensure_queue(ctx, name)?;
    }
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    retire_unavailable(ctx, &keys)?;
    let mut touched = BTreeSet::new();
    let mut out = Vec::new();
    // In the specs' order: which of them draws which id follows PostgreSQL's
    // plan for the INSERT .. SELECT (see DESIGN.md); the model takes the specs' order.
    for spec in specs {
        if let Some(job) = insert_or_replace(ctx, &spec, preserve_run_at, &mut touched)? {
            out.push(job);
        }
    }
    Ok(out)
}

/// Jobs holding a key being added that are not available (running, or out
/// of attempts) give the key up and are retired: the new job is inserted
/// beside them.
fn retire_unavailable(ctx: &mut Ctx, keys: &BTreeSet<String>) -> Result<(), Fail> {
    let unavailable: Vec<JobRow> = jobs_with_key(ctx, keys).into_iter().filter(|j| !j.is_available()).collect();
    if unavailable.is_empty() {
        return Ok(());
    }
    for job in &unavailable {
        ctx.lock(RowKey::Job(job.id))?;
        let row = JobRow { key: None, attempts: job.max_attempts, updated_at: ctx.now, ..job.clone() };
        check_job(&row)?;
        ctx.put_job(row);
    }
    ctx.lock_table(Table::Retirements, TableLock::RowExclusive)?;
    for job in unavailable {
        ctx.retire(job.id)?;
    }
    Ok(())
}

/// The row `insert into _private_jobs .. select .. from unnest(specs)` proposes.
fn proposed(ctx: &mut Ctx, spec: &Spec) -> Result<JobRow, Fail> {
    let identifier = spec.identifier.clone().expect("ensure_task refused a NULL identifier");
    let task_id = task_id(ctx, &identifier).expect("ensure_task inserted the task");
    let job_queue_id = spec.queue_name.as_deref().and_then(|name| queue_id(ctx, name));
    let id = ctx.next_job_id();
    let row = JobRow {
        id,
        job_queue_id,
        queue_name: job_queue_id.and(spec.queue_name.clone()),
        task_id,
        task_identifier: identifier,
        payload: spec.payload.clone().unwrap_or_else(|| serde_json::json!({})),
        priority: spec.priority.unwrap_or(0),
        run_at: spec.run_at.unwrap_or(ctx.now),
        attempts: 0,
        max_attempts: spec.max_attempts.unwrap_or(25),
        last_error: None,
        created_at: ctx.now,
        updated_at: ctx.now,
        key: spec.job_key.clone(),
        locked_at: None,
        locked_by: None,
        revision: 0,
        flags: flags_object(spec.flags.as_deref()),
    };
    check_job(&row)?;
    Ok(row)
}

/// The job holding `key`, or the transaction whose uncommitted row holds it.
fn conflicting(ctx: &Ctx, key: Option<&str>) -> Result<Option<JobRow>, Fail> {
    let Some(key) = key else { return Ok(None) };
    if let Some(job) = ctx.all_jobs().into_iter().find(|j| j.key.as_deref() == Some(key)) {
        return Ok(Some(job));
    }
    match ctx.job_key_holder(key) {
        Some(holder) => Err(Fail::Blocked(holder)),
        None => Ok(None),
    }
}

/// One spec of `insert .. on conflict (key) do update set .. where jobs.locked_at is null returning *`.
fn insert_or_replace(
    ctx: &mut Ctx,
    spec: &Spec,
    preserve_run_at: bool,
    touched: &mut BTreeSet<i64>,
) -> Result<Option<JobRow>, Fail> {
    let new = proposed(ctx, spec)?;
    let Some(old) = conflicting(ctx, new.key.as_deref())? else {
        ctx.lock(RowKey::Job(new.id))?;
        touched.insert(new.id);
        ctx.put_job(new.clone());
        return Ok(Some(new));
    };
    if !touched.insert(old.id) {
        return Err(error("21000", "ON CONFLICT DO UPDATE command cannot affect row a second time"));
    }
    ctx.lock(RowKey::Job(old.id))?;
    if old.locked_at.is_some() {
        return Ok(None);
    }
    let payload = match (&old.payload, &new.payload) {
        (Value::Array(a), Value::Array(b)) => Value::Array(a.iter().chain(b).cloned().collect()),
        _ => new.payload.clone(),
    };
    let keep_run_at = preserve_run_at && old.attempts == 0;
    let row = JobRow {
        job_queue_id: new.job_queue_id,
        queue_name: new.queue_name,
        task_id: new.task_id,
        task_identifier: new.task_identifier,
        payload,
        max_attempts: new.max_attempts,
        run_at: if keep_run_at { old.run_at } else { new.run_at },
        priority: new.priority,
        revision: old.revision + 1,
        flags: new.flags,
        attempts: 0,
        last_error: None,
        updated_at: ctx.now,
        ..old
    };
    ctx.put_job(row.clone());
    Ok(Some(row))
}

/// add_job's `unsafe_dedupe` branch: no key lock, no retirement; an existing
/// job with the key, even a running one, only gets its revision bumped.
fn add_unsafe_dedupe(ctx: &mut Ctx, spec: Spec) -> Result<JobRow, Fail> {
    ctx.lock_table(Table::Tasks, TableLock::RowExclusive)?;
    ensure_task(ctx, spec.identifier.as_deref())?;
    if let Some(name) = &spec.queue_name {
        ctx.lock_table(Table::Queues, TableLock::RowExclusive)?;
        ensure_queue(ctx, name)?;
    }
    ctx.lock_table(Table::Jobs, TableLock::RowExclusive)?;
    let new = proposed(ctx, &spec)?;
    match conflicting(ctx, new.key.as_deref())? {
        None => {
            ctx.lock(RowKey::Job(new.id))?;
            ctx.put_job(new.clone());
            Ok(new)
        }
        Some(old) => {
            ctx.lock(RowKey::Job(old.id))?;
            let row = JobRow { revision: old.revision + 1, updated_at: ctx.now, ..old };
            ctx.put_job(row.clone());
            Ok(row)
        }
    }
}
