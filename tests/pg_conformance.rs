//! The store model against a real PostgreSQL.
//!
//! Every run of the harness trusts `Store::apply`, a hand-written model of
//! what the seed systems' SQL stores do. This test checks it against the
//! production-shaped SQL in `tests/pg/store.rs`: proptest generates request
//! sequences (several owners and incarnations, attempts, clock steps to the
//! instants where rules flip, stale and forged fences, missing rows, terminal
//! rows, stages, indexes, transactions that span round trips), applies each
//! request to the model and to PostgreSQL, and compares every response and,
//! after every request, every row of every table. A transaction that spans
//! round trips runs in a PostgreSQL session of its own, concurrent with the
//! others (`tests/pg/sessions.rs`): its row locks are real, and so are the
//! waits and skips they cause.
//!
//! PostgreSQL starts by itself: a throwaway cluster on a temporary directory
//! (`tests/pg/cluster.rs`), one per test process, emptied between sequences.
//! Without server binaries the test prints one line saying it was skipped;
//! with `CI` set it fails instead. 1,000 sequences by default
//! (`PROPTEST_CASES` to change), a fixed seed (`PROPTEST_RNG_SEED` to
//! change); shrunk failures are kept in `tests/pg_conformance.proptest-regressions`
//! and replayed first. See docs/store-fidelity.md.

mod pg;

use leasesim::config::{EngineConfig, LeaseTtls, MaintenanceKind};
use leasesim::event::NullObserver;
use leasesim::handler::TaskError;
use leasesim::ids::{Fence, GroupId, IndexId, Owner, StageRef, TaskId, TxnId};
use leasesim::proto::{Request, Response};
use leasesim::store::Store;
use leasesim::task::{Task, TaskKind, TaskSpec, TaskState};
use pg::cluster::{self, Cluster};
use pg::store::{describe, PgStore};
use pg::Rows;
use postgres::error::SqlState;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed, TestRunner};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const REGRESSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pg_conformance.proptest-regressions");
const JANITOR: Owner = Owner { proc: 99, incarnation: 0 };
const SEQUENCES: u32 = 1_000;
/// A chunk is one op, or a clock jump and one op.
const MAX_CHUNKS: usize = 36;

#[test]
fn store_model_agrees_with_postgres() {
    let Some(mut cluster) = cluster_or_skip() else { return };
    let client = cluster.connect().unwrap_or_else(|e| panic!("pg_conformance: cannot connect: {e}"));
    let mut pg = PgStore::create(client, cluster.conninfo()).expect("the schema applies");
    let version = pg.server_version().expect("the server says its version");
    let (pg, tally) = (RefCell::new(pg), RefCell::new(Tally::default()));
    let started = Instant::now();
    let mut runner = TestRunner::new(proptest_config());
    let result = runner.run(&sequence(), |(deployment, ops)| {
        check_sequence(&mut pg.borrow_mut(), deployment, &ops, &mut tally.borrow_mut())
    });
    if let Err(failure) = result {
        panic!("pg_conformance: the store model and PostgreSQL {version} disagree: {failure}");
    }
    a_pass_past_its_statement_timeout_applies_nothing(&mut cluster, &mut pg.borrow_mut());
    let (tally, txns) = (tally.into_inner(), pg.borrow().txn_counts());
    say(&format!(
        "pg_conformance: {} sequences, {} requests ({} transactions spanning round trips, {} committed, \
         {} statements in them, {} lock waits (55P03), {} sweeps that skipped a locked row): \
         the model agrees with PostgreSQL {version} ({:.1} s)",
        tally.sequences,
        tally.requests,
        txns.txns,
        txns.commits,
        txns.statements,
        txns.lock_waits,
        tally.count("skips a locked row"),
        started.elapsed().as_secs_f64()
    ));
}

/// A maintenance pass past its statement timeout applies nothing, in
/// PostgreSQL as in the store process (`StoreServer::handle` answers
/// `TimedOut` and never calls `Store::apply`, so the sequences cannot show
/// it): here the pass waits on a row lock another session holds (the
/// `hung-maintenance` fault's "a lock it waits on") until `statement_timeout`
/// cancels it; the whole transaction rolls back. Once the lock is gone the
/// same pass applies what `Store::apply` applies.
fn a_pass_past_its_statement_timeout_applies_nothing(cluster: &mut Cluster, pg: &mut PgStore) {
    let cfg = EngineConfig::default();
    pg.reset(&cfg).expect("reset the store");
    let mut model = Store::new(cfg);
    let owner = Owner { proc: 1, incarnation: 0 };
    let spec = TaskSpec { kind: TaskKind::IndexBuild, group: None, stage: None, index: Some(7), not_before_ms: 0 };
    let mut both = |req: &Request| {
        let got = pg.apply(0, req).unwrap_or_else(|e| panic!("{req:?}: {}", describe(&e)));
        assert_eq!(model.apply(0, req, &NullObserver), got, "{req:?}");
    };
    both(&Request::Enqueue { spec, key: None });
    both(&Request::Claim { owner, max: 1, wait_ms: 0 });
    both(&Request::Complete { fence: Fence { task: 1, attempt: 1, owner } });
    let pass = |timeout_ms| Request::Maintain { owner, kind: MaintenanceKind::Index, timeout_ms };

    // The other session holds the lock until told, or for 10 s at most: a
    // pass that ignored its timeout would wait that long, then apply.
    let mut blocker = cluster.connect().expect("a second session");
    let (locked, release) = (mpsc::channel(), mpsc::channel::<()>());
    let holder = std::thread::spawn(move || {
        let mut lock = blocker.transaction().expect("begin");
        lock.execute("SELECT 1 FROM built_indexes FOR UPDATE", &[]).expect("lock the built index");
        locked.0.send(()).expect("say it is locked");
        let _ = release.1.recv_timeout(Duration::from_secs(10));
        lock.rollback().expect("release the lock");
    });
    locked.1.recv().expect("the lock is held");
    let timed_out = pg.apply(0, &pass(Some(200)));
    // (The holder is gone already if the pass waited it out.)
    let _ = release.0.send(());
    holder.join().expect("the lock holder");
    let e = timed_out.expect_err("the pass waits on the lock until its statement timeout");
    assert_eq!(e.code(), Some(&SqlState::QUERY_CANCELED), "{}", describe(&e));
    let rows = pg.rows().expect("read the rows");
    assert_eq!(Rows::of_model(&model).difference(&rows), None, "a timed-out pass applied something");
    assert_eq!(rows.built.len(), 1);

    let want = model.apply(0, &pass(None), &NullObserver);
    assert_eq!(pg.apply(0, &pass(Some(5_000))).map_err(|e| describe(&e)), Ok(want));
    let rows = pg.rows().expect("read the rows");
    assert_eq!(Rows::of_model(&model).difference(&rows), None);
    assert_eq!(rows.materialized, vec![7]);
}

/// A running cluster, or `None` (after saying so) where no server binaries
/// exist. Under CI a missing server is a failure: `.ci/run` installs it.
fn cluster_or_skip() -> Option<Cluster> {
    let Some(bindir) = cluster::find_bindir() else {
        let hint = cluster::INSTALL_HINT;
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            panic!("pg_conformance: no PostgreSQL server binaries under CI ({hint}); .ci/run installs them");
        }
        say(&format!("pg_conformance: SKIPPED: no PostgreSQL server binaries ({hint})"));
        return None;
    };
    match Cluster::start(&bindir) {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("pg_conformance: cannot start PostgreSQL from {}: {e}", bindir.display()),
    }
}

