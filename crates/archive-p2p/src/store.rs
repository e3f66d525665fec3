//! A peer's records on disk: Kademlia's record store, one file per page record, written
//! durably before the peer acknowledges a put (the store's `put` runs before Kademlia answers,
//! and a failed `put` makes it reset the request instead). Records never expire, and a put
//! merges into the record held (`PageRecord::merge`) instead of replacing it. The reader's
//! side of the DHT keeps nothing (`CopyStore::nothing`): its copies belong on the peers.
//!
//! Every value is checked before it is kept (a hostile peer's bytes included): it must decode
//! as a page record of the page its key names. Provider records are not used and refused.

use crate::record::{Value, MAX_RECORD_BYTES};
use libp2p::kad::store::{Error as StoreError, RecordStore, Result as StoreResult};
use libp2p::kad::{ProviderRecord, Record, RecordKey};
use libp2p::PeerId;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Records a peer keeps at most (about 2 GiB of page records at one 8 KiB copy each).
pub const MAX_RECORDS: usize = 1 << 18;
/// Records one replication round re-sends at most (Kademlia holds a round in memory).
pub const REPLICATION_ROUND: usize = 1024;
/// The longest key kept: ours are `lodestore/<namespace>/p/<page>`.
pub const MAX_KEY_BYTES: usize = 128;

/// A peer's record store; see the module's documentation.
pub struct CopyStore {
    /// `None` for a reader, which keeps nothing.
    dir: Option<PathBuf>,
    /// The keys held, with their records' lengths; ordered, so that replication rounds go
    /// through them in turn.
    held: BTreeMap<Vec<u8>, usize>,
    /// Where the next replication round starts (`records`), and its size.
    next_round: RefCell<Option<Vec<u8>>>,
    round: usize,
}

impl CopyStore {
    /// The store of a reader of the DHT: keeps nothing.
    pub fn nothing() -> CopyStore {
        CopyStore {
            dir: None,
            held: BTreeMap::new(),
            next_round: RefCell::new(None),
            round: REPLICATION_ROUND,
        }
    }

