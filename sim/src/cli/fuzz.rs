//! `leasesim fuzz`: many seeds, in parallel; optionally for a wall-clock
//! budget, on one shard of the seed space, saving each new failure.

use super::common::{jobs, targets, FaultsArg};
use crate::corpus::{self, Entry};
use crate::fuzz::{self, Campaign, Failure, Progress, SeedSpace, Summary};
use crate::guided;
use crate::runner::{self, RunSpec};
use clap::Args;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// A built-in scenario name, a scenario TOML path, or a group: `all` (every
    /// scenario of the built-in engine), `graphile-all` (every graphile-worker
    /// scenario), `apalis-all` (every apalis scenario); `cargo sim list` names
    /// each group's scenarios. Example: --scenario all
    #[arg(long)]
    pub scenario: String,
    /// How many seeds: seeds --seed-start to --seed-start + N - 1. Each seed
    /// runs once per scenario: N seeds of a group of K scenarios are N x K
    /// runs. Optional with --time. Example: --seeds 2000
    #[arg(long)]
    pub seeds: Option<u64>,
    /// The first seed of the range. Example: --seed-start 100000
    #[arg(long, default_value_t = 1)]
    pub seed_start: u64,
    /// A wall-clock budget instead of (or on top of) a seed count: 90s, 10m, 1h.
    /// Example: --time 10m
    #[arg(long, value_parser = parse_duration)]
    pub time: Option<Duration>,
    /// Run shard K of N: the seeds s of the range with s % N == K - 1, so N
    /// machines together cover each seed exactly once. Example: --shard 2/4
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<(u64, u64)>,
    /// Save each new failure as a corpus entry in DIR (atomically, never
    /// overwriting; one entry per scenario/invariant/defects signature, and none
    /// for a signature DIR already has). Example: --save corpus/
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Runs at once (default: one per core). Example: --jobs 2
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print one JSON summary object on stdout instead of text (runs,
    /// failures, fault_counts, checks, events, sim_seconds, wall_seconds, ...).
    /// Example: --json > summary.json
    #[arg(long)]
    pub json: bool,
    /// Where each run's fault plan comes from: `swarm` (drawn from the seed) or `none`.
    /// Example: --faults none
    #[arg(long, value_enum, default_value_t = FaultsArg::Swarm)]
    pub faults: FaultsArg,
    /// Guided swarm: beside fresh seeds, keep the runs that reached rare
    /// coverage points and run mutations of their fault plans, giving more
    /// runs to what was reached least. Deterministic; failures are saved with
    /// their explicit plans (to --save DIR, or target/leasesim-failures).
    /// Example: --guided
    #[arg(long)]
    pub guided: bool,
    #[command(flatten)]
    pub defects: super::common::DefectArgs,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("'{text}' is not a duration (examples: 90s, 10m, 1h, 1500ms)");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(unit_ms).filter(|&ms| ms <= MAX_BUDGET_MS);
    let Some(ms) = ms else {
        return Err(format!("'{text}': at most {} days", MAX_BUDGET_MS / 86_400_000));
    };
    if ms == 0 {
        return Err(format!("'{text}': the budget must be more than zero"));
    }
    Ok(Duration::from_millis(ms))
}

/// The longest `--time` budget (30 days): past it, it is a typo.
const MAX_BUDGET_MS: u64 = 30 * 86_400_000;

pub fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let bad = || format!("'{text}' is not a shard K/N with 1 <= K <= N (example: 2/4)");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n): (u64, u64) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if n == 0 || k == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Saves failures as corpus entries as they are found, one per signature.
struct Saver {
    dir: PathBuf,
    seen: BTreeSet<(String, String, Vec<String>)>,
    command: String,
    saved: Vec<PathBuf>,
}

impl Saver {
    fn new(dir: &Path, command: String, engines: &crate::Engines) -> Result<Saver, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("--save {}: cannot create: {e}", dir.display()))?;
        // Prove the folder takes an entry before spending any time on
        // seeds: an empty file fits on a full disk, an entry's bytes do not.
        let probe = dir.join(format!(".leasesim-probe-{}", std::process::id()));
        let probed = crate::export::write_synced(&probe, &[b'#'; PROBE_BYTES]);
        let _ = std::fs::remove_file(&probe);
        probed.map_err(|e| format!("--save {}: not writable: {e}", dir.display()))?;
        let mut seen = BTreeSet::new();
        for path in corpus::entries(dir)? {
            if let Ok(entry) = Entry::load(&path, engines) {
                seen.insert(entry.signature());
            }
        }
        Ok(Saver { dir: dir.to_path_buf(), seen, command, saved: Vec::new() })
    }

    /// Saves `f`, the failure of the run `spec`, unless its signature is
    /// already saved.
    fn offer(&mut self, f: &Failure, spec: &RunSpec) -> Result<Option<PathBuf>, String> {
        // Saved with its plan and world written out, so it replays the same
        // whatever later happens to the fault generator or the scenario.
        let entry = Entry::of_run(spec, &f.invariant, format!("found by `{}`: {}", self.command, f.message));
        if !self.seen.insert(entry.signature()) {
            return Ok(None);
        }
        let path = corpus::save_new(&self.dir, &corpus::stem(&entry), &entry)?;
        self.saved.push(path.clone());
        Ok(Some(path))
    }
}