/// One line on the terminal even when libtest captures the test's output
/// (it captures `print!` and `eprint!`, not writes to the stderr handle).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn proptest_config() -> ProptestConfig {
    let base = ProptestConfig::default();
    let set = |name: &str| std::env::var_os(name).is_some();
    ProptestConfig {
        cases: if set("PROPTEST_CASES") { base.cases } else { SEQUENCES },
        rng_seed: if set("PROPTEST_RNG_SEED") { base.rng_seed } else { RngSeed::Fixed(0x5eed_5a1e) },
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..base
    }
}

// ---------------------------------------------------------------------------
// Running one sequence against both.
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Tally {
    sequences: u32,
    requests: u64,
    /// (request, outcome) pairs seen, to keep the generator honest.
    outcomes: BTreeMap<(&'static str, String), u32>,
}

impl Tally {
    /// How many requests were seen with this outcome or situation.
    fn count(&self, label: &str) -> u32 {
        self.outcomes.iter().filter(|((_, l), _)| l == label).map(|(_, n)| n).sum()
    }

    fn record(&mut self, req: &Request, resp: &Response, situations: &[&'static str]) {
        self.requests += 1;
        *self.outcomes.entry((req.op_name(), outcome(req, resp))).or_default() += 1;
        for situation in situations {
            *self.outcomes.entry((req.op_name(), situation.to_string())).or_default() += 1;
        }
    }
}

fn check_sequence(
    pg: &mut PgStore,
    deployment: Deployment,
    ops: &[Op],
    tally: &mut Tally,
) -> Result<(), TestCaseError> {
    let cfg = deployment.config();
    let failed =
        |what: &str, e: postgres::Error| TestCaseError::fail(format!("PostgreSQL error {what}: {}", describe(&e)));
    pg.reset(&cfg).map_err(|e| failed("resetting the store", e))?;
    let mut world = World::new(cfg);
    for (step, op) in ops.iter().enumerate() {
        let Some(req) = world.request(op) else { continue };
        let (now, situations) = (world.now_ms, world.situations(&req));
        let want = world.store.apply(now, &req, &NullObserver);
        let got = pg.apply(now, &req).map_err(|e| failed(&format!("at step {step} ({now} ms): {req:?}"), e))?;
        prop_assert_eq!(&want, &got, "step {} at {} ms: {:?} (left: model, right: PostgreSQL)", step, now, req);
        let rows = pg.rows().map_err(|e| failed("reading the rows", e))?;
        if let Some(difference) = Rows::of_model(&world.store).difference(&rows) {
            return Err(TestCaseError::fail(format!("after step {step} at {now} ms: {req:?}: {difference}")));
        }
        tally.record(&req, &want, &situations);
        world.answered(&req, &want);
    }
    tally.sequences += 1;
    Ok(())
}

/// The generator's view of a run: the model, the clock, what was granted,
/// the last completion that applied, the transactions of the slots.
struct World {
    store: Store,
    cfg: EngineConfig,
    now_ms: u64,
    granted: Vec<Fence>,
    last_completed: Option<Fence>,
    /// The transaction each slot runs now, if any.
    slots: [Option<TxnId>; TXN_SLOTS],
    /// The fence of the first statement of each slot's latest transaction.
    slot_fences: [Option<Fence>; TXN_SLOTS],
    next_seq: u64,
    /// Transactions that ended, for late statements.
    ended: Vec<TxnId>,
}

impl World {
    fn new(cfg: EngineConfig) -> World {
        World {
            store: Store::new(cfg.clone()),
            cfg,
            now_ms: 0,
            granted: Vec::new(),
            last_completed: None,
            slots: [None; TXN_SLOTS],
            slot_fences: [None; TXN_SLOTS],
            next_seq: 0,
            ended: Vec::new(),
        }
    }

    /// A statement of the transaction in `slot`; the first one opens a
    /// transaction owned by its fence's owner.
    fn exec(&mut self, slot: usize, stmt: &TxnStmt, commit: bool) -> Request {
        let stmt = self.statement(stmt);
        let txn = match self.slots[slot] {
            Some(txn) => txn,
            None => {
                let fence = stmt_fence(&stmt);
                self.next_seq += 1;
                self.slot_fences[slot] = Some(fence);
                let txn = TxnId { owner: fence.owner, seq: self.next_seq };
                self.slots[slot] = Some(txn);
                txn
            }
        };
        Request::Exec { txn, stmt: Box::new(stmt), commit }
    }

    fn statement(&self, stmt: &TxnStmt) -> Request {
        match *stmt {
            TxnStmt::LeaseValid(pick) => Request::LeaseValid { fence: self.fence(pick) },
            TxnStmt::Complete(pick) => Request::Complete { fence: self.fence(pick) },
            TxnStmt::Fail(pick, error) => Request::Fail { fence: self.fence(pick), error },
            TxnStmt::ClearStageLink(pick) => Request::ClearStageLink { fence: self.fence(pick) },
        }
    }

    /// The slot's transaction rolled back; with none, one never opened (a
    /// rollback that overtook its first statement), which ends it for good.
    fn rollback(&mut self, slot: usize, owner: Owner) -> Request {
        let txn = self.slots[slot].unwrap_or_else(|| {
            self.next_seq += 1;
            let txn = TxnId { owner, seq: self.next_seq };
            self.ended.push(txn);
            txn
        });
        Request::Rollback { txn }
    }

    /// Slots whose transaction is no longer open in the model are free.
    fn end_closed_slots(&mut self) {
        let open: Vec<TxnId> = self.store.open_txns().collect();
        for slot in &mut self.slots {
            if let Some(txn) = slot.filter(|txn| !open.contains(txn)) {
                self.ended.push(txn);
                *slot = None;
            }
        }
    }

    /// The request `op` makes now, or `None` for a clock step.
    fn request(&mut self, op: &Op) -> Option<Request> {
        let now = self.now_ms;
        Some(match op {
            Op::Advance(ms) => {
                self.now_ms += ms;
                return None;
            }
            Op::AdvanceToEdge(edge, i, delta) => {
                let edges = self.edges(*edge);
                if !edges.is_empty() {
                    let target = edges[i % edges.len()].saturating_add_signed((*delta).into());
                    self.now_ms = self.now_ms.max(target);
                }
                return None;
            }
            Op::Enqueue { kind, group, index, stage, delay_ms, key } => {
                let not_before_ms = delay_ms.map_or(0, |d| now + d);
                let spec = TaskSpec { kind: *kind, group: *group, stage: *stage, index: *index, not_before_ms };
                Request::Enqueue { spec, key: *key }
            }
            Op::CreatePipeline { pipeline, stages } => Request::CreatePipeline { pipeline: *pipeline, stages: *stages },
            Op::Claim { owner, max } => Request::Claim { owner: *owner, max: *max, wait_ms: 0 },
            Op::Heartbeat(owner) => Request::Heartbeat { owner: *owner },
            Op::Deregister(owner) => Request::Deregister { owner: *owner },
            Op::Renew(pick) => Request::Renew { fence: self.fence(*pick) },
            Op::LeaseValid(pick) => Request::LeaseValid { fence: self.fence(*pick) },
            Op::Complete(pick) => Request::Complete { fence: self.fence(*pick) },
            Op::Fail(pick, error) => Request::Fail { fence: self.fence(*pick), error: *error },
            Op::ClearStageLink(pick) => Request::ClearStageLink { fence: self.fence(*pick) },
            Op::ReleaseDead => Request::ReleaseDead { by: JANITOR },
            Op::ReleaseOrphans(orphans) => self.release_orphans(orphans),
            Op::ReclaimExpired => Request::ReclaimExpired { by: JANITOR },
            Op::Repair => Request::Repair { by: JANITOR },
            Op::Maintain(owner, kind, timeout_ms) => {
                Request::Maintain { owner: *owner, kind: *kind, timeout_ms: *timeout_ms }
            }
            Op::PipelineSnapshot => Request::PipelineSnapshot { by: JANITOR },
            Op::EnqueueStage(pick) => Request::EnqueueStage { stage: self.stage(*pick) },
            Op::QueryIndex(index) => Request::QueryIndex { index: *index, lag_timeout_ms: 0 },
            Op::Exec { slot, stmt, commit } => self.exec(*slot, stmt, *commit),
            Op::Rollback(slot, owner) => self.rollback(*slot, *owner),
            Op::Late(i, stmt) => {
                let txn = *self.ended.get(i % self.ended.len().max(1))?;
                Request::Exec { txn, stmt: Box::new(self.statement(stmt)), commit: false }
            }
            Op::LateRollback(i) => Request::Rollback { txn: *self.ended.get(i % self.ended.len().max(1))? },
        })
    }

    fn answered(&mut self, req: &Request, resp: &Response) {
        self.end_closed_slots();
        match (req, resp) {
            (_, Response::Claimed { grants }) => self.granted.extend(grants.iter().map(|g| g.fence)),
            (Request::Complete { fence }, Response::Applied { .. }) => self.last_completed = Some(*fence),
            _ => {}
        }
    }

    /// The current fences of leased tasks, in task order.
    fn live_fences(&self) -> Vec<Fence> {
        let leased = self.store.tasks().filter(|t| t.state == TaskState::Leased);
        leased
            .map(|t| Fence { task: t.id, attempt: t.attempt, owner: t.owner.expect("leased task has an owner") })
            .collect()
    }

    fn fence(&self, pick: Pick) -> Fence {
        let granted_at = |i: usize| match self.granted.len() {
            0 => Fence { task: (i % 4) as TaskId + 1, attempt: 1, owner: Owner { proc: 1, incarnation: 0 } },
            n => self.granted[i % n],
        };
        match pick {
            Pick::Live(i) => {
                let live = self.live_fences();
                if live.is_empty() {
                    granted_at(i)
                } else {
                    live[i % live.len()]
                }
            }
            Pick::Newest => self.live_fences().last().copied().unwrap_or_else(|| granted_at(0)),
            Pick::OfSlot(slot) => self.slot_fences[slot].unwrap_or_else(|| self.fence(Pick::Newest)),
            Pick::Granted(i) => granted_at(i),
            Pick::OtherOwner(i, owner) => Fence { owner, ..granted_at(i) },
            Pick::OtherAttempt(i, up) => {
                let fence = granted_at(i);
                let attempt = if up { fence.attempt + 1 } else { fence.attempt.saturating_sub(1) };
                Fence { attempt, ..fence }
            }
            Pick::Missing(i) => Fence { task: 1_000 + i as TaskId, ..granted_at(i) },
            Pick::LastCompleted => self.last_completed.unwrap_or_else(|| granted_at(0)),
            Pick::Completed(i, other_owner) => {
                let completions: Vec<Fence> = self.store.completions().collect();
                let fence = match completions.len() {
                    0 => granted_at(i),
                    n => completions[i % n],
                };
                Fence { owner: other_owner.unwrap_or(fence.owner), ..fence }
            }
        }
    }

    fn stage(&self, pick: StagePick) -> StageRef {
        match pick {
            StagePick::Due(i) => {
                // The model's own snapshot, on a copy: the generator never changes it.
                let snapshot =
                    self.store.clone().apply(self.now_ms, &Request::PipelineSnapshot { by: JANITOR }, &NullObserver);
                match snapshot {
                    Response::Snapshot { due } if !due.is_empty() => due[i % due.len()],
                    _ => StageRef { pipeline: 1, index: 0 },
                }
            }
            StagePick::Done(i) => {
                let done: Vec<StageRef> = self.store.stages().filter(|(_, row)| row.done).map(|(s, _)| *s).collect();
                done.get(i % done.len().max(1)).copied().unwrap_or(StageRef { pipeline: 1, index: 0 })
            }
            StagePick::Any(stage) => stage,
        }
    }

    fn release_orphans(&self, o: &Orphans) -> Request {
        let live = self.live_fences();
        let owner = match o.of_live {
            Some(i) if !live.is_empty() => live[i % live.len()].owner,
            _ => o.owner,
        };
        let mine = self.store.tasks().filter(|t| t.state == TaskState::Leased && t.owner == Some(owner));
        let mut running: Vec<TaskId> =
            mine.enumerate().filter(|(i, _)| o.running_mask & (1 << (i % 8)) != 0).map(|(_, t)| t.id).collect();
        if o.lists_missing_task {
            running.push(999);
        }
        let as_of_ms = self.now_ms.saturating_add_signed(-o.listed_ago_ms);
        Request::ReleaseOrphans { owner, running, older_than_ms: o.older_than_ms, as_of_ms }
    }

    /// The instants from now on at which a rule of this kind flips, ascending.
    fn edges(&self, edge: Edge) -> Vec<u64> {
        let tasks = || self.store.tasks();
        let edges: BTreeSet<u64> = match edge {
            Edge::LeaseExpiry => tasks().filter_map(|t| t.lease_expiry_ms).collect(),
            Edge::RetryAt => tasks().filter(|t| t.state == TaskState::Ready).map(|t| t.retry_at_ms).collect(),
            Edge::Stale => self.store.heartbeats().map(|(_, last_ms)| last_ms + self.cfg.dead_after_ms).collect(),
            Edge::RepairLook => self.store.repair_schedule().map(|(_, _, next_at_ms)| next_at_ms).collect(),
            Edge::OrphanAge => {
                tasks().filter(|t| t.state == TaskState::Leased).map(|t| t.updated_ms + ORPHAN_AGE_MS).collect()
            }
            Edge::TxnDeadline => self.store.next_txn_deadline_ms().into_iter().collect(),
        };
        edges.into_iter().filter(|&t| t >= self.now_ms).collect()
    }

    /// What is special about running `req` now: an edge it runs exactly at
    /// (where a `<` written for a `<=`, or the reverse, answers differently),
    /// or a stage it targets that is done or already has a task.
    fn situations(&self, req: &Request) -> Vec<&'static str> {
        let look_due = matches!(req, Request::Repair { .. })
            && self.store.repair_schedule().any(|(_, _, next_at_ms)| next_at_ms == self.now_ms && self.now_ms > 0);
        let stage = match req {
            Request::EnqueueStage { stage } => self.store.stage(*stage),
            _ => None,
        };
        let mut labels = vec![
            (self.runs_at_edge(req), "at an edge"),
            (look_due, "at a repair look"),
            (stage.is_some_and(|row| row.done), "on a done stage"),
            (stage.is_some_and(|row| row.task.is_some()), "on a linked stage"),
        ];
        labels.extend(self.keys_and_retries(req));
        labels.extend(self.indexes(req));
        labels.extend(self.liveness_and_lists(req));
        labels.extend(self.transactions(req));
        labels.into_iter().filter(|(hit, _)| *hit).map(|(_, label)| label).collect()
    }

    /// Repeated enqueue keys, and completions retried or made on done tasks.
    fn keys_and_retries(&self, req: &Request) -> Vec<(bool, &'static str)> {
        match req {
            Request::Enqueue { spec, key } => {
                let keyed = key.and_then(|k| self.store.enqueue_keys().find(|&(seen, _)| seen == k));
                let same_spec = keyed.and_then(|(_, task)| self.store.task(task)).is_some_and(|t| t.spec == *spec);
                vec![
                    (key.is_some() && keyed.is_none(), "new key"),
                    (keyed.is_some(), "repeated key"),
                    (keyed.is_some() && !same_spec, "repeated key, other spec"),
                ]
            }
            Request::Complete { fence } => {
                let completer = self.store.completions().find(|c| c.task == fence.task);
                let retries = self.store.task(fence.task).map_or(0, |t| t.retries);
                vec![
                    (completer == Some(*fence), "retried by its completer"),
                    (completer == Some(*fence) && retries > 0, "retried by its completer after failures"),
                    (completer.is_some_and(|c| c.attempt != fence.attempt), "on a done task, stale attempt"),
                    (
                        completer.is_some_and(|c| c.attempt == fence.attempt && c.owner != fence.owner),
                        "on a done task, completer's attempt, other owner",
                    ),
                ]
            }
            _ => vec![],
        }
    }

    /// Index builds that complete, passes that finalize them, queries between.
    fn indexes(&self, req: &Request) -> Vec<(bool, &'static str)> {
        let built = |index: IndexId| self.store.built_by().any(|(i, _)| i == index);
        match req {
            Request::Complete { fence } => {
                let task = self.store.task(fence.task).filter(|t| t.state == TaskState::Leased);
                let build = task.filter(|t| t.spec.kind == TaskKind::IndexBuild).and_then(|t| t.spec.index);
                vec![
                    (build.is_some(), "completes an index build"),
                    (build.is_some_and(built), "completes a build of a built index"),
                    (build.is_some_and(|i| self.store.is_materialized(i)), "completes a build of a materialized index"),
                ]
            }
            Request::Maintain { kind, .. } => {
                let index_pass = *kind == MaintenanceKind::Index;
                let any_built = self.store.built_by().next().is_some();
                vec![
                    (index_pass && any_built, "index pass finalizes"),
                    (index_pass && !any_built, "index pass, nothing built"),
                    (!index_pass && any_built, "other pass, an index built"),
                ]
            }
            Request::QueryIndex { index, .. } => vec![(built(*index), "built, not finalized")],
            _ => vec![],
        }
    }

    /// First claims (a sign of life), and orphan lists made before a grant or
    /// on a clock ahead of the store's.
    fn liveness_and_lists(&self, req: &Request) -> Vec<(bool, &'static str)> {
        match req {
            Request::Claim { owner, .. } => {
                vec![(self.store.heartbeats().all(|(o, _)| o != *owner), "first claim of an owner")]
            }
            Request::ReleaseOrphans { owner, as_of_ms, .. } => {
                let mut mine = self.store.tasks().filter(|t| t.state == TaskState::Leased && t.owner == Some(*owner));
                vec![
                    (mine.any(|t| t.updated_ms > *as_of_ms), "as of before a grant"),
                    (*as_of_ms > self.now_ms, "as of after now"),
                ]
            }
            _ => vec![],
        }
    }

    /// Requests that wait for a row lock, sweeps and claims whose answer the
    /// rows locked by open transactions change, requests past a deadline.
    fn transactions(&self, req: &Request) -> Vec<(bool, &'static str)> {
        let past_deadline = self.store.next_txn_deadline_ms().is_some_and(|d| d <= self.now_ms);
        let waits = !past_deadline && self.store.clone().blocked_until(self.now_ms, req).is_some();
        let sweep = matches!(
            req,
            Request::Claim { .. }
                | Request::ReleaseDead { .. }
                | Request::ReleaseOrphans { .. }
                | Request::ReclaimExpired { .. }
                | Request::Repair { .. }
        );
        let skips = sweep && self.store.open_txns().next().is_some() && {
            let (mut locked, mut unlocked) = (self.store.clone(), self.store.clone());
            unlocked.abort_all_txns();
            locked.apply(self.now_ms, req, &NullObserver) != unlocked.apply(self.now_ms, req, &NullObserver)
        };
        vec![(past_deadline, "past a txn deadline"), (waits, "waits for a lock"), (skips, "skips a locked row")]
    }

    /// Does `req` run exactly at an instant where its answer turns?
    fn runs_at_edge(&self, req: &Request) -> bool {
        let now = self.now_ms;
        let leased = || self.store.tasks().filter(|t| t.state == TaskState::Leased);
        let expires_now = |t: &&Task| t.lease_expiry_ms == Some(now);
        match req {
            Request::ReclaimExpired { .. } => leased().filter(expires_now).any(|t| t.spec.group.is_none()),
            Request::Repair { .. } => leased().filter(expires_now).any(|t| t.spec.group.is_some()),
            Request::LeaseValid { fence } => self.store.task(fence.task).is_some_and(|t| expires_now(&t)),
            Request::Claim { .. } => self.store.tasks().any(|t| t.state == TaskState::Ready && t.retry_at_ms == now),
            Request::ReleaseDead { .. } => {
                let last_ms: BTreeMap<Owner, u64> = self.store.heartbeats().collect();
                let stale_now = |o: Owner| last_ms.get(&o).is_some_and(|&l| l + self.cfg.dead_after_ms == now);
                leased().any(|t| t.lease_expiry_ms.is_none() && t.owner.is_some_and(stale_now))
            }
            Request::ReleaseOrphans { owner, older_than_ms, as_of_ms, .. } => {
                let listed_ms = now.min(*as_of_ms);
                leased().any(|t| t.owner == Some(*owner) && listed_ms.saturating_sub(t.updated_ms) == *older_than_ms)
            }
            _ => false,
        }
    }
}

/// The fence of a statement that runs in a transaction.
fn stmt_fence(stmt: &Request) -> Fence {
    match stmt {
        Request::LeaseValid { fence }
        | Request::Complete { fence }
        | Request::Fail { fence, .. }
        | Request::ClearStageLink { fence } => *fence,
        other => unreachable!("{} does not run in a transaction", other.op_name()),
    }
}

/// A label of what a request did, for the tally; a statement of a
/// transaction that spans round trips is labelled "txn ...".
fn outcome(req: &Request, resp: &Response) -> String {
    match req {
        Request::Exec { stmt, .. } => format!("txn {}", request_outcome(stmt, resp)),
        _ => request_outcome(req, resp),
    }
}

fn request_outcome(req: &Request, resp: &Response) -> String {
    let label = match resp {
        Response::Rejected { reason } => return format!("rejected {reason:?}"),
        Response::Claimed { grants } if grants.is_empty() => "nothing",
        Response::Released { tasks: 0 } => "nothing",
        Response::Claimed { .. } | Response::Released { .. } => "some",
        Response::Valid { valid } => ["invalid", "valid"][usize::from(*valid)],
        Response::Query { materialized } => ["pending", "materialized"][usize::from(*materialized)],
        Response::Snapshot { due } if due.is_empty() => "nothing",
        Response::Snapshot { .. } => "some",
        Response::Applied { retry_at_ms: None, .. } if matches!(req, Request::Fail { .. }) => "dead",
        Response::Renewed { lease_expiry_ms: u64::MAX } => "heartbeat-owned",
        Response::Applied { .. } | Response::Renewed { .. } | Response::Enqueued { .. } | Response::Ack => "applied",
    };
    label.to_string()
}

// ---------------------------------------------------------------------------
// The deployments and the operations. A new request is one new `Op` arm.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Deployment {
    /// System A's constants: 5-minute leases (10 s for workflow tasks),
    /// heartbeat-owned jobs and stages.
    Default,
    /// Short leases, stages with a lease, few retries, short backoffs.
    Tight,
}

