//! Exports of one run for people to look at: a Chrome trace (opens in
//! Perfetto or chrome://tracing) and a static SVG timeline.
//!
//! Both are drawn from one [`Timeline`], rebuilt from the history alone: the
//! spans (leases, permits, executions, outcome writes, transactions,
//! maintenance passes, process lives and pauses) and the instants (faults,
//! lifecycle, store commits, query results) of the run.
//!
//! What the store did and what ran where is drawn from ground truth (the
//! harness's facts, `facts.rs`), the same for every engine: a lease is a
//! grant as the store committed it (`leasesim_check::granted`), ended by the
//! commit that took it away (`leasesim_check::lost_holder`); a body is what
//! the task-body seam saw; an outcome write runs from its arrival at the
//! store to its answer. The engine's testimony adds what only it can tell
//! (permits, maintenance passes, repair decisions), where it gives any.

mod chrome;
mod facts;
mod svg;

pub use chrome::chrome_trace;
pub use svg::{around_first_violation, svg_timeline, svg_timeline_window};

use crate::check::Violation;
use crate::history::{Entry, Record, WorldEvent};
use leasesim_vocab::ids::{Fence, GroupId, IndexId, Owner, ProcId, TaskId, TxnId};
use leasesim_vocab::task::MaintenanceKind;
use leasesim_vocab::task::{Row, TaskKind};
use leasesim_vocab::testimony::Event;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Creates `path` with `bytes`, on disk before it returns (a full disk
/// shows here, not later).
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Writes `contents` to `path` atomically: a temporary file in the same
/// folder, then a rename over `path`. The error is one line naming the path.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), String> {
    check_output_path(path)?;
    let name = path.file_name().and_then(|n| n.to_str()).filter(|n| !n.is_empty());
    let Some(name) = name else {
        return Err(format!("{}: not a file path", path.display()));
    };
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        write_synced(&tmp, contents.as_bytes())?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: cannot write: {e}", path.display())
    })
}

/// May an output file be written at `path`? Only a new path or an existing
/// regular file: a symlink, a device (`/dev/full`, `/dev/null`), a FIFO, a
/// socket or a directory is refused, since writing a file there replaces
/// what the user never asked to replace. Checked before any work too, so a
/// bad path costs no run.
pub fn check_output_path(path: &Path) -> Result<(), String> {
    let name = path.file_name().and_then(|n| n.to_str()).filter(|n| !n.is_empty());
    if name.is_none() {
        return Err(format!("{}: not a file path", path.display()));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("{}: no directory {} to write it in", path.display(), parent.display()));
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: cannot look at it: {e}", path.display())),
    };
    let file_type = meta.file_type();
    if file_type.is_file() {
        return Ok(());
    }
    let what = if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file (a device, a FIFO or a socket)"
    };
    Err(format!("{}: is {what}; refusing to replace it (name a regular file or a new path)", path.display()))
}

/// [`check_output_path`], and proof that a file can be written there: the
/// temporary file an atomic write makes is created and removed, so a folder
/// that takes no file (`/proc`, read-only, no space for a name) is refused
/// before any work rather than after it. An existing file is left as it is.
pub fn check_writable_output(path: &Path) -> Result<(), String> {
    check_output_path(path)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let probe = path.with_file_name(format!(".{name}.probe-{}", std::process::id()));
    let created = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe);
    let _ = std::fs::remove_file(&probe);
    created.map(drop).map_err(|e| format!("{}: cannot write there: {e}", path.display()))
}

/// What a span shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum SpanKind {
    /// One incarnation of a process: up -> killed (or the end).
    Alive,
    /// A process stopped running: paused -> resumed (or the end).
    Paused,
    /// A lease, in the lane of its holder.
    Lease,
    /// A permit held by a worker.
    Permit,
    /// A task body running.
    Execution,
    /// An outcome write at the store: its arrival -> its answer (applied,
    /// rejected, refused, lost).
    Write,
    /// A maintenance pass.
    Maintenance(MaintenanceKind),
    /// A transaction that spans round trips: its first statement's arrival
    /// at the store -> committed, rolled back, refused, found no longer
    /// open, or ended by the store (its process replaced, the store died).
    /// Without an attempt when none of its statements speaks for one.
    Transaction,
}

/// How a span ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Its own end event (a completion, a release of the permit, ...).
    Normal,
    /// A lease taken back: released by recovery or superseded by a new grant.
    Reclaimed,
    /// Its process was killed or exited (a body stopped, a transaction
    /// that ended without a commit).
    Killed,
    /// Still open when the history ended.
    Open,
}

#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub kind: SpanKind,
    /// The worker process whose lane the span is drawn in.
    pub proc: ProcId,
    /// The incarnation (all spans but pauses).
    pub owner: Option<Owner>,
    pub task: Option<TaskId>,
    pub attempt: Option<u32>,
    pub start_ms: u64,
    pub end_ms: u64,
    /// A short name: `lease t12#2`, `permit t12#2`, `maintenance index`.
    pub name: String,
    pub cut: Cut,
    /// An outcome write whose attempt did not hold its task when it
    /// arrived, or whose change the store applied to a task the attempt no
    /// longer held (as `fenced-completion` judges it).
    pub stale: bool,
    /// How it ended, in words.
    pub ended_by: String,
    /// Everything else worth showing (task kind, pass, error, ...).
    pub args: Map<String, Value>,
}

/// Which store commits are shown as marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum StoreMark {
    Created,
    Done,
    Failed,
    Dead,
    Released,
    Rejected,
    Repair,
    Materialized,
    StageDone,
    StageRefused,
}

