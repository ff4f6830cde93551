//! The corpus: saved runs that must keep reproducing what they reproduced.
//!
//! An entry is one TOML file: scenario, seed, defect switches, where the
//! fault plan comes from (drawn from the seed, none, or an explicit list),
//! the expected outcome (`pass`, or the invariant that must be violated), an
//! optional pinned trace hash and a comment saying why it exists. Entries are
//! written atomically and never overwritten.

use crate::check::invariants;
use crate::faults::{FaultEvent, FaultPlan};
use crate::outcome::Outcome;
use crate::runner::{PlanSource, RunSpec};
use crate::scenario;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where an entry's fault plan comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultsMode {
    /// Drawn from the seed, as `cargo sim run` does.
    #[default]
    Swarm,
    /// No faults.
    None,
    /// The `plan` list of the entry.
    Explicit,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Why this entry exists.
    pub comment: String,
    /// A built-in scenario name or a scenario file path.
    pub scenario: String,
    /// Any u64 (guided campaigns draw seeds over all of it). TOML integers
    /// stop at i64's range, so a seed above it is written as a string of
    /// digits; either form is read.
    #[serde(with = "seed_toml")]
    pub seed: u64,
    /// The engine's defect switches that were on (`cargo sim list`).
    #[serde(default)]
    pub defects: Vec<String>,
    #[serde(default)]
    pub faults: FaultsMode,
    /// `pass`, or the name of the invariant the run must violate (or
    /// `panic` / `hang` / `resource-limit` for a seed that does not finish).
    pub expect: String,
    /// Pinned hash of the event history; a mismatch fails the replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_hash: Option<String>,
    /// The explicit fault plan (`faults = "explicit"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<FaultEvent>,
    /// A whole world inline (a shrunk scenario); replaces `scenario`'s file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<scenario::Scenario>,
}

/// A u64 in TOML: an integer up to `i64::MAX`, a string of decimal digits
/// above it (`"18446744073709551615"`), so every seed round-trips.
mod seed_toml {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(*seed) {
            Ok(small) => s.serialize_i64(small),
            Err(_) => s.serialize_str(&seed.to_string()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(SeedVisitor)
    }

    struct SeedVisitor;

    impl Visitor<'_> for SeedVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(
                "a seed from 0 to 18446744073709551615 (an integer, or a string of digits above 9223372036854775807)",
            )
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            let digits = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| v.parse().ok()).flatten().ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }
}

/// What can be expected of a run.
pub fn expectations() -> Vec<&'static str> {
    let mut names = vec!["pass", "panic", "hang", "resource-limit"];
    names.extend(invariants().into_iter().map(|(name, _)| name));
    names
}

