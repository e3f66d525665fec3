//! A snapshot archive on a peer-to-peer DHT (Moh section 4.3 and 6.6: the archive spread over
//! many peers), built on libp2p's Kademlia. Peers (`lodestore archive-peer`) hold page
//! records on disk; a store reaches them as a reader that holds nothing (`P2pArchive`).
//!
//! Layout: one record per page, under the key `lodestore/<namespace>/<page>`, holding every
//! copy of the page (and the times of copies removed); see `record`. All copies of a page thus
//! sit on the same replica set, the `replicas` peers closest to the key, and a read of the
//! past is one lookup. Records never expire, a put merges into what a peer holds, and a peer
//! writes a record to disk before it acknowledges it.
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

pub use peer::{PeerArgs, ADDR_FILE};
pub use url::{P2pUrl, PeerAddr, MAX_REPLICAS, P2P_SCHEME};

use libp2p::kad::RecordKey;
use lodestore_core::{Error, PageId, Result};
use lodestore_protocol::archive::{batch_page_size, sealed, Archive, PageCopy};
use record::PageRecord;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// Longest one call waits for one lookup or store (the DHT's own timeout, and a margin).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Lookups or stores one call keeps in flight at once.
pub const REQUESTS_IN_FLIGHT: usize = 64;
/// Copies a read of the past asks for at once by default (`Archive::read_ahead`): each is a
/// lookup of several round trips, overlapped.
pub const READ_AHEAD: usize = 32;

/// Lookups made and bytes moved, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub requests: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

/// A snapshot archive in a DHT; see the module's documentation.
pub struct P2pArchive {
    url: P2pUrl,
    /// Commands to the node's loop; dropping it ends the loop and its thread.
    commands: Option<tokio::sync::mpsc::UnboundedSender<node::Command>>,
    thread: Option<std::thread::JoinHandle<()>>,
    counters: Counters,
}

impl P2pArchive {
    /// An archive at `url` (`p2p://ID@host:port,.../namespace?replicas=N`). Nothing is asked
    /// of the peers until first use, so a store opens while they are down.
    pub fn open(url: &str) -> Result<P2pArchive> {
        let url = P2pUrl::parse(url)?;
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
                    let mut swarm = match node::swarm(key, node::Role::Reader, replicas) {
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
            counters: Counters::default(),
        })
    }

    /// Lookups made and bytes moved since the archive was opened.
    pub fn traffic(&self) -> Traffic {
        Traffic {
            requests: self.counters.requests.load(Ordering::Relaxed),
            bytes_sent: self.counters.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.counters.bytes_received.load(Ordering::Relaxed),
        }
    }

    /// The key of `page`'s record.
    pub fn page_key(&self, page: PageId) -> RecordKey {
        RecordKey::new(&format!("lodestore/{}/{}", self.url.namespace, page.0))
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

    /// Stores the records (page, record) on their replicas, `REQUESTS_IN_FLIGHT` at a time.
    fn put_records(&self, what: &str, records: Vec<PageRecord>) -> Result<()> {
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            let mut waiting = Vec::new();
            for record in records.by_ref().take(REQUESTS_IN_FLIGHT) {
                let value = record.encode();
                self.counters.requests.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_sent
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
                let (reply, answer) = channel();
                let key = self.page_key(record.page);
                self.send(node::Command::Put { key, value, reply })?;
                waiting.push((record.page, answer));
            }
            for (page, answer) in waiting {
                self.wait(&format!("{what} of page {page}"), &answer)?;
            }
        }
        Ok(())
    }

    /// The records of `pages`, each the union of what its replicas hold (`None`: no replica
    /// holds one), looked up `REQUESTS_IN_FLIGHT` at a time.
    fn records(&self, pages: &[PageId]) -> Result<Vec<Option<PageRecord>>> {
        let mut out = Vec::with_capacity(pages.len());
        for batch in pages.chunks(REQUESTS_IN_FLIGHT) {
            let mut waiting = Vec::new();
            for &page in batch {
                let (reply, answer) = channel();
                self.counters.requests.fetch_add(1, Ordering::Relaxed);
                self.send(node::Command::Get {
                    key: self.page_key(page),
                    reply,
                })?;
                waiting.push((page, answer));
            }
            for (page, answer) in waiting {
                let values = self.wait(&format!("a lookup of page {page}"), &answer)?;
                out.push(self.unite(page, values)?);
            }
        }
        Ok(out)
    }

    /// The union of the replicas' records of `page`; damaged ones are skipped (another replica
    /// serves) unless nothing else is left, which is an error naming the damage.
    fn unite(&self, page: PageId, values: Vec<Vec<u8>>) -> Result<Option<PageRecord>> {
        let mut united: Option<PageRecord> = None;
        let mut damage = None;
        for value in values {
            self.counters
                .bytes_received
                .fetch_add(value.len() as u64, Ordering::Relaxed);
            match PageRecord::decode(&value) {
                Ok(record) if record.page == page => match united.as_mut() {
                    Some(united) => united.merge(record),
                    None => united = Some(record),
                },
                Ok(record) => damage = Some(format!("a record of page {} served", record.page)),
                Err(why) => damage = Some(why),
            }
        }
        match (united, damage) {
            (None, Some(why)) => Err(Error::CorruptArchive {
                path: self.url.location().into(),
                page,
                time_us: 0,
                reason: why,
            }),
            (united, Some(why)) => {
                tracing::warn!(%page, %why, "a replica's record is damaged; the others served");
                Ok(united)
            }
            (united, None) => Ok(united),
        }
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

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let mut records: BTreeMap<PageId, PageRecord> = BTreeMap::new();
        for copy in copies {
            records
                .entry(copy.page)
                .or_insert_with(|| PageRecord::new(copy.page))
                .add_copy(copy.time_us, copy.image);
        }
        self.put_records("a put", records.into_values().collect())
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let record = self.records(&[page])?.pop().flatten();
        self.copy_out(page, record.as_ref(), time_us, buf)
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        Ok(self
            .records(&[page])?
            .pop()
            .flatten()
            .and_then(|r| r.newest()))
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        let Some(page_size) = batch_page_size(wants, bufs) else {
            return Ok(Vec::new());
        };
        let pages: Vec<PageId> = wants.iter().map(|&(page, _)| page).collect();
        let records = self.records(&pages)?;
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

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        let mut records: BTreeMap<PageId, PageRecord> = BTreeMap::new();
        for &(page, time_us) in copies {
            records
                .entry(page)
                .or_insert_with(|| PageRecord::new(page))
                .remove(time_us);
        }
        self.put_records("a removal", records.into_values().collect())
    }

    /// Bytes this archive has sent to be held (each record once, before replication); the
    /// peers' folders hold the rest of the story.
    fn bytes(&self) -> u64 {
        self.counters.bytes_sent.load(Ordering::Relaxed)
    }
}