impl Deployment {
    fn config(self) -> EngineConfig {
        match self {
            Deployment::Default => EngineConfig::default(),
            Deployment::Tight => EngineConfig {
                lease_ttl: LeaseTtls {
                    index_build_ms: Some(30_000),
                    authz_materialization_ms: Some(45_000),
                    job_ms: None,
                    stage_ms: Some(20_000),
                    workflow_task_ms: Some(5_000),
                    activity_ms: Some(90_000),
                },
                dead_after_ms: 20_000,
                retry_base_ms: 1_000,
                retry_cap_ms: 8_000,
                max_retries: 2,
                repair_backoff_base_ms: 1_000,
                repair_backoff_cap_ms: 16_000,
                ..EngineConfig::default()
            },
        }
    }
}

/// How an operation picks its fence, resolved modulo the candidates when it runs.
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// The current fence of a leased task.
    Live(usize),
    /// The current fence of the newest leased task.
    Newest,
    /// A fence granted earlier, as granted (often stale by now).
    Granted(usize),
    /// A granted fence carrying another owner.
    OtherOwner(usize, Owner),
    /// A granted fence with the attempt one higher (`true`) or lower.
    OtherAttempt(usize, bool),
    /// A fence of a task that does not exist.
    Missing(usize),
    /// The fence of the last completion that applied: its retry.
    LastCompleted,
    /// The fence that completed a done task (modulo the done ones), or the
    /// same attempt carrying another owner.
    Completed(usize, Option<Owner>),
    /// The fence of the first statement of the slot's latest transaction
    /// (else the newest): the row that transaction locked.
    OfSlot(usize),
}

