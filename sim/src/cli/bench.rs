//! `leasesim bench`: throughput and time-to-find, measured in one run.

use super::common::{jobs, targets};
use crate::bench;
use clap::Args;
use leasesim::defects::Defect;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: one mode (each flag below names the modes it is for).
    ///
    /// `throughput`: runs/s, simulated seconds/s, events/s and the cost per
    /// event, at 1 job and at --jobs.
    ///
    /// `find`: seeds needed to find each defect of the built-in engine.
    ///
    /// `coverage`: runs needed to first reach the rarest coverage points,
    /// plain against guided.
    ///
    /// `suite`: speed, phases, memory, scaling and time to find, as tables
    /// and a JSON file.
    ///
    /// `compare`: this build against --baseline, side by side.
    ///
    /// `judge`: what each checker and the coverage points cost per run, over
    /// the same histories.
    ///
    /// `false-alarms`: the correct engine over a fresh random range of seeds
    /// of every scenario of the built-in engine: runs, failures and the 95%
    /// bound they give (the range is printed first, so it replays).
    ///
    /// Example: bench suite
    #[arg(value_parser = ["throughput", "find", "coverage", "suite", "compare", "judge", "false-alarms"])]
    pub what: String,
    /// Throughput, compare and judge: the scenario (a built-in name or a TOML
    /// path), or for throughput and compare a group, each seed running every
    /// scenario of it: `all` (every scenario of the built-in engine),
    /// `graphile-all` (every graphile-worker scenario), `apalis-all` (every
    /// apalis scenario); see `cargo sim list`. Judge takes one scenario.
    /// Example: --scenario graphile-all
    #[arg(long, default_value = "swarm")]
    pub scenario: String,
    /// Throughput, compare and suite: seeds per repeat, each run once per
    /// scenario (default 400; compare 300; suite 100); judge: seeds profiled
    /// (default 20); false-alarms: seeds of the fresh range (default 2000).
    /// Example: --seeds 400
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Throughput, compare, judge and suite: repeats, the median is reported
    /// (default 5; suite 3). Example: --repeats 5
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Find, coverage and suite: independent starting seeds per defect, or
    /// per point for coverage (default 20; suite 5). Example: --starts 20
    #[arg(long)]
    pub starts: Option<u64>,
    /// Find, coverage and suite: give up after this many seeds from one start
    /// (default 1000; suite 300). Example: --cap 1000
    #[arg(long)]
    pub cap: Option<u64>,
    /// Find: measure on this scenario instead of each defect's own (e.g.
    /// `swarm`). Example: --on swarm
    #[arg(long)]
    pub on: Option<String>,
    /// Find: also measure guided campaigns (`fuzz --guided`), side by side;
    /// false-alarms: run the range guided. Example: --guided
    #[arg(long)]
    pub guided: bool,
    /// Coverage: seeds of the plain reference campaign (each run once per
    /// scenario of the built-in engine) that ranks the points by how often it
    /// reached them. Example: --reference 500
    #[arg(long, default_value_t = 500)]
    pub reference: u64,
    /// Coverage: how many of the rarest points to measure. Example: --points 10
    #[arg(long, default_value_t = 10)]
    pub points: usize,
    /// Find: only these defects of the built-in engine (repeatable; default
    /// all; see `cargo sim list`). Example: --defect unfenced-completion
    // Its parser (a switch of a known engine) is set where the engines are
    // known (`cli::command`), by this id, `defects`.
    #[arg(long = "defect", value_name = "NAME")]
    pub defects: Vec<String>,
    /// False-alarms: start here instead of a fresh random start (to replay
    /// a measurement). Example: --seed-start 4153377261544070146
    #[arg(long)]
    pub seed_start: Option<u64>,
    /// False-alarms: failures are saved here as corpus entries (never
    /// overwritten; default target/leasesim-failures). Example: --save /tmp/false-alarms
    #[arg(long, value_name = "DIR")]
    pub save: Option<std::path::PathBuf>,
    /// Every mode but judge: runs at once (default: one per core);
    /// throughput and compare measure at 1 job and at this many.
    /// Example: --jobs 2
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Throughput, find, coverage, judge and false-alarms: print JSON lines
    /// instead of a table (suite writes its JSON to --out). Example: --json
    #[arg(long)]
    pub json: bool,
    /// Compare: another build of the CLI (e.g. a release build of an older
    /// commit), run alternately with this one on the same campaign
    /// (`--scenario`, `--seeds` default 300, `--repeats` default 5, at 1 job
    /// and at `--jobs`). Example: --baseline /tmp/leasesim-3b4af0f
    #[arg(long, value_name = "PATH")]
    pub baseline: Option<std::path::PathBuf>,
    /// Compare: the scenario the baseline runs (default: `--scenario`), when
    /// this build's is the same world with a field the old build does not
    /// know. Example: --baseline-scenario /tmp/swarm-3b4af0f.toml
    #[arg(long, value_name = "SCENARIO")]
    pub baseline_scenario: Option<String>,
    /// Suite and false-alarms: where to write the JSON (false-alarms
    /// appends one line per measurement, so chunks of a long campaign add
    /// up; default target/bench-false-alarms.jsonl). Example: --out target/bench-suite.json
    #[arg(long, default_value = "target/bench-suite.json")]
    pub out: std::path::PathBuf,
    /// Suite: seeds of the memory campaign (swarm); the early peak is read
    /// after --rss-early-seeds. Example: --rss-seeds 10000
    #[arg(long, default_value_t = 10_000)]
    pub rss_seeds: u64,
    /// Suite: the early memory milestone, in seeds of the memory campaign.
    /// Example: --rss-early-seeds 1000
    #[arg(long, default_value_t = 1_000)]
    pub rss_early_seeds: u64,
}

