//! The engine's tracing logs for one seed, filtered like `RUST_LOG`, each
//! line stamped with simulated time (the wall clock means nothing here).

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::EnvFilter;

/// Stamps log lines with the simulated time of the current madsim runtime.
struct SimTime;

impl FormatTime for SimTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        match madsim::time::TimeHandle::try_current() {
            Some(time) => {
                let ms = time.elapsed().as_millis();
                write!(w, "{:>7}.{:03}s", ms / 1000, ms % 1000)
            }
            None => write!(w, "      -.---s"),
        }
    }
}

/// Installs a subscriber for this thread (the seed's own thread) until the
/// guard drops. A filter that does not parse falls back to `info`.
pub fn install(filter: &str) -> tracing::subscriber::DefaultGuard {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(SimTime)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .finish();
    tracing::subscriber::set_default(subscriber)
}
