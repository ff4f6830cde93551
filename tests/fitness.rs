//! Fitness of every invariant: a check that never fired is not a check.
//!
//! For each invariant there is an engine variant, private to this test, that
//! breaks the promise the invariant stands for, the way a realistic bug
//! would: a configuration the engine misreads (it runs with other constants
//! than the scenario promises), a store that answers or commits wrongly, a
//! worker or client whose calls go wrong, an engine whose events lie. Each
//! variant enters through the hooks of `leasesim_builtin::variant::Variant`, never
//! through `src/`, and the harness's ground truth does not know it is there.
//!
//! One check function: a small swarm campaign with the variant must report
//! the invariant within a few seeds, and the same seed without the variant
//! must not.

mod common;

use leasesim::config::EngineConfig;
use leasesim::event::Event;
use leasesim::ids::{Owner, StageRef};
use leasesim::proto::{Request, Response, RpcError};
use leasesim::store::server::StoreServer;
use leasesim::task::{TaskKind, TaskSpec, TaskState};
use leasesim_builtin::variant::{BoxFuture, Call, Variant};
use leasesim_sim::runner;
use std::sync::Arc;
use std::time::Duration;

/// One fitness case: the invariant, the world it is tried in, the variant,
/// and how many seeds the campaign may take.
struct Fitness {
    invariant: &'static str,
    scenario: &'static str,
    variant: fn() -> Arc<dyn Variant>,
    seeds: u64,
}

/// The one check function.
fn check(f: &Fitness) {
    let with = |seed: u64, variant: Option<Arc<dyn Variant>>| {
        let mut spec = common::spec(f.scenario, seed);
        if let Some(v) = variant {
            let mut scenario = (*spec.scenario).clone();
            scenario.engine = leasesim_builtin::with_variant(&scenario.engine, v);
            spec.scenario = Arc::new(scenario);
        }
        let outcome = runner::run_seed(&spec, runner::DEFAULT_WATCHDOG)
            .unwrap_or_else(|e| panic!("{} seed {seed}: {e}", f.scenario));
        outcome.violations.into_iter().find(|v| v.invariant == f.invariant).map(|v| v.message)
    };
    let found = (1..=f.seeds).find_map(|seed| with(seed, Some((f.variant)())).map(|message| (seed, message)));
    let Some((seed, message)) = found else {
        let name = (f.variant)().name().to_string();
        panic!("{}: the variant '{name}' was not caught in {} seeds of {}", f.invariant, f.seeds, f.scenario);
    };
    // `--nocapture` shows what each variant was caught by.
    eprintln!("{}: caught at seed {seed} of {} (within {}): {message}", f.invariant, f.scenario, f.seeds);
    assert!(with(seed, None).is_none(), "{}: seed {seed} of {} fails without the variant too", f.invariant, f.scenario);
}

macro_rules! fitness {
    ($($name:ident: $invariant:literal in $scenario:literal by $variant:expr, within $seeds:literal;)+) => {
        $(
            #[test]
            fn $name() {
                fn make() -> Arc<dyn Variant> {
                    Arc::new($variant)
                }
                check(&Fitness { invariant: $invariant, scenario: $scenario, variant: make, seeds: $seeds });
            }
        )+
        /// Every invariant has a fitness case.
        #[test]
        fn every_invariant_has_a_fitness_case() {
            let covered = [$($invariant),+];
            for (name, _) in leasesim_sim::check::invariants() {
                assert!(covered.contains(&name), "no fitness case for {name}");
            }
        }
    };
}

// ---------------------------------------------------------------------------
// Engines that run with other constants than the scenario promises
// ---------------------------------------------------------------------------