/// The start-up probe of `--save`: about the size of a saved entry.
const PROBE_BYTES: usize = 16 * 1024;

/// Exit code of a campaign stopped by Ctrl-C or SIGTERM (after its summary).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Where guided campaigns save failures when `--save` is not given: every
/// guided run has an explicit plan that no command line can carry.
const GUIDED_FAILURES: &str = corpus::FAILURES_DIR;

pub fn run(args: FuzzArgs, engines: &crate::Engines) -> Result<i32, String> {
    let campaign = campaign(&args, engines)?;
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let save_dir = args.save.clone().or_else(|| args.guided.then(|| PathBuf::from(GUIDED_FAILURES)));
    let saver = match &save_dir {
        Some(dir) => Some(Saver::new(dir, format!("cargo sim {command}"), engines)?),
        None => None,
    };
    let header = header(&args, &campaign);
    if args.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
    }
    let (stop, interrupted) = stop_on_signals();
    let mut reporter = Reporter {
        bar: progress_bar(&campaign, args.json),
        json: args.json,
        saver,
        save_error: None,
        unsaved: Vec::new(),
        stop: &stop,
        started: Instant::now(),
        deadline: campaign.deadline,
        last_line: Instant::now(),
    };
    let summary = if args.guided {
        let (mut summary, stats) = guided::run(&campaign, &stop, |p| reporter.progress(p));
        summary.guided = Some(stats);
        summary
    } else {
        fuzz::run(&campaign, &stop, |p| reporter.progress(p))
    };
    let mut summary = summary;
    summary.runs = summary.seeds;
    summary.interrupted = interrupted.load(Ordering::SeqCst);
    reporter.finish(&summary);
    if let Some(e) = &reporter.save_error {
        // Every failure is in the summary above with its replay line; say
        // which were not saved, and why. Exit 1: failures were found.
        eprintln!("error: --save stopped the campaign: {e}");
        for line in &reporter.unsaved {
            eprintln!("  not saved: {line}");
        }
        return Ok(1);
    }
    if interrupted.load(Ordering::SeqCst) {
        eprintln!(
            "interrupted after {} runs: the summary above covers those only (exit {EXIT_INTERRUPTED})",
            summary.seeds
        );
        return Ok(if summary.failures.is_empty() { EXIT_INTERRUPTED } else { 1 });
    }
    Ok(exit_code(&summary))
}

/// The flags Ctrl-C or SIGTERM (a CI runner's timeout) raises: the campaign
/// stops taking seeds, prints its summary and exits 130 (1 if it found a
/// failure). A second signal ends the process at once.
fn stop_on_signals() -> (Arc<AtomicBool>, Arc<AtomicBool>) {
    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let (flag, seen) = (stop.clone(), interrupted.clone());
    let _ = ctrlc::set_handler(move || {
        if seen.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED);
        }
        flag.store(true, Ordering::SeqCst);
        eprintln!("\ninterrupted: finishing the runs in flight; every failure found so far is kept");
    });
    (stop, interrupted)
}

/// The campaign the flags describe.
fn campaign(args: &FuzzArgs, engines: &crate::Engines) -> Result<Campaign, String> {
    if args.seeds == Some(0) {
        return Err("--seeds: must be at least 1".into());
    }
    if args.seeds.is_none() && args.time.is_none() {
        return Err("--seeds or --time: give a seed count, a time budget, or both".into());
    }
    if args.guided && args.faults == FaultsArg::None {
        return Err("--guided: guides fault plans, so it needs --faults swarm".into());
    }
    let seed_end = match args.seeds {
        Some(n) => Some(args.seed_start.checked_add(n).ok_or("--seed-start + --seeds overflows u64")?),
        None => None,
    };
    let (shard_k, shard_n) = args.shard.unwrap_or((1, 1));
    let seeds = SeedSpace { start: args.seed_start, end: seed_end, shard_k, shard_n };
    if seeds.count() == Some(0) {
        // A shard with nothing to run would pass green having judged nothing.
        return Err(format!(
            "--shard {shard_k}/{shard_n}: none of the {} seeds from {} falls in this shard (it takes the seeds whose \
             remainder mod {shard_n} is {}); give more --seeds",
            args.seeds.unwrap_or(0),
            args.seed_start,
            shard_k - 1
        ));
    }
    let targets = targets(&args.scenario, engines)?;
    super::common::check_defects(&targets, &args.defects.set())?;
    Ok(Campaign {
        targets,
        seeds,
        deadline: args.time.map(|t| Instant::now() + t),
        jobs: jobs(args.jobs)?,
        plan: args.faults.plan(),
        watchdog: runner::DEFAULT_WATCHDOG,
        defects: args.defects.set(),
        sabotage: None,
    })
}

