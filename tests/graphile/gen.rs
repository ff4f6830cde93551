//! Generated sequences of graphile operations over a small universe (three
//! tasks, two queues, three job keys, three workers, four sessions), so that
//! they collide: claims against rows an open sweep holds, stale completions
//! and failures, recovery of live workers' jobs, keys replaced while their
//! job runs, clock steps onto run_at, backoff, sweep-threshold and 4-hour edges.
//! Ops name jobs and workers by small indices, resolved against the model's
//! committed rows when they run.

use chrono::Duration;
use graphile_worker_job_spec::{JobKeyMode, JobSpec};
use leasesim_graphile_model::calls::{Call, JobRef};
use leasesim_graphile_model::time::{self, plus_micros};
use leasesim_graphile_model::{SessionId, Ts};
use proptest::prelude::*;
use serde_json::{json, Value};

use super::world::{Failure, World};

pub const SESSIONS: u8 = 4;
const TASKS: [&str; 4] = ["alpha", "beta", "gamma", "a-task-identifier-that-is-too-long-for-the-check-constraint-of-the-tasks-table-which-allows-one-hundred-and-twenty-eight-characters"];
const QUEUES: [&str; 2] = ["q0", "q1"];
const KEYS: [&str; 4] = ["k0", "k1", "k2", ""];
const WORKERS: [&str; 4] = ["w0", "w1", "w2", "ghost"];
const FLAGS: [&str; 3] = ["f0", "f1", "infrastructure_resilient"];
const THRESHOLDS_MS: [u64; 3] = [0, 1_000, 60_000];
const DELAYS_MS: [u64; 3] = [0, 1, 30_000];

#[derive(Debug, Clone)]
pub struct AddSpec {
    task: u8,
    queue: Option<u8>,
    run_in_ms: Option<i64>,
    nanos: u32,
    max_attempts: Option<i16>,
    key: Option<u8>,
    mode: u8,
    priority: Option<i16>,
    flags: Vec<u8>,
    payload: u8,
}

#[derive(Debug, Clone)]
pub enum Act {
    Register(Vec<u8>),
    Add(AddSpec),
    AddBatch(Vec<AddSpec>, bool),
    Claim { worker: u8, filter: u8, local: bool, tasks: u8 },
    BatchClaim { worker: u8, size: u8 },
    Complete { job: u8, worker: u8 },
    Fail { job: u8, worker: u8, replace: u8 },
    FailBatch { jobs: Vec<u8>, worker: u8 },
    Heartbeat { worker: u8, meta: u8 },
    Deregister { worker: u8 },
    TryLock,
    ListStale(u8),
    ListOrphans(u8),
    Holds { worker: u8 },
    LastHeartbeat { worker: u8 },
    Recover { workers: Vec<u8>, delay: u8 },
    DeleteStale { workers: Vec<u8> },
    LockedJobs { workers: Vec<u8> },
    ListActive,
    Return { worker: u8, jobs: Vec<u8> },
    ReturnRecovery { worker: u8, job: u8, delay: Option<u8> },
    Remove { key: u8 },
    CompleteJobs(Vec<u8>),
    PermanentlyFail(Vec<u8>),
    Reschedule { jobs: Vec<u8>, run_in_ms: Option<i64>, priority: Option<i16>, attempts: Option<i16>, max: Option<i16> },
    ForceUnlock(Vec<u8>),
    CleanupFailed,
    GcQueues,
    GcTasks,
}

#[derive(Debug, Clone)]
pub enum Op {
    Tick(i64),
    /// To an edge: 0 a job's run_at, 1 a heartbeat plus a sweep threshold,
    /// 2 a lock plus 4 hours; `delta_us` -1, 0 or +1 from it.
    TickTo {
        target: u8,
        pick: u8,
        delta_us: i64,
    },
    Begin(u8),
    Commit(u8),
    Rollback(u8),
    Do(u8, Act),
    /// The recovery sweep's transaction, left open: lock, find dead workers,
    /// recover their jobs, delete them.
    Sweep {
        session: u8,
        threshold: u8,
        delay: u8,
        hooks: bool,
    },
}

fn small_vec(max: u8) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0..max, 0..3)
}