/// The engine reads one of its constants wrong.
struct Drift(&'static str, fn(&mut EngineConfig));

impl Variant for Drift {
    fn name(&self) -> &str {
        self.0
    }
    fn engine(&self, cfg: &mut EngineConfig) {
        (self.1)(cfg)
    }
}

/// Claim answers reach the worker 7.5 s late (a workflow task's 10 s lease
/// is then inside its promised 3.3 s renewal margin), and the engine
/// believes in a margin of a thirtieth of the TTL: it starts such grants as
/// they are, instead of confirming the lease by a renewal first.
struct LateClaimsStartedAsThey {}

impl Variant for LateClaimsStartedAsThey {
    fn name(&self) -> &str {
        "late claim answers started without confirming the lease"
    }
    fn engine(&self, cfg: &mut EngineConfig) {
        cfg.renew_divisor = 30;
    }
    fn call<'a>(&'a self, from: Option<Owner>, req: Request, send: Call) -> BoxFuture<'a, Result<Response, RpcError>> {
        Box::pin(async move {
            let claim = from.is_some() && matches!(req, Request::Claim { .. });
            let answer = send(req).await;
            if claim && matches!(&answer, Ok(Response::Claimed { grants }) if !grants.is_empty()) {
                tokio::time::sleep(Duration::from_millis(7_500)).await;
            }
            answer
        })
    }
}

// ---------------------------------------------------------------------------
// Stores that commit or answer wrongly
// ---------------------------------------------------------------------------

/// Completions apply by task id alone: the store rewrites a completion's
/// fence to whoever holds the task now.
struct CompletesByTaskId;

impl Variant for CompletesByTaskId {
    fn name(&self) -> &str {
        "completes by task id"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        let req = match req {
            Request::Complete { fence } => {
                let current = server.with_store(|s| s.task(fence.task).and_then(|t| Some((t.attempt, t.owner?))));
                match current {
                    Some((attempt, owner)) => {
                        Request::Complete { fence: leasesim::ids::Fence { attempt, owner, ..fence } }
                    }
                    None => Request::Complete { fence },
                }
            }
            other => other,
        };
        Box::pin(server.handle(req))
    }
}

/// A transaction pooler between the engine and the store: each statement
/// goes to whichever server session is free, so a transaction's later
/// statements land where it is not open ("no transaction in progress"),
/// while the session that opened it keeps it, and its locks, open.
#[derive(Default)]
struct TransactionPooler {
    opened: std::sync::Mutex<std::collections::BTreeSet<leasesim::ids::TxnId>>,
}

impl Variant for TransactionPooler {
    fn name(&self) -> &str {
        "transaction pooler"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        if let Request::Exec { txn, .. } = &req {
            if !self.opened.lock().expect("opened").insert(*txn) {
                let closed = Response::Rejected { reason: leasesim::proto::Rejection::TxnClosed };
                return Box::pin(async move { closed });
            }
        }
        Box::pin(server.handle(req))
    }
}

/// A claim first takes one leased task away from another owner, whatever its
/// lease, so the claim can grant it.
struct ClaimSteals;

impl Variant for ClaimSteals {
    fn name(&self) -> &str {
        "claim steals a leased task"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        if let Request::Claim { owner, .. } = &req {
            let victim = server.with_store(|s| {
                let leased =
                    s.tasks().find(|t| t.state == TaskState::Leased && t.owner.is_some_and(|o| o != *owner))?;
                let holder = leased.owner?;
                let keep = s.tasks().filter(|t| t.owner == Some(holder) && t.id != leased.id).map(|t| t.id).collect();
                Some((holder, keep))
            });
            if let Some((holder, running)) = victim {
                let as_of_ms = u64::MAX;
                server.apply_now(&Request::ReleaseOrphans { owner: holder, running, older_than_ms: 0, as_of_ms });
            }
        }
        Box::pin(server.handle(req))
    }
}

/// The store forgets which attempt completed a task: the same attempt's
/// retry of an applied completion (its first answer lost) is refused as if
/// the attempt no longer held the task, so its callback never comes. With
/// `stage_link`, the completion itself is answered as applied again and
/// only the stage transaction's first statement (clearing the stage link)
/// is refused on the retry.
#[derive(Default)]
struct ForgetsCompletions {
    stage_link: bool,
    applied: std::sync::Mutex<std::collections::BTreeSet<leasesim::ids::Fence>>,
}

