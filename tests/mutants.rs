//! The mutation catalog (mutants/catalog.toml) stays true to the engine:
//! every entry's `find` text occurs exactly once in its file, so
//! `python3 mutants/run.py` patches what the entry says it patches.

use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutant {
    name: String,
    class: String,
    what: String,
    file: String,
    find: String,
    replace: String,
}

#[derive(Deserialize)]
struct Catalog {
    mutant: Vec<Mutant>,
}

#[test]
fn every_mutant_applies_exactly_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("mutants/catalog.toml")).expect("the catalog is readable");
    let catalog: Catalog = toml::from_str(&text).expect("the catalog parses");
    assert!(catalog.mutant.len() >= 30, "only {} mutants", catalog.mutant.len());
    let mut names = std::collections::BTreeSet::new();
    for m in &catalog.mutant {
        assert!(names.insert(&m.name), "{} listed twice", m.name);
        assert!(!m.class.is_empty() && !m.what.is_empty(), "{}: describe it", m.name);
        assert_ne!(m.find, m.replace, "{}: changes nothing", m.name);
        let source =
            std::fs::read_to_string(root.join(&m.file)).unwrap_or_else(|e| panic!("{}: {}: {e}", m.name, m.file));
        let n = source.matches(m.find.as_str()).count();
        assert_eq!(n, 1, "{}: `find` occurs {n} times in {} (must be once)", m.name, m.file);
    }
}