fn add_spec() -> impl Strategy<Value = AddSpec> {
    (
        prop_oneof![8 => Just(0u8), 4 => Just(1), 2 => Just(2), 1 => Just(3)],
        prop::option::weighted(0.5, 0..2u8),
        prop::option::weighted(0.4, -2_000i64..5_000),
        prop_oneof![3 => Just(0u32), 1 => Just(123_456_789u32), 1 => Just(500u32), 1 => Just(1_500u32)],
        prop::option::weighted(0.4, prop_oneof![Just(1i16), Just(2), Just(3), Just(0)]),
        prop::option::weighted(0.5, prop_oneof![5 => 0..3u8, 1 => Just(3u8)]),
        0..4u8,
        prop::option::weighted(0.3, -1i16..2),
        small_vec(3),
        0..6u8,
    )
        .prop_map(|(task, queue, run_in_ms, nanos, max_attempts, key, mode, priority, flags, payload)| AddSpec {
            task,
            queue,
            run_in_ms,
            nanos,
            max_attempts,
            key,
            mode,
            priority,
            flags,
            payload,
        })
}

fn act() -> impl Strategy<Value = Act> {
    let worker = || 0..4u8;
    prop_oneof![
        2 => small_vec(4).prop_map(Act::Register),
        10 => add_spec().prop_map(Act::Add),
        2 => (prop::collection::vec(add_spec(), 1..4), any::<bool>()).prop_map(|(s, p)| Act::AddBatch(s, p)),
        12 => (worker(), prop_oneof![6 => Just(0u8), 1 => 1..8u8], prop::bool::weighted(0.15), 0..4u8)
            .prop_map(|(worker, filter, local, tasks)| Act::Claim { worker, filter, local, tasks }),
        // Batches of at most one job: which of the candidates that tie on
        // (priority, run_at) a larger batch locks is PostgreSQL's plan's
        // choice, invisible when `distinct on` drops it (see DESIGN.md).
        1 => (worker(), 0..2u8).prop_map(|(worker, size)| Act::BatchClaim { worker, size }),
        6 => (any::<u8>(), worker()).prop_map(|(job, worker)| Act::Complete { job, worker }),
        6 => (any::<u8>(), worker(), 0..3u8).prop_map(|(job, worker, replace)| Act::Fail { job, worker, replace }),
        1 => (small_vec(255), worker()).prop_map(|(jobs, worker)| Act::FailBatch { jobs, worker }),
        5 => (worker(), 0..3u8).prop_map(|(worker, meta)| Act::Heartbeat { worker, meta }),
        1 => worker().prop_map(|worker| Act::Deregister { worker }),
        1 => Just(Act::TryLock),
        1 => (0..3u8).prop_map(Act::ListStale),
        1 => (0..3u8).prop_map(Act::ListOrphans),
        1 => worker().prop_map(|worker| Act::Holds { worker }),
        1 => worker().prop_map(|worker| Act::LastHeartbeat { worker }),
        2 => (small_vec(4), 0..3u8).prop_map(|(workers, delay)| Act::Recover { workers, delay }),
        1 => small_vec(4).prop_map(|workers| Act::DeleteStale { workers }),
        1 => small_vec(4).prop_map(|workers| Act::LockedJobs { workers }),
        1 => Just(Act::ListActive),
        1 => (worker(), small_vec(255)).prop_map(|(worker, jobs)| Act::Return { worker, jobs }),
        2 => (worker(), any::<u8>(), prop::option::of(0..3u8)).prop_map(|(worker, job, delay)| Act::ReturnRecovery { worker, job, delay }),
        2 => (0..4u8).prop_map(|key| Act::Remove { key }),
        1 => small_vec(255).prop_map(Act::CompleteJobs),
        1 => small_vec(255).prop_map(Act::PermanentlyFail),
        2 => (
            small_vec(255),
            prop::option::of(-1_000i64..10_000),
            prop::option::of(-1i16..2),
            prop::option::of(0i16..3),
            prop::option::weighted(0.3, 0i16..4)
        )
            .prop_map(|(jobs, run_in_ms, priority, attempts, max)| Act::Reschedule { jobs, run_in_ms, priority, attempts, max }),
        1 => small_vec(4).prop_map(Act::ForceUnlock),
        1 => Just(Act::CleanupFailed),
        1 => Just(Act::GcQueues),
        1 => Just(Act::GcTasks),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let session = || 0..SESSIONS;
    prop_oneof![
        4 => prop_oneof![1 => 1i64..1_000, 3 => 1_000i64..3_000_000, 1 => 3_000_000i64..400_000_000, 1 => Just(4 * 3_600_000_000i64)]
            .prop_map(Op::Tick),
        3 => (0..3u8, any::<u8>(), -1i64..2).prop_map(|(target, pick, delta_us)| Op::TickTo { target, pick, delta_us }),
        5 => session().prop_map(Op::Begin),
        4 => session().prop_map(Op::Commit),
        2 => session().prop_map(Op::Rollback),
        40 => (session(), act()).prop_map(|(s, a)| Op::Do(s, a)),
        3 => (session(), 0..3u8, 0..3u8, prop::bool::weighted(0.3))
            .prop_map(|(session, threshold, delay, hooks)| Op::Sweep { session, threshold, delay, hooks }),
    ]
}

/// A sequence: a registration of the tasks, then generated operations.
pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 5..45).prop_map(|mut ops| {
        ops.insert(0, Op::Do(0, Act::Register(vec![0, 1, 2])));
        ops
    })
}

