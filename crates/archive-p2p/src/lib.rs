//! A snapshot archive on a peer-to-peer DHT (Moh section 4.3 and 6.6: the archive spread over
//! many peers), built on libp2p's Kademlia. Peers (`lodestore archive-peer`) hold page
//! records on disk; a store reaches them as a reader that holds nothing (`P2pArchive`).
//!
//! Layout: one record per page, under the key `lodestore/<namespace>/p/<page>`, holding every
//! copy of the page (and the times of copies removed); see `record`. All copies of a page thus
//! sit on the same replica set, the `replicas` peers closest to the key, and a read of the
//! past is one lookup. An index, in shards of 65,536 pages (`lodestore/<namespace>/i/<shard>`,
//! listed under `lodestore/<namespace>/shards`), names every copy: a store builds its page map
//! from it when it opens (so it asks only for pages that changed, and reads ahead) and
//! retention lists copies from it. Records never expire, a put merges into what a peer holds,
//! and a peer writes a record to disk before it acknowledges it.
//!
//! A put returns once `replicas` peers hold the page's new copies. A read unites the records
//! of every replica its lookup reaches, so a copy survives as long as one of its replicas
//! does, and takes the oldest copy at or after the time asked; each copy is checked by its
//! seal. A lookup that reaches no peer is an error naming the DHT, never "no copy".
//!
//! libp2p is asynchronous and the engine is not: each archive runs its node on a thread of
//! its own with a single-threaded runtime, and a call sends commands to it and waits on
//! channels, so no async reaches the engine and a caller inside another runtime does not
//! panic.

mod node;
pub mod peer;
pub mod peers;
pub mod record;
pub mod store;
mod url;

/// Requests made and bytes moved (`traffic()`).
pub use lodestore_protocol::archive::Traffic;
pub use peer::{PeerArgs, ADDR_FILE};
pub use url::{P2pUrl, PeerAddr, MAX_REPLICAS, P2P_SCHEME};

use libp2p::kad::RecordKey;
use lodestore_core::{Error, PageId, Result};
use lodestore_protocol::archive::{batch_page_size, sealed, Archive, PageCopy, TrafficCounters};
use record::{IndexShard, KeyKind, PageRecord, ShardList, Value};
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// Longest one call waits for one lookup or store (the DHT's own timeout, and a margin).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Lookups or stores one call keeps in flight at once.
pub const REQUESTS_IN_FLIGHT: usize = 64;
/// Copies a read of the past asks for at once by default (`Archive::read_ahead`): each is a
/// lookup of several round trips, overlapped.
pub const READ_AHEAD: usize = 32;

/// A snapshot archive in a DHT; see the module's documentation.
pub struct P2pArchive {
    url: P2pUrl,
    /// Commands to the node's loop; dropping it ends the loop and its thread.
    commands: Option<tokio::sync::mpsc::UnboundedSender<node::Command>>,
    thread: Option<std::thread::JoinHandle<()>>,
    counters: TrafficCounters,
}

impl P2pArchive {
    /// An archive at `url` (`p2p://ID@host:port,.../namespace?replicas=N`) on an open DHT.
    /// Nothing is asked of the peers until first use, so a store opens while they are down.
    pub fn open(url: &str) -> Result<P2pArchive> {
        Self::open_private(url, None)
    }