impl Variant for ForgetsCompletions {
    fn name(&self) -> &str {
        if self.stage_link {
            "retried stage link refused"
        } else {
            "retried completion refused"
        }
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        Box::pin(async move {
            let refused = Response::Rejected { reason: leasesim::proto::Rejection::NotOwner };
            match req.statement().clone() {
                Request::ClearStageLink { fence } if self.stage_link => {
                    if self.applied.lock().expect("applied").contains(&fence) {
                        return refused;
                    }
                    server.handle(req).await
                }
                Request::Complete { fence } => {
                    if !self.stage_link && self.applied.lock().expect("applied").contains(&fence) {
                        return refused;
                    }
                    let answer = server.handle(req).await;
                    if matches!(answer, Response::Applied { .. }) {
                        self.applied.lock().expect("applied").insert(fence);
                    }
                    answer
                }
                _ => server.handle(req).await,
            }
        })
    }
}

/// The store forgets a ROLLBACK that overtakes its transaction's first
/// statement (acknowledged, never applied): the late statement then opens
/// the transaction, which holds its row lock until the store times it out.
#[derive(Default)]
struct ForgetsEarlyRollbacks {
    seen: std::sync::Mutex<std::collections::BTreeSet<leasesim::ids::TxnId>>,
}

impl Variant for ForgetsEarlyRollbacks {
    fn name(&self) -> &str {
        "rollback before the first statement forgotten"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        match &req {
            Request::Exec { txn, .. } => {
                self.seen.lock().expect("seen").insert(*txn);
            }
            Request::Rollback { txn } if !self.seen.lock().expect("seen").contains(txn) => {
                return Box::pin(async { Response::Ack });
            }
            _ => {}
        }
        Box::pin(server.handle(req))
    }
}

/// The store answers a lag-bounded query at once, as if its lag were 0.
struct QueryNotHeld;

impl Variant for QueryNotHeld {
    fn name(&self) -> &str {
        "query answered without waiting its lag"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        let req = match req {
            Request::QueryIndex { index, .. } => Request::QueryIndex { index, lag_timeout_ms: 0 },
            other => other,
        };
        Box::pin(server.handle(req))
    }
}

/// A claim answer leaves out the last task it granted.
struct ClaimHidesAGrant;

impl Variant for ClaimHidesAGrant {
    fn name(&self) -> &str {
        "claim answer hides a grant"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        Box::pin(async move {
            match server.handle(req).await {
                Response::Claimed { mut grants } if grants.len() > 1 => {
                    grants.pop();
                    Response::Claimed { grants }
                }
                other => other,
            }
        })
    }
}

/// Repair does its work on every tenth pass only and answers the others
/// "nothing to release", as a store whose per-group backoff outlives the
/// lease expiries it should look again at.
#[derive(Default)]
struct RepairSkipsPasses {
    passes: std::sync::atomic::AtomicU64,
}

impl Variant for RepairSkipsPasses {
    fn name(&self) -> &str {
        "repair backs off past lease expiries"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        if matches!(req, Request::Repair { .. })
            && !self.passes.fetch_add(1, std::sync::atomic::Ordering::Relaxed).is_multiple_of(10)
        {
            return Box::pin(async { Response::Released { tasks: 0 } });
        }
        Box::pin(server.handle(req))
    }
}

/// An index query answers "materialized" as soon as a build of it exists.
struct QueryTrustsBuilds;

impl Variant for QueryTrustsBuilds {
    fn name(&self) -> &str {
        "query trusts any build"
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        if let Request::QueryIndex { index, .. } = req {
            let built = server.with_store(|s| s.tasks().any(|t| t.spec.index == Some(index)));
            if built {
                return Box::pin(async { Response::Query { materialized: true } });
            }
        }
        Box::pin(server.handle(req))
    }
}

/// The pipeline snapshot lists every stage without a live task, and a stage
/// enqueue the guard refuses is inserted without it.
struct UnguardedStages {
    /// Also list (and insert) stages that are already done.
    done_too: bool,
}

