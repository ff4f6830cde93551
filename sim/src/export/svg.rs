//! The run as a static, self-contained SVG timeline: readable in any browser
//! or image viewer, without hovering (the legend names every mark; hovering
//! one shows its details).
//!
//! Time runs along x (ticks in seconds, top and bottom). From the top:
//! title, legend, a `run` band (heal, violations that name no process or
//! task), then one lane each for the `world` (one row per fault kind, a
//! triangle per injection), the `store` (one row per kind of commit, a tick
//! per commit), every worker process (labels, maintenance rows, a compact
//! row of transactions outside any attempt, attempt rows) and the `client`
//! (query results). Under the chart, every violation in words.
//!
//! A worker lane holds one row per attempt placed so that nothing overlaps:
//! each (incarnation, task, attempt) takes the first row free at its start,
//! and draws its lease (as the store committed it) as a thick bar labelled
//! `t12#2`, with a thin strip under it: the permit held, the body running
//! and the outcome write at the store (a stale one taller and red). A thin
//! dashed line joins each attempt's lease to the task's next attempt's,
//! across lanes. Deaths (killed or exited until restarted) are hatched,
//! pauses yellow, restarts dashed lines, kills red, exits dotted purple;
//! violations are red marks on the attempt row they name (labelled `V1
//! name`), and that task's attempts are outlined in red.

use super::{parse_process, timeline, Cut, MarkKind, Span, SpanKind, StoreMark, Timeline};
use crate::check::Violation;
use crate::history::Record;
use leasesim_vocab::ids::{Owner, ProcId, TaskId};
use leasesim_vocab::task::MaintenanceKind;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

const WIDTH: f64 = 1600.0;
const LEFT: f64 = 190.0;
const RIGHT: f64 = 24.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const FONT: &str = "Helvetica, Arial, sans-serif";

/// Height of a label row, a maintenance row, an attempt row, a tick row.
const LABEL_H: f64 = 11.0;
const MAINT_H: f64 = 9.0;
const ATTEMPT_H: f64 = 17.0;
/// A compact row of transactions outside any attempt.
const TXN_H: f64 = 6.0;
/// At most this many such rows per lane (they are many and short).
const MAX_TXN_ROWS: usize = 4;
const TICK_H: f64 = 12.0;
/// At most this many rows per allocation (more overlap shares the last rows).
const MAX_ROWS: usize = 80;

const LEASE: &str = "#3b6fb6";
const LEASE_RECLAIMED: &str = "#a9c4e8";
const PERMIT: &str = "#a3d9ab";
const EXEC: &str = "#2f8f4e";
const WRITE: &str = "#f0a030";
const TXN: &str = "#7a3fb0";
const PASS: &str = "#9a9a9a";
const PASS_CUT: &str = "#4d4d4d";
const PAUSED: &str = "#f5d45e";
const KILL: &str = "#8b0000";
const EXIT: &str = "#6a3d9a";
const STALE: &str = "#d62728";
const HEAL: &str = "#2ca02c";
const VIOLATION: &str = "#d62728";
const INCARNATION: &str = "#555555";

const FAULT_COLORS: [&str; 14] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79",
    "#637939", "#8c6d31", "#843c39", "#7b4173",
];

fn store_color(what: StoreMark) -> &'static str {
    match what {
        StoreMark::Created => "#9e9e9e",
        StoreMark::Done => "#2e7d32",
        StoreMark::Failed => "#8e44ad",
        StoreMark::Dead => "#000000",
        StoreMark::Released => "#e67e22",
        StoreMark::Rejected => "#c2185b",
        StoreMark::Repair => "#00838f",
        StoreMark::Materialized => "#1565c0",
        StoreMark::StageDone => "#558b2f",
        StoreMark::StageRefused => "#6d4c41",
    }
}

