//! `leasesim replay FILE`: replay one corpus entry exactly and say whether
//! it still does what it was saved for.

use super::common::{print_outcome, print_pictures, print_plan, run_and_show};
use crate::corpus::Entry;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The corpus entry (TOML). Example: corpus/b-machines-fenced-completion-unfenced-completion-seed12.toml
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
}

pub fn run(args: ReplayArgs) -> Result<i32, String> {
    let entry = Entry::load(&args.file)?;
    let mut spec = entry.spec(&args.file)?;
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
    let title = |o: &crate::outcome::Outcome| format!("{} seed {} ({})", o.scenario, o.seed, args.file.display());
    let (outcome, pictures) = match run_and_show(&spec, args.history.as_deref(), &args.pictures, title)? {
        Ok(shown) => shown,
        Err(e) => {
            let holds = e.kind() == entry.expect;
            println!("seed {} did not finish: {e}", entry.seed);
            println!("{}", if holds { "expectation holds" } else { "EXPECTATION FAILED" });
            return Ok(if holds { 0 } else { 1 });
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&outcome).expect("outcome serializes"));
    } else {
        print_outcome(&outcome);
        print_pictures(&outcome, &pictures);
    }
    match entry.verify(&outcome) {
        Ok(()) => {
            if !args.json {
                println!(
                    "expectation holds: {}",
                    if entry.expect == "pass" { "pass".to_string() } else { format!("violates {}", entry.expect) }
                );
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("EXPECTATION FAILED: {}: {e}", args.file.display());
            Ok(1)
        }
    }
}