fn worker(i: u8) -> String {
    WORKERS[usize::from(i) % WORKERS.len()].to_string()
}

fn workers(ids: &[u8]) -> Vec<String> {
    ids.iter().map(|&i| worker(i)).collect()
}

/// The job an index names: one of the committed jobs, or (one time in
/// `count + 1`) an id no job has.
fn job(world: &World, pick: u8) -> JobRef {
    let jobs: Vec<(i64, bool)> = world.db.jobs().map(|j| (j.id, j.job_queue_id.is_some())).collect();
    let next = jobs.last().map_or(1, |(id, _)| id + 1);
    let at = usize::from(pick) % (jobs.len() + 1);
    let (id, queued) = jobs.get(at).copied().unwrap_or((next, pick.is_multiple_of(2)));
    JobRef { id, queued }
}

fn job_ids(world: &World, picks: &[u8]) -> Vec<i64> {
    picks.iter().map(|&p| job(world, p).id).collect()
}

fn payload(i: u8) -> Value {
    match i {
        0 => json!({}),
        1 => json!({"a": 1}),
        2 => json!([1]),
        3 => json!([2, {"b": "c"}]),
        4 => Value::Null,
        _ => json!("text"),
    }
}

fn spec(world: &World, s: &AddSpec) -> (String, Value, JobSpec) {
    let run_at =
        s.run_in_ms.map(|ms| world.now + Duration::milliseconds(ms) + Duration::nanoseconds(i64::from(s.nanos)));
    let mode = match s.mode {
        1 => Some(JobKeyMode::Replace),
        2 => Some(JobKeyMode::PreserveRunAt),
        3 => Some(JobKeyMode::UnsafeDedupe),
        _ => None,
    };
    let flags = (!s.flags.is_empty())
        .then(|| s.flags.iter().map(|&f| FLAGS[usize::from(f) % FLAGS.len()].to_string()).collect());
    let spec = JobSpec {
        queue_name: s.queue.map(|q| QUEUES[usize::from(q) % QUEUES.len()].to_string()),
        run_at,
        max_attempts: s.max_attempts,
        job_key: s.key.map(|k| KEYS[usize::from(k) % KEYS.len()].to_string()),
        job_key_mode: mode,
        priority: s.priority,
        flags,
    };
    (TASKS[usize::from(s.task) % TASKS.len()].to_string(), payload(s.payload), spec)
}

fn claim(world: &World, worker_ix: u8, filter: u8, local: bool, tasks: u8) -> Call {
    let mut task_ids: Vec<i32> = world.db.tasks().map(|t| t.id).collect();
    if tasks == 3 && task_ids.len() > 1 {
        task_ids.remove(0);
    }
    let labels = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Call::GetJob {
        worker: worker(worker_ix),
        task_ids,
        forbidden: if filter & 1 != 0 { labels(&["f0"]) } else { Vec::new() },
        accepted: if filter & 2 != 0 { labels(&["f1", "infrastructure_resilient"]) } else { Vec::new() },
        allowlist: (filter & 4 != 0).then(|| labels(&["f1", "infrastructure_resilient"])),
        local_now: local.then_some(world.now + Duration::nanoseconds(777)),
    }
}