fn header(args: &FuzzArgs, campaign: &Campaign) -> String {
    let names: Vec<&str> = campaign.targets.iter().map(|t| t.arg.as_str()).collect();
    let s = &campaign.seeds;
    // Inclusive: `1..=300` is seeds 1 to 300.
    let range = match s.end {
        Some(end) => format!("{}..={}", s.start, end - 1),
        None => format!("{}..", s.start),
    };
    let runs = match campaign.total_runs() {
        Some(runs) => format!(" = {runs} runs"),
        None => String::new(),
    };
    let defects = &campaign.defects;
    format!(
        "seeds: {range} shard {}/{}{}{} on {} scenarios ({}){runs}, defects: {}, jobs: {}",
        s.shard_k,
        s.shard_n,
        args.time.map(|t| format!(", time budget {} s", t.as_secs())).unwrap_or_default(),
        if args.guided { ", guided" } else { "" },
        names.len(),
        names.join(", "),
        if defects.is_empty() { "none".to_string() } else { defects.join(", ") },
        campaign.jobs
    )
}

/// What the campaign shows while it runs: failures as they come (saved when
/// asked), and the progress bar.
struct Reporter<'a> {
    bar: Option<indicatif::ProgressBar>,
    json: bool,
    saver: Option<Saver>,
    save_error: Option<String>,
    /// Failures found after saving failed (their replay lines).
    unsaved: Vec<String>,
    stop: &'a AtomicBool,
    started: Instant,
    deadline: Option<Instant>,
    /// When the last progress line was printed (no bar: a log).
    last_line: Instant,
}

/// Off a terminal (a CI log), a progress line this often: a long shard is
/// never silent for longer. Wall-clock time decides only what is printed,
/// never what runs.
const PROGRESS_LINE_EVERY: Duration = Duration::from_secs(30);

impl Reporter<'_> {
    /// A line for whoever watches: on the bar, or on stdout, or (under
    /// `--json`, whose stdout is the summary alone) on stderr.
    fn line(&self, line: String, stdout: bool) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None if stdout && !self.json => println!("{line}"),
            None => eprintln!("{line}"),
        }
    }

    /// Without a bar, a line every `PROGRESS_LINE_EVERY`: runs done (of
    /// how many), failures, rate, time.
    fn progress_line(&mut self, p: &Progress<'_>) {
        if self.bar.is_some() || self.last_line.elapsed() < PROGRESS_LINE_EVERY {
            return;
        }
        self.last_line = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
        let of = p.total.map(|t| format!(" of {t}")).unwrap_or_default();
        eprintln!(
            "progress: {}{of} runs, {} failures, {:.0} runs/s, {:.0} s",
            p.done,
            p.failures,
            p.done as f64 / elapsed,
            elapsed
        );
    }

    fn progress(&mut self, p: Progress<'_>) {
        if let Some(f) = fuzz::failure_of(p.spec, p.last) {
            self.line(f.line(), true);
            if self.save_error.is_some() {
                // The disk is full or gone: no more tries, but the failure
                // is kept in the summary and named as unsaved.
                self.unsaved.push(f.line());
            } else if let Some(saver) = self.saver.as_mut() {
                match saver.offer(&f, p.spec) {
                    Ok(Some(path)) => self.line(fuzz::saved_line(&path), false),
                    Ok(None) => {}
                    Err(e) => {
                        self.save_error = Some(e);
                        self.unsaved.push(f.line());
                        self.stop.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        self.progress_line(&p);
        if let Some(bar) = &self.bar {
            bar.set_position(p.done);
            let rate = p.done as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
            let left = match self.deadline {
                Some(deadline) => format!(", {} s left", deadline.saturating_duration_since(Instant::now()).as_secs()),
                None => String::new(),
            };
            bar.set_message(format!("{rate:.0} runs/s, {} failures{left}", p.failures));
        }
    }

    /// The end of the campaign: the bar cleared, the coverage table, the
    /// summary (text or JSON) and what was saved.
    fn finish(&self, summary: &Summary) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        print_coverage(summary);
        if self.json {
            println!("{}", serde_json::to_string(summary).expect("summary serializes"));
        } else {
            print_summary(summary);
            if let Some(saver) = &self.saver {
                println!("saved {} new corpus entries in {}", saver.saved.len(), saver.dir.display());
            }
        }
    }
}

/// 0: every run passed and every required coverage point was reached;
/// 1: a run failed; 3: no run failed, but a scenario never reached a
/// coverage point it requires.
pub fn exit_code(summary: &Summary) -> i32 {
    if !summary.failures.is_empty() {
        1
    } else if !summary.coverage_missing.is_empty() {
        3
    } else {
        0
    }
}

/// The coverage table, on stderr: every point, the runs that reached it and
/// the first seed that did; then what was never reached, and what a
/// scenario requires but did not get.
pub fn print_coverage(s: &Summary) {
    let applicable = s.coverage.len() - s.coverage_not_applicable.len();
    eprintln!("coverage ({} of {applicable} points reached):", applicable - s.never_reached.len());
    eprintln!("  {:<36} {:>8} {:>12}", "point", "runs", "first seed");
    for (point, runs) in &s.coverage {
        if s.coverage_not_applicable.contains(point) {
            eprintln!("  {point:<36} {:>8} {:>12}", "n/a", "-");
            continue;
        }
        let first = s.coverage_first_seed.get(point).map_or("-".to_string(), |seed| seed.to_string());
        eprintln!("  {point:<36} {runs:>8} {first:>12}");
    }
    if !s.never_reached.is_empty() {
        eprintln!("never reached: {}", s.never_reached.join(" "));
    }
    for (scenario, missing) in &s.coverage_missing {
        eprintln!("COVERAGE NOT REACHED: {scenario} requires {} (no run reached them)", missing.join(", "));
    }
    for (scenario, (runs, min_seeds)) in &s.coverage_not_judged {
        eprintln!("required coverage not judged for {scenario}: {runs} runs, fewer than its min_seeds ({min_seeds})");
    }
}

fn progress_bar(campaign: &Campaign, json: bool) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = match campaign.total_runs() {
        Some(total) => indicatif::ProgressBar::new(total).with_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs, {msg}, eta {eta}")
                .expect("template parses")
                .progress_chars("=> "),
        ),
        None => indicatif::ProgressBar::new_spinner().with_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} {spinner} {pos} runs, {msg}")
                .expect("template parses"),
        ),
    };
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_message("starting");
    Some(bar)
}