impl Variant for UnguardedStages {
    fn name(&self) -> &str {
        if self.done_too {
            "stage enqueue without the done guard"
        } else {
            "stage enqueue without the order guard"
        }
    }
    fn store<'a>(&'a self, server: &'a StoreServer, req: Request) -> BoxFuture<'a, Response> {
        match req {
            Request::PipelineSnapshot { .. } => {
                let due: Vec<StageRef> = server.with_store(|s| {
                    s.stages()
                        .filter(|(_, row)| row.task.is_none() && (self.done_too || !row.done))
                        .map(|(st, _)| *st)
                        .collect()
                });
                Box::pin(async move { Response::Snapshot { due } })
            }
            Request::EnqueueStage { stage } => Box::pin(async move {
                match server.handle(Request::EnqueueStage { stage }).await {
                    Response::Rejected { .. } => {
                        let spec = TaskSpec {
                            kind: TaskKind::Stage,
                            group: Some(stage.pipeline),
                            stage: Some(stage),
                            index: None,
                            not_before_ms: 0,
                        };
                        server.handle(Request::Enqueue { spec, key: None }).await
                    }
                    other => other,
                }
            }),
            other => Box::pin(server.handle(other)),
        }
    }
}

/// A sweeper inside the store process reclaims and repairs expired leases on
/// its own timer, outside any request.
struct Sweeper;

impl Variant for Sweeper {
    fn name(&self) -> &str {
        "store-side sweeper"
    }
    fn store_process(&self, server: Arc<StoreServer>) -> Option<BoxFuture<'static, ()>> {
        Some(Box::pin(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(700)).await;
                let by = Owner { proc: 0, incarnation: 0 };
                server.apply_now(&Request::ReclaimExpired { by });
                server.apply_now(&Request::Repair { by });
            }
        }))
    }
}

// ---------------------------------------------------------------------------
// Workers and clients whose calls go wrong
// ---------------------------------------------------------------------------

/// What a call answers.
type Answer = BoxFuture<'static, Result<Response, RpcError>>;

/// A worker's or the client's calls, rewritten.
struct Calls(&'static str, fn(Option<Owner>, Request, Call) -> Answer);

impl Variant for Calls {
    fn name(&self) -> &str {
        self.0
    }
    fn call<'a>(&'a self, from: Option<Owner>, req: Request, send: Call) -> BoxFuture<'a, Result<Response, RpcError>> {
        (self.1)(from, req, send)
    }
}

/// A refused completion is taken for an applied one.
fn completion_always_applies(_: Option<Owner>, req: Request, send: Call) -> Answer {
    let complete = matches!(req.statement(), Request::Complete { .. });
    Box::pin(async move {
        match send(req).await {
            Ok(Response::Rejected { .. }) if complete => Ok(Response::Applied { retries: 0, retry_at_ms: None }),
            other => other,
        }
    })
}

/// A lease check's "not valid" is taken for "valid": the failure
/// transaction goes on to write the failure.
fn lease_check_always_valid(_: Option<Owner>, req: Request, send: Call) -> Answer {
    let check = matches!(req.statement(), Request::LeaseValid { .. });
    Box::pin(async move {
        match send(req).await {
            Ok(Response::Valid { valid: false }) if check => Ok(Response::Valid { valid: true }),
            other => other,
        }
    })
}

/// The client sends an enqueue again when the first answer does not come
/// within a second, under a fresh idempotency key.
fn enqueue_rekeyed(from: Option<Owner>, req: Request, send: Call) -> Answer {
    Box::pin(async move {
        let Request::Enqueue { spec, key } = req else { return send(req).await };
        if from.is_some() {
            return send(Request::Enqueue { spec, key }).await;
        }
        let first = tokio::spawn(send(Request::Enqueue { spec: spec.clone(), key }));
        tokio::select! {
            biased;
            answer = first => answer.unwrap_or(Err(RpcError::Unavailable)),
            _ = tokio::time::sleep(Duration::from_millis(1_000)) => {
                send(Request::Enqueue { spec, key: key.map(|k| k ^ 1 << 63) }).await
            }
        }
    })
}

/// A worker takes a refusal of its outcome write that says "nothing
/// applied, try again" (a statement or lock timeout, a conflict) as final.
fn outcome_refusal_final(from: Option<Owner>, req: Request, send: Call) -> Answer {
    use leasesim::proto::Rejection::{Conflict, LockTimeout, NotOwner, TimedOut};
    let outcome = from.is_some() && matches!(req.statement(), Request::Complete { .. } | Request::Fail { .. });
    Box::pin(async move {
        match send(req).await {
            Ok(Response::Rejected { reason: Conflict | TimedOut | LockTimeout }) if outcome => {
                Ok(Response::Rejected { reason: NotOwner })
            }
            other => other,
        }
    })
}