/// Transactions that span round trips run at once, at most (one slot each).
const TXN_SLOTS: usize = 3;

/// A statement that runs in a transaction.
#[derive(Debug, Clone, Copy)]
enum TxnStmt {
    LeaseValid(Pick),
    Complete(Pick),
    Fail(Pick, TaskError),
    ClearStageLink(Pick),
}

/// The `older_than_ms` orphan releases use most, and an edge of the clock.
const ORPHAN_AGE_MS: u64 = 10_000;

/// A kind of instant at which a rule flips.
#[derive(Debug, Clone, Copy)]
enum Edge {
    LeaseExpiry,
    RetryAt,
    /// A heartbeat's last sign of life + dead_after_ms.
    Stale,
    /// A group's next repair look.
    RepairLook,
    /// A leased task's grant + ORPHAN_AGE_MS.
    OrphanAge,
    /// The earliest deadline of an open transaction (txn_timeout_ms after
    /// its first statement).
    TxnDeadline,
}

/// How an enqueue-stage picks its stage.
#[derive(Debug, Clone, Copy)]
enum StagePick {
    /// A stage that is due now (modulo the due ones), else stage 0 of pipeline 1.
    Due(usize),
    /// A stage that is done (modulo the done ones): a stale snapshot's enqueue.
    Done(usize),
    /// Any stage, often one that does not exist or is not due.
    Any(StageRef),
}