impl StoreMark {
    pub fn name(self) -> &'static str {
        match self {
            StoreMark::Created => "created",
            StoreMark::Done => "done",
            StoreMark::Failed => "failed",
            StoreMark::Dead => "dead",
            StoreMark::Released => "released",
            StoreMark::Rejected => "rejected",
            StoreMark::Repair => "repair",
            StoreMark::Materialized => "materialized",
            StoreMark::StageDone => "stage-done",
            StoreMark::StageRefused => "stage-refused",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum MarkKind {
    Fault {
        kind: String,
        detail: String,
    },
    Up(Owner),
    Killed(Owner),
    /// The process exited on its own (no one killed it).
    Exited(Owner),
    Paused(ProcId),
    Resumed(ProcId),
    ClockOffset {
        proc: ProcId,
        offset_ms: i64,
    },
    Heal,
    End,
    Store {
        what: StoreMark,
        task: Option<TaskId>,
        detail: String,
    },
    Query {
        index: IndexId,
        materialized: bool,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub at_ms: u64,
    pub kind: MarkKind,
}

/// The run, as spans and marks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timeline {
    /// The last instant of the run (the last record, or a later violation).
    pub end_ms: u64,
    pub records: usize,
    /// Every worker process seen, with its incarnations in order of appearance.
    pub procs: BTreeMap<ProcId, Vec<u32>>,
    /// Clock offsets per process.
    pub offsets: BTreeMap<ProcId, i64>,
    /// Sorted by (start, end, kind, ...).
    pub spans: Vec<Span>,
    /// In history order.
    pub marks: Vec<Mark>,
    pub heal_ms: Option<u64>,
}

/// `p1.2` -> (1, Some(2)); `p1` -> (1, None).
pub(crate) fn parse_process(s: &str) -> Option<(ProcId, Option<u32>)> {
    let rest = s.trim().strip_prefix('p')?;
    match rest.split_once('.') {
        Some((p, i)) => Some((p.parse().ok()?, Some(i.parse().ok()?))),
        None => Some((rest.parse().ok()?, None)),
    }
}

/// A serde enum's wire name (`dead-owner`), for messages.
pub(crate) fn wire_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}

fn tag(fence: &Fence) -> String {
    format!("t{}#{}", fence.task, fence.attempt)
}

/// A lease as the store committed it, until a commit ends or replaces it.
struct OpenLease {
    fence: Fence,
    start_ms: u64,
    kind: TaskKind,
    expiry: Option<u64>,
    renewals: u32,
}

/// An outcome write on its way through the store: from its arrival to its
/// answer (or refusal, or loss).
struct OpenWrite {
    fence: Fence,
    start_ms: u64,
    /// `complete`, `fail`, `clear-stage-link`.
    what: &'static str,
    /// Why it is stale, if it was already at its arrival (the row's holder
    /// was not its attempt).
    stale: Option<String>,
}

/// A transaction seen at the store seam: when its first statement arrived,
/// the attempt it speaks for (`None`: a transaction outside any attempt,
/// a recovery pass's, a claim's), the statements answered so far and the
/// names of what they did.
struct OpenTxn {
    start_ms: u64,
    fence: Option<Fence>,
    statements: u32,
    ops: std::collections::BTreeSet<&'static str>,
}

/// A request that reached the store and has no answer yet, as the
/// timeline names what its commit did.
struct OpenReq {
    /// `complete of t4#1 (p3.1)`, `release-owners from p1.3`, ...
    by: String,
    /// The attempt it speaks for (for a COMMIT, its transaction's).
    fence: Option<Fence>,
    /// Its transaction, whether it ends it (COMMIT), and whether it is a rollback.
    txn: Option<(TxnId, bool, bool)>,
}

/// A span of one incarnation, as `Builder::span` takes it.
struct NewSpan {
    kind: SpanKind,
    owner: Owner,
    /// The task and attempt, for spans of an attempt.
    fence: Option<(TaskId, u32)>,
    name: String,
    start_ms: u64,
    end_ms: u64,
    cut: Cut,
    ended_by: String,
    args: Map<String, Value>,
}

/// Folds a history into a [`Timeline`]. Leases, bodies, outcome writes,
/// transactions and store commits come from ground truth (`facts.rs`), for
/// every engine; permits, maintenance passes, repair decisions and refused
/// stage enqueues are the engine's testimony, drawn where it gives any.
#[derive(Default)]
struct Builder {
    tl: Timeline,
    /// Open leases by task (a row has one holder at a time).
    leases: BTreeMap<TaskId, OpenLease>,
    permits: BTreeMap<(Owner, TaskId, u32), u64>,
    /// Bodies running: attempt -> (the process it runs on, since).
    execs: BTreeMap<Fence, (Owner, u64)>,
    /// Outcome writes at the store, by request.
    writes: BTreeMap<u64, OpenWrite>,
    passes: BTreeMap<(Owner, MaintenanceKind, u64), u64>,
    alive: BTreeMap<ProcId, (Owner, u64)>,
    paused: BTreeMap<ProcId, u64>,
    task_kinds: BTreeMap<TaskId, TaskKind>,
    txns: BTreeMap<TxnId, OpenTxn>,
    /// Transactions that ended (a late statement of one never reopens it).
    txns_ended: std::collections::BTreeSet<TxnId>,
    /// Requests on their way through the store.
    reqs: BTreeMap<u64, OpenReq>,
    /// Every task row as the store last committed it.
    rows: BTreeMap<TaskId, Row>,
    /// Done tasks -> the attempt whose write made them done (the view's
    /// `completed_by`): that attempt's retried completion is not stale.
    done_by: BTreeMap<TaskId, Fence>,
    /// Client calls that query an index: call -> index.
    queries: BTreeMap<u64, IndexId>,
}

impl Builder {
    fn see(&mut self, owner: Owner) {
        let incs = self.tl.procs.entry(owner.proc).or_default();
        if !incs.contains(&owner.incarnation) {
            incs.push(owner.incarnation);
        }
    }

    fn mark(&mut self, at_ms: u64, kind: MarkKind) {
        self.tl.marks.push(Mark { at_ms, kind });
    }

    fn store(&mut self, at_ms: u64, what: StoreMark, task: Option<TaskId>, detail: String) {
        self.mark(at_ms, MarkKind::Store { what, task, detail });
    }

    fn span(&mut self, s: NewSpan) {
        self.tl.spans.push(Span {
            kind: s.kind,
            proc: s.owner.proc,
            owner: Some(s.owner),
            task: s.fence.map(|f| f.0),
            attempt: s.fence.map(|f| f.1),
            start_ms: s.start_ms,
            end_ms: s.end_ms.max(s.start_ms),
            name: s.name,
            cut: s.cut,
            stale: false,
            ended_by: s.ended_by,
            args: s.args,
        });
    }

    fn close_lease(&mut self, task: TaskId, now: u64, cut: Cut, ended_by: String) {
        let Some(l) = self.leases.remove(&task) else { return };
        let mut args = Map::new();
        args.insert("task".into(), json!(l.fence.task));
        args.insert("attempt".into(), json!(l.fence.attempt));
        args.insert("owner".into(), json!(l.fence.owner.to_string()));
        args.insert("kind".into(), json!(l.kind.name()));
        args.insert("lease_expiry_ms".into(), json!(l.expiry));
        args.insert("renewals".into(), json!(l.renewals));
        args.insert("ended_by".into(), json!(ended_by));
        let f = l.fence;
        self.span(NewSpan {
            kind: SpanKind::Lease,
            owner: f.owner,
            fence: Some((f.task, f.attempt)),
            name: format!("lease {}", tag(&f)),
            start_ms: l.start_ms,
            end_ms: now,
            cut,
            ended_by,
            args,
        });
    }

    fn close_permit(&mut self, key: (Owner, TaskId, u32), now: u64, cut: Cut, ended_by: &str) {
        let Some(start) = self.permits.remove(&key) else { return };
        let (owner, task, attempt) = key;
        let mut args = Map::new();
        args.insert("task".into(), json!(task));
        args.insert("attempt".into(), json!(attempt));
        args.insert("owner".into(), json!(owner.to_string()));
        args.insert("ended_by".into(), json!(ended_by));
        self.span(NewSpan {
            kind: SpanKind::Permit,
            owner,
            fence: Some((task, attempt)),
            name: format!("permit t{task}#{attempt}"),
            start_ms: start,
            end_ms: now,
            cut,
            ended_by: ended_by.to_string(),
            args,
        });
    }

