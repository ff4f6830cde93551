//! The run in the Chrome trace event format: one JSON object with
//! `traceEvents`, which Perfetto (ui.perfetto.dev) and chrome://tracing open.
//!
//! Processes ("pid"): `world` (faults, heal, end, violations of the whole
//! run), `store` (commits), one per worker process (`p1`, `p2`, ...) and the
//! `client`. A worker's threads ("tid"): `lifecycle` (one span per
//! incarnation, up/kill instants, violations), `paused`, then per
//! incarnation one thread per kind of span and slot, e.g. `p1.2 leases`,
//! `p1.2 leases #2`, `p1.2 permits`, `p1.2 execution`, `p1.2 outcome writes`
//! (a stale one coloured `terrible`), `p1.2 transactions`, `p1.2 other
//! transactions` (outside any attempt), `p1.2 maintenance index`: spans on
//! one thread never overlap, so every viewer draws them all. Timestamps are
//! microseconds (`at_ms * 1000`).

use super::{timeline, Cut, MarkKind, Span, SpanKind, Timeline};
use crate::check::Violation;
use crate::history::Record;
use leasesim_vocab::ids::ProcId;
use leasesim_vocab::task::MaintenanceKind;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

const WORLD: u64 = 1;
const STORE: u64 = 2;
const CLIENT: u64 = 3;
/// The lifecycle thread of a worker (incarnation spans, instants).
const LIFECYCLE: u64 = 1;
const PAUSED: u64 = 2;
/// Most threads per (incarnation, kind of span); more overlap shares the last.
const SLOTS: usize = 99;

fn worker_pid(proc: ProcId) -> u64 {
    10 + proc as u64
}

fn us(ms: u64) -> u64 {
    ms.saturating_mul(1000)
}

fn maintenance_index(kind: MaintenanceKind) -> u64 {
    match kind {
        MaintenanceKind::Index => 0,
        MaintenanceKind::Bucket => 1,
        MaintenanceKind::Tenant => 2,
        MaintenanceKind::Pipeline => 3,
    }
}

/// The first thread id of a span's group and the group's thread name. A
/// group has `SLOTS` threads, so groups are 100 apart, and an incarnation's
/// groups 10 000 apart: no two groups share a thread.
fn group(span: &Span) -> (u64, String) {
    let inc = span.owner.map_or(0, |o| o.incarnation as u64);
    let who = span.owner.map_or(format!("p{}", span.proc), |o| o.to_string());
    let base = |group: u64| inc * 10_000 + group * 100;
    match span.kind {
        SpanKind::Alive => (LIFECYCLE, "lifecycle".to_string()),
        SpanKind::Paused => (PAUSED, "paused".to_string()),
        SpanKind::Lease => (base(1), format!("{who} leases")),
        SpanKind::Permit => (base(2), format!("{who} permits")),
        SpanKind::Execution => (base(3), format!("{who} execution")),
        SpanKind::Write => (base(4), format!("{who} outcome writes")),
        SpanKind::Transaction if span.task.is_some() => (base(5), format!("{who} transactions")),
        // Transactions outside any attempt (recovery passes, claims) on
        // threads of their own.
        SpanKind::Transaction => (base(6), format!("{who} other transactions")),
        SpanKind::Maintenance(kind) => {
            (base(7 + maintenance_index(kind)), format!("{who} maintenance {}", kind.name()))
        }
    }
}

fn category(kind: SpanKind) -> &'static str {
    match kind {
        SpanKind::Alive | SpanKind::Paused => "process",
        SpanKind::Lease => "lease",
        SpanKind::Permit => "permit",
        SpanKind::Execution => "execution",
        SpanKind::Write => "write",
        SpanKind::Transaction => "transaction",
        SpanKind::Maintenance(_) => "maintenance",
    }
}