#[derive(Debug, Clone)]
struct Orphans {
    owner: Owner,
    /// Instead of `owner`: the owner of a leased task (modulo the leased ones).
    of_live: Option<usize>,
    /// Bit i: the owner still runs its i-th leased task (task order, mod 8).
    running_mask: u8,
    /// The list also names a task that does not exist.
    lists_missing_task: bool,
    older_than_ms: u64,
    /// How long before the store's now the owner made its list (negative: the
    /// owner's clock is ahead of the store's).
    listed_ago_ms: i64,
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        kind: TaskKind,
        group: Option<GroupId>,
        index: Option<IndexId>,
        /// A stage link no stage row knows of (stage tasks come from EnqueueStage).
        stage: Option<StageRef>,
        /// None: due at once (not_before 0); Some(d): not before now + d.
        delay_ms: Option<u64>,
        /// The idempotency key (few keys: repeats are common).
        key: Option<u64>,
    },
    CreatePipeline {
        pipeline: GroupId,
        stages: u32,
    },
    Claim {
        owner: Owner,
        max: u32,
    },
    Heartbeat(Owner),
    Deregister(Owner),
    Renew(Pick),
    LeaseValid(Pick),
    Complete(Pick),
    Fail(Pick, TaskError),
    ClearStageLink(Pick),
    ReleaseDead,
    ReleaseOrphans(Orphans),
    ReclaimExpired,
    Repair,
    Maintain(Owner, MaintenanceKind, Option<u64>),
    PipelineSnapshot,
    EnqueueStage(StagePick),
    QueryIndex(IndexId),
    Advance(u64),
    /// Jump to just before (-1), at (0) or just after (+1) an edge of a kind,
    /// picked modulo the ones from now on; no-op if none.
    AdvanceToEdge(Edge, usize, i8),
    /// A statement of the transaction in a slot (its first opens one);
    /// `commit` sends COMMIT with it.
    Exec {
        slot: usize,
        stmt: TxnStmt,
        commit: bool,
    },
    /// Rolls back the slot's transaction, or, in an empty slot, one of this
    /// owner that never ran a statement.
    Rollback(usize, Owner),
    /// A late or repeated statement of a transaction that ended (modulo the
    /// ended ones; no-op if none).
    Late(usize, TxnStmt),
    LateRollback(usize),
}

/// A deployment and its ops: single ops, and clock jumps to an edge each
/// followed by a request whose answer turns at that edge.
fn sequence() -> impl Strategy<Value = (Deployment, Vec<Op>)> {
    let deployment = prop_oneof![Just(Deployment::Default), Just(Deployment::Tight)];
    let single = op().prop_map(|op| vec![op]);
    let chunk = prop_oneof![
        8 => single,
        2 => at_edge(),
        1 => task_story(),
        1 => stage_story(),
        1 => retry_story(),
        1 => index_story(),
        1 => txn_story(),
        1 => two_txn_story(),
        1 => shared_rows_story(),
    ];
    (deployment, proptest::collection::vec(chunk, 1..=MAX_CHUNKS).prop_map(|chunks| chunks.concat()))
}

fn at_edge() -> impl Strategy<Value = Vec<Op>> {
    let timed = prop_oneof![
        Just(Op::ReclaimExpired),
        Just(Op::Repair),
        Just(Op::ReleaseDead),
        pick().prop_map(Op::LeaseValid),
        pick().prop_map(Op::Renew),
        claim(),
        orphans().prop_map(Op::ReleaseOrphans),
    ];
    (timed, any::<bool>(), nth_edge(), -1i8..=1).prop_map(|(op, look, i, delta)| {
        let edge = match op {
            Op::Repair if look => Edge::RepairLook,
            Op::ReclaimExpired | Op::Repair | Op::LeaseValid(_) | Op::Renew(_) => Edge::LeaseExpiry,
            Op::ReleaseDead => Edge::Stale,
            Op::Claim { .. } => Edge::RetryAt,
            _ => Edge::OrphanAge,
        };
        vec![Op::AdvanceToEdge(edge, i, delta), op]
    })
}

/// A due task is enqueued, claimed (if the claim reaches it) and finished
/// one way or another; an index build's index is then queried.
fn task_story() -> impl Strategy<Value = Vec<Op>> {
    let kind = proptest::sample::select(TaskKind::ALL.to_vec());
    let group = proptest::option::of(1u64..=2);
    let finish = prop_oneof![
        2 => Just(Op::Complete(Pick::Newest)),
        1 => Just(Op::Fail(Pick::Newest, TaskError::Conflict)),
        1 => Just(Op::Fail(Pick::Newest, TaskError::Fatal)),
        1 => Just(Op::Renew(Pick::Newest)),
    ];
    (kind, group, index(), owner(), finish).prop_map(|(kind, group, index, owner, finish)| {
        let enqueue = Op::Enqueue { kind, group, index: Some(index), stage: None, delay_ms: None, key: None };
        let mut ops = vec![enqueue, Op::Claim { owner, max: 3 }, finish];
        if kind == TaskKind::IndexBuild {
            ops.push(Op::QueryIndex(index));
        }
        ops
    })
}

