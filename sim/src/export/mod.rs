//! Exports of one run for people to look at: a Chrome trace (opens in
//! Perfetto or chrome://tracing) and a static SVG timeline.
//!
//! Both are drawn from one [`Timeline`], rebuilt from the history alone: the
//! spans (leases, permits, executions, outcome writes, maintenance passes,
//! process lives and pauses) and the instants (faults, lifecycle, store
//! commits, query results) of the run.

mod chrome;
mod svg;

pub use chrome::chrome_trace;
pub use svg::{svg_timeline, svg_timeline_window};

use crate::check::Violation;
use crate::history::{Entry, Record, WorldEvent};
use crate::truth::Fact;
use leasesim_vocab::ids::{Fence, GroupId, IndexId, Owner, ProcId, TaskId, TxnId};
use leasesim_vocab::op::{Op, Refusal, Response};
use leasesim_vocab::task::MaintenanceKind;
use leasesim_vocab::task::TaskError;
use leasesim_vocab::task::TaskKind;
use leasesim_vocab::testimony::{Event, WriteKind};
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
    /// Waiting for the outcome write: execution finished -> written, rejected, timed out.
    Write,
    /// A maintenance pass.
    Maintenance(MaintenanceKind),
    /// A transaction that spans round trips: its first statement's arrival
    /// at the store -> committed, rolled back, or found no longer open.
    Transaction,
}

/// How a span ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Its own end event (a completion, a release of the permit, ...).
    Normal,
    /// A lease taken back: released by recovery or superseded by a new grant.
    Reclaimed,
    /// Its process was killed.
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
    Fault { kind: String, detail: String },
    Up(Owner),
    Killed(Owner),
    Paused(ProcId),
    Resumed(ProcId),
    ClockOffset { proc: ProcId, offset_ms: i64 },
    Heal,
    End,
    Store { what: StoreMark, task: Option<TaskId>, detail: String },
    Query { index: IndexId, materialized: bool },
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

struct OpenLease {
    fence: Fence,
    start_ms: u64,
    kind: TaskKind,
    expiry: Option<u64>,
    renewals: u32,
}

struct OpenWrite {
    start_ms: u64,
    error: Option<String>,
}