    /// An archive at `url` on a private DHT: one whose peers were started with `token`
    /// (`archive-peer --token-file`); `None` for an open one. Only holders of the token
    /// connect to its peers.
    pub fn open_private(url: &str, token: Option<&[u8]>) -> Result<P2pArchive> {
        let url = P2pUrl::parse(url)?;
        let private = token
            .map(node::swarm_key)
            .transpose()
            .map_err(|why| Error::InvalidArgument(format!("archive {}: {why}", url.location())))?;
        let key = libp2p::identity::Keypair::generate_ed25519();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io(url.location(), "start the DHT runtime", e))?;
        let (commands, receiver) = tokio::sync::mpsc::unbounded_channel();
        let (started, started_rx) = channel();
        let (peers, replicas) = (url.peers.clone(), url.replicas);
        let thread = std::thread::Builder::new()
            .name("lodestore-p2p".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut swarm = match node::swarm(key, node::Role::Reader, replicas, private) {
                        Ok(swarm) => swarm,
                        Err(why) => {
                            let _ = started.send(Err(why));
                            return;
                        }
                    };
                    for peer in &peers {
                        node::add_peer(&mut swarm, peer.id, peer.multiaddr());
                    }
                    node::bootstrap(&mut swarm);
                    let _ = started.send(Ok(()));
                    node::run(swarm, receiver, replicas, |_| {}).await;
                })
            })
            .map_err(|e| Error::io(url.location(), "start the DHT thread", e))?;
        let failed = |why: String| Error::Connection {
            peer: url.location(),
            reason: why,
        };
        match started_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => return Err(failed(why)),
            Err(_) => return Err(failed("the DHT thread ended".into())),
        }
        Ok(P2pArchive {
            url,
            commands: Some(commands),
            thread: Some(thread),
            counters: TrafficCounters::default(),
        })
    }

    /// Lookups made and bytes moved since the archive was opened.
    pub fn traffic(&self) -> Traffic {
        self.counters.read()
    }

    /// The key of `page`'s record.
    pub fn page_key(&self, page: PageId) -> RecordKey {
        self.key(KeyKind::Page(page.0))
    }

    fn key(&self, kind: KeyKind) -> RecordKey {
        RecordKey::new(&record::key(&self.url.namespace, kind))
    }

    fn failed(&self, what: &str, why: &str) -> Error {
        Error::Connection {
            peer: self.url.location(),
            reason: format!("{what} failed: {why}"),
        }
    }

    fn send(&self, command: node::Command) -> Result<()> {
        let commands = self.commands.as_ref().expect("lives until the drop");
        commands
            .send(command)
            .map_err(|_| self.failed("a DHT request", "the DHT thread ended"))
    }

    fn wait<T>(&self, what: &str, reply: &Receiver<Result<T, String>>) -> Result<T> {
        match reply.recv_timeout(CALL_TIMEOUT) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(why)) => Err(self.failed(what, &why)),
            Err(_) => Err(self.failed(
                what,
                &format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
            )),
        }
    }

    /// Stores each value under its key on its replicas, `REQUESTS_IN_FLIGHT` at a time.
    fn store(&self, what: &str, values: Vec<(KeyKind, Vec<u8>)>) -> Result<()> {
        let mut values = values.into_iter().peekable();
        while values.peek().is_some() {
            let mut waiting = Vec::new();
            for (kind, value) in values.by_ref().take(REQUESTS_IN_FLIGHT) {
                self.counters.count(1, value.len() as u64, 0);
                let (reply, answer) = channel();
                let key = self.key(kind);
                self.send(node::Command::Put { key, value, reply })?;
                waiting.push((kind, answer));
            }
            for (kind, answer) in waiting {
                self.wait(&format!("{what} ({kind:?})"), &answer)?;
            }
        }
        Ok(())
    }

    /// The values the replicas of each key hold, united (`None`: no replica holds one),
    /// looked up `REQUESTS_IN_FLIGHT` at a time.
    fn look_up(&self, kinds: &[KeyKind]) -> Result<Vec<Option<Value>>> {
        let mut out = Vec::with_capacity(kinds.len());
        for batch in kinds.chunks(REQUESTS_IN_FLIGHT) {
            let mut waiting = Vec::new();
            for &kind in batch {
                let (reply, answer) = channel();
                self.counters.count(1, 0, 0);
                self.send(node::Command::Get {
                    key: self.key(kind),
                    reply,
                })?;
                waiting.push((kind, answer));
            }
            for (kind, answer) in waiting {
                let values = self.wait(&format!("a lookup of {kind:?}"), &answer)?;
                out.push(self.unite(kind, values)?);
            }
        }
        Ok(out)
    }

    /// The union of the replicas' values under `kind`'s key; damaged ones are skipped
    /// (another replica serves) unless nothing else is left, which is an error naming the
    /// damage.
    fn unite(&self, kind: KeyKind, values: Vec<Vec<u8>>) -> Result<Option<Value>> {
        let key = record::key(&self.url.namespace, kind);
        let mut united: Option<Value> = None;
        let mut damage = None;
        for bytes in values {
            self.counters.count(0, 0, bytes.len() as u64);
            match Value::decode_for(key.as_bytes(), &bytes) {
                Ok(value) => match united.as_mut() {
                    Some(united) => united.merge(value),
                    None => united = Some(value),
                },
                Err(why) => damage = Some(why),
            }
        }
        match (united, damage) {
            (None, Some(why)) => Err(Error::CorruptArchive {
                path: self.url.location().into(),
                page: match kind {
                    KeyKind::Page(page) => PageId(page),
                    _ => PageId(u32::MAX),
                },
                time_us: 0,
                reason: format!("{key}: {why}"),
            }),
            (united, Some(why)) => {
                tracing::warn!(%key, %why, "a replica's record is damaged; the others served");
                Ok(united)
            }
            (united, None) => Ok(united),
        }
    }

    /// The page records of `pages`.
    fn page_records(&self, pages: &[PageId]) -> Result<Vec<Option<PageRecord>>> {
        let kinds: Vec<KeyKind> = pages.iter().map(|p| KeyKind::Page(p.0)).collect();
        Ok(self
            .look_up(&kinds)?
            .into_iter()
            .map(|value| match value {
                Some(Value::Page(record)) => Some(record),
                _ => None,
            })
            .collect())
    }

    /// Every shard of the index: the shard list, then each shard it names.
    fn index(&self) -> Result<Vec<IndexShard>> {
        let shards = match self.look_up(&[KeyKind::Shards])?.pop().flatten() {
            Some(Value::Shards(list)) => list.0,
            _ => return Ok(Vec::new()),
        };
        let kinds: Vec<KeyKind> = shards.iter().map(|&s| KeyKind::Index(s)).collect();
        Ok(self
            .look_up(&kinds)?
            .into_iter()
            .filter_map(|value| match value {
                Some(Value::Index(shard)) => Some(shard),
                _ => None,
            })
            .collect())
    }

    /// Every copy the index lists; `None` (asked page by page then) when the DHT does not
    /// answer.
    fn listed(&self) -> Option<Vec<(PageId, u64)>> {
        match self.index() {
            Ok(shards) => Some(shards.iter().flat_map(|s| s.copies()).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "the DHT's index is out of reach; pages are asked one by one");
                None
            }
        }
    }

    /// The index entries of `copies` (added or removed), then the shard list's.
    fn index_values(
        copies: impl Iterator<Item = (PageId, u64)>,
        removed: bool,
    ) -> Vec<(KeyKind, Vec<u8>)> {
        let mut shards: BTreeMap<u32, IndexShard> = BTreeMap::new();
        for (page, time) in copies {
            let shard = shards
                .entry(record::shard_of(page))
                .or_insert_with(|| IndexShard::new(record::shard_of(page)));
            if removed {
                shard.remove(page, time);
            } else {
                shard.add(page, time);
            }
        }
        let list = ShardList(shards.keys().copied().collect());
        let mut values: Vec<(KeyKind, Vec<u8>)> = shards
            .into_values()
            .map(|shard| (KeyKind::Index(shard.shard), shard.encode()))
            .collect();
        if !removed && !values.is_empty() {
            values.push((KeyKind::Shards, list.encode()));
        }
        values
    }

    /// Copies the copy of `record` oldest at or after `time_us` into `buf`.
    fn copy_out(
        &self,
        page: PageId,
        record: Option<&PageRecord>,
        time_us: u64,
        buf: &mut [u8],
    ) -> Result<Option<u64>> {
        let Some((time, blob)) = record.and_then(|r| r.oldest_from(time_us)) else {
            return Ok(None);
        };
        let image =
            sealed::open(blob, page, time, buf.len()).map_err(|why| Error::CorruptArchive {
                path: self.url.location().into(),
                page,
                time_us: time,
                reason: why,
            })?;
        buf.copy_from_slice(image);
        Ok(Some(time))
    }
}