    fn close_exec(&mut self, fence: Fence, now: u64, cut: Cut, ended_by: String) {
        let Some((on, start)) = self.execs.remove(&fence) else { return };
        let mut args = Map::new();
        args.insert("task".into(), json!(fence.task));
        args.insert("attempt".into(), json!(fence.attempt));
        args.insert("owner".into(), json!(fence.owner.to_string()));
        if let Some(kind) = self.task_kinds.get(&fence.task) {
            args.insert("kind".into(), json!(kind.name()));
        }
        args.insert("ended_by".into(), json!(ended_by));
        self.span(NewSpan {
            kind: SpanKind::Execution,
            owner: on,
            fence: Some((fence.task, fence.attempt)),
            name: format!("exec {}", tag(&fence)),
            start_ms: start,
            end_ms: now,
            cut,
            ended_by,
            args,
        });
    }

    /// Ends the outcome write of request `req`; `stale_applied` says why the
    /// store's change was stale, if it was.
    fn close_write(&mut self, req: u64, now: u64, ended_by: String, stale_applied: Option<String>) {
        let Some(w) = self.writes.remove(&req) else { return };
        let stale = w.stale.or(stale_applied);
        let mut args = Map::new();
        args.insert("task".into(), json!(w.fence.task));
        args.insert("attempt".into(), json!(w.fence.attempt));
        args.insert("owner".into(), json!(w.fence.owner.to_string()));
        args.insert("outcome".into(), json!(w.what));
        args.insert("request".into(), json!(req));
        args.insert("ended_by".into(), json!(ended_by));
        if let Some(why) = &stale {
            args.insert("stale".into(), json!(why));
        }
        let prefix = if stale.is_some() { "stale " } else { "" };
        self.span(NewSpan {
            kind: SpanKind::Write,
            owner: w.fence.owner,
            fence: Some((w.fence.task, w.fence.attempt)),
            name: format!("{prefix}{} {}", w.what, tag(&w.fence)),
            start_ms: w.start_ms,
            end_ms: now,
            cut: Cut::Normal,
            ended_by,
            args,
        });
        if let Some(last) = self.tl.spans.last_mut() {
            last.stale = stale.is_some();
        }
    }

    fn close_pass(&mut self, key: (Owner, MaintenanceKind, u64), now: u64, cut: Cut, ended_by: &str) {
        let Some(start) = self.passes.remove(&key) else { return };
        let (owner, kind, pass) = key;
        let mut args = Map::new();
        args.insert("owner".into(), json!(owner.to_string()));
        args.insert("kind".into(), json!(kind.name()));
        args.insert("pass".into(), json!(pass));
        args.insert("ended_by".into(), json!(ended_by));
        self.span(NewSpan {
            kind: SpanKind::Maintenance(kind),
            owner,
            fence: None,
            name: format!("maintenance {}", kind.name()),
            start_ms: start,
            end_ms: now,
            cut,
            ended_by: ended_by.to_string(),
            args,
        });
    }

    fn close_alive(&mut self, proc: ProcId, now: u64, cut: Cut, ended_by: &str) {
        let Some((owner, start)) = self.alive.remove(&proc) else { return };
        let mut args = Map::new();
        args.insert("owner".into(), json!(owner.to_string()));
        args.insert("ended_by".into(), json!(ended_by));
        self.span(NewSpan {
            kind: SpanKind::Alive,
            owner,
            fence: None,
            name: format!("{owner}"),
            start_ms: start,
            end_ms: now,
            cut,
            ended_by: ended_by.to_string(),
            args,
        });
    }

    fn close_pause(&mut self, proc: ProcId, now: u64, cut: Cut, ended_by: &str) {
        let Some(start) = self.paused.remove(&proc) else { return };
        let mut args = Map::new();
        args.insert("proc".into(), json!(format!("p{proc}")));
        args.insert("ended_by".into(), json!(ended_by));
        self.tl.spans.push(Span {
            kind: SpanKind::Paused,
            proc,
            owner: None,
            task: None,
            attempt: None,
            start_ms: start,
            end_ms: now.max(start),
            name: format!("p{proc} paused"),
            cut,
            stale: false,
            ended_by: ended_by.to_string(),
            args,
        });
    }

    /// Everything of `owner` that dies with it, killed or exited (`how`).
    /// Not its leases (the store keeps those), nor its writes already at
    /// the store (the store still answers them).
    fn gone(&mut self, owner: Owner, now: u64, how: &str) {
        let ended = format!("process {how}");
        let permits: Vec<_> = self.permits.keys().filter(|k| k.0 == owner).copied().collect();
        for key in permits {
            self.close_permit(key, now, Cut::Killed, &ended);
        }
        let execs: Vec<_> = self.execs.iter().filter(|(_, (on, _))| *on == owner).map(|(f, _)| *f).collect();
        for f in execs {
            self.close_exec(f, now, Cut::Killed, ended.clone());
        }
        let passes: Vec<_> = self.passes.keys().filter(|k| k.0 == owner).copied().collect();
        for key in passes {
            self.close_pass(key, now, Cut::Killed, &ended);
        }
        if self.alive.get(&owner.proc).is_some_and(|(o, _)| *o == owner) {
            self.close_alive(owner.proc, now, Cut::Killed, how);
        }
    }

    fn world(&mut self, now: u64, w: &WorldEvent) {
        match w {
            WorldEvent::ProcessUp { owner } => {
                self.see(*owner);
                self.close_alive(owner.proc, now, Cut::Normal, "replaced by a new incarnation");
                self.alive.insert(owner.proc, (*owner, now));
                self.mark(now, MarkKind::Up(*owner));
            }
            WorldEvent::ProcessKilled { owner } => {
                self.see(*owner);
                self.gone(*owner, now, "killed");
                self.mark(now, MarkKind::Killed(*owner));
            }
            WorldEvent::ProcessExited { owner } => {
                self.see(*owner);
                self.gone(*owner, now, "exited");
                self.mark(now, MarkKind::Exited(*owner));
            }
            WorldEvent::ProcessPaused { proc } => {
                self.tl.procs.entry(*proc).or_default();
                self.paused.entry(*proc).or_insert(now);
                self.mark(now, MarkKind::Paused(*proc));
            }
            WorldEvent::ProcessResumed { proc } => {
                self.tl.procs.entry(*proc).or_default();
                self.close_pause(*proc, now, Cut::Normal, "resumed");
                self.mark(now, MarkKind::Resumed(*proc));
            }
            WorldEvent::ClockOffset { proc, offset_ms } => {
                self.tl.procs.entry(*proc).or_default();
                self.tl.offsets.insert(*proc, *offset_ms);
                self.mark(now, MarkKind::ClockOffset { proc: *proc, offset_ms: *offset_ms });
            }
            WorldEvent::Fault { kind, detail } => {
                self.mark(now, MarkKind::Fault { kind: kind.clone(), detail: detail.clone() });
            }
            // The graceful-stop fault's own record marks the moment.
            WorldEvent::StopRequested { owner } => self.see(*owner),
            WorldEvent::Heal => {
                self.tl.heal_ms.get_or_insert(now);
                self.mark(now, MarkKind::Heal);
            }
            WorldEvent::End => self.mark(now, MarkKind::End),
        }
    }

