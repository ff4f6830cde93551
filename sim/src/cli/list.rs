//! `leasesim list`: what there is to run, break, inject and check.

use crate::check::invariants;
use crate::faults::FaultKind;
use crate::scenario;
use leasesim::defects::Defect;

pub fn run() -> Result<i32, String> {
    println!("scenarios:");
    for name in scenario::builtin_names() {
        let description = scenario::resolve(&name).map(|l| l.scenario.description).unwrap_or_else(|e| e);
        println!("  {name:<28} {description}");
    }
    println!("defects (off by default; --defect NAME):");
    for d in Defect::ALL {
        println!("  {:<28} {} [{}]", d.name(), d.description(), d.source());
    }
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