/// Escapes text for XML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A generous estimate of a text's width in pixels.
fn text_w(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

fn secs(ms: u64) -> String {
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

fn span_text(s: &Span) -> String {
    let who = s.owner.map_or(format!("p{}", s.proc), |o| o.to_string());
    let mut t = format!(
        "{} on {who}: {} to {} ({})\nended: {}",
        s.name,
        secs(s.start_ms),
        secs(s.end_ms),
        secs(s.end_ms - s.start_ms),
        s.ended_by
    );
    for key in ["kind", "outcome", "stale", "did", "pass", "renewals", "lease_expiry_ms"] {
        if let Some(v) = s.args.get(key).filter(|v| !v.is_null()) {
            let v = v.as_str().map_or(v.to_string(), str::to_string);
            let _ = write!(t, "\n{key}: {v}");
        }
    }
    t
}

/// Places intervals on the first row free at their start.
struct Rows {
    ends: Vec<f64>,
    /// At most this many rows.
    max: usize,
}

impl Default for Rows {
    fn default() -> Self {
        Rows::with_max(MAX_ROWS)
    }
}

impl Rows {
    fn with_max(max: usize) -> Rows {
        Rows { ends: Vec::new(), max: max.max(1) }
    }

    fn place(&mut self, x0: f64, x1: f64) -> usize {
        let row = match self.ends.iter().position(|end| *end <= x0) {
            Some(i) => i,
            None if self.ends.len() < self.max => {
                self.ends.push(f64::MIN);
                self.ends.len() - 1
            }
            None => {
                // Full: the row that frees first.
                let mut best = 0;
                for (i, e) in self.ends.iter().enumerate() {
                    if *e < self.ends[best] {
                        best = i;
                    }
                }
                best
            }
        };
        self.ends[row] = x1;
        row
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// The time window drawn, from `from_ms` to `to_ms` (the whole run, or the
/// `--from`/`--to` window).
struct Scale {
    from_ms: u64,
    to_ms: u64,
}

impl Scale {
    fn x(&self, ms: u64) -> f64 {
        let span = (self.to_ms - self.from_ms).max(1);
        LEFT + (ms.clamp(self.from_ms, self.to_ms) - self.from_ms) as f64 / span as f64 * PLOT_W
    }

    fn shows(&self, ms: u64) -> bool {
        (self.from_ms..=self.to_ms).contains(&ms)
    }
}

/// The SVG under construction.
struct Svg {
    out: String,
}

impl Svg {
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, style: &str, title: Option<&str>) {
        let _ = write!(self.out, r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" {style}"#, w.max(0.0));
        self.close(title, "rect");
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, style: &str, title: Option<&str>) {
        let _ = write!(self.out, r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}"#);
        self.close(title, "line");
    }

    fn text(&mut self, x: f64, y: f64, size: f64, style: &str, text: &str, title: Option<&str>) {
        let _ = write!(self.out, r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" {style}>{}"#, esc(text));
        if let Some(t) = title {
            let _ = write!(self.out, "<title>{}</title>", esc(t));
        }
        self.out.push_str("</text>\n");
    }

    fn path(&mut self, d: &str, style: &str, title: Option<&str>) {
        let _ = write!(self.out, r#"<path d="{d}" {style}"#);
        self.close(title, "path");
    }

    fn close(&mut self, title: Option<&str>, tag: &str) {
        match title {
            Some(t) => {
                let _ = writeln!(self.out, "><title>{}</title></{tag}>", esc(t));
            }
            None => self.out.push_str("/>\n"),
        }
    }

    fn open_group(&mut self, class: &str) {
        let _ = writeln!(self.out, r#"<g class="{class}">"#);
    }

    fn close_group(&mut self) {
        self.out.push_str("</g>\n");
    }
}

/// A tick step giving at most ~15 ticks.
fn tick_step(end_ms: u64) -> u64 {
    const STEPS: [u64; 22] = [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 1_200_000, 1_800_000, 3_600_000,
    ];
    STEPS.iter().copied().find(|s| end_ms / s <= 15).unwrap_or_else(|| (end_ms / 15).max(1))
}

fn tick_label(ms: u64, step: u64) -> String {
    if step.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        let s = format!("{:.3}", ms as f64 / 1000.0);
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// A label placed in a band of label rows.
struct Label {
    x: f64,
    text: String,
    color: &'static str,
    bold: bool,
    title: Option<String>,
}

/// Places labels on rows so they never overlap; returns each label's row.
fn place_labels(labels: &mut [Label]) -> (Vec<usize>, usize) {
    labels.sort_by(|a, b| label_start(a).total_cmp(&label_start(b)));
    let mut rows = Rows::default();
    let placed =
        labels.iter().map(|l| rows.place(label_start(l), label_start(l) + text_w(&l.text, 9.0) + 6.0)).collect();
    (placed, rows.len())
}

/// Where a label starts: right of its mark, or left of it near the right edge.
fn label_start(l: &Label) -> f64 {
    let w = text_w(&l.text, 9.0) + 6.0;
    if l.x + w > WIDTH - 2.0 {
        (l.x - w).max(0.0)
    } else {
        l.x
    }
}

fn draw_labels(svg: &mut Svg, labels: &[Label], rows: &[usize], top: f64) {
    for (l, row) in labels.iter().zip(rows) {
        let weight = if l.bold { r#" font-weight="bold""# } else { "" };
        let style = format!(r#"fill="{}"{weight}"#, l.color);
        let y = top + (*row as f64 + 1.0) * LABEL_H - 2.0;
        svg.text(label_start(l) + 2.0, y, 9.0, &style, &l.text, l.title.as_deref());
    }
}

/// The violations drawn in a worker's lane (those naming a process that has
/// one, or a task whose attempts a lane holds), by process, and those of
/// the whole run; each with its index.
type ByLane<'a> = (ByProc<'a>, Vec<(usize, &'a Violation)>);

/// Violations by the worker lane they are drawn in, each with its index.
type ByProc<'a> = BTreeMap<ProcId, Vec<(usize, &'a Violation)>>;

/// The run as a static SVG timeline.
pub fn svg_timeline(history: &[Record], violations: &[Violation], title: &str) -> String {
    svg_timeline_window(history, violations, title, None)
}

/// Seconds of context a window around a violation shows before the
/// violating task's first grant and after the violation, at least.
const AROUND_MIN_PAD_MS: u64 = 2_000;

/// The window around the first violation (by time): from a little before
/// the first grant of the task it names (or 30 s before it, when it names
/// none) to a little after it, so its task's attempts and the moment of the
/// harm fill the width. `None` when the run has no violation.
pub fn around_first_violation(history: &[Record], violations: &[Violation]) -> Option<(u64, u64)> {
    let first = violations.iter().min_by_key(|v| v.at_ms)?;
    let tl = timeline(history, violations);
    let first_grant_ms = first.task.and_then(|task| {
        tl.spans.iter().filter(|s| s.kind == SpanKind::Lease && s.task == Some(task)).map(|s| s.start_ms).min()
    });
    let from_ms = first_grant_ms.unwrap_or(first.at_ms.saturating_sub(30_000)).min(first.at_ms);
    let pad_ms = ((first.at_ms - from_ms) / 10).max(AROUND_MIN_PAD_MS);
    let to_ms = first.at_ms.saturating_add(pad_ms).min(tl.end_ms.max(1));
    Some((from_ms.saturating_sub(pad_ms), to_ms))
}

/// The window drawn: `window_ms` within the run (past its end it is moved
/// back to end there, keeping its width), with a note when it was moved.
fn clamp_window(window_ms: Option<(u64, u64)>, end_ms: u64) -> (Scale, Option<String>) {
    let Some((from_ms, to_ms)) = window_ms else { return (Scale { from_ms: 0, to_ms: end_ms }, None) };
    if from_ms < end_ms {
        return (Scale { from_ms, to_ms: to_ms.min(end_ms).max(from_ms + 1) }, None);
    }
    // Its width, within the run's (an open end, `--from` alone, is the run's).
    let width_ms = to_ms.saturating_sub(from_ms).clamp(1, end_ms);
    let scale = Scale { from_ms: end_ms - width_ms, to_ms: end_ms };
    let drawn = if width_ms == end_ms { "the whole run".to_string() } else { format!("its last {width_ms} ms") };
    let note =
        format!("the window asked for starts at {from_ms} ms, after the run's end at {end_ms} ms: {drawn} is drawn");
    (scale, Some(note))
}

/// [`svg_timeline`] of the window `from_ms..=to_ms` only (`to_ms` past the
/// end is the end; a window that starts after the end is moved back to
/// end there, and says so): spans are cut at its edges, marks and
/// violations outside it are not drawn (the list under the chart keeps
/// every violation). Never fails: a picture is not worth a run's verdict.
pub fn svg_timeline_window(
    history: &[Record],
    violations: &[Violation],
    title: &str,
    window_ms: Option<(u64, u64)>,
) -> String {
    let mut tl = timeline(history, violations);
    let (scale, note) = clamp_window(window_ms, tl.end_ms.max(1));
    tl.spans.retain(|sp| sp.end_ms >= scale.from_ms && sp.start_ms <= scale.to_ms);
    tl.marks.retain(|m| scale.shows(m.at_ms));
    let mut svg = Svg { out: String::with_capacity(64 * 1024) };
    let (by_proc, unowned) = by_lane(&tl, violations, &scale);

    let band_top = header(&mut svg, &tl, violations, title, (&scale, note.as_deref()));
    let axis_top = run_band(&mut svg, &tl, &scale, &unowned, band_top);
    let chart_top = axis_top + 16.0;
    // The lanes are drawn into their own buffer: the grid goes under them.
    let (lanes, chart_bottom) = lanes(&tl, &scale, (&by_proc, violations), chart_top);
    axis(&mut svg, &scale, axis_top, chart_top, chart_bottom);
    svg.out.push_str(&lanes.out);
    run_marks(&mut svg, &tl, &scale, &unowned, (band_top, chart_bottom));
    let bottom = violation_list(&mut svg, violations, chart_bottom + 36.0);
    document(&svg, title, (bottom + 16.0).ceil())
}

/// The lane a violation is drawn in: the process it names, or else the
/// holder of the last attempt of the task it names (a violation of a task's
/// fate, such as one never finished, belongs with its last attempt).
fn lane_of(tl: &Timeline, v: &Violation) -> Option<ProcId> {
    if let Some((p, _)) = v.process.as_deref().and_then(parse_process).filter(|(p, _)| tl.procs.contains_key(p)) {
        return Some(p);
    }
    let task = v.task?;
    let leases = tl.spans.iter().filter(|s| s.kind == SpanKind::Lease && s.task == Some(task));
    leases.max_by_key(|s| (s.attempt, s.start_ms)).map(|s| s.proc)
}

/// The violations inside the window, by the lane they are drawn in.
fn by_lane<'a>(tl: &Timeline, violations: &'a [Violation], scale: &Scale) -> ByLane<'a> {
    let mut by_proc: ByProc = BTreeMap::new();
    let mut unowned = Vec::new();
    for (i, v) in violations.iter().enumerate().filter(|(_, v)| scale.shows(v.at_ms)) {
        match lane_of(tl, v) {
            Some(p) => by_proc.entry(p).or_default().push((i, v)),
            None => unowned.push((i, v)),
        }
    }
    (by_proc, unowned)
}

/// The title, a line of figures and the legend; returns the y under them.
fn header(svg: &mut Svg, tl: &Timeline, violations: &[Violation], title: &str, window: (&Scale, Option<&str>)) -> f64 {
    let (scale, note) = window;
    let faults = tl.marks.iter().filter(|m| matches!(m.kind, MarkKind::Fault { .. })).count();
    let window = if scale.from_ms == 0 && scale.to_ms >= tl.end_ms.max(1) {
        String::new()
    } else {
        format!("; window {} to {}", secs(scale.from_ms), secs(scale.to_ms))
    };
    let subtitle = format!(
        "{} records, {} simulated{window}; {} workers; {} fault injections; heal at {}; {} violation{}",
        tl.records,
        secs(tl.end_ms),
        tl.procs.len(),
        faults,
        tl.heal_ms.map_or("(none)".to_string(), secs),
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    svg.text(16.0, 24.0, 16.0, r##"font-weight="bold" fill="#111""##, title, None);
    svg.text(16.0, 42.0, 11.0, r##"fill="#555""##, &subtitle, None);
    match note {
        Some(note) => {
            svg.text(16.0, 56.0, 11.0, &format!(r#"fill="{VIOLATION}""#), note, None);
            legend(svg, 66.0)
        }
        None => legend(svg, 54.0),
    }
}

/// The `run` band: labels of the heal and of the violations of the whole
/// run; returns the y under it.
fn run_band(svg: &mut Svg, tl: &Timeline, scale: &Scale, unowned: &[(usize, &Violation)], top: f64) -> f64 {
    let mut run_labels = Vec::new();
    if let Some(heal) = tl.heal_ms.filter(|&h| scale.shows(h)) {
        run_labels.push(Label {
            x: scale.x(heal),
            text: "heal".into(),
            color: HEAL,
            bold: true,
            title: Some(format!("heal at {}: faults stop, the liveness phase runs", secs(heal))),
        });
    }
    for (i, v) in unowned {
        run_labels.push(violation_label(*i, v, scale));
    }
    let (run_rows, n_run_rows) = place_labels(&mut run_labels);
    svg.text(8.0, top + LABEL_H - 2.0, 9.0, r##"fill="#555""##, "run", None);
    draw_labels(svg, &run_labels, &run_rows, top);
    top + (n_run_rows.max(1) as f64 * LABEL_H + 2.0)
}

/// Every lane, top to bottom, in a buffer of its own, then the links
/// between each task's attempts across lanes; returns it and the y under
/// the last lane.
fn lanes(tl: &Timeline, scale: &Scale, (by_proc, violations): (&ByProc, &[Violation]), top: f64) -> (Svg, f64) {
    let mut lanes = Svg { out: String::with_capacity(64 * 1024) };
    let mut shade = false;
    let mut y = world_lane(&mut lanes, tl, scale, top, shade);
    shade = !shade;
    y = store_lane(&mut lanes, tl, scale, y, shade);
    let violating: BTreeSet<TaskId> = violations.iter().filter_map(|v| v.task).collect();
    let mut leases: BTreeMap<(TaskId, u32), LeaseAt> = BTreeMap::new();
    for (proc, incs) in &tl.procs {
        shade = !shade;
        let violations = by_proc.get(proc).map_or(&[][..], |v| &v[..]);
        let worker = Worker { proc: *proc, incs, violations, violating: &violating };
        y = worker_lane(&mut lanes, tl, scale, &worker, (y, shade), &mut leases);
    }
    if tl.marks.iter().any(|m| matches!(m.kind, MarkKind::Query { .. })) {
        shade = !shade;
        y = client_lane(&mut lanes, tl, scale, y, shade);
    }
    draw_links(&mut lanes, &leases, &violating);
    (lanes, y)
}

/// Where an attempt's lease bar was drawn: its left and right ends and the
/// middle of its bar.
#[derive(Clone, Copy)]
struct LeaseAt {
    x0: f64,
    x1: f64,
    y: f64,
}

/// A thin line from the end of each attempt's lease to the start of the
/// task's next attempt's lease, wherever they are drawn: red for a task a
/// violation names, faint blue for the others.
fn draw_links(svg: &mut Svg, leases: &BTreeMap<(TaskId, u32), LeaseAt>, violating: &BTreeSet<TaskId>) {
    svg.open_group("attempt-links");
    let mut previous: Option<((TaskId, u32), LeaseAt)> = None;
    for (&(task, attempt), &at) in leases {
        if let Some(((t, a), from)) = previous.filter(|((t, _), _)| *t == task) {
            let style = if violating.contains(&task) {
                format!(r#"stroke="{VIOLATION}" stroke-width="1.2" stroke-dasharray="4,2" fill="none""#)
            } else {
                format!(
                    r#"stroke="{LEASE}" stroke-opacity="0.45" stroke-width="0.8" stroke-dasharray="4,2" fill="none""#
                )
            };
            let title = format!("t{t}: attempt {a} then attempt {attempt}");
            svg.line(from.x1, from.y, at.x0, at.y, &style, Some(&title));
        }
        previous = Some(((task, attempt), at));
    }
    svg.close_group();
}

/// The time axis (ticks over and under the chart) and the grid.
fn axis(svg: &mut Svg, scale: &Scale, axis_top: f64, chart_top: f64, chart_bottom: f64) {
    let step = tick_step(scale.to_ms - scale.from_ms);
    svg.open_group("axis");
    let mut t = scale.from_ms.div_ceil(step) * step;
    while t <= scale.to_ms {
        let x = scale.x(t);
        svg.line(x, chart_top, x, chart_bottom, r##"stroke="#e6e6e6" stroke-width="1""##, None);
        let label = tick_label(t, step);
        svg.text(x, axis_top + 11.0, 10.0, r##"text-anchor="middle" fill="#333""##, &label, None);
        svg.text(x, chart_bottom + 14.0, 10.0, r##"text-anchor="middle" fill="#333""##, &label, None);
        svg.line(x, chart_top - 4.0, x, chart_top, r##"stroke="#333""##, None);
        svg.line(x, chart_bottom, x, chart_bottom + 4.0, r##"stroke="#333""##, None);
        t += step;
    }
    svg.line(LEFT, chart_top, LEFT + PLOT_W, chart_top, r##"stroke="#333""##, None);
    svg.line(LEFT, chart_bottom, LEFT + PLOT_W, chart_bottom, r##"stroke="#333""##, None);
    svg.close_group();
}

/// Lines across every lane, from the run band down: the heal and the
/// violations of the whole run.
fn run_marks(svg: &mut Svg, tl: &Timeline, scale: &Scale, unowned: &[(usize, &Violation)], (top, bottom): (f64, f64)) {
    svg.open_group("run-marks");
    if let Some(heal) = tl.heal_ms.filter(|&h| scale.shows(h)) {
        let x = scale.x(heal);
        let title = format!("heal at {}", secs(heal));
        svg.line(
            x,
            top,
            x,
            bottom,
            &format!(r#"stroke="{HEAL}" stroke-width="1.5" stroke-dasharray="6,3""#),
            Some(&title),
        );
    }
    for (i, v) in unowned {
        let x = scale.x(v.at_ms);
        let title = violation_text(*i, v);
        svg.line(x, top, x, bottom, &format!(r#"stroke="{VIOLATION}" stroke-width="1.5""#), Some(&title));
    }
    svg.close_group();
}

/// The violations in words, one a line, under the chart; returns the y of
/// the last line.
/// `text` in lines of at most `width` characters, broken at spaces (a word
/// longer than a line is split).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

fn violation_list(svg: &mut Svg, violations: &[Violation], top: f64) -> f64 {
    let mut y = top;
    svg.open_group("violations");
    if violations.is_empty() {
        svg.text(16.0, y, 12.0, r##"font-weight="bold" fill="#111""##, "Violations: none", None);
        y += 16.0;
    } else {
        svg.text(16.0, y, 12.0, r##"font-weight="bold" fill="#111""##, "Violations", None);
        y += 16.0;
        let max_chars = ((WIDTH - 32.0) / (11.0 * 0.6)) as usize;
        for (i, v) in violations.iter().enumerate() {
            let full = violation_text(i, v);
            // Wrapped at word boundaries, never cut: the message is the
            // finding.
            for line in wrap(&full.replace('\n', " "), max_chars) {
                svg.text(16.0, y, 11.0, &format!(r#"fill="{VIOLATION}""#), &line, Some(&full));
                y += 15.0;
            }
        }
    }
    svg.text(16.0, y + 4.0, 10.0, r##"fill="#777""##, "Hover a bar or mark for its details.", None);
    svg.close_group();
    y
}

/// The whole document around the drawing.
fn document(svg: &Svg, title: &str, height: f64) -> String {
    let mut doc = String::with_capacity(svg.out.len() + 2048);
    let _ = writeln!(
        doc,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="{FONT}">"#
    );
    let _ = writeln!(doc, "<title>{}</title>", esc(title));
    doc.push_str(concat!(
        r#"<defs><pattern id="dead" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">"#,
        r##"<rect width="6" height="6" fill="#e9e9e9"/><line x1="0" y1="0" x2="0" y2="6" stroke="#b5b5b5" stroke-width="2.5"/>"##,
        "</pattern></defs>\n"
    ));
    let _ = writeln!(doc, r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#);
    doc.push_str(&svg.out);
    doc.push_str("</svg>");
    doc
}

fn violation_text(i: usize, v: &Violation) -> String {
    let mut who = Vec::new();
    if let Some(t) = v.task {
        who.push(format!("task {t}"));
    }
    if let Some(a) = v.attempt {
        who.push(format!("attempt {a}"));
    }
    if let Some(p) = &v.process {
        who.push(format!("process {p}"));
    }
    let who = if who.is_empty() { String::new() } else { format!(" ({})", who.join(", ")) };
    format!("V{} at {} [{}]{who}: {}", i + 1, secs(v.at_ms), v.invariant, v.message)
}

fn violation_label(i: usize, v: &Violation, scale: &Scale) -> Label {
    Label {
        x: scale.x(v.at_ms),
        text: format!("V{} {}", i + 1, v.invariant),
        color: VIOLATION,
        bold: true,
        title: Some(violation_text(i, v)),
    }
}

/// The legend, in rows; returns the y under it.
fn legend(svg: &mut Svg, top: f64) -> f64 {
    enum Swatch {
        Bar(&'static str, f64, &'static str),
        Line(&'static str),
        Triangle,
        Tick(&'static str),
    }
    use Swatch::*;
    let items: [(Swatch, &str); 24] = [
        (Bar(LEASE, 9.0, ""), "lease, as the store granted it (ended by its own outcome)"),
        (
            Bar(LEASE_RECLAIMED, 9.0, r##"stroke="#3b6fb6" stroke-dasharray="3,2""##),
            "lease taken away (released, superseded, or ended by another's write)",
        ),
        (
            Bar(LEASE, 9.0, r##"stroke="#111" stroke-width="1.5" stroke-dasharray="2,2""##),
            "lease still held at the end",
        ),
        (Line(r##"stroke="#3b6fb6" stroke-opacity="0.6" stroke-dasharray="4,2""##), "a task's next attempt"),
        (Bar(PERMIT, 4.0, ""), "permit held (engine's own account)"),
        (Bar(EXEC, 4.0, ""), "task body running"),
        (Bar(WRITE, 4.0, ""), "outcome write at the store (arrival to answer)"),
        (
            Bar(STALE, 7.0, r##"stroke="#111" stroke-width="0.8""##),
            "STALE outcome write (its attempt no longer held the task)",
        ),
        (Bar("none", 5.0, r##"stroke="#7a3fb0""##), "transaction committed"),
        (Bar("none", 5.0, r##"stroke="#7a3fb0" stroke-dasharray="2,1""##), "transaction ended without commit"),
        (
            Bar("#7a3fb0", 4.0, r##"fill-opacity="0.15" stroke="#7a3fb0" stroke-width="0.8""##),
            "transaction outside any attempt",
        ),
        (Bar(PASS, 6.0, ""), "maintenance pass"),
        (Bar(PASS_CUT, 6.0, ""), "pass cut by a kill or never ended"),
        (Bar("url(#dead)", 12.0, ""), "process down (killed or exited, until restarted)"),
        (Bar(PAUSED, 12.0, r#"fill-opacity="0.5""#), "process paused"),
        (Line(r##"stroke="#555555" stroke-dasharray="3,2""##), "new incarnation"),
        (Line(r##"stroke="#8b0000" stroke-width="1.5""##), "process killed"),
        (Line(r##"stroke="#6a3d9a" stroke-width="1.5" stroke-dasharray="1,2""##), "process exited on its own"),
        (Triangle, "fault injected (row = fault kind)"),
        (Line(r##"stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="6,3""##), "heal"),
        (Line(r##"stroke="#d62728" stroke-width="2.5""##), "violation Vn, on the attempt it names (listed below)"),
        (
            Bar("#d62728", 12.0, r##"fill-opacity="0.08" stroke="#d62728" stroke-width="1""##),
            "attempt of a task a violation names",
        ),
        (Tick("#2e7d32"), "store commit (row = kind)"),
        (Tick("#c2185b"), "write rejected by the store"),
    ];
    svg.open_group("legend");
    let (mut x, mut y) = (16.0, top);
    for (swatch, label) in items {
        let w = 24.0 + text_w(label, 11.0) + 14.0;
        if x + w > WIDTH - 16.0 {
            x = 16.0;
            y += 16.0;
        }
        let mid = y + 6.0;
        match swatch {
            Bar(fill, h, extra) => {
                let style = format!(r#"fill="{fill}" {extra}"#);
                svg.rect(x, mid - h / 2.0, 18.0, h, &style, None);
            }
            Line(style) => svg.line(x + 9.0, mid - 6.0, x + 9.0, mid + 6.0, style, None),
            Tick(color) => {
                let style = format!(r#"stroke="{color}" stroke-width="1.5""#);
                svg.line(x + 9.0, mid - 4.0, x + 9.0, mid + 4.0, &style, None);
            }
            Triangle => {
                let d = format!(
                    "M{:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z",
                    x + 5.0,
                    mid - 4.0,
                    x + 13.0,
                    mid - 4.0,
                    x + 9.0,
                    mid + 4.0
                );
                svg.path(&d, r##"fill="#1f77b4""##, None);
            }
        }
        svg.text(x + 24.0, mid + 4.0, 11.0, r##"fill="#222""##, label, None);
        x += w;
    }
    svg.close_group();
    y + 22.0
}

/// A lane's background, separator and name; `sub` lines go under the name.
fn lane_frame(svg: &mut Svg, top: f64, height: f64, shade: bool, name: &str, sub: &[String]) {
    let fill = if shade { "#f5f7fa" } else { "#ffffff" };
    svg.rect(0.0, top, WIDTH, height, &format!(r#"fill="{fill}""#), None);
    svg.line(0.0, top, WIDTH, top, r##"stroke="#c8ced6""##, None);
    svg.text(8.0, top + 14.0, 13.0, r##"font-weight="bold" fill="#111""##, name, None);
    for (i, s) in sub.iter().enumerate() {
        svg.text(8.0, top + 26.0 + 11.0 * i as f64, 9.0, r##"fill="#555""##, s, None);
    }
}

fn lane_min_height(sub: usize) -> f64 {
    18.0 + 11.0 * sub as f64 + 4.0
}

fn row_label(svg: &mut Svg, y_mid: f64, size: f64, text: &str) {
    svg.text(LEFT - 6.0, y_mid + size / 3.0, size, r##"text-anchor="end" fill="#444""##, text, None);
}

/// One row per fault kind, a triangle per injection.
fn world_lane(svg: &mut Svg, tl: &Timeline, scale: &Scale, top: f64, shade: bool) -> f64 {
    let mut kinds: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for m in &tl.marks {
        if let MarkKind::Fault { kind, detail } = &m.kind {
            kinds.entry(kind).or_default().push((m.at_ms, detail));
        }
    }
    let sub = if kinds.is_empty() { vec!["no faults".to_string()] } else { vec!["faults".to_string()] };
    let height = (kinds.len() as f64 * TICK_H + 8.0).max(lane_min_height(sub.len()));
    svg.open_group("lane world");
    lane_frame(svg, top, height, shade, "world", &sub);
    for (row, (kind, marks)) in kinds.iter().enumerate() {
        let y = top + 4.0 + row as f64 * TICK_H;
        let color = FAULT_COLORS[row % FAULT_COLORS.len()];
        row_label(svg, y + TICK_H / 2.0, 9.0, &format!("{kind} ({})", marks.len()));
        for (at, detail) in marks {
            let x = scale.x(*at);
            let d = format!("M{:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z", x - 3.5, y + 2.0, x + 3.5, y + 2.0, x, y + 10.0);
            let title = format!("{} {kind}: {detail}", secs(*at));
            svg.path(&d, &format!(r#"fill="{color}" fill-opacity="0.85""#), Some(&title));
        }
    }
    svg.close_group();
    top + height
}

/// One row per kind of store commit, a tick per commit.
fn store_lane(svg: &mut Svg, tl: &Timeline, scale: &Scale, top: f64, shade: bool) -> f64 {
    let mut rows: BTreeMap<StoreMark, Vec<(u64, &str)>> = BTreeMap::new();
    for m in &tl.marks {
        if let MarkKind::Store { what, detail, .. } = &m.kind {
            rows.entry(*what).or_default().push((m.at_ms, detail));
        }
    }
    let sub = vec!["commits".to_string()];
    let height = (rows.len() as f64 * TICK_H + 8.0).max(lane_min_height(sub.len()));
    svg.open_group("lane store");
    lane_frame(svg, top, height, shade, "store", &sub);
    for (row, (what, marks)) in rows.iter().enumerate() {
        let y = top + 4.0 + row as f64 * TICK_H;
        row_label(svg, y + TICK_H / 2.0, 9.0, &format!("{} ({})", what.name(), marks.len()));
        let style = format!(r#"stroke="{}" stroke-width="1.5""#, store_color(*what));
        for (at, detail) in marks {
            let x = scale.x(*at);
            let title = format!("{} {}: {detail}", secs(*at), what.name());
            svg.line(x, y + 2.0, x, y + TICK_H - 2.0, &style, Some(&title));
        }
    }
    svg.close_group();
    top + height
}

fn client_lane(svg: &mut Svg, tl: &Timeline, scale: &Scale, top: f64, shade: bool) -> f64 {
    let queries: Vec<(u64, u64, bool)> = tl
        .marks
        .iter()
        .filter_map(|m| match m.kind {
            MarkKind::Query { index, materialized } => Some((m.at_ms, index, materialized)),
            _ => None,
        })
        .collect();
    let sub = vec!["green: materialized".to_string(), "orange: not yet".to_string()];
    let height = (TICK_H + 8.0).max(lane_min_height(sub.len()));
    svg.open_group("lane client");
    lane_frame(svg, top, height, shade, "client", &sub);
    let y = top + 4.0;
    row_label(svg, y + TICK_H / 2.0, 9.0, &format!("query results ({})", queries.len()));
    for (at, index, materialized) in queries {
        let x = scale.x(at);
        let color = if materialized { "#2e7d32" } else { "#e67e22" };
        let what = if materialized { "materialized" } else { "not materialized" };
        let title = format!("{} query of index {index}: {what}", secs(at));
        svg.line(x, y + 2.0, x, y + TICK_H - 2.0, &format!(r#"stroke="{color}" stroke-width="1.5""#), Some(&title));
    }
    svg.close_group();
    top + height
}

/// The spans of one attempt, drawn on one row.
#[derive(Default)]
struct Attempt<'a> {
    lease: Vec<&'a Span>,
    permit: Vec<&'a Span>,
    exec: Vec<&'a Span>,
    write: Vec<&'a Span>,
    txn: Vec<&'a Span>,
}

impl Attempt<'_> {
    fn all(&self) -> impl Iterator<Item = &&Span> {
        self.lease.iter().chain(&self.permit).chain(&self.exec).chain(&self.write).chain(&self.txn)
    }
}

/// One worker process, as its lane shows it: its incarnations and the
/// violations that name it.
struct Worker<'a> {
    proc: ProcId,
    incs: &'a [u32],
    violations: &'a [(usize, &'a Violation)],
    /// Tasks some violation names: their attempts are outlined in red.
    violating: &'a BTreeSet<TaskId>,
}

/// The marks of a worker's life: labels (incarnations, kills, exits,
/// pauses, violations), deaths (from a kill or an exit to the restart),
/// restarts, kills and exits.
struct Life {
    labels: Vec<Label>,
    dead: Vec<(u64, u64, Owner)>,
    ups: Vec<(u64, Owner)>,
    kills: Vec<(u64, Owner)>,
    exits: Vec<(u64, Owner)>,
}

/// Per maintenance kind: its rows, and each pass with its row.
type PassRows<'a> = Vec<(MaintenanceKind, usize, Vec<(&'a Span, usize)>)>;

/// Where an attempt's label goes: inside its lease bar, right after the
/// attempt, or (at the right edge) right before it.
#[derive(PartialEq)]
enum LabelAt {
    Inside,
    After,
    Before,
}

/// An attempt placed on a row of its lane.
struct Placed<'a> {
    key: (Owner, TaskId, u32),
    spans: Attempt<'a>,
    x0: f64,
    x1: f64,
    label_at: LabelAt,
    /// The room taken on its row, label included.
    room: (f64, f64),
    row: usize,
}

impl<'a> Placed<'a> {
    /// The attempt's extent and where its label fits (its row comes later).
    fn new(key: (Owner, TaskId, u32), spans: Attempt<'a>, scale: &Scale) -> Placed<'a> {
        let start = spans.all().map(|s| s.start_ms).min().unwrap_or(0);
        let end = spans.all().map(|s| s.end_ms).max().unwrap_or(start);
        let x0 = scale.x(start);
        let x1 = scale.x(end).max(x0 + 1.0);
        let label = format!("t{}#{}", key.1, key.2);
        let lease_w = spans.lease.iter().map(|s| scale.x(s.end_ms) - scale.x(s.start_ms)).fold(0.0, f64::max);
        let label_w = text_w(&label, 8.0);
        let (label_at, room) = if lease_w >= label_w + 4.0 {
            (LabelAt::Inside, (x0, x1 + 2.0))
        } else if x1 + label_w + 4.0 <= WIDTH - 2.0 {
            (LabelAt::After, (x0, x1 + label_w + 5.0))
        } else {
            (LabelAt::Before, (x0 - label_w - 4.0, x1 + 2.0))
        };
        Placed { key, spans, x0, x1, label_at, room, row: 0 }
    }
}

/// A lane's vertical extent.
#[derive(Clone, Copy)]
struct Band {
    top: f64,
    height: f64,
    bottom: f64,
}

/// A worker process's lane: labels, then maintenance rows, then a compact
/// row of transactions outside any attempt, then attempt rows; deaths,
/// pauses, restarts, kills, exits and violations across them. Notes where
/// each attempt's lease was drawn in `leases`. Returns the y under it.
fn worker_lane(
    svg: &mut Svg,
    tl: &Timeline,
    scale: &Scale,
    w: &Worker,
    (top, shade): (f64, bool),
    leases: &mut BTreeMap<(TaskId, u32), LeaseAt>,
) -> f64 {
    let proc = w.proc;
    let mut life = life(tl, scale, w);
    let (label_rows, n_label_rows) = place_labels(&mut life.labels);
    let spans = worker_spans(tl, proc);
    let pass_rows = place_passes(&spans.passes, scale);
    let n_pass_rows: usize = pass_rows.iter().map(|(_, n, _)| n).sum();
    let (n_txn_rows, txn_rows) = place_compact(&spans.txns, scale, MAX_TXN_ROWS);
    let (placed, n_attempt_rows) = place_attempts(spans.attempts, scale);

    // ---- geometry ----
    let sub = worker_sub(tl, w, &placed, &spans.passes);
    let label_top = top + 3.0;
    let pass_top = label_top + n_label_rows.max(1) as f64 * LABEL_H + 2.0;
    let txn_top = pass_top + n_pass_rows as f64 * MAINT_H + if n_pass_rows > 0 { 3.0 } else { 0.0 };
    let attempt_top = txn_top + n_txn_rows as f64 * TXN_H + if n_txn_rows > 0 { 3.0 } else { 0.0 };
    let content_bottom = attempt_top + n_attempt_rows as f64 * ATTEMPT_H + 3.0;
    let height = (content_bottom - top).max(lane_min_height(sub.len()));
    let band = Band { top, height, bottom: top + height };

    // ---- drawing ----
    svg.open_group(&format!("lane p{proc}"));
    lane_frame(svg, top, height, shade, &format!("p{proc}"), &sub);
    draw_life(svg, tl, scale, proc, &life, band);
    draw_labels(svg, &life.labels, &label_rows, label_top);
    draw_passes(svg, scale, &pass_rows, pass_top);
    draw_txns(svg, scale, (n_txn_rows, &txn_rows), txn_top);
    if n_attempt_rows > 0 {
        row_label(svg, attempt_top + ATTEMPT_H / 2.0, 8.0, "attempts");
    }
    draw_attempts(svg, scale, (&placed, w.violating), attempt_top, leases);
    draw_violations(svg, scale, w, (&placed, attempt_top), band);
    svg.close_group();
    band.bottom
}

/// Each violation of the lane at its instant: across the row of the
/// attempt it names when this lane draws one (a red bar with a diamond),
/// so it crosses no unrelated attempt; else across the whole lane.
fn draw_violations(svg: &mut Svg, scale: &Scale, w: &Worker, (placed, attempt_top): (&[Placed], f64), band: Band) {
    for (i, v) in w.violations {
        let x = scale.x(v.at_ms);
        let title = violation_text(*i, v);
        let style = format!(r#"stroke="{VIOLATION}" stroke-width="1.5""#);
        let owner = v.process.as_deref().and_then(parse_process).and_then(|(p, inc)| inc.map(|i| (p, i)));
        // The attempt it names, or (naming only its task) the task's last here.
        let row = placed
            .iter()
            .filter(|p| {
                Some(p.key.1) == v.task
                    && (v.attempt.is_none() || Some(p.key.2) == v.attempt)
                    && owner.is_none_or(|(proc, inc)| p.key.0 == Owner { proc, incarnation: inc })
            })
            .max_by_key(|p| (p.key.2, p.key.0));
        match row {
            Some(p) => {
                let y = attempt_top + p.row as f64 * ATTEMPT_H;
                svg.line(
                    x,
                    y - 1.0,
                    x,
                    y + ATTEMPT_H,
                    &format!(r#"stroke="{VIOLATION}" stroke-width="2.5""#),
                    Some(&title),
                );
                let d = format!(
                    "M{:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}L{:.1} {:.1}Z",
                    x,
                    y - 3.0,
                    x + 3.5,
                    y + 0.5,
                    x,
                    y + 4.0,
                    x - 3.5,
                    y + 0.5
                );
                svg.path(&d, &format!(r#"fill="{VIOLATION}""#), Some(&title));
            }
            None => svg.line(x, band.top + 1.0, x, band.bottom, &style, Some(&title)),
        }
    }
}

/// What a worker lane marks of the process's life, with the labels of its
/// violations.
fn life(tl: &Timeline, scale: &Scale, w: &Worker) -> Life {
    let proc = w.proc;
    let mut life = Life { labels: Vec::new(), dead: Vec::new(), ups: Vec::new(), kills: Vec::new(), exits: Vec::new() };
    let mut dead_since: Option<(u64, Owner)> = None;
    let label = |at_ms: u64, text: String, color: &'static str, title: String| Label {
        x: scale.x(at_ms),
        text,
        color,
        bold: false,
        title: Some(title),
    };
    for m in &tl.marks {
        match &m.kind {
            MarkKind::Up(o) if o.proc == proc => {
                if let Some((since, who)) = dead_since.take() {
                    life.dead.push((since, m.at_ms, who));
                }
                life.ups.push((m.at_ms, *o));
                let title = format!("{o} up at {}", secs(m.at_ms));
                life.labels.push(label(m.at_ms, o.to_string(), "#333333", title));
            }
            MarkKind::Killed(o) if o.proc == proc => {
                dead_since.get_or_insert((m.at_ms, *o));
                life.kills.push((m.at_ms, *o));
                let title = format!("{o} killed at {}", secs(m.at_ms));
                life.labels.push(label(m.at_ms, format!("killed {o}"), KILL, title));
            }
            MarkKind::Exited(o) if o.proc == proc => {
                dead_since.get_or_insert((m.at_ms, *o));
                life.exits.push((m.at_ms, *o));
                let title = format!("{o} exited on its own at {}", secs(m.at_ms));
                life.labels.push(label(m.at_ms, format!("exited {o}"), EXIT, title));
            }
            MarkKind::Paused(p) if *p == proc => {
                let title = format!("p{p} paused at {}", secs(m.at_ms));
                life.labels.push(label(m.at_ms, "paused".into(), "#8a6d00", title));
            }
            _ => {}
        }
    }
    if let Some((since, who)) = dead_since {
        life.dead.push((since, tl.end_ms, who));
    }
    for (i, v) in w.violations {
        life.labels.push(violation_label(*i, v, scale));
    }
    life
}

/// A worker's spans as its lane draws them: maintenance passes (per
/// kind), transactions outside any attempt, and attempts (per
/// incarnation, task and attempt).
struct WorkerSpans<'a> {
    passes: BTreeMap<MaintenanceKind, Vec<&'a Span>>,
    txns: Vec<&'a Span>,
    attempts: BTreeMap<(Owner, TaskId, u32), Attempt<'a>>,
}

fn worker_spans(tl: &Timeline, proc: ProcId) -> WorkerSpans<'_> {
    let mut w = WorkerSpans { passes: BTreeMap::new(), txns: Vec::new(), attempts: BTreeMap::new() };
    for s in tl.spans.iter().filter(|s| s.proc == proc) {
        let (Some(owner), Some(task), Some(attempt)) = (s.owner, s.task, s.attempt) else {
            match s.kind {
                SpanKind::Maintenance(k) => w.passes.entry(k).or_default().push(s),
                SpanKind::Transaction => w.txns.push(s),
                _ => {}
            }
            continue;
        };
        let a = w.attempts.entry((owner, task, attempt)).or_default();
        match s.kind {
            SpanKind::Lease => a.lease.push(s),
            SpanKind::Permit => a.permit.push(s),
            SpanKind::Execution => a.exec.push(s),
            SpanKind::Write => a.write.push(s),
            SpanKind::Transaction => a.txn.push(s),
            SpanKind::Maintenance(_) | SpanKind::Alive | SpanKind::Paused => {}
        }
    }
    w
}

/// Spans placed on at most `max` rows so they never overlap (more overlap
/// shares the rows that free first); returns the rows used and each span
/// with its row.
fn place_compact<'a>(spans: &[&'a Span], scale: &Scale, max: usize) -> (usize, Vec<(&'a Span, usize)>) {
    let mut rows = Rows::with_max(max);
    let placed = spans
        .iter()
        .map(|s| {
            let x0 = scale.x(s.start_ms);
            (*s, rows.place(x0, scale.x(s.end_ms).max(x0 + 1.0) + 0.5))
        })
        .collect();
    (rows.len(), placed)
}

/// The compact rows of transactions outside any attempt, from `top` down:
/// an outline each, solid when it committed, dashed when it ended without.
fn draw_txns(svg: &mut Svg, scale: &Scale, (n_rows, spans): (usize, &[(&Span, usize)]), top: f64) {
    if n_rows > 0 {
        row_label(svg, top + n_rows as f64 * TXN_H / 2.0, 8.0, &format!("transactions ({})", spans.len()));
    }
    for (s, r) in spans {
        let x0 = scale.x(s.start_ms);
        let w = (scale.x(s.end_ms) - x0).max(1.0);
        let dash = if s.cut == Cut::Normal { "" } else { r#" stroke-dasharray="2,1""# };
        let style = format!(r#"fill="{TXN}" fill-opacity="0.15" stroke="{TXN}" stroke-width="0.8"{dash}"#);
        svg.rect(x0, top + *r as f64 * TXN_H + 1.0, w, TXN_H - 2.0, &style, Some(&span_text(s)));
    }
}

/// Maintenance rows: per kind, passes placed so they never overlap.
fn place_passes<'a>(passes: &BTreeMap<MaintenanceKind, Vec<&'a Span>>, scale: &Scale) -> PassRows<'a> {
    let mut pass_rows: PassRows = Vec::new();
    for (kind, spans) in passes {
        let mut rows = Rows::default();
        let placed: Vec<(&Span, usize)> = spans
            .iter()
            .map(|s| {
                let x0 = scale.x(s.start_ms);
                (*s, rows.place(x0, scale.x(s.end_ms).max(x0 + 1.0) + 0.5))
            })
            .collect();
        pass_rows.push((*kind, rows.len(), placed));
    }
    pass_rows
}

/// Attempt rows: each attempt on the first row free at its start; room is
/// kept for its label inside the lease bar, right after it, or (at the
/// right edge) right before it. Returns the attempts and the rows used.
fn place_attempts<'a>(
    attempts: BTreeMap<(Owner, TaskId, u32), Attempt<'a>>,
    scale: &Scale,
) -> (Vec<Placed<'a>>, usize) {
    let mut placed: Vec<Placed> = attempts.into_iter().map(|(key, spans)| Placed::new(key, spans, scale)).collect();
    placed.sort_by(|a, b| a.room.0.total_cmp(&b.room.0).then(a.key.cmp(&b.key)));
    let mut rows = Rows::default();
    for p in placed.iter_mut() {
        p.row = rows.place(p.room.0, p.room.1);
    }
    (placed, rows.len())
}

/// The lines under a worker lane's name: incarnations, clock offset,
/// leases and passes.
fn worker_sub(
    tl: &Timeline,
    w: &Worker,
    placed: &[Placed],
    passes: &BTreeMap<MaintenanceKind, Vec<&Span>>,
) -> Vec<String> {
    let proc = w.proc;
    let mut sub = Vec::new();
    match (w.incs.first(), w.incs.last()) {
        (Some(a), Some(b)) if a != b => sub.push(format!("p{proc}.{a} to p{proc}.{b}")),
        (Some(a), _) => sub.push(format!("p{proc}.{a}")),
        _ => {}
    }
    if let Some(off) = tl.offsets.get(&proc) {
        sub.push(format!("clock {off:+} ms"));
    }
    let count = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    sub.push(count(placed.iter().filter(|p| !p.spans.lease.is_empty()).count(), "lease", "leases"));
    sub.push(count(passes.values().map(Vec::len).sum::<usize>(), "pass", "passes"));
    sub
}

/// Across the whole lane: deaths hatched, pauses yellow, restarts dashed,
/// kills red.
fn draw_life(svg: &mut Svg, tl: &Timeline, scale: &Scale, proc: ProcId, life: &Life, band: Band) {
    let Band { top, height, bottom } = band;
    for (from, to, who) in &life.dead {
        let (x0, x1) = (scale.x(*from), scale.x(*to));
        let title = format!("{who} down from {} to {}", secs(*from), secs(*to));
        svg.rect(x0, top + 1.0, (x1 - x0).max(1.0), height - 1.0, r#"fill="url(#dead)""#, Some(&title));
    }
    for s in tl.spans.iter().filter(|s| s.proc == proc && s.kind == SpanKind::Paused) {
        let (x0, x1) = (scale.x(s.start_ms), scale.x(s.end_ms));
        let style = format!(r#"fill="{PAUSED}" fill-opacity="0.5""#);
        svg.rect(x0, top + 1.0, (x1 - x0).max(1.0), height - 1.0, &style, Some(&span_text(s)));
    }
    for (at, o) in &life.ups {
        if *at > 0 {
            let x = scale.x(*at);
            let title = format!("{o} up at {}", secs(*at));
            let style = format!(r#"stroke="{INCARNATION}" stroke-dasharray="3,2""#);
            svg.line(x, top + 1.0, x, bottom, &style, Some(&title));
        }
    }
    for (at, o) in &life.kills {
        let x = scale.x(*at);
        let title = format!("{o} killed at {}", secs(*at));
        svg.line(x, top + 1.0, x, bottom, &format!(r#"stroke="{KILL}" stroke-width="1.5""#), Some(&title));
    }
    for (at, o) in &life.exits {
        let x = scale.x(*at);
        let title = format!("{o} exited on its own at {}", secs(*at));
        let style = format!(r#"stroke="{EXIT}" stroke-width="1.5" stroke-dasharray="1,2""#);
        svg.line(x, top + 1.0, x, bottom, &style, Some(&title));
    }
}

/// The maintenance rows, from `top` down.
fn draw_passes(svg: &mut Svg, scale: &Scale, pass_rows: &PassRows, top: f64) {
    let mut y = top;
    for (kind, n_rows, spans) in pass_rows {
        for r in 0..*n_rows {
            row_label(svg, y + r as f64 * MAINT_H + MAINT_H / 2.0, 8.0, &format!("{} passes", kind.name()));
        }
        for (s, r) in spans {
            let x0 = scale.x(s.start_ms);
            let w = (scale.x(s.end_ms) - x0).max(1.0);
            let fill = if s.cut == Cut::Normal { PASS } else { PASS_CUT };
            svg.rect(
                x0,
                y + *r as f64 * MAINT_H + 1.5,
                w,
                MAINT_H - 3.0,
                &format!(r#"fill="{fill}""#),
                Some(&span_text(s)),
            );
        }
        y += *n_rows as f64 * MAINT_H;
    }
}

/// Each attempt on its row: the lease bar, the permit / execution / write
/// strip under it (a stale write taller and red), its transactions, and its
/// label; the attempts of a task a violation names are outlined in red.
/// Notes where each lease was drawn in `leases` (for the links).
fn draw_attempts(
    svg: &mut Svg,
    scale: &Scale,
    (placed, violating): (&[Placed], &BTreeSet<TaskId>),
    top: f64,
    leases: &mut BTreeMap<(TaskId, u32), LeaseAt>,
) {
    for p in placed {
        let y = top + p.row as f64 * ATTEMPT_H;
        let flagged = violating.contains(&p.key.1);
        if flagged {
            let style = format!(r#"fill="{VIOLATION}" fill-opacity="0.08" stroke="{VIOLATION}" stroke-width="1""#);
            let title = format!("t{}: a task a violation names (attempt {} on {})", p.key.1, p.key.2, p.key.0);
            svg.rect(p.x0 - 1.0, y, (p.x1 - p.x0) + 2.0, ATTEMPT_H - 1.0, &style, Some(&title));
        }
        draw_leases(svg, scale, p, y, leases);
        for (spans, fill) in [(&p.spans.permit, PERMIT), (&p.spans.exec, EXEC)] {
            for s in spans {
                let x0 = scale.x(s.start_ms);
                let w = (scale.x(s.end_ms) - x0).max(1.0);
                svg.rect(x0, y + 11.0, w, 4.0, &format!(r#"fill="{fill}""#), Some(&span_text(s)));
            }
        }
        for s in &p.spans.write {
            let x0 = scale.x(s.start_ms);
            let w = (scale.x(s.end_ms) - x0).max(1.5);
            if s.stale {
                let style = format!(r##"fill="{STALE}" stroke="#111" stroke-width="0.8""##);
                svg.rect(x0, y + 9.5, w.max(3.0), 7.0, &style, Some(&span_text(s)));
            } else {
                svg.rect(x0, y + 11.0, w, 4.0, &format!(r#"fill="{WRITE}""#), Some(&span_text(s)));
            }
        }
        // A transaction outlines the strip: solid when it committed, dashed
        // when it ended without (no longer open, rolled back, lost).
        for s in &p.spans.txn {
            let x0 = scale.x(s.start_ms);
            let w = (scale.x(s.end_ms) - x0).max(1.0);
            let dash = if s.cut == Cut::Normal { "" } else { r#" stroke-dasharray="2,1""# };
            let style = format!(r#"fill="none" stroke="{TXN}" stroke-width="1"{dash}"#);
            svg.rect(x0, y + 10.5, w, 5.0, &style, Some(&span_text(s)));
        }
        attempt_label(svg, scale, p, y, flagged);
    }
}

/// An attempt's lease bars, noting where the first starts and the last ends.
fn draw_leases(svg: &mut Svg, scale: &Scale, p: &Placed, y: f64, leases: &mut BTreeMap<(TaskId, u32), LeaseAt>) {
    for s in &p.spans.lease {
        let x0 = scale.x(s.start_ms);
        let w = (scale.x(s.end_ms) - x0).max(1.0);
        let style = match s.cut {
            Cut::Reclaimed => format!(r#"fill="{LEASE_RECLAIMED}" stroke="{LEASE}" stroke-dasharray="3,2""#),
            Cut::Open => format!(r##"fill="{LEASE}" stroke="#111" stroke-width="1.5" stroke-dasharray="2,2""##),
            Cut::Normal | Cut::Killed => format!(r#"fill="{LEASE}""#),
        };
        svg.rect(x0, y + 1.0, w, 9.0, &style, Some(&span_text(s)));
        let at = leases.entry((p.key.1, p.key.2)).or_insert(LeaseAt { x0, x1: x0 + w, y: y + 5.5 });
        at.x0 = at.x0.min(x0);
        at.x1 = at.x1.max(x0 + w);
    }
}

/// `t12#2` inside the lease bar, or after or before the attempt; red and
/// bold for a task a violation names.
fn attempt_label(svg: &mut Svg, scale: &Scale, p: &Placed, y: f64, flagged: bool) {
    let label = format!("t{}#{}", p.key.1, p.key.2);
    let title = format!("task {} attempt {} on {}", p.key.1, p.key.2, p.key.0);
    let weight = if flagged { r#" font-weight="bold""# } else { "" };
    if p.label_at == LabelAt::Inside {
        let lease = p.spans.lease.iter().max_by(|a, b| (a.end_ms - a.start_ms).cmp(&(b.end_ms - b.start_ms)));
        let x = lease.map_or(p.x0, |s| scale.x(s.start_ms)) + 2.0;
        // Dark on a pale (taken away) bar, light on a dark one.
        let fill = match (flagged, lease.map(|s| s.cut)) {
            (true, Some(Cut::Reclaimed)) => VIOLATION,
            (true, _) => "#ffd6d6",
            (false, Some(Cut::Reclaimed)) => "#0b2a55",
            (false, _) => "#ffffff",
        };
        svg.text(x, y + 8.5, 8.0, &format!(r#"fill="{fill}"{weight}"#), &label, Some(&title));
    } else {
        let x = if p.label_at == LabelAt::After { p.x1 + 2.0 } else { p.room.0 + 1.0 };
        let fill = if flagged { VIOLATION } else { "#0b2a55" };
        svg.text(x, y + 8.5, 8.0, &format!(r#"fill="{fill}"{weight}"#), &label, Some(&title));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_messages_wrap_and_keep_every_word() {
        let text =
            "t4: complete by attempt 1 (p3.1) changed the store at 101904 ms while attempt 2 (p2.15) holds the task";
        let lines = super::wrap(text, 30);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= 30), "{lines:?}");
        assert_eq!(lines.join(" "), text, "nothing cut");
        assert_eq!(super::wrap("abcdefgh", 3), ["abc", "def", "gh"]);
    }

    use super::super::testkit::{history, violations};
    use super::{esc, svg_timeline, svg_timeline_window, tick_label, tick_step};

    #[test]
    fn a_window_draws_only_its_own_time() {
        let whole = picture();
        let window = svg_timeline_window(&history(), &violations(), "w", Some((4000, 6000)));
        assert_well_formed(&window);
        assert!(window.contains("window 4.000 s to 6.000 s"), "the subtitle names the window");
        assert!(whole.contains("<title>heal at 9.000 s"), "the whole run marks the heal");
        assert!(!window.contains("<title>heal at 9.000 s"), "the heal at 9 s is outside 4..6 s");
        assert!(window.contains(">4.2 s<") && !window.contains(">0 s<"), "the axis starts at the window");
        assert!(window.contains("t7 is not terminal"), "the list under the chart keeps every violation");
        let to_past_end = svg_timeline_window(&history(), &violations(), "w", Some((0, u64::MAX)));
        assert_eq!(to_past_end, svg_timeline_window(&history(), &violations(), "w", None));
    }

    fn picture() -> String {
        svg_timeline(&history(), &violations(), "swarm seed 3 <demo> & friends")
    }

    /// A tiny well-formedness check: every tag closes in order, attribute
    /// quotes balance, no raw '<' or '&' outside tags and entities.
    fn assert_well_formed(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find(['<', '&']) {
            let text = &rest[..i];
            assert!(!text.contains('>'), "a raw '>' in text: {text:?}");
            rest = &rest[i..];
            if rest.starts_with('&') {
                let end = rest.find(';').expect("an entity ends with ';'");
                let entity = &rest[1..end];
                assert!(["amp", "lt", "gt", "quot", "apos"].contains(&entity), "unknown entity &{entity};");
                rest = &rest[end + 1..];
                continue;
            }
            let end = rest.find('>').expect("a tag ends");
            let tag = &rest[1..end];
            assert!(!tag.contains('<'), "a '<' inside a tag: {tag:?}");
            assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes in <{tag}>");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "closing </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    }

    #[test]
    fn the_picture_is_well_formed_svg() {
        let svg = picture();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<g ").count() + svg.matches("<g>").count(), svg.matches("</g>").count());
        assert_well_formed(&svg);
        assert!(svg.contains("<title>swarm seed 3 &lt;demo&gt; &amp; friends</title>"));
    }

    #[test]
    fn every_process_has_a_lane_and_every_lease_a_bar() {
        let svg = picture();
        for lane in ["world", "store", "p1", "p2", "client"] {
            assert!(svg.contains(&format!(r#"<g class="lane {lane}">"#)), "lane {lane}");
            assert!(svg.contains(&format!(">{lane}</text>")), "lane label {lane}");
        }
        assert!(svg.contains(">t12#2<"), "the lease of t12 is labelled");
        assert!(svg.contains(">t7#1<"), "the lease of t7 is labelled");
        assert_eq!(svg.matches("<title>lease t12#2 on p1.1").count(), 1);
        assert_eq!(svg.matches("<title>lease t7#1 on p2.1").count(), 1);
        assert!(svg.contains("<title>permit t12#2 on p1.1"));
        assert!(svg.contains("<title>complete t12#2 on p1.1"));
        assert!(svg.contains("<title>maintenance index on p1.1"));
        assert!(svg.contains(">p2.2<"), "the restart is labelled");
        assert!(svg.contains(">killed p2.1<"));
        assert!(svg.contains(r#"fill="url(#dead)""#), "p2's death is hatched");
        assert!(svg.contains(">paused<"));
    }

    #[test]
    fn faults_heal_and_violations_are_marked() {
        let svg = picture();
        assert!(svg.contains(">message-loss (1)</text>"), "a row per fault kind");
        assert!(svg.contains(">process-kill (1)</text>"));
        assert!(svg.contains("message-loss: claim request lost</title>"));
        assert!(svg.contains(">heal<"));
        assert!(svg.contains(">V1 single-owner<"));
        assert!(svg.contains(">V2 eventual-completion<"));
        // The message's markup is escaped, in the list and in the tooltips.
        assert!(svg.contains("t12 &lt;granted&gt; while p2.1 &amp; others &quot;held&quot; it"));
        assert!(!svg.contains("<granted>"));
        // V1 names p1.1: its label sits in p1's lane.
        let p1 = svg.find(r#"<g class="lane p1">"#).unwrap();
        let p2 = svg.find(r#"<g class="lane p2">"#).unwrap();
        let v1 = svg.find(">V1 single-owner<").unwrap();
        assert!(p1 < v1 && v1 < p2, "V1 is drawn in p1's lane");
    }

    #[test]
    fn ticks_are_in_seconds() {
        assert_eq!(tick_step(600_000), 60_000);
        assert_eq!(tick_step(10_000), 1000);
        assert_eq!(tick_step(0), 1);
        assert_eq!(tick_label(30_000, 30_000), "30 s");
        assert_eq!(tick_label(1500, 500), "1.5 s");
        let svg = picture();
        assert!(svg.contains(">10 s</text>") && svg.contains(">0 s</text>"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc(r#"<a & 'b' "c">"#), "&lt;a &amp; &apos;b&apos; &quot;c&quot;&gt;");
    }

    #[test]
    fn an_empty_history_still_draws() {
        let svg = svg_timeline(&[], &[], "empty");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_well_formed(&svg);
        assert!(svg.contains("Violations: none"));
    }

    #[test]
    fn overlapping_attempts_get_their_own_rows() {
        use super::super::testkit::{change, o, row, t};
        use crate::truth::{Commit, Fact};
        use leasesim_vocab::task::{TaskKind, TaskState};
        let grant = |at_ms, task| {
            let before = row(task, TaskKind::Job, TaskState::Ready, (0, None));
            let after = row(task, TaskKind::Job, TaskState::Leased, (1, Some(o(1, 1))));
            t(at_ms, Fact::Drift { commit: Commit { tasks: vec![change(Some(before), after)], ..Commit::default() } })
        };
        let history: Vec<_> = (0..5).map(|task| grant(task * 100, task)).collect();
        let svg = svg_timeline(&history, &[], "overlap");
        let ys: std::collections::BTreeSet<String> = svg
            .lines()
            .filter(|l| l.contains("<title>lease t"))
            .map(|l| l.split("y=\"").nth(1).unwrap().split('"').next().unwrap().to_string())
            .collect();
        assert_eq!(ys.len(), 5, "five overlapping leases on five rows: {ys:?}");
    }

    #[test]
    fn a_window_past_the_end_is_moved_back_and_says_so() {
        let past = svg_timeline_window(&history(), &violations(), "w", Some((10_000, 20_000)));
        assert_well_formed(&past);
        assert!(past.contains("after the run&apos;s end at 10000 ms"), "the picture says the window moved");
        assert!(past.contains(">0 s<") && past.contains(">10 s<"), "its width is kept, within the run");
        let from_alone = svg_timeline_window(&history(), &violations(), "w", Some((30_000, u64::MAX)));
        assert!(from_alone.contains("10000 ms: the whole run is drawn"), "an open end is the run's width");
        let narrow = svg_timeline_window(&history(), &violations(), "w", Some((12_000, 14_000)));
        assert!(narrow.contains("its last 2000 ms is drawn") && narrow.contains("window 8.000 s to 10.000 s"));
    }

    #[test]
    fn the_window_around_the_first_violation_holds_its_task_and_its_moment() {
        assert_eq!(super::around_first_violation(&history(), &[]), None);
        let (from, to) = super::around_first_violation(&history(), &violations()).unwrap();
        // V1 (4.5 s) names t12, first granted at 1 s: from before 1 s to after 4.5 s.
        assert!(from < 1000 && to > 4500 && to <= 10_000, "{from}..{to}");
    }

    #[test]
    fn a_violation_is_drawn_on_the_attempt_it_names_and_its_task_outlined() {
        let svg = picture();
        assert!(svg.contains("<title>t12: a task a violation names (attempt 2 on p1.1)</title>"));
        // The mark across t12#2's row only: a diamond and a short bar.
        let v1 = svg.matches("<title>V1 at 4.500 s").count();
        assert!(v1 >= 3, "label, bar and diamond: {v1}");
    }
}