/// An enqueue sent again with its key (its first answer lost), perhaps with
/// another spec; the task claimed, perhaps failed once and claimed again
/// when due, and completed; then the completion sent again: by the attempt
/// that made it (applied again, nothing changes), by the same attempt with
/// another owner, or by a fence granted earlier.
fn retry_story() -> impl Strategy<Value = Vec<Op>> {
    let kind = || proptest::sample::select(TaskKind::ALL.to_vec());
    let retry = prop_oneof![
        3 => Just(Pick::LastCompleted),
        1 => (0usize..8).prop_map(|i| Pick::Completed(i, None)),
        1 => (0usize..8, owner()).prop_map(|(i, o)| Pick::Completed(i, Some(o))),
        1 => (0usize..64).prop_map(Pick::Granted),
    ];
    (key(), kind(), kind(), owner(), any::<bool>(), retry).prop_map(
        |(key, kind, kind_again, owner, fails_first, retry)| {
            let enqueue =
                |kind| Op::Enqueue { kind, group: None, index: None, stage: None, delay_ms: None, key: Some(key) };
            let mut ops = vec![enqueue(kind), enqueue(kind_again), Op::Claim { owner, max: 3 }];
            if fails_first {
                ops.extend([
                    Op::Fail(Pick::Newest, TaskError::Conflict),
                    Op::AdvanceToEdge(Edge::RetryAt, 0, 0),
                    Op::Claim { owner, max: 3 },
                ]);
            }
            ops.extend([Op::Complete(Pick::Newest), Op::Complete(retry)]);
            ops
        },
    )
}

/// One or two builds of an index complete; the index is queried before any
/// pass, after a pass of another kind (still pending) and after an index
/// pass (materialized); perhaps it is built again, which builds nothing.
fn index_story() -> impl Strategy<Value = Vec<Op>> {
    let other_pass =
        proptest::sample::select(vec![MaintenanceKind::Bucket, MaintenanceKind::Tenant, MaintenanceKind::Pipeline]);
    (index(), owner(), 1usize..=2, other_pass, timeout(), any::<bool>()).prop_map(
        |(index, owner, builds, other_pass, timeout_ms, rebuild)| {
            let build = Op::Enqueue {
                kind: TaskKind::IndexBuild,
                group: None,
                index: Some(index),
                stage: None,
                delay_ms: None,
                key: None,
            };
            let claim = Op::Claim { owner, max: 3 };
            let mut ops = vec![build.clone(); builds];
            ops.extend([claim.clone(), Op::Complete(Pick::Newest)]);
            if builds == 2 {
                ops.push(Op::Complete(Pick::Live(0)));
            }
            ops.extend([
                Op::QueryIndex(index),
                Op::Maintain(owner, other_pass, timeout_ms),
                Op::QueryIndex(index),
                Op::Maintain(owner, MaintenanceKind::Index, timeout_ms),
                Op::QueryIndex(index),
            ]);
            if rebuild {
                ops.extend([
                    build,
                    claim,
                    Op::Complete(Pick::Newest),
                    Op::Maintain(owner, MaintenanceKind::Index, None),
                ]);
            }
            ops
        },
    )
}

/// A pipeline's stage is enqueued, claimed (if the claim reaches it) and
/// finished one way or another: stages get done, and later enqueues of them
/// meet the stage guard.
fn stage_story() -> impl Strategy<Value = Vec<Op>> {
    let finish = prop_oneof![
        Just(Op::Complete(Pick::Newest)),
        Just(Op::ClearStageLink(Pick::Newest)),
        Just(Op::Fail(Pick::Newest, TaskError::Conflict)),
    ];
    (1u64..=2, 1u32..=3, owner(), finish).prop_map(|(pipeline, stages, owner, finish)| {
        vec![
            Op::CreatePipeline { pipeline, stages },
            Op::EnqueueStage(StagePick::Due(0)),
            Op::Claim { owner, max: 3 },
            finish,
        ]
    })
}

/// Mostly the next edges, so that the requests after the jump run at them.
fn nth_edge() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..2, 1 => 0usize..64]
}

fn claim() -> impl Strategy<Value = Op> {
    (owner(), 0u32..=3).prop_map(|(owner, max)| Op::Claim { owner, max })
}

fn owner() -> impl Strategy<Value = Owner> {
    (1u32..=3, prop_oneof![3 => Just(0u32), 1 => Just(1u32)])
        .prop_map(|(proc, incarnation)| Owner { proc, incarnation })
}

fn pick() -> impl Strategy<Value = Pick> {
    let i = 0usize..64;
    prop_oneof![
        5 => i.clone().prop_map(Pick::Live),
        3 => i.clone().prop_map(Pick::Granted),
        1 => (i.clone(), owner()).prop_map(|(i, o)| Pick::OtherOwner(i, o)),
        1 => (i.clone(), any::<bool>()).prop_map(|(i, up)| Pick::OtherAttempt(i, up)),
        1 => i.clone().prop_map(Pick::Missing),
        1 => Just(Pick::LastCompleted),
        1 => (i, proptest::option::weighted(0.3, owner())).prop_map(|(i, o)| Pick::Completed(i, o)),
    ]
}

/// Pipelines share their ids with the groups of plain tasks (1 and 2).
fn stage() -> impl Strategy<Value = StageRef> {
    (1u64..=2, 0u32..4).prop_map(|(pipeline, index)| StageRef { pipeline, index })
}

/// Two indexes: builds of one index often meet, and queries often find it.
fn index() -> impl Strategy<Value = IndexId> {
    0u64..2
}

/// Few idempotency keys: enqueues often repeat one.
fn key() -> impl Strategy<Value = u64> {
    0u64..6
}

/// A maintenance pass's statement timeout. `Store::apply` ignores it (the
/// store process enforces it); in PostgreSQL it is a real `statement_timeout`,
/// long enough never to strike here, or 0, which PostgreSQL reads as none.
fn timeout() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![2 => Just(None), 1 => Just(Some(0)), 2 => (5_000u64..=60_000).prop_map(Some)]
}

fn stage_pick() -> impl Strategy<Value = StagePick> {
    prop_oneof![
        3 => (0usize..8).prop_map(StagePick::Due),
        1 => (0usize..8).prop_map(StagePick::Done),
        1 => stage().prop_map(StagePick::Any),
    ]
}

fn orphans() -> impl Strategy<Value = Orphans> {
    let older_than_ms = prop_oneof![Just(0), Just(ORPHAN_AGE_MS), 0u64..60_000];
    let listed_ago_ms = prop_oneof![Just(0), -5_000i64..0, 0i64..30_000];
    let of_live = proptest::option::of(0usize..8);
    (owner(), of_live, any::<u8>(), proptest::bool::weighted(0.2), older_than_ms, listed_ago_ms).prop_map(
        |(owner, of_live, running_mask, lists_missing_task, older_than_ms, listed_ago_ms)| Orphans {
            owner,
            of_live,
            running_mask,
            lists_missing_task,
            older_than_ms,
            listed_ago_ms,
        },
    )
}