/// The client keys an enqueue by its content instead of by its call: a
/// long-lived client's second call with equal content (another job) is
/// answered with the first call's task. Calls from clients of their own
/// never meet this bug; the swarm's long-lived clients do.
fn enqueue_keyed_by_content(from: Option<Owner>, req: Request, send: Call) -> Answer {
    let req = match req {
        Request::Enqueue { spec, key: Some(key) } if from.is_none() => {
            let content = format!("{:?}", (spec.kind, spec.group, spec.index, spec.stage));
            let digest = content.bytes().fold(0u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)) & 0xff_ffff;
            Request::Enqueue { spec, key: Some((key >> 24) << 24 | digest) }
        }
        other => other,
    };
    send(req)
}

/// The client gives up on an enqueue at the first conflict, or when its
/// answer takes two seconds, as if either were final: the contract says it
/// sends again (with its key) on both.
fn enqueue_gives_up(from: Option<Owner>, req: Request, send: Call) -> Answer {
    Box::pin(async move {
        if from.is_some() || !matches!(req, Request::Enqueue { .. }) {
            return send(req).await;
        }
        let given_up = Ok(Response::Rejected { reason: leasesim::proto::Rejection::Missing });
        match tokio::time::timeout(Duration::from_millis(2_000), send(req)).await {
            Ok(Ok(Response::Rejected { reason: leasesim::proto::Rejection::Conflict })) | Err(_) => given_up,
            Ok(answer) => answer,
        }
    })
}

/// The client sends a scheduled enqueue without its not-before time: the
/// store writes a row that agrees with itself, only the application's call
/// says when the task may run.
fn schedule_dropped(from: Option<Owner>, req: Request, send: Call) -> Answer {
    let req = match req {
        Request::Enqueue { spec, key } if from.is_none() => {
            Request::Enqueue { spec: TaskSpec { not_before_ms: 0, ..spec }, key }
        }
        other => other,
    };
    send(req)
}

/// The client waits for a lag-bounded query's answer one RPC deadline
/// (10 s in swarm) instead of the lag plus one, and takes the silence for
/// "not materialized".
fn query_gives_up_early(from: Option<Owner>, req: Request, send: Call) -> Answer {
    Box::pin(async move {
        if from.is_some() || !matches!(req, Request::QueryIndex { .. }) {
            return send(req).await;
        }
        match tokio::time::timeout(Duration::from_millis(10_000), send(req)).await {
            Ok(answer) => answer,
            Err(_) => Err(RpcError::Unavailable),
        }
    })
}

/// The client asks the store to hold a query for half the lag the
/// application asked for (held-out set 8's `h8-query-wait-net-of-rpc` was of
/// this kind: the lag less one RPC deadline).
fn query_lag_halved(from: Option<Owner>, req: Request, send: Call) -> Answer {
    match req {
        Request::QueryIndex { index, lag_timeout_ms } if from.is_none() => {
            send(Request::QueryIndex { index, lag_timeout_ms: lag_timeout_ms / 2 })
        }
        req => send(req),
    }
}

/// A completion's answer is dropped at the worker after the store applied
/// it, as if an idempotent success were an error: no callback comes.
fn drops_applied_completions(from: Option<Owner>, req: Request, send: Call) -> Answer {
    Box::pin(async move {
        let complete = from.is_some() && matches!(req.statement(), Request::Complete { .. });
        match send(req).await {
            Ok(Response::Applied { .. }) if complete => Err(RpcError::Unavailable),
            answer => answer,
        }
    })
}

/// A maintenance call gives up after a second while its store work goes on.
fn maintenance_times_out(_: Option<Owner>, req: Request, send: Call) -> Answer {
    Box::pin(async move {
        if !matches!(req, Request::Maintain { .. }) {
            return send(req).await;
        }
        let call = tokio::spawn(send(req));
        tokio::select! {
            biased;
            answer = call => answer.unwrap_or(Err(RpcError::Unavailable)),
            _ = tokio::time::sleep(Duration::from_millis(1_000)) => Err(RpcError::Unavailable),
        }
    })
}

