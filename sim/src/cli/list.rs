//! `leasesim list`: what there is to run, break, inject and check.

use crate::check::invariants;
use crate::faults::FaultKind;
use crate::scenario;
use clap::Args;
use serde_json::{json, Value};

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print one JSON object (scenarios, engines, fault kinds, invariants,
    /// coverage points) instead of text. Example: --json
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ListArgs, known: &crate::Engines) -> Result<i32, String> {
    if args.json {
        println!("{}", as_json(known));
        return Ok(0);
    }
    println!("scenarios:");
    for name in scenario::builtin_names() {
        let described = scenario::resolve(&name, known)
            .map(|l| format!("[{}] {}", l.scenario.engine.get().name(), l.scenario.description))
            .unwrap_or_else(|e| e);
        println!("  {name:<28} {described}");
    }
    groups(known);
    engines(known);
    println!("fault kinds:");
    for k in FaultKind::ALL {
        println!("  {:<28} {}", k.name(), k.description());
    }
    println!("invariants:");
    for (name, description) in invariants() {
        println!("  {name:<28} {description}");
    }
    println!("coverage points:");
    for p in crate::check::coverage::POINTS {
        println!("  {:<36} {}", p.name, p.about);
    }
    Ok(0)
}

/// The groups `fuzz --scenario` and `bench --scenario` take, each with
/// its scenarios (and their engines): each seed runs every one of them.
fn groups(known: &crate::Engines) {
    println!("scenario groups (for fuzz and bench --scenario; each seed runs once per scenario of the group):");
    for (group, names) in super::common::groups() {
        let mut engines: Vec<String> = names
            .iter()
            .filter_map(|name| scenario::resolve(name, known).ok())
            .map(|l| l.scenario.engine.get().name().to_string())
            .collect();
        engines.sort();
        engines.dedup();
        let what = match group.strip_suffix("all") {
            Some(prefix) if !prefix.is_empty() => format!("every scenario named {prefix}*"),
            _ => "every scenario of the built-in engine".to_string(),
        };
        println!("  {group:<28} [{}] {what}: {}", engines.join(", "), names.join(", "));
    }
}

/// Every known engine: what it is, what it can do (with its default
/// configuration), which invariants apply to it, and its defect switches.
fn engines(known: &crate::Engines) {
    println!("engines (a scenario's [engine] name):");
    for adapter in known.known() {
        println!("  {:<28} {}", adapter.name(), adapter.about());
        let Ok(engine) = adapter.configure(&toml::Table::new()) else { continue };
        let caps = engine.capabilities();
        let can: Vec<&str> = caps.named().into_iter().filter(|(_, on)| *on).map(|(name, _)| name).collect();
        let cannot: Vec<&str> = caps.named().into_iter().filter(|(_, on)| !*on).map(|(name, _)| name).collect();
        println!("    can (defaults): {}", can.join(" "));
        if !cannot.is_empty() {
            println!("    cannot: {}", cannot.join(" "));
        }
        let applies = crate::check::applicable(&caps);
        let not: Vec<&str> =
            invariants().into_iter().map(|(name, _)| name).filter(|name| !applies.contains(name)).collect();
        println!("    invariants that apply: {}", applies.join(" "));
        if !not.is_empty() {
            println!("    not applicable: {}", not.join(" "));
        }
        let switches = adapter.switches();
        if switches.is_empty() {
            println!("    defect switches: none");
        }
        for (name, about) in switches {
            println!("    --defect {name:<26} {about}");
        }
    }
}

/// What `list` prints, as one JSON object for scripts.
fn as_json(known: &crate::Engines) -> Value {
    let named = |pairs: Vec<(&str, &str)>| -> Vec<Value> {
        pairs.into_iter().map(|(name, about)| json!({ "name": name, "about": about })).collect()
    };
    let scenarios: Vec<Value> = scenario::builtin_names()
        .into_iter()
        .map(|name| match scenario::resolve(&name, known) {
            Ok(l) => json!({
                "name": name,
                "engine": l.scenario.engine.get().name(),
                "about": l.scenario.description,
            }),
            Err(e) => json!({ "name": name, "error": e }),
        })
        .collect();
    let engines: Vec<Value> = known
        .known()
        .iter()
        .map(|adapter| {
            let mut e = json!({ "name": adapter.name(), "about": adapter.about() });
            if let Ok(engine) = adapter.configure(&toml::Table::new()) {
                let caps = engine.capabilities();
                let on = |want: bool| -> Vec<&str> {
                    caps.named().into_iter().filter(|(_, v)| *v == want).map(|(n, _)| n).collect()
                };
                e["can"] = json!(on(true));
                e["cannot"] = json!(on(false));
                e["invariants"] = json!(crate::check::applicable(&caps));
            }
            e["defects"] = json!(named(adapter.switches()));
            e
        })
        .collect();
    let faults: Vec<(&str, &str)> = FaultKind::ALL.iter().map(|k| (k.name(), k.description())).collect();
    let points: Vec<(&str, &str)> = crate::check::coverage::POINTS.iter().map(|p| (p.name, p.about)).collect();
    json!({
        "scenarios": scenarios,
        "engines": engines,
        "fault_kinds": named(faults),
        "invariants": named(invariants()),
        "coverage_points": named(points),
    })
}