fn op() -> impl Strategy<Value = Op> {
    let kind = proptest::sample::select(TaskKind::ALL.to_vec());
    let group = prop_oneof![2 => Just(None), 1 => Just(Some(1u64)), 1 => Just(Some(2u64))];
    let build_of = proptest::option::weighted(0.7, index());
    let stray_stage = proptest::option::weighted(0.1, stage());
    let delay = proptest::option::of(0u64..30_000);
    let keyed = proptest::option::weighted(0.3, key());
    let enqueue =
        (kind, group, build_of, stray_stage, delay, keyed).prop_map(|(kind, group, index, stage, delay_ms, key)| {
            Op::Enqueue { kind, group, index, stage, delay_ms, key }
        });
    let maintenance = prop_oneof![
        3 => Just(MaintenanceKind::Index),
        1 => proptest::sample::select(vec![MaintenanceKind::Bucket, MaintenanceKind::Tenant, MaintenanceKind::Pipeline]),
    ];
    let error = prop_oneof![3 => Just(TaskError::Conflict), 1 => Just(TaskError::Fatal)];
    let advance = prop_oneof![4 => 0u64..5_000, 2 => 0u64..70_000, 1 => 0u64..=400_000];
    let edge = proptest::sample::select(vec![
        Edge::LeaseExpiry,
        Edge::RetryAt,
        Edge::Stale,
        Edge::RepairLook,
        Edge::OrphanAge,
        Edge::TxnDeadline,
    ]);
    prop_oneof![
        6 => enqueue,
        2 => (1u64..=2, 0u32..=3).prop_map(|(pipeline, stages)| Op::CreatePipeline { pipeline, stages }),
        3 => stage_pick().prop_map(Op::EnqueueStage),
        1 => Just(Op::PipelineSnapshot),
        6 => claim(),
        3 => owner().prop_map(Op::Heartbeat),
        1 => owner().prop_map(Op::Deregister),
        2 => pick().prop_map(Op::Renew),
        2 => pick().prop_map(Op::LeaseValid),
        3 => pick().prop_map(Op::Complete),
        3 => (pick(), error).prop_map(|(p, e)| Op::Fail(p, e)),
        1 => pick().prop_map(Op::ClearStageLink),
        1 => Just(Op::ReleaseDead),
        1 => orphans().prop_map(Op::ReleaseOrphans),
        1 => Just(Op::ReclaimExpired),
        2 => Just(Op::Repair),
        2 => (owner(), maintenance, timeout()).prop_map(|(o, k, t)| Op::Maintain(o, k, t)),
        1 => index().prop_map(Op::QueryIndex),
        4 => advance.prop_map(Op::Advance),
        2 => (edge, nth_edge(), -1i8..=1).prop_map(|(e, i, d)| Op::AdvanceToEdge(e, i, d)),
        4 => (slot(), txn_stmt(pick().boxed()), proptest::bool::weighted(0.3))
            .prop_map(|(slot, stmt, commit)| Op::Exec { slot, stmt, commit }),
        1 => (slot(), owner()).prop_map(|(slot, owner)| Op::Rollback(slot, owner)),
        1 => (0usize..8, txn_stmt(pick().boxed())).prop_map(|(i, stmt)| Op::Late(i, stmt)),
        1 => (0usize..8).prop_map(Op::LateRollback),
    ]
}

fn slot() -> impl Strategy<Value = usize> {
    0..TXN_SLOTS
}

fn txn_stmt(pick: BoxedStrategy<Pick>) -> impl Strategy<Value = TxnStmt> {
    let error = prop_oneof![3 => Just(TaskError::Conflict), 1 => Just(TaskError::Fatal)];
    prop_oneof![
        3 => pick.clone().prop_map(TxnStmt::LeaseValid),
        2 => pick.clone().prop_map(TxnStmt::Complete),
        2 => (pick.clone(), error).prop_map(|(p, e)| TxnStmt::Fail(p, e)),
        1 => pick.prop_map(TxnStmt::ClearStageLink),
    ]
}

/// A task is claimed and a transaction checks its lease (locking the row);
/// then another request meets the lock (the same attempt's autocommit
/// write or renewal waits, a sweep or claim skips the row, a newer
/// incarnation's heartbeat or the transaction's deadline ends it); then the
/// transaction finishes the task and commits, rolls back, or is left open;
/// perhaps a statement of it comes late.
fn txn_story() -> impl Strategy<Value = Vec<Op>> {
    let kind = proptest::sample::select(TaskKind::ALL.to_vec());
    let group = proptest::option::of(1u64..=2);
    let expired = |sweep: Op| vec![Op::AdvanceToEdge(Edge::LeaseExpiry, 0, 1), sweep];
    let between = prop_oneof![
        Just(vec![Op::Complete(Pick::Newest)]),
        Just(vec![Op::Renew(Pick::Newest)]),
        (pick(), any::<bool>()).prop_map(|(p, fail)| vec![if fail {
            Op::Fail(p, TaskError::Conflict)
        } else {
            Op::ClearStageLink(p)
        }]),
        Just(expired(Op::ReclaimExpired)),
        Just(expired(Op::Repair)),
        Just(vec![Op::AdvanceToEdge(Edge::Stale, 0, 1), Op::ReleaseDead]),
        // The story's owner says it runs nothing, a second after its claim.
        Just(vec![
            Op::Advance(1_000),
            Op::ReleaseOrphans(Orphans {
                owner: JANITOR,
                of_live: None,
                running_mask: 0,
                lists_missing_task: false,
                older_than_ms: 0,
                listed_ago_ms: 0,
            })
        ]),
        claim().prop_map(|c| vec![c]),
        owner().prop_map(|o| vec![Op::Heartbeat(Owner { incarnation: o.incarnation + 1, ..o })]),
        (-1i8..=1).prop_map(|d| vec![Op::AdvanceToEdge(Edge::TxnDeadline, 0, d)]),
    ];
    let finish = txn_stmt(Just(Pick::OfSlot(0)).boxed());
    let end = prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (kind, group, owner(), slot(), between, finish, end, any::<bool>()).prop_map(
        |(kind, group, owner, slot, between, finish, end, late)| {
            let enqueue = Op::Enqueue { kind, group, index: Some(0), stage: None, delay_ms: None, key: None };
            let check = TxnStmt::LeaseValid(Pick::Newest);
            let mut ops = vec![enqueue, Op::Claim { owner, max: 3 }, Op::Exec { slot, stmt: check, commit: false }];
            ops.extend(between.into_iter().map(|op| match op {
                Op::ReleaseOrphans(o) => Op::ReleaseOrphans(Orphans { owner, ..o }),
                op => op,
            }));
            let finish = Op::Exec { slot, stmt: finish, commit: end == 0 };
            ops.push(match end {
                1 => Op::Rollback(slot, owner),
                _ => finish,
            });
            if late {
                ops.push(Op::Late(0, TxnStmt::Complete(Pick::OfSlot(slot))));
            }
            ops
        },
    )
}

