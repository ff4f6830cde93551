//! The values a key can hold.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A key's value. Collections are never empty: Redis deletes a key whose
/// list, set, sorted set or hash loses its last element.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    List(VecDeque<Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    ZSet(ZSet),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

impl Value {
    /// The name TYPE answers with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Hash(_) => "hash",
        }
    }

    /// An empty collection; such a value must not stay in the keyspace.
    pub(crate) fn is_empty_collection(&self) -> bool {
        match self {
            Value::String(_) => false,
            Value::List(l) => l.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Hash(h) => h.is_empty(),
        }
    }
}

/// A score as the skiplist orders it: by `<` on doubles, so -0 and 0 are
/// equal (members then break the tie). Scores are never NaN.
#[derive(Clone, Copy, Debug)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Score) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Score) -> Ordering {
        self.0.partial_cmp(&other.0).expect("sorted-set scores are never NaN")
    }
}

/// A sorted set: members with scores, ordered by (score, member bytes) as
/// Redis orders them.
#[derive(Clone, Debug, Default)]
pub struct ZSet {
    scores: BTreeMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl PartialEq for ZSet {
    fn eq(&self, other: &ZSet) -> bool {
        // Compare bit patterns, so -0 and 0 differ as they do in replies.
        self.scores.len() == other.scores.len()
            && self
                .scores
                .iter()
                .zip(&other.scores)
                .all(|((m1, s1), (m2, s2))| m1 == m2 && s1.to_bits() == s2.to_bits())
    }
}

impl ZSet {
    pub fn new() -> ZSet {
        ZSet::default()
    }

    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets `member`'s score, returning the previous one. A score of -0 is
    /// stored as 0, as Redis's listpack encoding (that of small sorted sets)
    /// stores it.
    pub fn insert(&mut self, member: Vec<u8>, score: f64) -> Option<f64> {
        assert!(!score.is_nan(), "a NaN score must be refused before it reaches the set");
        let score = if score == 0.0 { 0.0 } else { score };
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            self.order.remove(&(Score(old), member.clone()));
        }
        self.order.insert((Score(score), member));
        debug_assert_eq!(self.order.len(), self.scores.len());
        old
    }

    /// Removes `member`, returning whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => {
                let removed = self.order.remove(&(Score(score), member.to_vec()));
                assert!(removed, "score index out of step with members");
                true
            }
            None => false,
        }
    }

    /// Members and scores, lowest score first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        self.order.iter().map(|(score, member)| (member.as_slice(), score.0))
    }

    /// The 0-based position of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.order.range(..(Score(score), member.to_vec())).count())
    }
}

impl FromIterator<(Vec<u8>, f64)> for ZSet {
    fn from_iter<I: IntoIterator<Item = (Vec<u8>, f64)>>(items: I) -> ZSet {
        let mut z = ZSet::new();
        for (member, score) in items {
            z.insert(member, score);
        }
        z
    }
}