/// Chrome's reserved color names, so the legacy viewer tells kinds apart.
fn color(span: &Span) -> &'static str {
    match (span.kind, span.cut) {
        (SpanKind::Lease, Cut::Reclaimed) => "bad",
        (SpanKind::Lease, _) => "thread_state_running",
        (SpanKind::Permit, _) => "good",
        (SpanKind::Execution, _) => "rail_response",
        // A stale write stands out: the harm is usually there.
        (SpanKind::Write, _) if span.stale => "terrible",
        (SpanKind::Write, _) => "yellow",
        (SpanKind::Transaction, Cut::Normal) => "olive",
        (SpanKind::Transaction, _) => "bad",
        (SpanKind::Maintenance(_), _) => "grey",
        (SpanKind::Alive, _) => "thread_state_sleeping",
        (SpanKind::Paused, _) => "terrible",
    }
}

/// Where an instant event goes: its process and thread, and its scope
/// (`g` global, `p` process, `t` thread).
#[derive(Clone, Copy)]
struct Track {
    pid: u64,
    tid: u64,
    scope: &'static str,
}

impl Track {
    /// The world's fault thread, or across the whole trace (`g`).
    fn world(scope: &'static str) -> Track {
        Track { pid: WORLD, tid: 1, scope }
    }

    /// A worker's lifecycle thread.
    fn lifecycle(proc: ProcId) -> Track {
        Track { pid: worker_pid(proc), tid: LIFECYCLE, scope: "p" }
    }
}

struct Out {
    events: Vec<Value>,
    meta: Vec<Value>,
    /// (pid, tid) named so far.
    threads: BTreeMap<(u64, u64), ()>,
}

impl Out {
    fn process(&mut self, pid: u64, name: &str, sort: u64) {
        self.meta.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}));
        self.meta
            .push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}));
    }

    fn thread(&mut self, pid: u64, tid: u64, name: &str) {
        if self.threads.insert((pid, tid), ()).is_some() {
            return;
        }
        self.meta.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
        self.meta
            .push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
    }

    fn instant(&mut self, at: Track, at_ms: u64, name: &str, cat: &str, args: Value) {
        let Track { pid, tid, scope } = at;
        self.events.push(json!({
            "name": name, "cat": cat, "ph": "i", "s": scope, "ts": us(at_ms), "pid": pid, "tid": tid, "args": args,
        }));
    }
}

/// The run in the Chrome trace event format (a JSON object with `traceEvents`).
pub fn chrome_trace(history: &[Record], violations: &[Violation]) -> String {
    let tl = timeline(history, violations);
    let mut out = Out { events: Vec::new(), meta: Vec::new(), threads: BTreeMap::new() };
    let procs: Vec<ProcId> = tl.procs.keys().copied().collect();
    out.process(WORLD, "world", 0);
    out.thread(WORLD, 1, "faults");
    out.process(STORE, "store", 1);
    out.thread(STORE, 1, "commits");
    for (i, proc) in procs.iter().enumerate() {
        out.process(worker_pid(*proc), &format!("p{proc}"), 2 + i as u64);
        out.thread(worker_pid(*proc), LIFECYCLE, "lifecycle");
    }
    out.process(CLIENT, "client", 2 + procs.len() as u64);
    out.thread(CLIENT, 1, "queries");

    spans(&tl, &mut out);
    permit_counters(&tl, &mut out);
    marks(&tl, &mut out);
    for v in violations {
        violation(v, &tl, &mut out);
    }

    // Metadata first, then time order (stable: history order within a tick).
    out.events.sort_by_key(|e| e["ts"].as_u64().unwrap_or(0));
    let mut events = out.meta;
    events.append(&mut out.events);
    let trace = json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "leasesim",
            "records": tl.records,
            "end_ms": tl.end_ms,
            "heal_ms": tl.heal_ms,
            "violations": violations.len(),
        },
    });
    serde_json::to_string(&trace).expect("a trace serializes")
}