    /// Folds one engine event into the timeline: the overlay of what only
    /// testimony tells (permits, maintenance passes, repair decisions,
    /// refused stage enqueues). Leases, bodies, writes and commits are
    /// drawn from ground truth, so an engine that testifies nothing is
    /// drawn as fully as one that does. Every variant is named, so a new
    /// one has to be placed here (drawn, or among those that are not).
    fn engine(&mut self, now: u64, e: &Event) {
        match e {
            Event::TaskCreated { task, spec, .. } => {
                self.task_kinds.insert(*task, spec.kind);
            }
            Event::StageEnqueueRefused { stage, reason } => {
                self.store(now, StoreMark::StageRefused, None, format!("{stage}: {}", wire_name(reason)));
            }
            Event::LeaseGranted { fence, kind, .. } => {
                self.see(fence.owner);
                self.task_kinds.insert(fence.task, *kind);
            }
            Event::RepairDecision { group, needed, reclaimed } => self.repair_decision(now, *group, *needed, reclaimed),
            Event::ProcessStarted { owner, .. } => self.see(*owner),
            Event::PermitAcquired { owner, task, attempt } => self.permit_acquired(now, (*owner, *task, *attempt)),
            Event::PermitReleased { owner, task, attempt } => {
                self.close_permit((*owner, *task, *attempt), now, Cut::Normal, "released")
            }
            Event::MaintenanceStarted { owner, kind, pass } => {
                self.see(*owner);
                self.passes.insert((*owner, *kind, *pass), now);
            }
            Event::MaintenanceEnded { owner, kind, pass } => {
                self.close_pass((*owner, *kind, *pass), now, Cut::Normal, "ended");
            }
            // Drawn from ground truth instead (facts.rs): leases and their
            // ends, writes, bodies, materializations, stage completions and
            // query answers.
            Event::LeaseRenewed { .. }
            | Event::LeaseReleased { .. }
            | Event::WriteApplied { .. }
            | Event::WriteRejected { .. }
            | Event::IndexMaterialized { .. }
            | Event::StageDone { .. }
            | Event::ExecutionStarted { .. }
            | Event::ExecutionFinished { .. }
            | Event::FinalizeTimedOut { .. }
            | Event::QueryResult { .. } => {}
            // Not drawn: bookkeeping (pipelines, lease checks, heartbeats,
            // answers the client also records, snapshots, notes and plans)
            // and steps that open or close no span.
            Event::PipelineCreated { .. }
            | Event::LeaseChecked { .. }
            | Event::HeartbeatApplied { .. }
            | Event::QueryAnswered { .. }
            | Event::MaintenanceApplied { .. }
            | Event::PipelineSnapshotTaken { .. }
            | Event::AttemptDropped { .. }
            | Event::CallbackPublished { .. }
            | Event::HeartbeatSent { .. }
            | Event::MaintenanceStillRunning { .. }
            | Event::RetryPlanned { .. }
            | Event::NoteSent { .. } => {}
        }
    }

    /// Group repair is shown when it reclaimed something or found it needed.
    fn repair_decision(&mut self, now: u64, group: GroupId, needed: bool, reclaimed: &[TaskId]) {
        if needed || !reclaimed.is_empty() {
            let ids: Vec<String> = reclaimed.iter().map(|t| format!("t{t}")).collect();
            let detail = format!("group {group}: reclaimed [{}]", ids.join(", "));
            self.store(now, StoreMark::Repair, reclaimed.first().copied(), detail);
        }
    }

    fn permit_acquired(&mut self, now: u64, key: (Owner, TaskId, u32)) {
        self.see(key.0);
        self.close_permit(key, now, Cut::Normal, "acquired again");
        self.permits.insert(key, now);
    }

