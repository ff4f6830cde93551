//! `leasesim shrink FILE`: a smaller failing case for a saved failure.

use crate::corpus::{self, Entry, FaultsMode};
use crate::faults::FaultPlan;
use crate::shrink::{Case, Shrinker, Size};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ShrinkArgs {
    /// The failing corpus entry. Example: corpus/b-machines-fenced-completion-unfenced-completion-seed10.toml
    pub file: PathBuf,
    /// Where to write the shrunk entry (default: next to FILE). Example: --out corpus/
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Give up after this many runs. Example: --budget 300
    #[arg(long, default_value_t = 600)]
    pub budget: usize,
}

fn show(s: Size) -> String {
    s.to_string()
}

/// Refuses, before any run, an `--out` that is not a folder taking files.
fn check_out(dir: &std::path::Path) -> Result<(), String> {
    if dir.as_os_str().is_empty() {
        return Err("--out: an empty path (name a folder, e.g. --out corpus/)".into());
    }
    if !dir.is_dir() {
        return Err(format!("--out: {} is not a folder (the shrunk entry gets a new name in it)", dir.display()));
    }
    let probe = dir.join(format!(".leasesim-probe-{}", std::process::id()));
    let created = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe);
    let _ = std::fs::remove_file(&probe);
    created.map(drop).map_err(|e| format!("--out: {}: cannot write there: {e}", dir.display()))
}

pub fn run(args: ShrinkArgs, engines: &crate::Engines) -> Result<i32, String> {
    if args.budget == 0 {
        return Err("--budget: must be at least 1 (the first run checks that the entry fails as saved)".into());
    }
    if let Some(dir) = &args.out {
        check_out(dir)?;
    }
    let entry = Entry::load(&args.file, engines)?;
    if entry.expect == "pass" {
        return Err(format!("{}: expect: a passing entry has nothing to shrink", args.file.display()));
    }
    let spec = entry.spec(&args.file, engines)?;
    let case = Case { scenario: (*spec.scenario).clone(), plan: spec.fault_plan() };
    let mut shrinker = Shrinker {
        seed: entry.seed,
        defects: spec.defects.clone(),
        invariant: entry.expect.clone(),
        budget: args.budget,
        runs: 0,
        progress: true,
    };
    println!("seed: {}", entry.seed);
    println!("shrinking {} (violates {})", args.file.display(), entry.expect);
    if !shrinker.fails(&case) {
        println!("the entry does not fail as saved: nothing to shrink");
        return Ok(1);
    }
    let before = case.size();
    println!("before: {}", show(before));
    let small = shrinker.shrink(case);
    let after = small.size();
    println!("after:  {}", show(after));
    let stopped = shrinker.runs >= shrinker.budget;
    if stopped {
        println!(
            "runs: {} (stopped at its budget: a smaller case may exist; --budget {} tries longer)",
            shrinker.runs,
            shrinker.budget * 2
        );
    } else {
        println!("runs: {} (nothing smaller fails the same way)", shrinker.runs);
    }
    // The comment quotes what the shrunk run reports, not the original's
    // message: the corpus test holds every quote to its run.
    let message = shrinker.message(&small).unwrap_or_else(|| format!("violates {}", entry.expect));
    let shrunk = Entry {
        comment: format!(
            "Shrunk from {} ({} -> {}) in {} runs{}. Found by `cargo sim shrink {}`: {message}",
            args.file.display(),
            show(before),
            show(after),
            shrinker.runs,
            if stopped { ", stopped at its budget" } else { "" },
            args.file.display(),
        ),
        scenario: entry.scenario.clone(),
        seed: entry.seed,
        defects: entry.defects.clone(),
        faults: FaultsMode::Explicit,
        expect: entry.expect.clone(),
        trace_hash: None,
        plan: FaultPlan { events: small.plan.events }.events,
        world: Some(small.scenario),
    };
    let dir = args.out.clone().unwrap_or_else(|| args.file.parent().map(PathBuf::from).unwrap_or_default());
    let stem = format!("{}-shrunk", args.file.file_stem().and_then(|s| s.to_str()).unwrap_or("entry"));
    let path = corpus::save_new(&dir, &stem, &shrunk)?;
    println!("wrote {}", path.display());
    println!("replay: cargo sim replay {}", path.display());
    Ok(0)
}
