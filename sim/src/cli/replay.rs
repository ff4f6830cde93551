//! `leasesim replay FILE`: replay one corpus entry exactly and say whether
//! it still does what it was saved for.

use super::common::{print_outcome, print_pictures, print_plan, run_and_show};
use crate::corpus::Entry;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The corpus entry (TOML). Example: corpus/b-machines-fenced-completion-unfenced-completion-seed10.toml
    pub file: PathBuf,
    /// Print the outcome as one JSON object instead of text. Example: --json
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pictures: super::common::PictureArgs,
    /// Also write the whole event history, one JSON record per line, to FILE.
    /// Example: --history run.jsonl
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// When a failure entry now passes (its bug fixed): save it again beside
    /// FILE as a regression, `expect = "pass"` with its trace hash pinned, in
    /// a new file (never overwriting). Example: --pin-pass
    #[arg(long)]
    pub pin_pass: bool,
}

/// Exit code of a replay whose run passes but no longer hashes as pinned.
pub const EXIT_TRACE_MOVED: i32 = 4;

/// What a replay found, against what the entry was saved for.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A failure entry that fails as saved: the bug is still there.
    StillFails,
    /// A failure entry whose run now fails another way.
    FailsDifferently(String),
    /// A failure entry whose run passes: fixed.
    NowPasses,
    /// A pass entry that passes (with its pinned hash, if any).
    Passes,
    /// A pass entry that now fails: a regression.
    Regressed(String),
    /// A pass entry that passes, hashing to something else.
    TraceMoved { pinned: String, now: String },
}

impl Verdict {
    fn of(entry: &Entry, failed: &[String], trace_hash: &str) -> Verdict {
        let failed_as_saved = failed.contains(&entry.expect);
        match (entry.expect == "pass", failed.is_empty()) {
            (false, true) => Verdict::NowPasses,
            (false, false) if failed_as_saved => Verdict::StillFails,
            (false, false) => Verdict::FailsDifferently(failed.join(", ")),
            (true, false) => Verdict::Regressed(failed.join(", ")),
            (true, true) => match &entry.trace_hash {
                Some(pinned) if pinned != trace_hash => {
                    Verdict::TraceMoved { pinned: pinned.clone(), now: trace_hash.to_string() }
                }
                _ => Verdict::Passes,
            },
        }
    }

    /// Its stable name, for JSON (`still-fails`, `fails-differently`,
    /// `now-passes`, `passes`, `regressed`, `trace-moved`).
    fn name(&self) -> &'static str {
        match self {
            Verdict::StillFails => "still-fails",
            Verdict::FailsDifferently(_) => "fails-differently",
            Verdict::NowPasses => "now-passes",
            Verdict::Passes => "passes",
            Verdict::Regressed(_) => "regressed",
            Verdict::TraceMoved { .. } => "trace-moved",
        }
    }

    /// 0: the run passes; 1: it fails; 4: it passes, off its pinned hash.
    fn exit_code(&self) -> i32 {
        match self {
            Verdict::NowPasses | Verdict::Passes => 0,
            Verdict::StillFails | Verdict::FailsDifferently(_) | Verdict::Regressed(_) => 1,
            Verdict::TraceMoved { .. } => EXIT_TRACE_MOVED,
        }
    }

    /// What it means, and what to do next.
    fn say(&self, entry: &Entry, file: &std::path::Path) -> String {
        let file = file.display();
        match self {
            Verdict::StillFails => format!(
                "still fails: violates {}, as saved. Fix the engine, then replay until it says \"now passes\" (exit 1 until then)",
                entry.expect
            ),
            Verdict::FailsDifferently(got) => format!(
                "fails differently: saved for {}, now {got}. The bug it pinned may be fixed and another one found: \
                 shrink this run again (cargo sim shrink {file})",
                entry.expect
            ),
            Verdict::NowPasses => format!(
                "now passes: {} is no longer violated. Keep it as a regression: cargo sim replay {file} --pin-pass \
                 (a new entry with expect = \"pass\" and its trace hash; nothing is overwritten)",
                entry.expect
            ),
            Verdict::Passes => "passes, as pinned".to_string(),
            Verdict::Regressed(got) => format!("REGRESSION: this entry passed when saved; now {got}"),
            Verdict::TraceMoved { pinned, now } => format!(
                "passes, but the trace moved: pinned {pinned}, now {now}. If a change of traces was meant, \
                 re-pin trace_hash and say so (docs/trace-changes.md); otherwise determinism is lost"
            ),
        }
    }
}

/// The entry replays the world pinned in it, not today's scenario of the
/// same name: said, so that a user who runs the seed with `cargo sim run`
/// knows why that run differs (a longer liveness phase, say).
fn drift_line(entry: &Entry, fields: &[String]) -> String {
    const SHOWN: usize = 6;
    let mut named = fields.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if fields.len() > SHOWN {
        named.push_str(&format!(" and {} more", fields.len() - SHOWN));
    }
    format!(
        "world: pinned as it was saved; today's {} differs in {named} (`cargo sim run --scenario {} --seed {}` runs today's)",
        entry.scenario, entry.scenario, entry.seed
    )
}