    fn finish(mut self, end_ms: u64) -> Timeline {
        const OPEN: &str = "still open at the end of the history";
        for txn in self.txns.keys().copied().collect::<Vec<_>>() {
            self.close_txn(txn, end_ms, Cut::Open, "no end seen: still open at the end of the history");
        }
        for task in self.leases.keys().copied().collect::<Vec<_>>() {
            self.close_lease(task, end_ms, Cut::Open, OPEN.into());
        }
        for key in self.permits.keys().copied().collect::<Vec<_>>() {
            self.close_permit(key, end_ms, Cut::Open, OPEN);
        }
        for f in self.execs.keys().copied().collect::<Vec<_>>() {
            self.close_exec(f, end_ms, Cut::Open, OPEN.into());
        }
        for req in self.writes.keys().copied().collect::<Vec<_>>() {
            self.close_write(req, end_ms, "no answer by the end of the history".into(), None);
            if let Some(last) = self.tl.spans.last_mut() {
                last.cut = Cut::Open;
            }
        }
        for key in self.passes.keys().copied().collect::<Vec<_>>() {
            self.close_pass(key, end_ms, Cut::Open, OPEN);
        }
        for proc in self.alive.keys().copied().collect::<Vec<_>>() {
            self.close_alive(proc, end_ms, Cut::Open, "alive at the end");
        }
        for proc in self.paused.keys().copied().collect::<Vec<_>>() {
            self.close_pause(proc, end_ms, Cut::Open, "still paused at the end");
        }
        self.tl.end_ms = end_ms;
        self.tl.spans.sort_by(|a, b| {
            (a.start_ms, a.end_ms, a.kind, a.proc, a.owner, a.task, a.attempt)
                .cmp(&(b.start_ms, b.end_ms, b.kind, b.proc, b.owner, b.task, b.attempt))
        });
        self.tl
    }
}

/// Rebuilds the run's spans and marks from its history.
pub(crate) fn timeline(history: &[Record], violations: &[Violation]) -> Timeline {
    let mut b = Builder::default();
    b.tl.records = history.len();
    for rec in history {
        match &rec.entry {
            Entry::World(w) => b.world(rec.at_ms, w),
            Entry::Engine(e) => b.engine(rec.at_ms, e),
            Entry::Truth(f) => b.fact(rec.at_ms, f),
        }
    }
    for v in violations {
        if let Some((proc, inc)) = v.process.as_deref().and_then(parse_process) {
            let incs = b.tl.procs.entry(proc).or_default();
            if let Some(inc) = inc.filter(|i| !incs.contains(i)) {
                incs.push(inc);
            }
        }
    }
    let last = history.iter().map(|r| r.at_ms).max().unwrap_or(0);
    let end_ms = violations.iter().map(|v| v.at_ms).fold(last, u64::max);
    b.finish(end_ms)
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Small hand-made runs shared by the exporters' tests: ground truth
    //! (requests, commits, bodies) as the harness records it, with the
    //! engine's testimony of permits and passes.

    use crate::check::Violation;
    use crate::history::{Entry, Record, WorldEvent};
    use crate::truth::{ClientAnswer, ClientCall, Commit, Fact, Reply, Sender, TaskChange};
    use leasesim_vocab::ids::{Fence, Owner};
    use leasesim_vocab::op::{Op, Response};
    use leasesim_vocab::task::{MaintenanceKind, Row, TaskState};
    use leasesim_vocab::task::{TaskKind, TaskSpec};
    use leasesim_vocab::testimony::Event;

    pub fn o(proc: u32, incarnation: u32) -> Owner {
        Owner { proc, incarnation }
    }

    pub fn f(task: u64, attempt: u32, owner: Owner) -> Fence {
        Fence { task, attempt, owner }
    }

    pub fn w(at_ms: u64, w: WorldEvent) -> Record {
        Record { at_ms, entry: Entry::World(w) }
    }

    pub fn e(at_ms: u64, e: Event) -> Record {
        Record { at_ms, entry: Entry::Engine(e) }
    }

    pub fn t(at_ms: u64, f: Fact) -> Record {
        Record { at_ms, entry: Entry::Truth(f) }
    }

    /// A row of `kind` in `state`, held by `holder` (attempt, owner) when leased.
    pub fn row(id: u64, kind: TaskKind, state: TaskState, holder: (u32, Option<Owner>)) -> Row {
        let spec = TaskSpec { kind, group: None, stage: None, index: None, not_before_ms: 500, queue: None };
        Row { state, owner: holder.1, attempt: holder.0, ..Row::ready(id, spec) }
    }

    /// Request `req` from `from` arrives at `at_ms` and is answered at
    /// `answered_ms` with `response`, its transaction changing `tasks`.
    pub fn request(
        (at_ms, answered_ms): (u64, u64),
        req: u64,
        from: Sender,
        request: Op,
        (response, tasks): (Response, Vec<TaskChange>),
    ) -> [Record; 2] {
        let commit = Commit { tasks, ..Commit::default() };
        [
            t(at_ms, Fact::Arrived { req, from, request, duplicate: false }),
            t(answered_ms, Fact::Answered { req, response, commit, reply: Reply::Sent }),
        ]
    }

    /// A change from `before` (`None`: a new row) to `after`.
    pub fn change(before: Option<Row>, after: Row) -> TaskChange {
        TaskChange { before, after }
    }

    /// p1.1 leases t12 (attempt 2) from 1000 to 5000 ms: permit 1000..5100
    /// (released after the write), body 1100..4000, its completion at the
    /// store 4000..5000. p2.1 holds t7 from 2000, is killed at 3000 and
    /// restarted as p2.2 at 6000; p1.1's reclaim releases t7 at 7000. A
    /// maintenance pass runs on p1.1 600..900. A fault at 2500, a pause of
    /// p1 8000..8500, heal at 9000, a query answered at 9500, end at 10000.
    pub fn history() -> Vec<Record> {
        use TaskState::{Done, Leased, Ready};
        let (p1, p2, p2b) = (o(1, 1), o(2, 1), o(2, 2));
        let (job, index) = (TaskKind::Job, TaskKind::IndexBuild);
        let claim = |owner| Op::Claim { owner, max: 1, wait_ms: 0 };
        let created = vec![change(None, row(12, job, Ready, (1, None))), change(None, row(7, index, Ready, (0, None)))];
        let granted = |id, kind, attempt, owner| {
            let before = row(id, kind, Ready, (attempt - 1, None));
            vec![change(Some(before), row(id, kind, Leased, (attempt, Some(owner))))]
        };
        let spec = TaskSpec::job(0);
        let mut h = vec![w(0, WorldEvent::ProcessUp { owner: p1 }), w(0, WorldEvent::ProcessUp { owner: p2 })];
        h.extend(request((490, 500), 1, Sender::Client(1), Op::Enqueue { spec, key: None }, (Response::Ack, created)));
        h.extend([
            e(600, Event::MaintenanceStarted { owner: p1, kind: MaintenanceKind::Index, pass: 1 }),
            e(900, Event::MaintenanceEnded { owner: p1, kind: MaintenanceKind::Index, pass: 1 }),
        ]);
        h.extend(request((995, 1000), 2, Sender::Worker(p1), claim(p1), (Response::Ack, granted(12, job, 2, p1))));
        h.extend([
            e(1000, Event::PermitAcquired { owner: p1, task: 12, attempt: 2 }),
            t(1100, Fact::BodyStarted { fence: f(12, 2, p1), kind: job, on: p1 }),
        ]);
        h.extend(request((1995, 2000), 3, Sender::Worker(p2), claim(p2), (Response::Ack, granted(7, index, 1, p2))));
        h.extend([
            e(2000, Event::PermitAcquired { owner: p2, task: 7, attempt: 1 }),
            t(2050, Fact::BodyStarted { fence: f(7, 1, p2), kind: index, on: p2 }),
            w(2500, WorldEvent::Fault { kind: "message-loss".into(), detail: "claim request lost".into() }),
            w(3000, WorldEvent::ProcessKilled { owner: p2 }),
            w(3000, WorldEvent::Fault { kind: "process-kill".into(), detail: "p2 killed".into() }),
            t(4000, Fact::BodyEnded { fence: f(12, 2, p1), on: p1, error: None }),
        ]);
        let done = vec![change(Some(row(12, job, Leased, (2, Some(p1)))), row(12, job, Done, (2, None)))];
        let applied = Response::Applied { retries: 0, retry_at_ms: None };
        h.extend(request((4000, 5000), 4, Sender::Worker(p1), Op::Complete { fence: f(12, 2, p1) }, (applied, done)));
        h.extend([
            e(5100, Event::PermitReleased { owner: p1, task: 12, attempt: 2 }),
            w(6000, WorldEvent::ProcessUp { owner: p2b }),
        ]);
        let released = vec![change(Some(row(7, index, Leased, (1, Some(p2)))), row(7, index, Ready, (1, None)))];
        let reclaim = Op::ReclaimExpired { by: p1 };
        h.extend(request((6990, 7000), 5, Sender::Worker(p1), reclaim, (Response::Released { tasks: 1 }, released)));
        h.extend([
            w(8000, WorldEvent::ProcessPaused { proc: 1 }),
            w(8500, WorldEvent::ProcessResumed { proc: 1 }),
            w(9000, WorldEvent::Heal),
            t(
                9400,
                Fact::ClientCalled { call: 9, client: 9, what: ClientCall::Query { index: 3, lag_timeout_ms: 500 } },
            ),
            t(9500, Fact::ClientAnswered { call: 9, answer: ClientAnswer::Queried { materialized: true } }),
            w(10_000, WorldEvent::End),
        ]);
        h
    }

    /// One violation on p1.1 (its message has markup in it) and one of the
    /// whole run.
    pub fn violations() -> Vec<Violation> {
        vec![
            Violation::new("single-owner", 4500, "t12 <granted> while p2.1 & others \"held\" it")
                .task(12)
                .attempt(2)
                .process(o(1, 1)),
            Violation::new("eventual-completion", 9800, "t7 is not terminal"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::{history, o, violations};
    use super::{check_output_path, parse_process, timeline, write_atomic, Cut, MarkKind, SpanKind};
    use crate::history::{Entry, Record, WorldEvent};
    use crate::truth::Fact;
    use std::path::Path;

    #[test]
    fn parse_process_reads_owner_and_proc_names() {
        assert_eq!(parse_process("p1.2"), Some((1, Some(2))));
        assert_eq!(parse_process("p14"), Some((14, None)));
        assert_eq!(parse_process("store"), None);
        assert_eq!(parse_process("p1.x"), None);
    }

    #[test]
    fn timeline_rebuilds_spans_and_how_they_ended() {
        let tl = timeline(&history(), &violations());
        assert_eq!(tl.end_ms, 10_000);
        assert_eq!(tl.heal_ms, Some(9000));
        assert_eq!(tl.procs.get(&2), Some(&vec![1, 2]));
        let find = |kind: SpanKind, name: &str| {
            tl.spans
                .iter()
                .find(|s| s.kind == kind && s.name == name)
                .unwrap_or_else(|| panic!("no {kind:?} span {name}: {:#?}", tl.spans))
        };
        let lease = find(SpanKind::Lease, "lease t12#2");
        assert_eq!((lease.start_ms, lease.end_ms, lease.cut, lease.owner), (1000, 5000, Cut::Normal, Some(o(1, 1))));
        let lease = find(SpanKind::Lease, "lease t7#1");
        assert_eq!((lease.start_ms, lease.end_ms, lease.cut), (2000, 7000, Cut::Reclaimed));
        assert_eq!(lease.ended_by, "released by reclaim-expired from p1.1");
        let permit = find(SpanKind::Permit, "permit t7#1");
        assert_eq!((permit.end_ms, permit.cut), (3000, Cut::Killed));
        let write = find(SpanKind::Write, "complete t12#2");
        assert_eq!((write.start_ms, write.end_ms, write.stale), (4000, 5000, false));
        let exec = find(SpanKind::Execution, "exec t12#2");
        assert_eq!((exec.start_ms, exec.end_ms), (1100, 4000));
        let pass = find(SpanKind::Maintenance(leasesim_vocab::task::MaintenanceKind::Index), "maintenance index");
        assert_eq!((pass.start_ms, pass.end_ms), (600, 900));
        let pause = find(SpanKind::Paused, "p1 paused");
        assert_eq!((pause.start_ms, pause.end_ms), (8000, 8500));
        let alive = find(SpanKind::Alive, "p2.2");
        assert_eq!((alive.start_ms, alive.end_ms, alive.cut), (6000, 10_000, Cut::Open));
        assert!(tl.marks.iter().any(|m| matches!(&m.kind, MarkKind::Fault { kind, .. } if kind == "message-loss")));
        assert!(tl.spans.windows(2).all(|w| w[0].start_ms <= w[1].start_ms), "spans are sorted by start");
    }

    /// graphile's stale completion in small: p3.1 holds t4 (attempt 1);
    /// p2.1's sweep, a transaction outside any attempt ended by a COMMIT of
    /// its own, releases it; p2.1 takes attempt 2; p3.1's completion
    /// arrives and deletes the task under p2.1. p1.1 exits on its own at
    /// 500 ms; p2.1 is killed at 600 ms.
    fn stale_history() -> Vec<Record> {
        use super::testkit::{change, f, request, row, t, w};
        use crate::truth::Sender;
        use leasesim_vocab::ids::TxnId;
        use leasesim_vocab::op::{Op, Response};
        use leasesim_vocab::task::{TaskKind::Job, TaskSpec, TaskState::*};
        let (p1, p2, p3) = (o(1, 1), o(2, 1), o(3, 1));
        let txn = TxnId { owner: p2, seq: 1 };
        let rows = |n| (Response::Rows { count: n }, vec![]);
        let exec = |stmt| Op::Exec { txn, stmt: Box::new(stmt), commit: false };
        let mut h: Vec<Record> = [p1, p2, p3].map(|owner| w(0, WorldEvent::ProcessUp { owner })).to_vec();
        let created = vec![change(None, row(4, Job, Ready, (0, None)))];
        h.extend(request(
            (5, 10),
            1,
            Sender::Client(1),
            Op::Enqueue { spec: TaskSpec::job(0), key: None },
            (Response::Ack, created),
        ));
        let grant1 = vec![change(Some(row(4, Job, Ready, (0, None))), row(4, Job, Leased, (1, Some(p3))))];
        h.extend(request(
            (100, 105),
            2,
            Sender::Worker(p3),
            Op::Claim { owner: p3, max: 1, wait_ms: 0 },
            (Response::Ack, grant1),
        ));
        h.push(t(110, Fact::BodyStarted { fence: f(4, 1, p3), kind: Job, on: p3 }));
        h.extend(request(
            (200, 201),
            3,
            Sender::Worker(p2),
            exec(Op::Other { what: "sweep-lock".into(), by: Some(p2) }),
            rows(1),
        ));
        h.extend(request(
            (210, 211),
            4,
            Sender::Worker(p2),
            exec(Op::ReleaseOwners { by: p2, owners: vec![p3] }),
            rows(1),
        ));
        let release = vec![change(Some(row(4, Job, Leased, (1, Some(p3)))), row(4, Job, Ready, (1, None)))];
        h.extend(request(
            (220, 221),
            5,
            Sender::Worker(p2),
            Op::Commit { txn },
            (Response::Rows { count: 0 }, release),
        ));
        let grant2 = vec![change(Some(row(4, Job, Ready, (1, None))), row(4, Job, Leased, (2, Some(p2))))];
        h.extend(request(
            (300, 301),
            6,
            Sender::Worker(p2),
            Op::Claim { owner: p2, max: 1, wait_ms: 0 },
            (Response::Ack, grant2),
        ));
        h.push(t(305, Fact::BodyStarted { fence: f(4, 2, p2), kind: Job, on: p2 }));
        h.push(t(400, Fact::BodyEnded { fence: f(4, 1, p3), on: p3, error: None }));
        let deleted = vec![change(Some(row(4, Job, Leased, (2, Some(p2)))), row(4, Job, Done, (2, None)))];
        h.extend(request(
            (402, 402),
            7,
            Sender::Worker(p3),
            Op::Complete { fence: f(4, 1, p3) },
            (Response::Rows { count: 1 }, deleted),
        ));
        h.extend([w(500, WorldEvent::ProcessExited { owner: p1 }), w(600, WorldEvent::ProcessKilled { owner: p2 })]);
        h.push(w(1000, WorldEvent::End));
        h
    }

    #[test]
    fn leases_writes_and_transactions_come_from_the_facts() {
        let tl = timeline(&stale_history(), &[]);
        let one = |kind: SpanKind, name: &str| {
            let found: Vec<_> = tl.spans.iter().filter(|s| s.kind == kind && s.name == name).collect();
            assert_eq!(found.len(), 1, "one {kind:?} span {name}: {:#?}", tl.spans);
            found[0]
        };
        let first = one(SpanKind::Lease, "lease t4#1");
        assert_eq!((first.start_ms, first.end_ms, first.cut, first.owner), (105, 221, Cut::Reclaimed, Some(o(3, 1))));
        assert_eq!(first.ended_by, "released by commit of x1@p2.1 (release-owners) from p2.1");
        let second = one(SpanKind::Lease, "lease t4#2");
        assert_eq!((second.start_ms, second.end_ms, second.cut, second.proc), (301, 402, Cut::Reclaimed, 2));
        assert_eq!(second.ended_by, "completed by complete of t4#1 from p3.1");
        let stale = one(SpanKind::Write, "stale complete t4#1");
        assert!(stale.stale && stale.proc == 3 && (stale.start_ms, stale.end_ms) == (402, 402));
        assert_eq!(stale.args["stale"], "at its arrival attempt 2 (p2.1) holds the task");
        let sweep = one(SpanKind::Transaction, "txn x1@p2.1");
        assert_eq!((sweep.task, sweep.start_ms, sweep.end_ms, sweep.cut), (None, 200, 221, Cut::Normal));
        assert_eq!(sweep.ended_by, "committed");
        let body = one(SpanKind::Execution, "exec t4#2");
        assert_eq!((body.end_ms, body.cut, body.ended_by.as_str()), (600, Cut::Killed, "process killed"));
        assert_eq!(one(SpanKind::Execution, "exec t4#1").ended_by, "finished ok");
        let leases = tl.spans.iter().filter(|s| s.kind == SpanKind::Lease).count();
        assert_eq!(leases, 2, "a lease per grant");
        let store = |what: super::StoreMark| {
            tl.marks.iter().filter(|m| matches!(&m.kind, MarkKind::Store { what: w, .. } if *w == what)).count()
        };
        use super::StoreMark::{Created, Done, Released};
        assert_eq!((store(Created), store(Released), store(Done)), (1, 1, 1));
    }

    #[test]
    fn an_exit_is_not_a_kill() {
        let tl = timeline(&stale_history(), &[]);
        let exits: Vec<_> = tl.marks.iter().filter(|m| matches!(m.kind, MarkKind::Exited(_))).collect();
        let kills: Vec<_> = tl.marks.iter().filter(|m| matches!(m.kind, MarkKind::Killed(_))).collect();
        assert_eq!((exits.len(), exits[0].at_ms, kills.len(), kills[0].at_ms), (1, 500, 1, 600));
        let life = |name: &str| tl.spans.iter().find(|s| s.kind == SpanKind::Alive && s.name == name).unwrap();
        assert_eq!((life("p1.1").end_ms, life("p1.1").ended_by.as_str()), (500, "exited"));
        assert_eq!((life("p2.1").end_ms, life("p2.1").ended_by.as_str()), (600, "killed"));
        let svg = super::svg_timeline(&stale_history(), &[], "exits");
        assert!(svg.contains(">exited p1.1<") && svg.contains(">killed p2.1<"));
        assert!(!svg.contains(">killed p1.1<") && !svg.contains(">exited p2.1<"));
    }

    /// The built-in engine's outcome held at the store while its lease is
    /// taken and given again: the write is not stale when it arrives, and
    /// is when the store applies it.
    #[test]
    fn a_write_applied_after_its_lease_ended_is_stale_from_arrival_to_commit() {
        use super::testkit::{change, f, request, row, t, w};
        use crate::truth::Sender;
        use leasesim_vocab::op::{Op, Response};
        use leasesim_vocab::task::{TaskKind::Job, TaskState::*};
        let (p2, p3) = (o(2, 1), o(3, 1));
        let claim = |owner| Op::Claim { owner, max: 1, wait_ms: 0 };
        let mut h = vec![w(0, WorldEvent::ProcessUp { owner: p2 }), w(0, WorldEvent::ProcessUp { owner: p3 })];
        let grant1 = vec![change(Some(row(16, Job, Ready, (0, None))), row(16, Job, Leased, (1, Some(p2))))];
        h.extend(request((90, 100), 1, Sender::Worker(p2), claim(p2), (Response::Ack, grant1)));
        h.push(t(
            200,
            Fact::Arrived {
                req: 2,
                from: Sender::Worker(p2),
                request: Op::Complete { fence: f(16, 1, p2) },
                duplicate: false,
            },
        ));
        let orphan = Op::ReleaseOrphans { owner: p2, running: vec![], older_than_ms: 0, as_of_ms: 300 };
        let release = vec![change(Some(row(16, Job, Leased, (1, Some(p2)))), row(16, Job, Ready, (1, None)))];
        h.extend(request((295, 300), 3, Sender::Worker(p2), orphan, (Response::Released { tasks: 1 }, release)));
        let grant2 = vec![change(Some(row(16, Job, Ready, (1, None))), row(16, Job, Leased, (2, Some(p3))))];
        h.extend(request((395, 400), 4, Sender::Worker(p3), claim(p3), (Response::Ack, grant2)));
        let done = vec![change(Some(row(16, Job, Leased, (2, Some(p3)))), row(16, Job, Done, (2, None)))];
        let commit = crate::truth::Commit { tasks: done, ..Default::default() };
        let applied = Response::Applied { retries: 0, retry_at_ms: None };
        h.push(t(600, Fact::Answered { req: 2, response: applied, commit, reply: crate::truth::Reply::Sent }));
        let tl = timeline(&h, &[]);
        let write = tl.spans.iter().find(|s| s.kind == SpanKind::Write).unwrap();
        assert_eq!(
            (write.name.as_str(), write.start_ms, write.end_ms, write.stale),
            ("stale complete t16#1", 200, 600, true)
        );
        assert_eq!(write.args["stale"], "the store changed the task while attempt 2 (p3.1) holds the task");
    }

    #[test]
    fn an_empty_history_has_an_empty_timeline() {
        let tl = timeline(&[], &[]);
        assert_eq!((tl.end_ms, tl.spans.len(), tl.marks.len()), (0, 0, 0));
    }

    #[test]
    fn write_atomic_replaces_the_file_and_names_the_path_on_error() {
        let dir = std::env::temp_dir().join(format!("leasesim-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.json");
        write_atomic(&path, "first").unwrap();
        write_atomic(&path, "second").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second");
        let leftovers: Vec<_> =
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind: {leftovers:?}");
        let missing = dir.join("no-such-dir").join("out.svg");
        let err = write_atomic(&missing, "x").unwrap_err();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(!err.contains('\n'), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_paths_that_are_not_regular_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("leasesim-export-refuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("kept.txt");
        std::fs::write(&target, "kept").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for (path, what) in [
            (link.as_path(), "a symbolic link"),
            (dir.as_path(), "a directory"),
            (Path::new("/dev/null"), "not a regular file"),
        ] {
            let err = write_atomic(path, "x").unwrap_err();
            assert!(err.contains(what) && err.contains(&path.display().to_string()), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept", "the link's target is untouched");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert!(check_output_path(&dir.join("new.svg")).is_ok() && check_output_path(&target).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Runs a real world and exports it. With `LEASESIM_EXPORT_DIR` set, the
    /// exports are also written there to be looked at.
    fn export_real_run(scenario: &str, seed: u64, defects: &[&str]) -> (String, String, usize) {
        use crate::runner::{judge, run_world, RunSpec, DEFAULT_WATCHDOG};
        let loaded = crate::scenario::resolve(scenario, &crate::engines()).expect("a built-in scenario");
        let spec = RunSpec::new(std::sync::Arc::new(loaded.scenario), scenario, seed).with_defects(defects.iter());
        let result = run_world(&spec, DEFAULT_WATCHDOG).expect("the world runs");
        let outcome = judge(&spec, &result);
        let title = format!("{scenario} seed {seed}");
        let trace = super::chrome_trace(&result.history, &outcome.violations);
        let svg = super::svg_timeline(&result.history, &outcome.violations, &title);
        if let Some(dir) = std::env::var_os("LEASESIM_EXPORT_DIR") {
            let dir = std::path::Path::new(&dir);
            write_atomic(&dir.join(format!("{scenario}-seed{seed}.trace.json")), &trace).unwrap();
            write_atomic(&dir.join(format!("{scenario}-seed{seed}.svg")), &svg).unwrap();
        }
        (trace, svg, outcome.violations.len())
    }

    #[test]
    fn a_real_run_exports_to_both_formats() {
        let (trace, svg, _) = export_real_run("swarm", 3, &[]);
        let v: serde_json::Value = serde_json::from_str(&trace).expect("the trace is JSON");
        let events = v["traceEvents"].as_array().unwrap();
        assert!(events.len() > 100, "{} trace events", events.len());
        let spans = |cat: &str| events.iter().filter(|e| e["ph"] == "X" && e["cat"] == cat).count();
        assert!(spans("lease") > 10 && spans("permit") > 10 && spans("maintenance") > 10);
        // Failures and stage completions are written in transactions.
        assert!(spans("transaction") > 5, "{} transaction spans", spans("transaction"));
        assert!(events.iter().any(|e| e["ph"] == "i" && e["cat"] == "fault"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.len() > 20_000, "{} bytes of SVG", svg.len());
        assert!(svg.matches("<title>lease t").count() > 10);
        assert_eq!(svg.matches("<title>txn x").count(), spans("transaction"), "one outline per transaction");
        assert_eq!(svg.matches("<g ").count(), svg.matches("</g>").count());
        for lane in ["world", "store", "p1", "p2", "p3"] {
            assert!(svg.contains(&format!(r#"<g class="lane {lane}">"#)), "lane {lane}");
        }
    }

    /// What a picture must draw, counted in the history itself: grants
    /// (`leasesim_check::granted` over every commit), bodies started, exits
    /// and kills.
    fn truth_counts(history: &[Record]) -> [usize; 4] {
        let mut n = [0; 4];
        for rec in history {
            match &rec.entry {
                Entry::Truth(Fact::Answered { commit, .. } | Fact::Drift { commit }) => {
                    n[0] += commit.tasks.iter().filter(|c| crate::check::granted(c).is_some()).count();
                }
                Entry::Truth(Fact::BodyStarted { .. }) => n[1] += 1,
                Entry::World(WorldEvent::ProcessExited { .. }) => n[2] += 1,
                Entry::World(WorldEvent::ProcessKilled { .. }) => n[3] += 1,
                _ => {}
            }
        }
        n
    }

    /// Runs a real world of `scenario` and counts what its whole-run SVG
    /// draws against the history: a lease bar per grant, a body per body
    /// started, an exit label per exit, a kill label per kill; and at least
    /// one grant and one body, so that a blank picture cannot pass.
    fn picture_counts_match_the_history(scenario: &str, seed: u64) -> [usize; 4] {
        use crate::runner::{judge, run_world, RunSpec, DEFAULT_WATCHDOG};
        let loaded = crate::scenario::resolve(scenario, &crate::engines()).expect("a built-in scenario");
        let spec = RunSpec::new(std::sync::Arc::new(loaded.scenario), scenario, seed);
        let result = run_world(&spec, DEFAULT_WATCHDOG).expect("the world runs");
        let outcome = judge(&spec, &result);
        let svg = super::svg_timeline(&result.history, &outcome.violations, scenario);
        let [grants, bodies, exits, kills] = truth_counts(&result.history);
        assert!(grants > 0 && bodies > 0, "{scenario} seed {seed}: {grants} grants, {bodies} bodies");
        let drawn = |pat: &str| svg.matches(pat).count();
        assert_eq!(drawn("<title>lease t"), grants, "{scenario}: a lease bar per grant");
        assert_eq!(drawn("<title>exec t"), bodies, "{scenario}: a body bar per body started");
        assert_eq!(drawn(">exited p"), exits, "{scenario}: an exit label per exit");
        assert_eq!(drawn(">killed p"), kills, "{scenario}: a kill label per kill");
        // Every commit of the store is a mark; its lane is not empty.
        assert!(drawn("<title>") > grants * 3, "{scenario}: marks beyond the leases");
        assert!(svg.contains(">created ("), "{scenario}: store commits drawn");
        // The trace is drawn from the same timeline.
        let trace: serde_json::Value =
            serde_json::from_str(&super::chrome_trace(&result.history, &outcome.violations)).expect("JSON");
        let events = trace["traceEvents"].as_array().expect("events");
        let spans = |cat: &str| events.iter().filter(|e| e["ph"] == "X" && e["cat"] == cat).count();
        assert_eq!((spans("lease"), spans("execution")), (grants, bodies), "{scenario}: the trace's spans");
        [grants, bodies, exits, kills]
    }

    #[test]
    fn the_builtin_picture_draws_every_grant_body_and_kill() {
        let [_, _, exits, _] = picture_counts_match_the_history("swarm", 3);
        assert_eq!(exits, 0, "the built-in engine's workers never exit on their own");
    }

    #[test]
    fn the_graphile_picture_draws_every_grant_body_and_exit() {
        let [_, _, exits, kills] = picture_counts_match_the_history("graphile-recovery", 66);
        assert!(exits > 0 && kills == 0, "seed 66 kills nothing; its workers exit: {exits} exits, {kills} kills");
    }

    #[test]
    fn the_apalis_picture_draws_every_grant_body_and_exit() {
        picture_counts_match_the_history("apalis-recovery", 4);
    }

    #[test]
    fn a_violating_run_shows_its_violations() {
        let defects = ["unfenced-completion"];
        // The first violating seed: which one it is moves whenever plans do.
        let (trace, svg, violations) = (1..=40)
            .map(|seed| export_real_run("b-machines", seed, &defects))
            .find(|(_, _, violations)| *violations > 0)
            .expect("unfenced-completion violates within 40 seeds of b-machines");
        let v: serde_json::Value = serde_json::from_str(&trace).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let found = events.iter().filter(|e| e["cat"] == "violation").count();
        assert_eq!(found, violations);
        assert!(svg.contains(">V1 fenced-completion<") || svg.contains("[fenced-completion]"));
    }
}