fn spans(tl: &Timeline, out: &mut Out) {
    // Per (pid, first tid of the group): the end of the last span of each slot.
    let mut slots: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for span in &tl.spans {
        let pid = worker_pid(span.proc);
        let (base, name) = group(span);
        // A process's lives and pauses never overlap: one thread each.
        let max = if matches!(span.kind, SpanKind::Alive | SpanKind::Paused) { 1 } else { SLOTS };
        let ends = slots.entry((pid, base)).or_default();
        let slot = match ends.iter().position(|end| *end <= span.start_ms) {
            Some(i) => i,
            None if ends.len() < max => {
                ends.push(0);
                ends.len() - 1
            }
            None => max - 1,
        };
        ends[slot] = span.end_ms;
        let tid = base + slot as u64;
        let thread = if slot == 0 { name } else { format!("{name} #{}", slot + 1) };
        out.thread(pid, tid, &thread);
        let mut args = span.args.clone();
        args.insert("start_ms".into(), json!(span.start_ms));
        args.insert("end_ms".into(), json!(span.end_ms));
        out.events.push(json!({
            "name": span.name,
            "cat": category(span.kind),
            "ph": "X",
            "ts": us(span.start_ms),
            "dur": us(span.end_ms - span.start_ms),
            "pid": pid,
            "tid": tid,
            "cname": color(span),
            "args": Value::Object(args),
        }));
    }
}

/// A counter track per worker: permits in use.
fn permit_counters(tl: &Timeline, out: &mut Out) {
    let mut changes: BTreeMap<ProcId, BTreeMap<u64, i64>> = BTreeMap::new();
    for s in tl.spans.iter().filter(|s| s.kind == SpanKind::Permit) {
        let c = changes.entry(s.proc).or_default();
        *c.entry(s.start_ms).or_default() += 1;
        *c.entry(s.end_ms).or_default() -= 1;
    }
    for (proc, changes) in changes {
        let mut n = 0i64;
        for (at_ms, d) in changes {
            n += d;
            out.events.push(json!({
                "name": "permits in use", "ph": "C", "ts": us(at_ms), "pid": worker_pid(proc), "tid": 0,
                "args": {"permits": n},
            }));
        }
    }
}

fn marks(tl: &Timeline, out: &mut Out) {
    for m in &tl.marks {
        let at = m.at_ms;
        match &m.kind {
            MarkKind::Fault { kind, detail } => {
                out.instant(Track::world("p"), at, kind, "fault", json!({"kind": kind, "detail": detail}));
            }
            MarkKind::Up(owner) => {
                let args = json!({"owner": owner.to_string()});
                out.instant(Track::lifecycle(owner.proc), at, &format!("up {owner}"), "process", args);
            }
            MarkKind::Killed(owner) => {
                let args = json!({"owner": owner.to_string()});
                out.instant(Track::lifecycle(owner.proc), at, &format!("killed {owner}"), "process", args);
            }
            MarkKind::Exited(owner) => {
                let args = json!({"owner": owner.to_string()});
                out.instant(Track::lifecycle(owner.proc), at, &format!("exited {owner}"), "process", args);
            }
            MarkKind::Paused(proc) => {
                let args = json!({"proc": format!("p{proc}")});
                out.instant(Track::lifecycle(*proc), at, &format!("paused p{proc}"), "process", args);
            }
            MarkKind::Resumed(proc) => {
                let args = json!({"proc": format!("p{proc}")});
                out.instant(Track::lifecycle(*proc), at, &format!("resumed p{proc}"), "process", args);
            }
            MarkKind::ClockOffset { proc, offset_ms } => {
                let args = json!({"proc": format!("p{proc}"), "offset_ms": offset_ms});
                let name = format!("clock offset {offset_ms:+} ms");
                out.instant(Track::lifecycle(*proc), at, &name, "process", args);
            }
            MarkKind::Heal => out.instant(Track::world("g"), at, "heal", "phase", json!({"at_ms": at})),
            MarkKind::End => out.instant(Track::world("g"), at, "end", "phase", json!({"at_ms": at})),
            MarkKind::Store { what, task, detail } => {
                let args = json!({"task": task, "detail": detail});
                out.instant(Track { pid: STORE, tid: 1, scope: "t" }, at, what.name(), "store", args);
            }
            MarkKind::Query { index, materialized } => {
                let args = json!({"index": index, "materialized": materialized});
                let name = if *materialized { "query: materialized" } else { "query: not materialized" };
                out.instant(Track { pid: CLIENT, tid: 1, scope: "t" }, at, name, "client", args);
            }
        }
    }
}