impl Entry {
    /// Reads an entry; its defects must be switches of one of `engines`.
    pub fn load(path: &Path, engines: &crate::Engines) -> Result<Entry, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        Entry::parse(&text, engines).map_err(|e| match looks_like_a_scenario(&text) {
            // A scenario where an entry belongs: say what to type instead.
            true => format!(
                "{}: a scenario, not a corpus entry: run a seed of it with `cargo sim run --scenario {} --seed N` \
                 (or a campaign with `cargo sim fuzz --scenario {} --seeds N`)",
                path.display(),
                path.display(),
                path.display()
            ),
            false => format!("{}: {e}", path.display()),
        })
    }

    pub fn parse(text: &str, engines: &crate::Engines) -> Result<Entry, String> {
        let mut entry: Entry = scenario::from_toml(text)?;
        if entry.scenario.is_empty() || entry.scenario.len() > 4096 {
            return Err("scenario: a built-in scenario's name or a scenario file's path (1 to 4096 bytes)".into());
        }
        if !expectations().contains(&entry.expect.as_str()) {
            return Err(format!("expect: unknown expectation '{}' (pass, panic, hang or an invariant)", entry.expect));
        }
        for (i, name) in entry.defects.iter().enumerate() {
            engines.known_defect(name).map_err(|e| format!("defects[{i}]: {e}"))?;
        }
        if entry.faults != FaultsMode::Explicit && !entry.plan.is_empty() {
            return Err("plan: only allowed with faults = \"explicit\"".into());
        }
        if let Some(world) = &mut entry.world {
            scenario::configure(world, engines).map_err(|e| format!("world.{e}"))?;
        }
        Ok(entry)
    }

    /// The run this entry describes. `path` is where the entry lives (for the
    /// replay command).
    pub fn spec(&self, path: &Path, engines: &crate::Engines) -> Result<RunSpec, String> {
        let loaded = match &self.world {
            Some(world) => {
                scenario::validate(world).map_err(|e| format!("{}: world.{e}", path.display()))?;
                scenario::Loaded { scenario: world.clone(), path: path.to_path_buf() }
            }
            None => {
                scenario::resolve(&self.scenario, engines).map_err(|e| format!("{}: scenario: {e}", path.display()))?
            }
        };
        let plan = match self.faults {
            FaultsMode::Swarm => PlanSource::Swarm,
            FaultsMode::None => PlanSource::None,
            FaultsMode::Explicit => {
                let plan = FaultPlan { events: self.plan.clone() };
                let s = &loaded.scenario;
                plan.validate(s.topology.workers, s.phases.fault_phase_ms)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                PlanSource::Explicit(plan)
            }
        };
        if let Err(e) = loaded.scenario.engine.get().with_switches(&self.defects) {
            return Err(format!("{}: defects: {e}", path.display()));
        }
        let mut spec = RunSpec::new(Arc::new(loaded.scenario), self.scenario.clone(), self.seed)
            .with_plan(plan)
            .with_defects(self.defects.iter());
        spec.replay_override = Some(format!("cargo sim replay {}", path.display()));
        Ok(spec)
    }

    /// The same entry, pinned against drift: its fault plan written out (the
    /// one `faults = "swarm"` draws today) and its world inline (the scenario
    /// as it is today), so that neither a change to the fault generator nor
    /// an edit of a built-in scenario changes what it replays.
    pub fn pinned(&self, path: &Path, engines: &crate::Engines) -> Result<Entry, String> {
        let spec = self.spec(path, engines)?;
        Ok(Entry {
            faults: FaultsMode::Explicit,
            plan: spec.fault_plan().events,
            world: Some((*spec.scenario).clone()),
            ..self.clone()
        })
    }

    /// The entry that replays the run `spec` exactly and expects `expect`,
    /// pinned from the start: its fault plan written out and its world
    /// inline, as [`Entry::pinned`] would make it. This is how every failure
    /// is saved (`fuzz --save`, the fuzz test, the Rust API).
    pub fn of_run(spec: &RunSpec, expect: &str, comment: String) -> Entry {
        Entry {
            comment,
            scenario: spec.scenario_arg.clone(),
            seed: spec.seed,
            defects: spec.defects.clone(),
            faults: FaultsMode::Explicit,
            expect: expect.to_string(),
            trace_hash: None,
            plan: spec.fault_plan().events,
            world: Some((*spec.scenario).clone()),
        }
    }

    /// Where this entry's pinned world differs from today's scenario of
    /// the same name: the fields (dotted paths), in order. Empty when the
    /// world is not pinned, or the name is no scenario today, or nothing
    /// differs. A pinned world replays as it was saved, so a user who runs
    /// the same seed with `cargo sim run` gets today's world instead.
    pub fn pinned_world_drift(&self, engines: &crate::Engines) -> Vec<String> {
        let Some(pinned) = &self.world else { return Vec::new() };
        let Ok(today) = scenario::resolve(&self.scenario, engines) else { return Vec::new() };
        let value = |s: &scenario::Scenario| serde_json::to_value(s).unwrap_or(serde_json::Value::Null);
        let mut fields = Vec::new();
        differing_fields("", &value(pinned), &value(&today.scenario), &mut fields);
        fields
    }

    /// The grouping key of a failure: the same bug found again has the same one.
    pub fn signature(&self) -> (String, String, Vec<String>) {
        (self.scenario.clone(), self.expect.clone(), self.defects.clone())
    }

    /// Does the outcome meet the expectation (and the pinned hash)?
    pub fn verify(&self, outcome: &Outcome) -> Result<(), String> {
        let violated: BTreeSet<&str> = outcome.violations.iter().map(|v| v.invariant.as_str()).collect();
        if self.expect == "pass" {
            if let Some(v) = outcome.violations.first() {
                return Err(format!("expected a pass, but {} was violated: {}", v.invariant, v.message));
            }
        } else if !violated.contains(self.expect.as_str()) {
            let got = if violated.is_empty() {
                "no violation".to_string()
            } else {
                violated.into_iter().collect::<Vec<_>>().join(", ")
            };
            return Err(format!("expected {} to be violated; the run no longer reproduces it ({got})", self.expect));
        }
        if let Some(pinned) = &self.trace_hash {
            if *pinned != outcome.trace_hash {
                return Err(format!(
                    "the pinned trace hash {pinned} no longer matches: the run now hashes to {} (update trace_hash if the change is intended)",
                    outcome.trace_hash
                ));
            }
        }
        Ok(())
    }

    /// The violation message a failure entry's comment quotes: what follows
    /// its last "`: " (how `fuzz --save` writes "Found by `COMMAND`:
    /// MESSAGE"). `None` for a pass entry or a comment that quotes nothing.
    pub fn quoted_violation(&self) -> Option<&str> {
        if self.expect == "pass" {
            return None;
        }
        self.comment.rsplit_once("`: ").map(|(_, quote)| quote.trim())
    }

    /// Does the comment still quote what the run reports? A comment is
    /// written from the run it was saved from; when the run moves (a trace
    /// change, a shrink), the quote must be regenerated, or the entry
    /// describes a moment that no longer happens.
    pub fn verify_comment(&self, outcome: &Outcome) -> Result<(), String> {
        let Some(quote) = self.quoted_violation() else { return Ok(()) };
        let now: Vec<&str> =
            outcome.violations.iter().filter(|v| v.invariant == self.expect).map(|v| v.message.as_str()).collect();
        if now.contains(&quote) {
            return Ok(());
        }
        Err(format!(
            "the comment quotes \"{quote}\" but the run now reports \"{}\" (regenerate the comment)",
            now.first().copied().unwrap_or("nothing")
        ))
    }

    /// The entry as TOML. Every field of an entry fits TOML (a seed above
    /// i64's range as a string); an error here names the field that does
    /// not, and the caller reports it rather than losing the run.
    pub fn to_toml(&self) -> Result<String, String> {
        toml::to_string(self).map_err(|e| format!("cannot write the entry as TOML: {e}"))
    }
}

