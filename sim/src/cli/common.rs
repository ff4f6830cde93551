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

/// Pictures of one run: a Chrome trace and an SVG timeline.
#[derive(Args, Debug, Clone, Default)]
pub struct PictureArgs {
    /// Write the run in the Chrome trace event format (open it in Perfetto or
    /// chrome://tracing): a track per process, spans for leases, permits,
    /// executions, maintenance passes and outcome writes, instants for faults
    /// and violations. Example: --trace run.json
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<std::path::PathBuf>,
    /// Write a static SVG timeline: a lane per process, leases and permits as
    /// bars, faults, the heal and the violation marked. Example: --svg run.svg
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<std::path::PathBuf>,
}

impl PictureArgs {
    /// Writes the pictures that were asked for; returns what was written.
    pub fn write(
        &self,
        history: &[crate::history::Record],
        violations: &[crate::check::Violation],
        title: &str,
    ) -> Result<Vec<String>, String> {
        let mut written = Vec::new();
        if let Some(path) = &self.trace {
            crate::export::write_atomic(path, &crate::export::chrome_trace(history, violations))
                .map_err(|e| format!("--trace: {e}"))?;
            written.push(format!("trace: {} (open in https://ui.perfetto.dev)", path.display()));
        }
        if let Some(path) = &self.svg {
            crate::export::write_atomic(path, &crate::export::svg_timeline(history, violations, title))
                .map_err(|e| format!("--svg: {e}"))?;
            written.push(format!("timeline: {}", path.display()));
        }
        Ok(written)
    }
}
