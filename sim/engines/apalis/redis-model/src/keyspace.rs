//! The keyspace: keys, their values and expiry times, on the caller's clock.
//!
//! Expiry is lazy, as in Redis: a key whose expiry time is at or before
//! `now_ms` is gone for every reader; a writer that meets it removes it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::reply::Reply;
use crate::value::{Value, ZSet};

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    expires_at_ms: Option<u64>,
}

impl Entry {
    fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms)
    }
}

/// A value type a command works on, so typed lookups can answer WRONGTYPE.
pub(crate) trait Kind: Sized {
    fn of(value: &Value) -> Option<&Self>;
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
    fn empty() -> Value;
}

macro_rules! kind {
    ($ty:ty, $variant:ident, $empty:expr) => {
        impl Kind for $ty {
            fn of(value: &Value) -> Option<&Self> {
                match value {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn of_mut(value: &mut Value) -> Option<&mut Self> {
                match value {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn empty() -> Value {
                Value::$variant($empty)
            }
        }
    };
}

kind!(Vec<u8>, String, Vec::new());
kind!(VecDeque<Vec<u8>>, List, VecDeque::new());
kind!(BTreeSet<Vec<u8>>, Set, BTreeSet::new());
kind!(ZSet, ZSet, ZSet::new());
kind!(BTreeMap<Vec<u8>, Vec<u8>>, Hash, BTreeMap::new());

/// The one database (db 0), plus what commands emitted on the side.
#[derive(Clone, Debug, Default)]
pub(crate) struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
    dirty: BTreeSet<Vec<u8>>,
    published: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Keyspace {
    /// The live value of `key`, without touching anything.
    pub(crate) fn peek(&self, now_ms: u64, key: &[u8]) -> Option<&Value> {
        self.entries.get(key).filter(|e| e.is_live(now_ms)).map(|e| &e.value)
    }

    /// Removes `key` if it has expired; commands call this before looking.
    fn reap(&mut self, now_ms: u64, key: &[u8]) {
        if self.entries.get(key).is_some_and(|e| !e.is_live(now_ms)) {
            self.entries.remove(key);
            self.dirty.insert(key.to_vec());
        }
    }

    pub(crate) fn lookup(&mut self, now_ms: u64, key: &[u8]) -> Option<&Value> {
        self.reap(now_ms, key);
        self.entries.get(key).map(|e| &e.value)
    }

    pub(crate) fn exists(&mut self, now_ms: u64, key: &[u8]) -> bool {
        self.lookup(now_ms, key).is_some()
    }

    /// The value of `key` as a `T`: `Ok(None)` when there is no key,
    /// `Err(WRONGTYPE)` when it holds another type.
    pub(crate) fn read<T: Kind>(&mut self, now_ms: u64, key: &[u8]) -> Result<Option<&T>, Reply> {
        match self.lookup(now_ms, key) {
            None => Ok(None),
            Some(v) => T::of(v).map(Some).ok_or_else(Reply::wrongtype),
        }
    }

    /// Like `read`, for changing the value in place. The caller must call
    /// `wrote` afterwards if it changed anything.
    pub(crate) fn write<T: Kind>(&mut self, now_ms: u64, key: &[u8]) -> Result<Option<&mut T>, Reply> {
        self.reap(now_ms, key);
        match self.entries.get_mut(key) {
            None => Ok(None),
            Some(e) => T::of_mut(&mut e.value).map(Some).ok_or_else(Reply::wrongtype),
        }
    }

    /// Like `write`, creating an empty `T` (with no expiry) when the key is
    /// missing. The caller must call `wrote` afterwards, which deletes the key
    /// again if it is still empty.
    pub(crate) fn write_or_create<T: Kind>(&mut self, now_ms: u64, key: &[u8]) -> Result<&mut T, Reply> {
        self.reap(now_ms, key);
        let entry =
            self.entries.entry(key.to_vec()).or_insert_with(|| Entry { value: T::empty(), expires_at_ms: None });
        T::of_mut(&mut entry.value).ok_or_else(Reply::wrongtype)
    }

    /// Records that a command changed `key`'s value, and deletes the key if
    /// that left its collection empty.
    pub(crate) fn wrote(&mut self, key: &[u8]) {
        if self.entries.get(key).is_some_and(|e| e.value.is_empty_collection()) {
            self.entries.remove(key);
        }
        self.dirty.insert(key.to_vec());
    }

    /// Sets `key` to `value`, dropping any expiry unless `keep_ttl`.
    pub(crate) fn set(&mut self, now_ms: u64, key: &[u8], value: Value, keep_ttl: bool) {
        assert!(!value.is_empty_collection(), "empty collections are never stored");
        self.reap(now_ms, key);
        let expires_at_ms = if keep_ttl { self.entries.get(key).and_then(|e| e.expires_at_ms) } else { None };
        self.entries.insert(key.to_vec(), Entry { value, expires_at_ms });
        self.dirty.insert(key.to_vec());
    }

    pub(crate) fn remove(&mut self, now_ms: u64, key: &[u8]) -> bool {
        self.reap(now_ms, key);
        let removed = self.entries.remove(key).is_some();
        if removed {
            self.dirty.insert(key.to_vec());
        }
        removed
    }

    pub(crate) fn expiry_ms(&mut self, now_ms: u64, key: &[u8]) -> Option<u64> {
        self.reap(now_ms, key);
        self.entries.get(key).and_then(|e| e.expires_at_ms)
    }

    /// Sets or clears the expiry of an existing key; returns whether the key
    /// exists.
    pub(crate) fn set_expiry(&mut self, now_ms: u64, key: &[u8], at_ms: Option<u64>) -> bool {
        self.reap(now_ms, key);
        match self.entries.get_mut(key) {
            None => false,
            Some(e) => {
                if e.expires_at_ms != at_ms {
                    e.expires_at_ms = at_ms;
                    self.dirty.insert(key.to_vec());
                }
                true
            }
        }
    }

    /// Live keys, in key order.
    pub(crate) fn live_keys(&self, now_ms: u64) -> impl Iterator<Item = &Vec<u8>> + '_ {
        self.entries.iter().filter(move |(_, e)| e.is_live(now_ms)).map(|(k, _)| k)
    }

    pub(crate) fn live_entries(&self, now_ms: u64) -> impl Iterator<Item = (&Vec<u8>, &Value)> + '_ {
        self.entries.iter().filter(move |(_, e)| e.is_live(now_ms)).map(|(k, e)| (k, &e.value))
    }

    /// The expiry time of a live key, if it has one.
    pub(crate) fn peek_expiry_ms(&self, now_ms: u64, key: &[u8]) -> Option<u64> {
        self.entries.get(key).filter(|e| e.is_live(now_ms)).and_then(|e| e.expires_at_ms)
    }

    pub(crate) fn flush(&mut self) {
        let keys = std::mem::take(&mut self.entries).into_keys();
        self.dirty.extend(keys);
    }

    pub(crate) fn publish(&mut self, channel: Vec<u8>, message: Vec<u8>) {
        self.published.push((channel, message));
    }

    pub(crate) fn take_dirty(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.dirty).into_iter().collect()
    }

    pub(crate) fn take_published(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.published)
    }
}