pub fn print_summary(s: &Summary) {
    println!(
        "runs: {}  failures: {}  events: {}  sim: {:.0} s  wall: {:.1} s  ({:.1} runs/s, {:.0} events/s)  peak RSS: {:.0} MiB",
        s.seeds,
        s.failures.len(),
        s.events,
        s.sim_seconds,
        s.wall_seconds,
        s.seeds_per_second,
        s.events_per_second,
        s.peak_rss_mib
    );
    let faults: Vec<String> = s.fault_counts.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("fault injections: {}", faults.join(" "));
    let checks: Vec<String> = s.checks.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("checks: {}", checks.join(" "));
    print_wasted(s);
    println!("trace digest: {} (same campaign, same runs: same digest)", s.trace_digest);
    if !s.not_applicable.is_empty() {
        println!("not applicable (the engine cannot do what they judge): {}", s.not_applicable.join(" "));
    }
    if !s.never_evaluated.is_empty() {
        println!("never evaluated (no run gave them anything to judge): {}", s.never_evaluated.join(" "));
    }
    print_failure_kinds(&s.failures);
}

/// Work lost over the campaign: with a reason the harness injected (the
/// checkers' excused losses) and without one (their violations).
fn print_wasted(s: &Summary) {
    let lost = |name: &str| s.failures.iter().filter(|f| f.invariant == name).count();
    let parts: Vec<String> =
        [("outcome-kept", "executions whose outcome was lost"), ("callback-kept", "callbacks lost")]
            .iter()
            .filter(|(name, _)| s.checks.contains_key(*name))
            .map(|(name, what)| {
                let with = s.excused.get(*name).copied().unwrap_or(0);
                format!("{what}: {with} with a reason, {} runs without ({name})", lost(name))
            })
            .collect();
    if !parts.is_empty() {
        println!("wasted work: {}", parts.join("; "));
    }
}

/// The failures of the summary, one line per kind (scenario and invariant):
/// how many runs and the first seed's replay command. Each failure already
/// had its own `FAIL` line when it was found.
fn print_failure_kinds(failures: &[crate::fuzz::Failure]) {
    let mut kinds: std::collections::BTreeMap<(&str, &str), (usize, &crate::fuzz::Failure)> = Default::default();
    for f in failures {
        let kind = kinds.entry((f.scenario.as_str(), f.invariant.as_str())).or_insert((0, f));
        kind.0 += 1;
        if f.seed < kind.1.seed {
            kind.1 = f;
        }
    }
    for ((scenario, invariant), (runs, first)) in kinds {
        println!(
            "failed: {scenario} [{invariant}] in {runs} run{}; first seed {}: {}",
            if runs == 1 { "" } else { "s" },
            first.seed,
            first.replay
        );
    }
}