/// A transaction finishes a stage task (writing its stage row) or an index
/// build (writing the index's built row) and stays open while requests that
/// touch the same stage or index, not the task, come: the stage enqueued
/// again or its pipeline created again, another build of the index
/// completed; then it commits or rolls back.
fn shared_rows_story() -> impl Strategy<Value = Vec<Op>> {
    let finish = prop_oneof![
        Just(TxnStmt::Complete(Pick::Newest)),
        Just(TxnStmt::ClearStageLink(Pick::Newest)),
        Just(TxnStmt::Fail(Pick::Newest, TaskError::Conflict)),
    ];
    let stage_meets = prop_oneof![
        Just(Op::EnqueueStage(StagePick::Any(StageRef { pipeline: 1, index: 0 }))),
        Just(Op::CreatePipeline { pipeline: 1, stages: 2 }),
        Just(Op::PipelineSnapshot),
    ];
    (owner(), any::<bool>(), finish, stage_meets, any::<bool>()).prop_map(|(owner, stage, finish, meets, commit)| {
        let build = Op::Enqueue {
            kind: TaskKind::IndexBuild,
            group: None,
            index: Some(0),
            stage: None,
            delay_ms: None,
            key: None,
        };
        let mut ops = if stage {
            vec![Op::CreatePipeline { pipeline: 1, stages: 2 }, Op::EnqueueStage(StagePick::Due(0))]
        } else {
            vec![build.clone(), build]
        };
        ops.extend([
            Op::Claim { owner, max: 3 },
            Op::Rollback(2, owner),
            Op::Exec { slot: 2, stmt: finish, commit: false },
        ]);
        ops.push(if stage { meets } else { Op::Complete(Pick::Live(0)) });
        ops.push(if commit {
            Op::Exec { slot: 2, stmt: TxnStmt::LeaseValid(Pick::OfSlot(2)), commit: true }
        } else {
            Op::Rollback(2, owner)
        });
        ops
    })
}

/// Two transactions on one row: the first locks it, the second's statement
/// on the same attempt waits (and aborts its transaction); the first ends;
/// then the second slot's next transaction runs on the row.
fn two_txn_story() -> impl Strategy<Value = Vec<Op>> {
    let kind = proptest::sample::select(TaskKind::ALL.to_vec());
    let same = || txn_stmt(Just(Pick::OfSlot(0)).boxed());
    (kind, owner(), txn_stmt(Just(Pick::Newest).boxed()), same(), same(), same(), any::<bool>()).prop_map(
        |(kind, owner, first, second, ending, again, commit)| {
            let enqueue = Op::Enqueue { kind, group: None, index: Some(1), stage: None, delay_ms: None, key: None };
            let end = if commit { Op::Exec { slot: 0, stmt: ending, commit: true } } else { Op::Rollback(0, owner) };
            vec![
                enqueue,
                Op::Claim { owner, max: 3 },
                Op::Rollback(0, owner),
                Op::Rollback(1, owner),
                Op::Exec { slot: 0, stmt: first, commit: false },
                Op::Exec { slot: 1, stmt: second, commit: false },
                end,
                Op::Exec { slot: 1, stmt: again, commit: true },
            ]
        },
    )
}

// ---------------------------------------------------------------------------
// The generator reaches every path (no PostgreSQL needed).
// ---------------------------------------------------------------------------

/// Runs the generator against the model alone and checks that the mix
/// reaches every outcome worth comparing: each rejection of each fenced
/// write, every release path, dead tasks, stage guards, repeated enqueue
/// keys, completions retried by their own attempt and by others, indexes
/// built and then materialized by a pass (queried between), first claims,
/// orphan lists made before a grant; statements of transactions that span
/// round trips with each outcome, lock waits, closed transactions,
/// rollbacks, sweeps that skip a locked row, requests past a txn deadline.
#[test]
fn generator_reaches_every_outcome() {
    use proptest::strategy::ValueTree;
    let mut runner =
        TestRunner::new(ProptestConfig { rng_seed: RngSeed::Fixed(0x5eed_5a1e), ..ProptestConfig::default() });
    let mut tally = Tally::default();
    for _ in 0..SEQUENCES {
        let (deployment, ops) = sequence().new_tree(&mut runner).expect("generate a sequence").current();
        let mut world = World::new(deployment.config());
        for op in &ops {
            let Some(req) = world.request(op) else { continue };
            let situations = world.situations(&req);
            let resp = world.store.apply(world.now_ms, &req, &NullObserver);
            tally.record(&req, &resp, &situations);
            world.answered(&req, &resp);
        }
    }
    let fenced_writes = ["renew", "complete", "fail", "clear-stage-link"];
    let rejections = ["Missing", "Superseded", "NotOwner", "Terminal"];
    let mut required: Vec<(&str, String)> =
        fenced_writes.iter().flat_map(|w| rejections.iter().map(move |r| (*w, format!("rejected {r}")))).collect();
    required.extend(
        [
            ("renew", "applied"),
            ("renew", "heartbeat-owned"),
            ("lease-valid", "valid"),
            ("lease-valid", "invalid"),
            ("complete", "applied"),
            ("fail", "applied"),
            ("fail", "dead"),
            ("clear-stage-link", "applied"),
            ("claim", "some"),
            ("claim", "nothing"),
            ("release-dead", "some"),
            ("release-orphans", "some"),
            ("release-orphans", "nothing"),
            ("reclaim-expired", "some"),
            ("repair", "some"),
            ("repair", "nothing"),
            ("enqueue-stage", "applied"),
            ("enqueue-stage", "rejected Missing"),
            ("enqueue-stage", "rejected StageGuard"),
            ("pipeline-snapshot", "some"),
            ("query-index", "materialized"),
            ("query-index", "pending"),
            ("claim", "at an edge"),
            ("lease-valid", "at an edge"),
            ("release-dead", "at an edge"),
            ("release-orphans", "at an edge"),
            ("reclaim-expired", "at an edge"),
            ("repair", "at an edge"),
            ("repair", "at a repair look"),
            ("enqueue-stage", "on a done stage"),
            ("enqueue-stage", "on a linked stage"),
            // Idempotency keys.
            ("enqueue", "new key"),
            ("enqueue", "repeated key"),
            ("enqueue", "repeated key, other spec"),
            // Completions sent again.
            ("complete", "retried by its completer"),
            ("complete", "retried by its completer after failures"),
            ("complete", "on a done task, stale attempt"),
            ("complete", "on a done task, completer's attempt, other owner"),
            // Built, then materialized by index passes.
            ("complete", "completes an index build"),
            ("complete", "completes a build of a built index"),
            ("complete", "completes a build of a materialized index"),
            ("maintain", "applied"),
            ("maintain", "index pass finalizes"),
            ("maintain", "index pass, nothing built"),
            ("maintain", "other pass, an index built"),
            ("query-index", "built, not finalized"),
            // Liveness and the orphan list's time.
            ("claim", "first claim of an owner"),
            ("release-orphans", "as of before a grant"),
            ("release-orphans", "as of after now"),
            // Transactions that span round trips: every statement's
            // outcomes in one, waits, sweeps that skip a locked row, deadlines.
            ("lease-valid", "txn valid"),
            ("lease-valid", "txn invalid"),
            ("complete", "txn applied"),
            ("fail", "txn applied"),
            ("fail", "txn dead"),
            ("clear-stage-link", "txn applied"),
            ("rollback", "applied"),
            ("rollback", "rejected TxnClosed"),
            ("lease-valid", "rejected TimedOut"),
            ("renew", "rejected TimedOut"),
            ("reclaim-expired", "skips a locked row"),
            ("release-dead", "skips a locked row"),
            ("release-orphans", "skips a locked row"),
            ("repair", "skips a locked row"),
            ("lease-valid", "past a txn deadline"),
            ("reclaim-expired", "past a txn deadline"),
        ]
        .map(|(op, out)| (op, out.to_string())),
    );
    for stmt in ["lease-valid", "complete", "fail", "clear-stage-link"] {
        required.extend(
            ["txn rejected TimedOut", "txn rejected TxnClosed", "rejected TimedOut", "txn rejected Terminal"]
                .iter()
                .filter(|out| !(stmt == "lease-valid" && out.ends_with("Terminal")))
                .map(|out| (stmt, out.to_string())),
        );
    }
    let missing: Vec<_> = required.into_iter().filter(|key| !tally.outcomes.contains_key(key)).collect();
    assert!(missing.is_empty(), "the generator never reached {missing:?}; it reached {:#?}", tally.outcomes);
}