/// Every `*.toml` entry in `dir`, sorted by path.
pub fn entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> =
        read.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    paths.sort();
    Ok(paths)
}

/// Writes `entry` as a new file in `dir` named after `stem`; never replaces
/// an existing file (a suffix -2, -3, ... is added instead). The content is
/// written to a temporary file first and linked into place, so a reader never
/// sees half an entry.
pub fn save_new(dir: &Path, stem: &str, entry: &Entry) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let text = entry.to_toml().map_err(|e| format!("{}: {e}", dir.join(format!("{stem}.toml")).display()))?;
    let tmp = dir.join(format!(".{stem}.{}.tmp", std::process::id()));
    if let Err(e) = crate::export::write_synced(&tmp, text.as_bytes()) {
        // A full disk leaves no partial temp file behind, and the error
        // names the entry, not a hidden temp file.
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: cannot write: {e}", dir.join(format!("{stem}.toml")).display()));
    }
    let mut result = Err(format!("{}: no free file name for {stem}", dir.display()));
    for n in 1..1000 {
        let name = if n == 1 { format!("{stem}.toml") } else { format!("{stem}-{n}.toml") };
        let path = dir.join(name);
        match std::fs::hard_link(&tmp, &path) {
            Ok(()) => {
                result = Ok(path);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                result = Err(format!("{}: cannot write: {e}", path.display()));
                break;
            }
        }
    }
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Saves `entry` as [`save_new`] does, unless `dir` already holds exactly
/// this entry under `stem` (`stem.toml`, `stem-2.toml`, ...): then it
/// answers that file. A test that saves its failures can run again and
/// again without piling up copies; nothing is ever overwritten.
pub fn save_once(dir: &Path, stem: &str, entry: &Entry) -> Result<PathBuf, String> {
    let text = entry.to_toml().map_err(|e| format!("{}: {e}", dir.join(format!("{stem}.toml")).display()))?;
    for n in 1..1000 {
        let name = if n == 1 { format!("{stem}.toml") } else { format!("{stem}-{n}.toml") };
        match std::fs::read_to_string(dir.join(&name)) {
            Ok(existing) if existing == text => return Ok(dir.join(name)),
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    save_new(dir, stem, entry)
}

/// Where failures are saved when no folder is named, relative to the
/// workspace: guided campaigns, the fuzz test and the Rust API save there.
pub const FAILURES_DIR: &str = "target/leasesim-failures";

/// [`FAILURES_DIR`] as a path that does not depend on the working directory
/// (`cargo test` runs each test in its package's folder): inside the target
/// folder of the running executable (the ancestor holding cargo's
/// `CACHEDIR.TAG`), else inside this workspace's `target/`.
pub fn failures_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let target = exe.as_deref().and_then(|exe| exe.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()));
    match target {
        Some(target) => target.join("leasesim-failures"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(FAILURES_DIR),
    }
}

/// Saves the failing run `spec` (it violated `expect`) as a pinned entry
/// ([`Entry::of_run`]) in `dir`, atomically; an identical entry already
/// there is reused ([`save_once`]), nothing is overwritten.
pub fn save_failure(dir: &Path, spec: &RunSpec, expect: &str, comment: String) -> Result<PathBuf, String> {
    let entry = Entry::of_run(spec, expect, comment);
    save_once(dir, &stem(&entry), &entry)
}

/// A file-name stem for an entry: scenario, expectation, defects, seed.
pub fn stem(entry: &Entry) -> String {
    let scenario = Path::new(&entry.scenario).file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
    let mut parts = vec![scenario, entry.expect.clone()];
    parts.extend(entry.defects.iter().cloned());
    parts.push(format!("seed{}", entry.seed));
    parts.join("-")
}

/// Whether `text` is a scenario file (its tables, and no `expect`) rather
/// than a corpus entry.
fn looks_like_a_scenario(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else { return false };
    !table.contains_key("expect") && ["topology", "workload", "phases"].iter().all(|key| table.contains_key(*key))
}

/// The dotted paths where `a` and `b` differ: objects field by field, any
/// other value (a list included) as a whole.
fn differing_fields(at: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                let (va, vb) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                differing_fields(&path, va, vb, out);
            }
        }
        _ if a != b => out.push(at.to_string()),
        _ => {}
    }
}