pub fn run(args: BenchArgs, e: &crate::Engines) -> Result<i32, String> {
    let jobs = jobs(args.jobs)?;
    let counts = [("--seeds", args.seeds), ("--starts", args.starts), ("--cap", args.cap)];
    if let Some((flag, _)) = counts.iter().find(|(_, n)| *n == Some(0)) {
        return Err(format!("{flag}: must be at least 1"));
    }
    if args.repeats == Some(0) {
        return Err("--repeats: must be at least 1".into());
    }
    if args.baseline_scenario.is_some() && args.what != "compare" {
        return Err("--baseline-scenario: only bench compare runs a baseline".into());
    }
    if args.seed_start.is_some() && args.what != "false-alarms" {
        return Err("--seed-start: only bench false-alarms takes a seed start".into());
    }
    if args.save.is_some() && args.what != "false-alarms" {
        return Err("--save: only bench false-alarms saves failures".into());
    }
    if let Some(on) = &args.on {
        targets(on, e).map_err(|e| format!("--on: {e}"))?;
    }
    match args.what.as_str() {
        "suite" => suite(&args, jobs, e),
        "throughput" => throughput(&args, jobs, e),
        "coverage" => coverage(&args, jobs, e),
        "judge" => judge(&args, e),
        "false-alarms" => false_alarms(&args, jobs),
        "compare" => {
            let baseline = args.baseline.as_deref().ok_or("--baseline: compare needs the other build's executable")?;
            let job_counts = if jobs == 1 { vec![1] } else { vec![1, jobs] };
            let (seeds, repeats) = (args.seeds.unwrap_or(300), args.repeats.unwrap_or(5));
            let scenarios = (args.scenario.as_str(), args.baseline_scenario.as_deref().unwrap_or(&args.scenario));
            super::bench_compare::run(baseline, scenarios, seeds, repeats, &job_counts)
        }
        _ => find(&args, jobs, e),
    }
}

/// The correct engine over a fresh range: one JSON line appended to
/// `--out`, a table (or the line) on stdout; exit 1 if anything failed.
fn false_alarms(args: &BenchArgs, jobs: usize) -> Result<i32, String> {
    use super::bench_false_alarms::{fresh_start, measure};
    let seeds = args.seeds.unwrap_or(2_000);
    let start = match args.seed_start {
        Some(s) => s,
        None => fresh_start()?,
    };
    start.checked_add(seeds - 1).ok_or("--seeds: the range runs past the last seed")?;
    let out = if args.out == std::path::Path::new("target/bench-suite.json") {
        std::path::PathBuf::from("target/bench-false-alarms.jsonl")
    } else {
        args.out.clone()
    };
    let mode = if args.guided { " --guided" } else { "" };
    // First, so an interrupted measurement still replays.
    eprintln!("fresh range: seeds {start}..={} of every scenario of the built-in engine{mode}", start + (seeds - 1));
    let save = args.save.clone().unwrap_or_else(|| std::path::PathBuf::from(crate::corpus::FAILURES_DIR));
    let m = measure(start, seeds, args.guided, jobs, &save)?;
    let line = serde_json::to_string(&m).expect("serializes");
    append_line(&out, &line)?;
    if args.json {
        println!("{line}");
    } else {
        println!(
            "{} runs, {} failures ({:.1} s); 95% upper bound: {:.2} per million runs",
            m.runs,
            m.failures.len(),
            m.wall_seconds,
            m.per_million_95
        );
        for f in &m.failures {
            println!("  FAIL {} seed {}: [{}] {}", f["scenario"], f["seed"], f["invariant"], f["message"]);
            println!("    replay: {}", f["replay"].as_str().unwrap_or("-"));
        }
        println!("replay this measurement: {}\nappended to {}", m.replay, out.display());
    }
    Ok(if m.failures.is_empty() { 0 } else { 1 })
}