fn violation(v: &Violation, tl: &Timeline, out: &mut Out) {
    let mut args = Map::new();
    args.insert("invariant".into(), json!(v.invariant));
    args.insert("message".into(), json!(v.message));
    args.insert("at_ms".into(), json!(v.at_ms));
    args.insert("task".into(), json!(v.task));
    args.insert("attempt".into(), json!(v.attempt));
    args.insert("process".into(), json!(v.process));
    let proc = v.process.as_deref().and_then(super::parse_process).map(|(p, _)| p);
    let (pid, scope) = match proc.filter(|p| tl.procs.contains_key(p)) {
        Some(p) => (worker_pid(p), "p"),
        None => (WORLD, "g"),
    };
    let tid = if pid == WORLD { 1 } else { LIFECYCLE };
    out.events.push(json!({
        "name": v.invariant, "cat": "violation", "ph": "i", "s": scope, "ts": us(v.at_ms), "pid": pid, "tid": tid,
        "cname": "terrible", "args": Value::Object(args),
    }));
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{history, violations};
    use super::chrome_trace;
    use serde_json::Value;

    fn trace() -> Vec<Value> {
        let text = chrome_trace(&history(), &violations());
        let v: Value = serde_json::from_str(&text).expect("the trace is JSON");
        v["traceEvents"].as_array().expect("traceEvents is an array").clone()
    }

    fn pid_named(events: &[Value], name: &str) -> u64 {
        events
            .iter()
            .find(|e| e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == name)
            .and_then(|e| e["pid"].as_u64())
            .unwrap_or_else(|| panic!("no process named {name}"))
    }

    fn one<'a>(events: &'a [Value], ph: &str, name: &str) -> &'a Value {
        let found: Vec<&Value> = events.iter().filter(|e| e["ph"] == ph && e["name"] == name).collect();
        assert_eq!(found.len(), 1, "one {ph} event named {name}: {found:#?}");
        found[0]
    }

    #[test]
    fn every_process_is_named() {
        let events = trace();
        for name in ["world", "store", "client", "p1", "p2"] {
            pid_named(&events, name);
        }
        let threads: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .filter_map(|e| e["args"]["name"].as_str())
            .collect();
        for t in ["lifecycle", "p1.1 leases", "p1.1 permits", "p1.1 execution", "p1.1 outcome writes", "p2.1 leases"] {
            assert!(threads.contains(&t), "thread {t} in {threads:?}");
        }
        assert!(threads.contains(&"p1.1 maintenance index"), "{threads:?}");
    }

    #[test]
    fn a_lease_is_a_complete_event_on_its_owners_track() {
        let events = trace();
        let p1 = pid_named(&events, "p1");
        let lease = one(&events, "X", "lease t12#2");
        assert_eq!(lease["ts"], 1_000_000);
        assert_eq!(lease["dur"], 4_000_000);
        assert_eq!(lease["pid"], p1);
        assert_eq!(lease["args"]["task"], 12);
        assert_eq!(lease["args"]["owner"], "p1.1");
        // The lease of the killed p2.1 stays on p2 until the store releases it.
        let zombie = one(&events, "X", "lease t7#1");
        assert_eq!((zombie["ts"].as_u64(), zombie["dur"].as_u64()), (Some(2_000_000), Some(5_000_000)));
        assert_eq!(zombie["pid"], pid_named(&events, "p2"));
        assert_eq!(zombie["args"]["ended_by"], "released by reclaim-expired from p1.1");
    }

    #[test]
    fn permits_executions_writes_and_passes_are_spans() {
        let events = trace();
        let span = |name: &str| {
            let e = one(&events, "X", name);
            (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap())
        };
        assert_eq!(span("permit t12#2"), (1_000_000, 4_100_000));
        assert_eq!(span("exec t12#2"), (1_100_000, 2_900_000));
        assert_eq!(span("complete t12#2"), (4_000_000, 1_000_000));
        assert_eq!(span("permit t7#1"), (2_000_000, 1_000_000), "the kill ends p2.1's permit");
        assert_eq!(span("exec t7#1"), (2_050_000, 950_000));
        assert_eq!(span("maintenance index"), (600_000, 300_000));
        assert_eq!(span("p1 paused"), (8_000_000, 500_000));
        assert_eq!(span("p2.1"), (0, 3_000_000));
        assert_eq!(span("p2.2"), (6_000_000, 4_000_000));
    }

    #[test]
    fn spans_on_one_thread_never_overlap() {
        let events = trace();
        let mut by_thread: std::collections::BTreeMap<(u64, u64), Vec<(u64, u64)>> = Default::default();
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let (ts, dur) = (e["ts"].as_u64().unwrap(), e["dur"].as_u64().unwrap());
            by_thread.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).or_default().push((ts, ts + dur));
        }
        for (thread, mut spans) in by_thread {
            spans.sort();
            assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{thread:?}: {spans:?}");
        }
    }

    #[test]
    fn faults_lifecycle_heal_and_violations_are_instants() {
        let events = trace();
        let fault = one(&events, "i", "message-loss");
        assert_eq!(fault["ts"], 2_500_000);
        assert_eq!(fault["pid"], pid_named(&events, "world"));
        assert_eq!(fault["args"]["detail"], "claim request lost");
        let kill = one(&events, "i", "killed p2.1");
        assert_eq!((kill["ts"].as_u64(), kill["pid"].as_u64()), (Some(3_000_000), Some(pid_named(&events, "p2"))));
        one(&events, "i", "up p2.2");
        one(&events, "i", "paused p1");
        one(&events, "i", "resumed p1");
        let heal = one(&events, "i", "heal");
        assert_eq!((heal["ts"].as_u64(), heal["s"].as_str()), (Some(9_000_000), Some("g")));

        let v = one(&events, "i", "single-owner");
        assert_eq!(v["ts"], 4_500_000);
        assert_eq!(v["pid"], pid_named(&events, "p1"), "on the process it names");
        assert_eq!(v["args"]["task"], 12);
        assert_eq!(v["args"]["attempt"], 2);
        assert_eq!(v["args"]["process"], "p1.1");
        assert!(v["args"]["message"].as_str().unwrap().contains("<granted>"));
        let v = one(&events, "i", "eventual-completion");
        assert_eq!((v["pid"].as_u64(), v["s"].as_str()), (Some(pid_named(&events, "world")), Some("g")));
    }

    #[test]
    fn store_and_client_instants_and_permit_counters() {
        let events = trace();
        let store = pid_named(&events, "store");
        assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "done" && e["pid"] == store));
        assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "released" && e["pid"] == store));
        assert_eq!(one(&events, "i", "query: materialized")["pid"], pid_named(&events, "client"));
        let p1 = pid_named(&events, "p1");
        let counts: Vec<i64> = events
            .iter()
            .filter(|e| e["ph"] == "C" && e["pid"] == p1)
            .map(|e| e["args"]["permits"].as_i64().unwrap())
            .collect();
        assert_eq!(counts, vec![1, 0]);
    }

    #[test]
    fn metadata_comes_first_then_time_order() {
        let events = trace();
        let first_timed = events.iter().position(|e| e["ph"] != "M").unwrap();
        assert!(events[first_timed..].iter().all(|e| e["ph"] != "M"));
        let ts: Vec<u64> = events[first_timed..].iter().map(|e| e["ts"].as_u64().unwrap()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn an_empty_history_is_still_a_trace() {
        let v: Value = serde_json::from_str(&chrome_trace(&[], &[])).unwrap();
        assert!(v["traceEvents"].is_array());
    }
}