/// The graphile call an act stands for, in the world as it is now.
fn call(world: &World, act: &Act) -> Call {
    match act {
        Act::Register(tasks) => {
            Call::RegisterTasks(tasks.iter().map(|&t| TASKS[usize::from(t) % TASKS.len()].to_string()).collect())
        }
        Act::Add(s) => {
            let (identifier, payload, spec) = spec(world, s);
            Call::AddJob { identifier, payload, spec }
        }
        Act::AddBatch(specs, preserve_run_at) => {
            // graphile refuses unsafe_dedupe in a batch before sending anything.
            let jobs = specs.iter().map(|s| spec(world, &AddSpec { mode: s.mode % 3, ..s.clone() })).collect();
            Call::AddJobs { jobs, preserve_run_at: *preserve_run_at }
        }
        Act::Claim { worker, filter, local, tasks } => claim(world, *worker, *filter, *local, *tasks),
        Act::BatchClaim { worker: w, size } => Call::BatchGetJobs {
            worker: worker(*w),
            task_ids: world.db.tasks().map(|t| t.id).collect(),
            batch_size: i32::from(*size),
        },
        Act::Complete { job: j, worker: w } => Call::CompleteJob { job: job(world, *j), worker: worker(*w) },
        Act::Fail { job: j, worker: w, replace } => Call::FailJob {
            job: job(world, *j),
            worker: worker(*w),
            message: "boom".into(),
            replacement: match replace {
                0 => None,
                1 => Some(json!({"replaced": true})),
                _ => Some(Value::Null),
            },
        },
        Act::FailBatch { jobs, worker: w } => Call::FailJobs {
            jobs: jobs.iter().map(|&j| job(world, j)).collect(),
            worker: worker(*w),
            message: "batch boom".into(),
        },
        Act::Heartbeat { worker: w, meta } => Call::Heartbeat {
            worker: worker(*w),
            metadata: match meta {
                0 => None,
                1 => Some(json!({"pid": 7})),
                _ => Some(Value::Null),
            },
        },
        Act::Deregister { worker: w } => Call::Deregister { worker: worker(*w) },
        Act::TryLock => Call::TrySweepLock,
        Act::ListStale(t) => Call::ListStaleWorkers { threshold_ms: THRESHOLDS_MS[usize::from(*t) % 3] },
        Act::ListOrphans(t) => Call::ListOrphanLockedWorkers { threshold_ms: THRESHOLDS_MS[usize::from(*t) % 3] },
        Act::Holds { worker: w } => {
            Call::HoldsResilientLocks { worker: worker(*w), flags: vec!["infrastructure_resilient".into()] }
        }
        Act::LastHeartbeat { worker: w } => Call::WorkerLastHeartbeat { worker: worker(*w) },
        Act::Recover { workers: w, delay } => {
            Call::RecoverDeadWorkerJobs { workers: workers(w), delay_ms: DELAYS_MS[usize::from(*delay) % 3] }
        }
        Act::DeleteStale { workers: w } => Call::DeleteStaleWorkers { workers: workers(w) },
        Act::LockedJobs { workers: w } => Call::LockedJobsForRecovery { workers: workers(w) },
        Act::ListActive => Call::ListActiveWorkers,
        Act::Return { worker: w, jobs } => {
            Call::ReturnJobs { worker: worker(*w), jobs: jobs.iter().map(|&j| job(world, j)).collect() }
        }
        Act::ReturnRecovery { worker: w, job: j, delay } => Call::ReturnJobForRecovery {
            worker: worker(*w),
            job: job(world, *j),
            delay_ms: delay.map(|d| DELAYS_MS[usize::from(d) % 3]),
            error: Some("Job recovered after worker interruption".into()),
        },
        Act::Remove { key } => Call::RemoveJob { key: KEYS[usize::from(*key) % KEYS.len()].to_string() },
        Act::CompleteJobs(jobs) => Call::CompleteJobs { ids: job_ids(world, jobs) },
        Act::PermanentlyFail(jobs) => Call::PermanentlyFailJobs { ids: job_ids(world, jobs), reason: "manual".into() },
        Act::Reschedule { jobs, run_in_ms, priority, attempts, max } => Call::RescheduleJobs {
            ids: job_ids(world, jobs),
            run_at: run_in_ms.map(|ms| world.now + Duration::milliseconds(ms)),
            priority: *priority,
            attempts: *attempts,
            max_attempts: *max,
        },
        Act::ForceUnlock(w) => Call::ForceUnlockWorkers { workers: workers(w) },
        Act::CleanupFailed => Call::CleanupPermanentlyFailed,
        Act::GcQueues => Call::CleanupJobQueues,
        Act::GcTasks => Call::CleanupTasks,
    }
}