    /// The records kept in `dir` (created if missing); leftovers of an interrupted write
    /// are removed.
    pub fn open(dir: &Path) -> std::io::Result<CopyStore> {
        fs::create_dir_all(dir)?;
        let mut held = BTreeMap::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".tmp") {
                fs::remove_file(entry.path())?;
                continue;
            }
            match hex::decode(name.as_ref()) {
                Ok(key) => {
                    held.insert(key, entry.metadata()?.len() as usize);
                }
                Err(_) => {
                    tracing::warn!(file = %entry.path().display(), "not a record; left alone")
                }
            }
        }
        Ok(CopyStore {
            dir: Some(dir.to_path_buf()),
            held,
            next_round: RefCell::new(None),
            round: REPLICATION_ROUND,
        })
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes of the records held.
    pub fn bytes(&self) -> u64 {
        self.held.values().map(|&n| n as u64).sum()
    }

    fn path(dir: &Path, key: &RecordKey) -> PathBuf {
        dir.join(hex::encode(key.as_ref()))
    }

    fn read_raw(&self, key: &RecordKey) -> Option<Vec<u8>> {
        let dir = self.dir.as_ref()?;
        if !self.held.contains_key(key.as_ref()) {
            return None;
        }
        let path = Self::path(dir, key);
        match fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "page record unreadable");
                None
            }
        }
    }

    fn load(&self, key: &RecordKey) -> Option<Value> {
        let dir = self.dir.as_ref()?;
        if !self.held.contains_key(key.as_ref()) {
            return None;
        }
        let path = Self::path(dir, key);
        let read = fs::read(&path).map_err(|e| e.to_string());
        match read.and_then(|bytes| Value::decode_for(key.as_ref(), &bytes)) {
            Ok(record) => Some(record),
            Err(why) => {
                // Served by no one here; the other replicas still have it.
                tracing::error!(file = %path.display(), %why, "page record unreadable");
                None
            }
        }
    }

    /// Writes `bytes` under `key` durably: a temporary file, synced, renamed over the old
    /// record, the folder synced.
    fn write(dir: &Path, key: &RecordKey, bytes: &[u8]) -> std::io::Result<()> {
        let path = Self::path(dir, key);
        let tmp = path.with_extension("tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    }
}

impl RecordStore for CopyStore {
    type RecordsIter<'a> = Box<dyn Iterator<Item = Cow<'a, Record>> + 'a>;
    type ProvidedIter<'a> = std::iter::Empty<Cow<'a, ProviderRecord>>;

    /// The record as it is on disk, unchecked: a reader checks it, and a damaged one is
    /// then named as damaged rather than taken for a page never archived.
    fn get(&self, key: &RecordKey) -> Option<Cow<'_, Record>> {
        self.read_raw(key)
            .map(|value| Cow::Owned(Record::new(key.clone(), value)))
    }

    fn put(&mut self, record: Record) -> StoreResult<()> {
        let Some(dir) = self.dir.clone() else {
            return Ok(()); // a reader keeps nothing
        };
        let key = record.key;
        if key.as_ref().len() > MAX_KEY_BYTES {
            tracing::warn!(bytes = key.as_ref().len(), "a key too long; refused");
            return Err(StoreError::ValueTooLarge);
        }
        let incoming = match Value::decode_for(key.as_ref(), &record.value) {
            Ok(incoming) => incoming,
            Err(why) => {
                tracing::warn!(%why, "a value that does not belong under its key; refused");
                return Err(StoreError::ValueTooLarge);
            }
        };
        if !self.held.contains_key(key.as_ref()) && self.held.len() >= MAX_RECORDS {
            return Err(StoreError::MaxRecords);
        }
        let merged = match self.load(&key) {
            Some(mut held) => {
                held.merge(incoming);
                held
            }
            None => incoming,
        };
        if merged.encoded_len() > MAX_RECORD_BYTES {
            tracing::warn!(?key, "record would pass {MAX_RECORD_BYTES} bytes; refused");
            return Err(StoreError::ValueTooLarge);
        }
        let bytes = merged.encode();
        if let Err(e) = Self::write(&dir, &key, &bytes) {
            // Not acknowledged: the putter counts this peer as failed.
            tracing::error!(dir = %dir.display(), error = %e, "page record not written");
            return Err(StoreError::MaxRecords);
        }
        self.held.insert(key.to_vec(), bytes.len());
        Ok(())
    }

    fn remove(&mut self, key: &RecordKey) {
        // Kademlia removes only expired records, and ours never expire; a removal of copies
        // is a tombstone merged in by `put`.
        tracing::debug!(?key, "record removal ignored");
    }

    fn records(&self) -> Self::RecordsIter<'_> {
        // Kademlia's replication loads every record this returns at once: a round is at most
        // `REPLICATION_ROUND` records, the next round starting where this one stopped. Only
        // records that check out are re-sent.
        let start = self.next_round.borrow_mut().take().unwrap_or_default();
        let round: Vec<Vec<u8>> = self
            .held
            .range(start..)
            .chain(&self.held)
            .map(|(key, _)| key.clone())
            .take(self.round.min(self.held.len()))
            .collect();
        *self.next_round.borrow_mut() = round.last().map(|last| {
            let mut after = last.clone();
            after.push(0); // the smallest key after `last`
            after
        });
        Box::new(round.into_iter().filter_map(move |key| {
            let key = RecordKey::new(&key);
            let record = self.load(&key)?;
            Some(Cow::Owned(Record::new(key, record.encode())))
        }))
    }

    fn add_provider(&mut self, _record: ProviderRecord) -> StoreResult<()> {
        Err(StoreError::MaxProvidedKeys)
    }

    fn providers(&self, _key: &RecordKey) -> Vec<ProviderRecord> {
        Vec::new()
    }

    fn provided(&self) -> Self::ProvidedIter<'_> {
        std::iter::empty()
    }

    fn remove_provider(&mut self, _key: &RecordKey, _provider: &PeerId) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::PageRecord;
    use lodestore_core::PageId;

    fn value(page: u32, times: &[u64]) -> Vec<u8> {
        let mut record = PageRecord::new(PageId(page));
        for &t in times {
            record.add_copy(t, &[t as u8; 32]);
        }
        record.encode()
    }

    #[test]
    fn puts_merge_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let key = RecordKey::new(&"lodestore/ns/p/7");
        let mut store = CopyStore::open(dir.path()).unwrap();
        store.put(Record::new(key.clone(), value(7, &[1]))).unwrap();
        store.put(Record::new(key.clone(), value(7, &[3]))).unwrap();
        drop(store);
        let store = CopyStore::open(dir.path()).unwrap();
        let held = PageRecord::decode(&store.get(&key).unwrap().value).unwrap();
        assert_eq!(held.copies.keys().copied().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(store.records().count(), 1);
    }

    #[test]
    fn replication_rounds_are_bounded_and_go_through_every_record_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CopyStore::open(dir.path()).unwrap();
        store.round = 2;
        for page in 1..=5 {
            let key = RecordKey::new(&format!("lodestore/ns/p/{page}"));
            store.put(Record::new(key, value(page, &[1]))).unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            let round: Vec<_> = store.records().map(|r| r.key.to_vec()).collect();
            assert!(!round.is_empty() && round.len() <= 2, "{}", round.len());
            seen.extend(round);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 5, "three rounds of two cover all five records");
    }

    #[test]
    fn hostile_values_are_refused_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = CopyStore::open(dir.path()).unwrap();
        let key = RecordKey::new(&"lodestore/ns/p/7");
        assert!(store.put(Record::new(key.clone(), vec![7; 100])).is_err());
        // A record of page 8 under page 7's key.
        assert!(store.put(Record::new(key.clone(), value(8, &[1]))).is_err());
        let other = RecordKey::new(&"somebody/else");
        assert!(store.put(Record::new(other, value(7, &[1]))).is_err());
        assert!(store.is_empty());
        let mut reader = CopyStore::nothing();
        reader
            .put(Record::new(key.clone(), value(7, &[1])))
            .unwrap();
        assert!(reader.get(&key).is_none());
    }
}