/// Every grant of a claim answer is handed out twice, when the worker asked
/// for room enough.
fn grants_twice(_: Option<Owner>, req: Request, send: Call) -> Answer {
    let asked = match req {
        Request::Claim { max, .. } => max as usize,
        _ => 0,
    };
    Box::pin(async move {
        match send(req).await {
            Ok(Response::Claimed { grants }) if grants.len() * 2 <= asked => {
                Ok(Response::Claimed { grants: grants.iter().flat_map(|g| [g.clone(), g.clone()]).collect() })
            }
            other => other,
        }
    })
}

/// A failed body is recorded as completed.
fn failure_completes(_: Option<Owner>, req: Request, send: Call) -> Answer {
    let req = match req {
        Request::Fail { fence, .. } => Request::Complete { fence },
        Request::Exec { txn, stmt, commit } => match *stmt {
            Request::Fail { fence, .. } => Request::Exec { txn, stmt: Box::new(Request::Complete { fence }), commit },
            stmt => Request::Exec { txn, stmt: Box::new(stmt), commit },
        },
        Request::LeaseValid { fence } => return Box::pin(async move { send(Request::LeaseValid { fence }).await }),
        other => other,
    };
    send(req)
}

/// Renewals are never sent.
fn never_renews(_: Option<Owner>, req: Request, send: Call) -> Answer {
    if matches!(req, Request::Renew { .. }) {
        return Box::pin(std::future::pending());
    }
    send(req)
}

/// A lease check's "not valid" is taken as no answer at all, so the
/// attempt tries its transaction again until its finalization deadline
/// (held-out set 7's `h7-invalid-lease-retried-to-deadline`).
fn not_valid_taken_as_lost(_: Option<Owner>, req: Request, send: Call) -> Answer {
    let check = matches!(req.statement(), Request::LeaseValid { .. });
    Box::pin(async move {
        match send(req).await {
            Ok(Response::Valid { valid: false }) if check => Err(RpcError::Unavailable),
            other => other,
        }
    })
}

/// A stopping worker keeps what it holds: its release of its own tasks
/// (the one that lists nothing running) is answered as done and never sent.
fn stop_keeps_its_tasks(_: Option<Owner>, req: Request, send: Call) -> Answer {
    match req {
        Request::ReleaseOrphans { ref running, older_than_ms: 0, .. } if running.is_empty() => {
            Box::pin(async { Ok(Response::Released { tasks: 0 }) })
        }
        req => send(req),
    }
}

/// A claim asks for one task fewer than the worker has permits free, as
/// if a permit it said it gave back had been lost.
fn claims_one_short(_: Option<Owner>, req: Request, send: Call) -> Answer {
    match req {
        Request::Claim { owner, max, wait_ms } if max >= 2 => send(Request::Claim { owner, max: max - 1, wait_ms }),
        req => send(req),
    }
}

/// Completions of index builds and stages are lost at the worker.
fn loses_completions(_: Option<Owner>, req: Request, send: Call) -> Answer {
    if matches!(req.statement(), Request::Complete { .. }) {
        return Box::pin(async { Err(RpcError::Unavailable) });
    }
    send(req)
}

/// A failed body's outcome is given up at the worker: never sent, as if
/// the write had failed. Recovery runs the task again later, and fencing
/// keeps the books straight: only the lost work shows.
fn loses_failures(_: Option<Owner>, req: Request, send: Call) -> Answer {
    if matches!(req.statement(), Request::Fail { .. }) {
        return Box::pin(async { Err(RpcError::Unavailable) });
    }
    send(req)
}

// ---------------------------------------------------------------------------
// An engine whose events lie
// ---------------------------------------------------------------------------

/// The store does not report its releases.
struct SilentReleases;

impl Variant for SilentReleases {
    fn name(&self) -> &str {
        "releases go unreported"
    }
    fn event(&self, event: Event) -> Option<Event> {
        (!matches!(event, Event::LeaseReleased { .. })).then_some(event)
    }
}