/// The instant an edge op moves the clock to, if it lies ahead.
fn edge(world: &World, target: u8, pick: u8, delta_us: i64) -> Option<Ts> {
    let at: Vec<Ts> = match target {
        0 => world.db.jobs().map(|j| j.run_at).collect(),
        1 => world
            .db
            .workers()
            .flat_map(|w| {
                THRESHOLDS_MS
                    .iter()
                    .map(move |ms| plus_micros(w.last_heartbeat_at, time::interval_from_millis(*ms as i64)))
            })
            .collect(),
        _ => world.db.jobs().filter_map(|j| j.locked_at).map(|at| plus_micros(at, time::FOUR_HOURS_MICROS)).collect(),
    };
    let ahead: Vec<Ts> = at.into_iter().map(|t| plus_micros(t, delta_us)).filter(|t| *t > world.now).collect();
    (!ahead.is_empty()).then(|| ahead[usize::from(pick) % ahead.len()])
}

fn sweep(world: &mut World, session: SessionId, threshold: u8, delay: u8, hooks: bool) -> Result<(), Failure> {
    let threshold_ms = THRESHOLDS_MS[usize::from(threshold) % 3];
    let delay_ms = DELAYS_MS[usize::from(delay) % 3];
    if !world.in_transaction(session) {
        world.begin(session)?;
    }
    world.call(session, &Call::TrySweepLock)?;
    world.call(session, &Call::ListStaleWorkers { threshold_ms })?;
    world.call(session, &Call::ListOrphanLockedWorkers { threshold_ms })?;
    // The dead: every worker with a heartbeat older than the threshold, and
    // every owner of an old lock without one (as the model sees them now).
    let cutoff = plus_micros(world.now, -time::interval_from_millis(threshold_ms as i64));
    let mut dead: Vec<String> =
        world.db.workers().filter(|w| w.last_heartbeat_at < cutoff).map(|w| w.id.clone()).collect();
    for job in world.db.jobs() {
        if let (Some(by), Some(at)) = (&job.locked_by, job.locked_at) {
            if at < cutoff && !dead.contains(by) && world.db.workers().all(|w| &w.id != by) {
                dead.push(by.clone());
            }
        }
    }
    if let Some(first) = dead.first().cloned() {
        world.call(
            session,
            &Call::HoldsResilientLocks { worker: first.clone(), flags: vec!["infrastructure_resilient".into()] },
        )?;
        world.call(session, &Call::WorkerLastHeartbeat { worker: first })?;
    }
    if dead.is_empty() {
        return Ok(());
    }
    if hooks {
        world.call(session, &Call::LockedJobsForRecovery { workers: dead.clone() })?;
        let held: Vec<(i64, bool, String)> = world
            .db
            .jobs()
            .filter_map(|j| {
                j.locked_by.clone().filter(|by| dead.contains(by)).map(|by| (j.id, j.job_queue_id.is_some(), by))
            })
            .collect();
        for (id, queued, by) in held {
            let job = JobRef { id, queued };
            let error = Some("Job recovered after worker interruption".to_string());
            world.call(session, &Call::ReturnJobForRecovery { worker: by, job, delay_ms: Some(delay_ms), error })?;
        }
    } else {
        world.call(session, &Call::RecoverDeadWorkerJobs { workers: dead.clone(), delay_ms })?;
    }
    world.call(session, &Call::DeleteStaleWorkers { workers: dead })
}

/// Runs one op. A session waiting for a lock gets nothing new but a COMMIT
/// or a ROLLBACK is not sent to it either (its connection is busy).
pub fn apply(world: &mut World, op: &Op) -> Result<(), Failure> {
    let busy = |world: &World, s: u8| world.busy(SessionId::from(s));
    match op {
        Op::Tick(us) => world.advance(*us),
        Op::TickTo { target, pick, delta_us } => {
            if let Some(at) = edge(world, *target, *pick, *delta_us) {
                let micros = (at - world.now).num_microseconds().unwrap_or(0);
                world.advance(micros);
            }
        }
        Op::Begin(s) if !busy(world, *s) => world.begin(SessionId::from(*s))?,
        Op::Commit(s) if !busy(world, *s) => world.commit(SessionId::from(*s))?,
        Op::Rollback(s) => world.rollback(SessionId::from(*s))?,
        // graphile claims outside transactions only; inside one, which named
        // queues the claim's subquery locks depends on PostgreSQL's plan.
        Op::Do(s, Act::Claim { .. } | Act::BatchClaim { .. }) if world.in_transaction(SessionId::from(*s)) => {}
        Op::Do(s, act) if !busy(world, *s) => {
            let call = call(world, act);
            world.call(SessionId::from(*s), &call)?;
        }
        Op::Sweep { session, threshold, delay, hooks } if !busy(world, *session) => {
            sweep(world, SessionId::from(*session), *threshold, *delay, *hooks)?
        }
        _ => {}
    }
    Ok(())
}