/// `--pin-pass`: the entry again, now a passing regression with its hash.
fn pin_pass(entry: &Entry, file: &std::path::Path, trace_hash: &str) -> Result<PathBuf, String> {
    let mut pinned = entry.clone();
    pinned.comment = format!(
        "pins the fix of what {} reproduced ({}): {}",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("an entry"),
        entry.expect,
        entry.comment.trim()
    );
    pinned.expect = "pass".to_string();
    pinned.trace_hash = Some(trace_hash.to_string());
    let dir = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    crate::corpus::save_new(dir, &crate::corpus::stem(&pinned), &pinned)
}

pub fn run(args: ReplayArgs, engines: &crate::Engines) -> Result<i32, String> {
    let entry = Entry::load(&args.file, engines)?;
    let mut spec = entry.spec(&args.file, engines)?;
    super::common::check_outputs(args.history.as_deref(), &args.pictures)?;
    spec.log_filter = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    if !args.json {
        println!("seed: {}", entry.seed);
        println!("entry: {} ({})", args.file.display(), entry.comment.trim());
        println!(
            "scenario: {}  defects: {}",
            entry.scenario,
            if entry.defects.is_empty() { "none".to_string() } else { spec.defects.join(", ") }
        );
        print_plan(&spec.fault_plan());
    }
    let drift = entry.pinned_world_drift(engines);
    if !drift.is_empty() && !args.json {
        println!("{}", drift_line(&entry, &drift));
    }
    let title = |o: &crate::outcome::Outcome| format!("{} seed {} ({})", o.scenario, o.seed, args.file.display());
    let (outcome, pictures) = match run_and_show(&spec, args.history.as_deref(), &args.pictures, title)? {
        Ok(shown) => shown,
        Err(e) => {
            println!("seed {} did not finish: {e}", entry.seed);
            let verdict = Verdict::of(&entry, &[e.kind().to_string()], "");
            println!("{}", verdict.say(&entry, &args.file));
            return Ok(verdict.exit_code());
        }
    };
    let mut failed: Vec<String> = outcome.violations.iter().map(|v| v.invariant.clone()).collect();
    failed.sort();
    failed.dedup();
    let verdict = Verdict::of(&entry, &failed, &outcome.trace_hash);
    let line = verdict.say(&entry, &args.file);
    if args.json {
        // The outcome, and what it means for the entry: a script reads the
        // verdict here rather than from the exit code alone.
        let mut json = serde_json::to_value(&outcome).expect("outcome serializes");
        json["verdict"] = serde_json::json!(verdict.name());
        json["verdict_says"] = serde_json::json!(line);
        json["exit_code"] = serde_json::json!(verdict.exit_code());
        json["pinned_world_differs_in"] = serde_json::json!(drift);
        println!("{json}");
        eprintln!("{line}");
    } else {
        print_outcome(&outcome);
        print_pictures(&outcome, &pictures);
        println!("{line}");
    }
    if args.pin_pass {
        if verdict != Verdict::NowPasses {
            eprintln!("--pin-pass: not pinned: only a failure entry that now passes is pinned as a pass");
            return Ok(verdict.exit_code().max(1));
        }
        let path = pin_pass(&entry, &args.file, &outcome.trace_hash)?;
        println!("pinned: {} (replay: cargo sim replay {})", path.display(), path.display());
    }
    Ok(verdict.exit_code())
}

#[cfg(test)]
mod tests {
    use super::Verdict;
    use crate::corpus::Entry;

    fn entry(expect: &str, hash: Option<&str>) -> Entry {
        let text = format!(
            "comment = \"c\"\nscenario = \"swarm\"\nseed = 1\nexpect = \"{expect}\"\n{}",
            hash.map(|h| format!("trace_hash = \"{h}\"\n")).unwrap_or_default()
        );
        toml::from_str(&text).expect("an entry")
    }

    #[test]
    fn every_verdict_and_its_exit_code() {
        let v = |e: &Entry, failed: &[&str], hash: &str| {
            let failed: Vec<String> = failed.iter().map(|s| s.to_string()).collect();
            let verdict = Verdict::of(e, &failed, hash);
            let code = verdict.exit_code();
            (verdict, code)
        };
        let fail = entry("fenced-completion", None);
        assert_eq!(v(&fail, &["fenced-completion", "store-reply"], "h"), (Verdict::StillFails, 1));
        assert_eq!(v(&fail, &["store-reply"], "h"), (Verdict::FailsDifferently("store-reply".into()), 1));
        assert_eq!(v(&fail, &[], "h"), (Verdict::NowPasses, 0));
        let pass = entry("pass", Some("aa"));
        assert_eq!(v(&pass, &[], "aa"), (Verdict::Passes, 0));
        assert_eq!(v(&pass, &["keepalive"], "aa"), (Verdict::Regressed("keepalive".into()), 1));
        assert_eq!(v(&pass, &[], "bb"), (Verdict::TraceMoved { pinned: "aa".into(), now: "bb".into() }, 4));
        assert_eq!(v(&entry("pass", None), &[], "bb"), (Verdict::Passes, 0));
        assert_eq!(v(&entry("hang", None), &["hang"], ""), (Verdict::StillFails, 1));
    }
}