/// The store tells a created task (a scheduled one, a stage) due at 0 ms in its
/// `TaskCreated` event, though it wrote it due at its not-before time.
struct ScheduleToldDueAtOnce;

impl Variant for ScheduleToldDueAtOnce {
    fn name(&self) -> &str {
        "created tasks told due at 0 ms"
    }
    fn event(&self, event: Event) -> Option<Event> {
        Some(match event {
            Event::TaskCreated { task, spec, retry_at_ms } if retry_at_ms > 0 => {
                Event::TaskCreated { task, spec, retry_at_ms: 0 }
            }
            other => other,
        })
    }
}

/// The lease renewer stops when the body returns: an outcome write held or
/// retried past the lease's expiry finds the task taken.
#[derive(Default)]
struct StopsRenewingAtBodyEnd {
    ended: std::sync::Mutex<std::collections::BTreeSet<leasesim::ids::Fence>>,
}

impl Variant for StopsRenewingAtBodyEnd {
    fn name(&self) -> &str {
        "renewals stop when the body returns"
    }
    fn event(&self, event: Event) -> Option<Event> {
        if let Event::ExecutionFinished { fence, .. } = &event {
            self.ended.lock().expect("ended").insert(*fence);
        }
        Some(event)
    }
    fn call<'a>(&'a self, _: Option<Owner>, req: Request, send: Call) -> BoxFuture<'a, Result<Response, RpcError>> {
        if let Request::Renew { fence } = &req {
            if self.ended.lock().expect("ended").contains(fence) {
                return Box::pin(std::future::pending());
            }
        }
        send(req)
    }
}