/// Appends one line to `path` (created if missing; never truncated).
fn append_line(path: &std::path::Path, line: &str) -> Result<(), String> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("--out {}: cannot create: {e}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("--out {}: cannot open: {e}", path.display()))?;
    writeln!(f, "{line}").and_then(|_| f.sync_all()).map_err(|e| format!("--out {}: cannot write: {e}", path.display()))
}

/// Runs/s at 1 job and at `jobs` jobs, of one scenario or of a whole group
/// (`all`, `graphile-all`, `apalis-all`: every scenario runs each seed).
fn throughput(args: &BenchArgs, jobs: usize, e: &crate::Engines) -> Result<i32, String> {
    let (seeds, repeats) = (args.seeds.unwrap_or(400), args.repeats.unwrap_or(5));
    let targets = targets(&args.scenario, e)?;
    let one = bench::throughput(&args.scenario, &targets, seeds, repeats, 1);
    let many = bench::throughput(&args.scenario, &targets, seeds, repeats, jobs);
    if args.json {
        println!("{}", serde_json::to_string(&one).expect("serializes"));
        println!("{}", serde_json::to_string(&many).expect("serializes"));
        return Ok(0);
    }
    println!("{}: {} ({} runs of each repeat)", args.scenario, one.scenarios.join(", "), seeds * targets.len() as u64);
    println!("| jobs | median runs/s | simulated s per s | events/s | events per run | us per event | runs/s of each repeat |");
    println!("|---|---|---|---|---|---|---|");
    for t in [&one, &many] {
        let runs: Vec<String> = t.seeds_per_second.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.2} | {} |",
            t.jobs,
            t.median_seeds_per_second,
            t.median_sim_seconds_per_wall_second,
            t.median_events_per_second,
            t.events_per_run,
            t.median_us_per_event,
            runs.join(", ")
        );
    }
    println!("speed-up {} jobs / 1 job: {:.2}x", jobs, many.median_seeds_per_second / one.median_seeds_per_second);
    Ok(0)
}

/// What each part of judgement costs per seed (`--seeds` default 20,
/// `--repeats` default 5), costliest first.
fn judge(args: &BenchArgs, e: &crate::Engines) -> Result<i32, String> {
    let (seeds, repeats) = (args.seeds.unwrap_or(20), args.repeats.unwrap_or(5));
    let mut targets = targets(&args.scenario, e)?;
    if targets.len() != 1 {
        return Err(format!("--scenario: judge profiles one scenario, not '{}'", args.scenario));
    }
    let target = targets.remove(0);
    let p = crate::bench_judge::profile(&target, seeds, repeats);
    if args.json {
        println!("{}", serde_json::to_string(&p).expect("serializes"));
        return Ok(0);
    }
    println!(
        "{}: {} seeds, {:.0} records per seed; judgement {:.0} us per seed, of which the view alone {:.0} us ({:.1}%)",
        p.scenario,
        p.seeds,
        p.records_per_seed,
        p.whole_us_per_seed,
        p.view_us_per_seed,
        100.0 * p.view_us_per_seed / p.whole_us_per_seed.max(f64::MIN_POSITIVE)
    );
    println!("| part | us per seed | share of judgement |");
    println!("|---|---|---|");
    for c in &p.parts {
        println!("| {} | {:.0} | {:.1}% |", c.part, c.us_per_seed, 100.0 * c.share);
    }
    Ok(0)
}