impl Drop for P2pArchive {
    fn drop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Archive for P2pArchive {
    fn name(&self) -> String {
        self.url.location()
    }

    /// The copies' page records, then the index entries naming them: the index never lacks
    /// a copy a put returned for.
    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let mut records: BTreeMap<PageId, PageRecord> = BTreeMap::new();
        for copy in copies {
            records
                .entry(copy.page)
                .or_insert_with(|| PageRecord::new(copy.page))
                .add_copy(copy.time_us, copy.image);
        }
        let values = records
            .into_values()
            .map(|r| (KeyKind::Page(r.page.0), r.encode()))
            .collect();
        self.store("a put", values)?;
        let index = Self::index_values(copies.iter().map(|c| (c.page, c.time_us)), false);
        self.store("a put's index entries", index)
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let record = self.page_records(&[page])?.pop().flatten();
        self.copy_out(page, record.as_ref(), time_us, buf)
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        Ok(self
            .page_records(&[page])?
            .pop()
            .flatten()
            .and_then(|r| r.newest()))
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        let Some(page_size) = batch_page_size(wants, bufs) else {
            return Ok(Vec::new());
        };
        let pages: Vec<PageId> = wants.iter().map(|&(page, _)| page).collect();
        let records = self.page_records(&pages)?;
        wants
            .iter()
            .zip(records)
            .zip(bufs.chunks_exact_mut(page_size))
            .map(|((&(page, time_us), record), buf)| {
                self.copy_out(page, record.as_ref(), time_us, buf)
            })
            .collect()
    }

    fn read_ahead(&self) -> usize {
        READ_AHEAD
    }

    /// From the index: one lookup for the shard list and one per 65,536 pages.
    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        let mut newest: BTreeMap<PageId, u64> = BTreeMap::new();
        for (page, time) in self.listed()? {
            let at = newest.entry(page).or_insert(time);
            *at = (*at).max(time);
        }
        Some(newest.into_iter().collect())
    }

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        self.listed()
    }

    /// Tombstones in the page records, then in the index.
    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        let mut records: BTreeMap<PageId, PageRecord> = BTreeMap::new();
        for &(page, time_us) in copies {
            records
                .entry(page)
                .or_insert_with(|| PageRecord::new(page))
                .remove(time_us);
        }
        let values = records
            .into_values()
            .map(|r| (KeyKind::Page(r.page.0), r.encode()))
            .collect();
        self.store("a removal", values)?;
        self.store(
            "a removal's index entries",
            Self::index_values(copies.iter().copied(), true),
        )
    }

    /// Bytes this archive has sent to be held (each record once, before replication); the
    /// peers' folders hold the rest of the story.
    fn bytes(&self) -> u64 {
        self.counters.read().bytes_sent
    }
}