fitness! {
    fenced_completion: "fenced-completion" in "b-machines" by CompletesByTaskId, within 60;
    single_owner: "single-owner" in "swarm" by ClaimSteals, within 20;
    lease_revocation: "lease-revocation" in "swarm" by Drift("dead after two heartbeats", |c| c.dead_after_ms = 2 * c.heartbeat_interval_ms + 1), within 40;
    lease_terms: "lease-terms" in "c-workflows" by Drift("half the workflow lease", |c| c.lease_ttl.workflow_task_ms = Some(5_000)), within 5;
    retry_clock: "retry-clock" in "swarm" by Drift("retry base of 1 s", |c| c.retry_base_ms = 1_000), within 20;
    retry_budget: "retry-budget" in "swarm" by Drift("one retry", |c| c.max_retries = 1), within 40;
    no_resurrection: "no-resurrection" in "b-machines" by UnguardedStages { done_too: true }, within 20;
    stage_order: "stage-order" in "b-machines" by UnguardedStages { done_too: false }, within 20;
    exactly_once: "exactly-once-completion" in "swarm" by Calls("refused completion taken as applied", completion_always_applies), within 60;
    enqueue_once: "enqueue-once" in "swarm" by Calls("enqueue retried without a key", enqueue_rekeyed), within 40;
    callback_kept: "callback-kept" in "swarm" by Calls("applied completions taken as errors", drops_applied_completions), within 20;
    callback_after_a_retry: "callback-kept" in "swarm" by ForgetsCompletions::default(), within 40;
    callback_after_a_stage_retry: "callback-kept" in "swarm" by ForgetsCompletions { stage_link: true, ..Default::default() }, within 60;
    query_held_its_lag: "query-truth" in "swarm" by QueryNotHeld, within 20;
    enqueue_by_content: "enqueue-once" in "swarm" by Calls("enqueue keyed by its content", enqueue_keyed_by_content), within 40;
    enqueue_retried: "enqueue-retried" in "swarm" by Calls("enqueue given up at a conflict or a slow answer", enqueue_gives_up), within 40;
    schedule_kept: "retry-clock" in "swarm" by Calls("schedule dropped by the client", schedule_dropped), within 20;
    // A scenario of the tests (the path is the test's, run from `sim/`).
    recovery_delay_kept: "retry-clock" in "../tests/scenarios/swarm-recovery-delay.toml" by Drift("the recovery delay dropped", |c| c.recovery_delay_ms = 0), within 20;
    query_waits_its_lag: "query-truth" in "swarm" by Calls("query given up after one RPC deadline", query_gives_up_early), within 20;
    query_asks_its_lag: "query-truth" in "swarm" by Calls("the store asked to hold a query half its lag", query_lag_halved), within 20;
    store_reply: "store-reply" in "swarm" by ClaimHidesAGrant, within 20;
    repair_reclaims_expired: "store-reply" in "c-workflows" by RepairSkipsPasses::default(), within 20;
    transactions: "transactions" in "swarm" by TransactionPooler::default(), within 20;
    transaction_ended_stays_ended: "transactions" in "swarm" by ForgetsEarlyRollbacks::default(), within 60;
    lease_check_guards: "transactions" in "swarm" by Calls("a lease check's 'not valid' taken as 'valid'", lease_check_always_valid), within 20;
    query_truth: "query-truth" in "a-index-builds" by QueryTrustsBuilds, within 20;
    single_flight: "single-flight-maintenance" in "a-index-builds" by Calls("maintenance call times out", maintenance_times_out), within 60;
    reconciliation: "reconciliation" in "c-workflows" by Sweeper, within 40;
    execution_exclusive: "execution-exclusive" in "swarm" by Calls("grants handed out twice", grants_twice), within 10;
    concurrency_bound: "concurrency-bound" in "a-index-builds" by Drift("six permits", |c| c.concurrency = 6), within 20;
    outcome_truth: "outcome-truth" in "swarm" by Calls("failures recorded as completions", failure_completes), within 20;
    outcome_kept: "outcome-kept" in "swarm" by Calls("failures lost at the worker", loses_failures), within 20;
    outcome_retried: "outcome-kept" in "swarm" by Calls("a retryable refusal of an outcome taken as final", outcome_refusal_final), within 100;
    keepalive: "keepalive" in "swarm" by Calls("never renews", never_renews), within 60;
    final_answer: "final-answer" in "swarm" by Calls("a \"not valid\" lease check taken as no answer", not_valid_taken_as_lost), within 40;
    stop_waits_its_grace: "graceful-stop" in "rolling-deploy" by Drift("a stop grace of 2 s", |c| c.stop_grace_ms = 2_000), within 20;
    stop_leaves_in_time: "graceful-stop" in "rolling-deploy" by Drift("a stop grace of 25 s", |c| c.stop_grace_ms = 25_000), within 20;
    stop_gives_back: "graceful-stop" in "rolling-deploy" by Calls("the stop's release never sent", stop_keeps_its_tasks), within 20;
    heartbeat_at_its_bound: "keepalive" in "b-machines" by Drift("heartbeats half a second late", |c| c.heartbeat_interval_ms += 500), within 5;
    start_margin: "keepalive" in "swarm" by LateClaimsStartedAsThey {}, within 20;
    renewed_until_recorded: "keepalive" in "swarm" by StopsRenewingAtBodyEnd::default(), within 60;
    no_permit_leak: "no-permit-leak" in "a-index-builds" by Drift("a finalization deadline ten times longer", |c| c.finalize_deadline_ms *= 10), within 60;
    permit_given_back: "no-permit-leak" in "swarm" by Calls("claims one permit short", claims_one_short), within 10;
    testimony: "testimony" in "c-workflows" by SilentReleases, within 40;
    testimony_of_a_schedule: "testimony" in "swarm" by ScheduleToldDueAtOnce, within 20;
    claim_progress: "claim-progress" in "a-index-builds" by Drift("idle poll of a minute", |c| c.idle_poll_ms = 60_000), within 20;
    expired_lease_recovery: "expired-lease-recovery" in "a-index-builds" by Drift("recovery every 5 minutes", |c| c.recovery_interval_ms = 300_000), within 60;
    materialization: "materialization" in "a-index-builds" by Calls("completions lost", loses_completions), within 20;
    eventual_completion: "eventual-completion" in "b-machines" by Calls("completions lost", loses_completions), within 20;
    pass_cadence: "pass-cadence" in "c-workflows" by Drift("repair on the reclaim period", |c| c.repair_interval_ms = c.recovery_interval_ms), within 10;
    maintenance_cadence: "pass-cadence" in "a-index-builds" by Drift("maintenance every minute", |c| c.maintenance_interval_ms = 60_000), within 10;
}