/// Seeds needed to find each defect, as a table (or JSON lines).
fn find(args: &BenchArgs, jobs: usize, e: &crate::Engines) -> Result<i32, String> {
    let (starts, cap) = find_sizes(args);
    let defects: Vec<Defect> = if args.defects.is_empty() {
        Defect::ALL.to_vec()
    } else {
        let built_in = |name: &String| {
            Defect::from_name(name)
                .ok_or_else(|| format!("--defect {name}: bench find measures the built-in engine's defects"))
        };
        args.defects.iter().map(built_in).collect::<Result<_, _>>()?
    };
    let modes: &[bench::Mode] =
        if args.guided { &[bench::Mode::Plain, bench::Mode::Guided] } else { &[bench::Mode::Plain] };
    // Every defect's scenario, checked before the table starts: bad input is
    // one line on stderr, not a table cut short.
    let mut measured = Vec::new();
    for defect in defects {
        let scenario = args.on.clone().unwrap_or_else(|| bench::home_scenario(defect).to_string());
        let target = targets(&scenario, e)?.remove(0);
        super::common::check_defects(std::slice::from_ref(&target), &[defect.name().to_string()])?;
        measured.push((defect, target));
    }
    if !args.json {
        println!("| defect | scenario | invariant | mode | found | median seeds to find | min..=max |");
        println!("|---|---|---|---|---|---|---|");
    }
    for (defect, target) in measured {
        for &mode in modes {
            let r = bench::time_to_find(defect, &target, starts, cap, jobs, mode);
            if args.json {
                println!("{}", serde_json::to_string(&r).expect("serializes"));
                continue;
            }
            let found: Vec<u64> = r.seeds_needed.iter().flatten().copied().collect();
            let range = match (found.iter().min(), found.iter().max()) {
                (Some(lo), Some(hi)) => format!("{lo}..={hi}"),
                _ => "-".into(),
            };
            println!(
                "| {} | {} | {} | {} | {}/{} | {} | {} |",
                r.defect,
                r.scenario,
                r.invariant,
                r.mode,
                r.found,
                r.starts,
                show_median(r.median, cap),
                range
            );
        }
    }
    Ok(0)
}

/// `--starts` and `--cap` of `find` and `coverage`, defaulted.
fn find_sizes(args: &BenchArgs) -> (u64, u64) {
    (args.starts.unwrap_or(20), args.cap.unwrap_or(1000))
}

fn show_median(median: Option<u64>, cap: u64) -> String {
    match median {
        Some(m) if m != u64::MAX => m.to_string(),
        _ => format!("> {cap}"),
    }
}

/// Runs to first reach the rarest coverage points, plain against guided.
fn coverage(args: &BenchArgs, jobs: usize, e: &crate::Engines) -> Result<i32, String> {
    let (starts, cap) = find_sizes(args);
    let all = targets("all", e)?;
    let rarest = bench::rarest_points(&all, args.reference, jobs, args.points);
    let points: Vec<String> = rarest.iter().map(|(p, _)| p.clone()).collect();
    let plain = bench::time_to_cover(&all, &points, starts, cap, jobs, bench::Mode::Plain);
    let guided = bench::time_to_cover(&all, &points, starts, cap, jobs, bench::Mode::Guided);
    let runs = cap * all.len() as u64;
    if args.json {
        for r in plain.iter().chain(&guided) {
            println!("{}", serde_json::to_string(r).expect("serializes"));
        }
        return Ok(0);
    }
    println!(
        "| point | reached in the reference ({} runs) | median runs to first reach: plain | guided | plain / guided | runs reaching it (of {runs}): plain | guided |",
        args.reference * all.len() as u64
    );
    println!("|---|---|---|---|---|---|---|");
    for ((p, g), (_, count)) in plain.iter().zip(&guided).zip(&rarest) {
        let ratio = match (p.median, g.median) {
            (Some(a), Some(b)) if a != u64::MAX && b != u64::MAX => format!("{:.1}x", a as f64 / b as f64),
            (_, Some(b)) if b != u64::MAX => format!("> {:.1}x", runs as f64 / b as f64),
            _ => "-".into(),
        };
        println!(
            "| {} | {count} | {} | {} | {ratio} | {} | {} |",
            p.point,
            show_median(p.median, runs),
            show_median(g.median, runs),
            p.median_reaching,
            g.median_reaching
        );
    }
    Ok(0)
}

/// Every measurement in one run (`bench_suite`); `--seeds`, `--repeats`,
/// `--starts` and `--cap` size the throughput and time-to-find parts.
fn suite(args: &BenchArgs, jobs: usize, e: &crate::Engines) -> Result<i32, String> {
    if args.rss_early_seeds == 0 || args.rss_early_seeds > args.rss_seeds {
        return Err("--rss-early-seeds must be at least 1 and at most --rss-seeds".into());
    }
    // Refused before the suite's minutes of work, not after them.
    crate::export::check_writable_output(&args.out).map_err(|e| format!("--out: {e}"))?;
    let all = targets("all", e)?;
    let swarm = targets("swarm", e)?.remove(0);
    let mut config = crate::bench_suite::SuiteConfig::standard(jobs);
    config.seeds = args.seeds.unwrap_or(config.seeds);
    config.repeats = args.repeats.unwrap_or(config.repeats);
    config.find_starts = args.starts.unwrap_or(config.find_starts);
    config.find_cap = args.cap.unwrap_or(config.find_cap);
    config.rss_seeds = args.rss_seeds;
    config.rss_early_seeds = args.rss_early_seeds;
    super::bench_suite::run(&all, &swarm, &config, &args.out)
}
