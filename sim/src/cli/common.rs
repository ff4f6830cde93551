//! Flags shared by several verbs.

use clap::Args;
use leasesim::defects::{Defect, Defects};

#[derive(Args, Debug, Clone)]
pub struct DefectArgs {
    /// Turn on a defect switch that re-creates a real bug (repeatable; see
    /// `cargo sim list`). Example: --defect unfenced-completion
    #[arg(long = "defect", value_name = "NAME", value_parser = parse_defect)]
    pub defects: Vec<Defect>,
}

impl DefectArgs {
    pub fn set(&self) -> Defects {
        Defects(self.defects.iter().copied().collect())
    }
}

pub fn parse_defect(name: &str) -> Result<Defect, String> {
    Defect::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Defect::ALL.iter().map(|d| d.name()).collect();
        format!("unknown defect '{name}' (known: {})", known.join(", "))
    })
}