/// A transaction seen at the store seam: when its first statement arrived,
/// the attempt it speaks for, the statements answered so far.
struct OpenTxn {
    start_ms: u64,
    fence: Option<Fence>,
    statements: u32,
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

#[derive(Default)]
struct Builder {
    tl: Timeline,
    leases: BTreeMap<TaskId, OpenLease>,
    permits: BTreeMap<(Owner, TaskId, u32), u64>,
    execs: BTreeMap<Fence, u64>,
    writes: BTreeMap<Fence, OpenWrite>,
    passes: BTreeMap<(Owner, MaintenanceKind, u64), u64>,
    alive: BTreeMap<ProcId, (Owner, u64)>,
    paused: BTreeMap<ProcId, u64>,
    task_kinds: BTreeMap<TaskId, TaskKind>,
    txns: BTreeMap<TxnId, OpenTxn>,
    /// Requests of transactions on their way through the store: request ->
    /// (transaction, sent with COMMIT, a rollback).
    txn_reqs: BTreeMap<u64, (TxnId, bool, bool)>,
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
        let Some(start) = self.execs.remove(&fence) else { return };
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
            owner: fence.owner,
            fence: Some((fence.task, fence.attempt)),
            name: format!("exec {}", tag(&fence)),
            start_ms: start,
            end_ms: now,
            cut,
            ended_by,
            args,
        });
    }

    fn close_write(&mut self, fence: Fence, now: u64, cut: Cut, ended_by: String) {
        let Some(w) = self.writes.remove(&fence) else { return };
        let mut args = Map::new();
        args.insert("task".into(), json!(fence.task));
        args.insert("attempt".into(), json!(fence.attempt));
        args.insert("owner".into(), json!(fence.owner.to_string()));
        let outcome = match &w.error {
            None => "complete".to_string(),
            Some(e) => format!("fail ({e})"),
        };
        args.insert("outcome".into(), json!(outcome));
        args.insert("ended_by".into(), json!(ended_by));
        self.span(NewSpan {
            kind: SpanKind::Write,
            owner: fence.owner,
            fence: Some((fence.task, fence.attempt)),
            name: format!("write {}", tag(&fence)),
            start_ms: w.start_ms,
            end_ms: now,
            cut,
            ended_by,
            args,
        });
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
            ended_by: ended_by.to_string(),
            args,
        });
    }

    /// Everything of `owner` that dies with it (not its leases: the store keeps those).
    fn kill(&mut self, owner: Owner, now: u64) {
        let permits: Vec<_> = self.permits.keys().filter(|k| k.0 == owner).copied().collect();
        for key in permits {
            self.close_permit(key, now, Cut::Killed, "process killed");
        }
        let execs: Vec<_> = self.execs.keys().filter(|f| f.owner == owner).copied().collect();
        for f in execs {
            self.close_exec(f, now, Cut::Killed, "process killed".into());
        }
        let writes: Vec<_> = self.writes.keys().filter(|f| f.owner == owner).copied().collect();
        for f in writes {
            self.close_write(f, now, Cut::Killed, "process killed".into());
        }
        let passes: Vec<_> = self.passes.keys().filter(|k| k.0 == owner).copied().collect();
        for key in passes {
            self.close_pass(key, now, Cut::Killed, "process killed");
        }
        if self.alive.get(&owner.proc).is_some_and(|(o, _)| *o == owner) {
            self.close_alive(owner.proc, now, Cut::Killed, "killed");
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
            WorldEvent::ProcessKilled { owner } | WorldEvent::ProcessExited { owner } => {
                self.see(*owner);
                self.kill(*owner, now);
                self.mark(now, MarkKind::Killed(*owner));
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
            WorldEvent::Heal => {
                self.tl.heal_ms.get_or_insert(now);
                self.mark(now, MarkKind::Heal);
            }
            WorldEvent::End => self.mark(now, MarkKind::End),
        }
    }

    /// Folds one engine event into the timeline. Every variant is named,
    /// so a new one has to be placed here (drawn, or among those that are not).
    fn engine(&mut self, now: u64, e: &Event) {
        match e {
            Event::TaskCreated { task, spec, .. } => {
                self.task_kinds.insert(*task, spec.kind);
                self.store(now, StoreMark::Created, Some(*task), format!("t{task} ({})", spec.kind.name()));
            }
            Event::StageEnqueueRefused { stage, reason } => {
                self.store(now, StoreMark::StageRefused, None, format!("{stage}: {}", wire_name(reason)));
            }
            Event::LeaseGranted { fence, kind, lease_expiry_ms, .. } => {
                self.lease_granted(now, *fence, *kind, *lease_expiry_ms)
            }
            Event::LeaseRenewed { fence, .. } => self.lease_renewed(*fence),
            Event::LeaseReleased { fence, cause } => {
                let cause = wire_name(cause);
                self.close_lease(fence.task, now, Cut::Reclaimed, format!("released ({cause})"));
                self.store(now, StoreMark::Released, Some(fence.task), format!("{fence} released ({cause})"));
            }
            Event::WriteApplied { fence, write, retries, retry_at_ms, terminal } => {
                self.write_applied(now, *fence, *write, (*retries, *retry_at_ms, *terminal))
            }
            Event::WriteRejected { fence, write, reason } => self.write_rejected(now, *fence, *write, reason),
            Event::RepairDecision { group, needed, reclaimed } => self.repair_decision(now, *group, *needed, reclaimed),
            Event::IndexMaterialized { index, task } => {
                self.store(now, StoreMark::Materialized, Some(*task), format!("index {index} by t{task}"));
            }
            Event::StageDone { stage, task } => {
                self.store(now, StoreMark::StageDone, Some(*task), format!("{stage} done by t{task}"));
            }
            Event::ProcessStarted { owner, .. } => self.see(*owner),
            Event::PermitAcquired { owner, task, attempt } => self.permit_acquired(now, (*owner, *task, *attempt)),
            Event::PermitReleased { owner, task, attempt } => self.permit_released(now, (*owner, *task, *attempt)),
            Event::ExecutionStarted { fence } => {
                self.see(fence.owner);
                self.execs.insert(*fence, now);
            }
            Event::ExecutionFinished { fence, error } => self.execution_finished(now, *fence, error.as_ref()),
            Event::FinalizeTimedOut { fence } => {
                self.close_write(*fence, now, Cut::Normal, "finalize timed out".into());
            }
            Event::MaintenanceStarted { owner, kind, pass } => {
                self.see(*owner);
                self.passes.insert((*owner, *kind, *pass), now);
            }
            Event::MaintenanceEnded { owner, kind, pass } => {
                self.close_pass((*owner, *kind, *pass), now, Cut::Normal, "ended");
            }
            Event::QueryResult { index, materialized } => {
                self.mark(now, MarkKind::Query { index: *index, materialized: *materialized });
            }
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

    fn lease_granted(&mut self, now: u64, fence: Fence, kind: TaskKind, expiry: Option<u64>) {
        self.see(fence.owner);
        self.task_kinds.insert(fence.task, kind);
        self.close_lease(fence.task, now, Cut::Reclaimed, format!("superseded by the grant of {fence}"));
        self.leases.insert(fence.task, OpenLease { fence, start_ms: now, kind, expiry, renewals: 0 });
    }

    fn lease_renewed(&mut self, fence: Fence) {
        if let Some(l) = self.leases.get_mut(&fence.task).filter(|l| l.fence == fence) {
            l.renewals += 1;
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

    /// An outcome (or renewal) took effect; `(retries, retry_at_ms, terminal)`
    /// say what became of a failed task.
    fn write_applied(&mut self, now: u64, fence: Fence, write: WriteKind, retry: (u32, Option<u64>, bool)) {
        let (retries, retry_at_ms, terminal) = retry;
        match write {
            WriteKind::Complete => {
                self.close_lease(fence.task, now, Cut::Normal, format!("completed by {fence}"));
                self.close_write(fence, now, Cut::Normal, "complete applied".into());
                self.store(now, StoreMark::Done, Some(fence.task), format!("{fence} completed"));
            }
            WriteKind::Fail => {
                let what = if terminal {
                    format!("failed by {fence}: dead after {retries} failures")
                } else {
                    let at = retry_at_ms.map_or("?".to_string(), |a| format!("{a} ms"));
                    format!("failed by {fence}: retry {retries} at {at}")
                };
                self.close_lease(fence.task, now, Cut::Normal, what.clone());
                self.close_write(fence, now, Cut::Normal, "fail applied".into());
                let mark = if terminal { StoreMark::Dead } else { StoreMark::Failed };
                self.store(now, mark, Some(fence.task), what);
            }
            WriteKind::Renew | WriteKind::ClearStageLink => {}
        }
    }

    fn write_rejected(&mut self, now: u64, fence: Fence, write: WriteKind, reason: &Refusal) {
        let outcome = matches!(write, WriteKind::Complete | WriteKind::Fail);
        let (write, reason) = (wire_name(&write), wire_name(reason));
        if outcome {
            self.close_write(fence, now, Cut::Normal, format!("{write} rejected ({reason})"));
        }
        self.store(now, StoreMark::Rejected, Some(fence.task), format!("{write} by {fence} rejected: {reason}"));
    }

    fn permit_acquired(&mut self, now: u64, key: (Owner, TaskId, u32)) {
        self.see(key.0);
        self.close_permit(key, now, Cut::Normal, "acquired again");
        self.permits.insert(key, now);
    }

    fn permit_released(&mut self, now: u64, (owner, task, attempt): (Owner, TaskId, u32)) {
        let fence = Fence { task, attempt, owner };
        self.close_write(fence, now, Cut::Normal, "permit released before any outcome write".into());
        self.close_permit((owner, task, attempt), now, Cut::Normal, "released");
    }

    fn execution_finished(&mut self, now: u64, fence: Fence, error: Option<&TaskError>) {
        let ended = match error {
            None => "finished ok".to_string(),
            Some(e) => format!("finished with error {}", wire_name(e)),
        };
        self.close_exec(fence, now, Cut::Normal, ended);
        self.writes.insert(fence, OpenWrite { start_ms: now, error: error.map(wire_name) });
    }

    /// Folds one fact of the store seam into the timeline: the statements
    /// of transactions that span round trips, and how each transaction ended.
    fn fact(&mut self, now: u64, f: &Fact) {
        match f {
            Fact::Arrived { req, request: Op::Exec { txn, stmt, commit }, .. } => {
                self.txn_reqs.insert(*req, (*txn, *commit, false));
                let fence = stmt.fence().copied();
                self.txns.entry(*txn).or_insert(OpenTxn { start_ms: now, fence, statements: 0 });
            }
            Fact::Arrived { req, request: Op::Rollback { txn }, .. } => {
                self.txn_reqs.insert(*req, (*txn, false, true));
            }
            Fact::Answered { req, response, .. } => {
                let Some((txn, commit, rollback)) = self.txn_reqs.remove(req) else { return };
                let ended_by = match response {
                    Response::Rejected { reason: Refusal::TxnClosed } => "told it is no longer open",
                    Response::Rejected { reason: Refusal::TimedOut } => "a lock wait timed out",
                    _ if rollback => "rolled back",
                    _ if commit => "committed",
                    _ => {
                        if let Some(t) = self.txns.get_mut(&txn) {
                            t.statements += 1;
                        }
                        return;
                    }
                };
                let cut = if commit && ended_by == "committed" { Cut::Normal } else { Cut::Killed };
                self.close_txn(txn, now, cut, ended_by);
            }
            Fact::Refused { req, .. } => {
                if let Some((txn, _, _)) = self.txn_reqs.remove(req) {
                    self.close_txn(txn, now, Cut::Killed, "aborted by a fault at the store");
                }
            }
            Fact::Dropped { req } => {
                self.txn_reqs.remove(req);
            }
            Fact::StoreCrashed { .. } => {
                for txn in self.txns.keys().copied().collect::<Vec<_>>() {
                    self.close_txn(txn, now, Cut::Killed, "lost when the store process died");
                }
            }
            _ => {}
        }
    }

    fn close_txn(&mut self, txn: TxnId, now: u64, cut: Cut, ended_by: &str) {
        let Some(t) = self.txns.remove(&txn) else { return };
        self.see(txn.owner);
        let mut args = Map::new();
        args.insert("statements".into(), Value::from(t.statements + u32::from(cut == Cut::Normal)));
        self.span(NewSpan {
            kind: SpanKind::Transaction,
            owner: txn.owner,
            fence: t.fence.map(|f| (f.task, f.attempt)),
            name: format!("txn {txn}"),
            start_ms: t.start_ms,
            end_ms: now,
            cut,
            ended_by: ended_by.to_string(),
            args,
        });
    }

    fn finish(mut self, end_ms: u64) -> Timeline {
        const OPEN: &str = "still open at the end of the history";
        for txn in self.txns.keys().copied().collect::<Vec<_>>() {
            self.close_txn(txn, end_ms, Cut::Open, OPEN);
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
        for f in self.writes.keys().copied().collect::<Vec<_>>() {
            self.close_write(f, end_ms, Cut::Open, OPEN.into());
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
    //! A small hand-made run shared by the exporters' tests.

    use crate::check::Violation;
    use crate::history::{Entry, Record, WorldEvent};
    use leasesim_vocab::ids::{Fence, Owner};
    use leasesim_vocab::task::MaintenanceKind;
    use leasesim_vocab::task::{TaskKind, TaskSpec};
    use leasesim_vocab::testimony::{Event, ReleaseCause, WriteKind};

    pub fn o(proc: u32, incarnation: u32) -> Owner {
        Owner { proc, incarnation }
    }

    pub fn f(task: u64, attempt: u32, owner: Owner) -> Fence {
        Fence { task, attempt, owner }
    }

    fn w(at_ms: u64, w: WorldEvent) -> Record {
        Record { at_ms, entry: Entry::World(w) }
    }

    fn e(at_ms: u64, e: Event) -> Record {
        Record { at_ms, entry: Entry::Engine(e) }
    }

    /// p1.1 leases t12 (attempt 2) from 1000 to 5000 ms: permit 1000..5100
    /// (released after the write), execution 1100..4000, write 4000..5000,
    /// completed at 5000. p2.1 holds t7 from 2000,
    /// is killed at 3000 and restarted as p2.2 at 6000; t7 is released
    /// (expired) at 7000. A maintenance pass runs on p1.1 600..900. A fault
    /// at 2500, a pause of p1 8000..8500, heal at 9000, end at 10000.
    pub fn history() -> Vec<Record> {
        let (p1, p2, p2b) = (o(1, 1), o(2, 1), o(2, 2));
        let spec = |kind| TaskSpec { kind, group: None, stage: None, index: None, not_before_ms: 500, queue: None };
        vec![
            w(0, WorldEvent::ProcessUp { owner: p1 }),
            w(0, WorldEvent::ProcessUp { owner: p2 }),
            e(500, Event::TaskCreated { task: 12, spec: spec(TaskKind::Job), retry_at_ms: 500 }),
            e(500, Event::TaskCreated { task: 7, spec: spec(TaskKind::IndexBuild), retry_at_ms: 500 }),
            e(600, Event::MaintenanceStarted { owner: p1, kind: MaintenanceKind::Index, pass: 1 }),
            e(900, Event::MaintenanceEnded { owner: p1, kind: MaintenanceKind::Index, pass: 1 }),
            e(
                1000,
                Event::LeaseGranted {
                    fence: f(12, 2, p1),
                    kind: TaskKind::Job,
                    lease_expiry_ms: Some(31_000),
                    retry_at_ms: 500,
                },
            ),
            e(1000, Event::PermitAcquired { owner: p1, task: 12, attempt: 2 }),
            e(1100, Event::ExecutionStarted { fence: f(12, 2, p1) }),
            e(
                2000,
                Event::LeaseGranted {
                    fence: f(7, 1, p2),
                    kind: TaskKind::IndexBuild,
                    lease_expiry_ms: Some(6_000),
                    retry_at_ms: 500,
                },
            ),
            e(2000, Event::PermitAcquired { owner: p2, task: 7, attempt: 1 }),
            e(2050, Event::ExecutionStarted { fence: f(7, 1, p2) }),
            w(2500, WorldEvent::Fault { kind: "message-loss".into(), detail: "claim request lost".into() }),
            w(3000, WorldEvent::ProcessKilled { owner: p2 }),
            w(3000, WorldEvent::Fault { kind: "process-kill".into(), detail: "p2 killed".into() }),
            e(4000, Event::ExecutionFinished { fence: f(12, 2, p1), error: None }),
            e(
                5000,
                Event::WriteApplied {
                    fence: f(12, 2, p1),
                    write: WriteKind::Complete,
                    retries: 0,
                    retry_at_ms: None,
                    terminal: false,
                },
            ),
            e(5000, Event::CallbackPublished { fence: f(12, 2, p1) }),
            e(5100, Event::PermitReleased { owner: p1, task: 12, attempt: 2 }),
            w(6000, WorldEvent::ProcessUp { owner: p2b }),
            e(7000, Event::LeaseReleased { fence: f(7, 1, p2), cause: ReleaseCause::Expired }),
            w(8000, WorldEvent::ProcessPaused { proc: 1 }),
            w(8500, WorldEvent::ProcessResumed { proc: 1 }),
            w(9000, WorldEvent::Heal),
            e(9500, Event::QueryResult { index: 3, materialized: true }),
            w(10_000, WorldEvent::End),
        ]
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
        assert_eq!(lease.ended_by, "released (expired)");
        let permit = find(SpanKind::Permit, "permit t7#1");
        assert_eq!((permit.end_ms, permit.cut), (3000, Cut::Killed));
        let write = find(SpanKind::Write, "write t12#2");
        assert_eq!((write.start_ms, write.end_ms), (4000, 5000));
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
