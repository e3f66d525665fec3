//! A snapshot archive kept on several archive nodes (Moh section 4.3.1) with a replication
//! factor `f`: a put returns once `f` nodes hold the copies durably; a read asks nodes until
//! `n - f + 1` of the `n` have answered and takes the best answer among them.
//!
//! Why reads need more than one answer: a node that was down during a put lacks that copy,
//! and its answer (an older copy's absence: "no copy at or after this time") would make the
//! store serve the current page for a past one, a wrong page. Any `n - f + 1` nodes include
//! at least one of the `f` that acknowledged every put, and a copy is the page as of its
//! time whoever holds it, so the oldest copy at or after a time among the answers is the
//! right one. A node's damaged copy, a timeout or a refusal count as no answer; a read that
//! cannot gather enough answers fails with an error naming the archive and each node's
//! failure, never a wrong page.

use crate::archive::node::ARCHIVE_NODE_METHOD;
use crate::auth::Credentials;
use crate::frame::MAX_FRAME_BODY;
use crate::message::{Request, Response, WireCopy};
use crate::remote::RemotePageServer;
use lodestore_core::{Error, PageId, Result};
use lodestore_protocol::archive::{batch_page_size, Archive, PageCopy};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Most nodes one archive names.
pub const NODES_MAX: usize = 64;
/// Longest a node may take to answer a request before it counts as down for that request.
pub const NODE_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Copies a read of the past asks the nodes for at once by default (`Archive::read_ahead`).
pub const READ_AHEAD: usize = 32;
/// Bytes a put request's copies may take, so its frame stays under the limit.
const PUT_BATCH_BYTES: usize = MAX_FRAME_BODY / 2;

/// An archive spread over archive nodes; see the module's documentation.
pub struct ArchiveNodes {
    nodes: Vec<Node>,
    factor: usize,
    credentials: Credentials,
    /// The page size of the first node reached; every other must hold the same.
    page_size: OnceLock<usize>,
}

/// How long a node that could not be reached is passed over before it is tried again, so
/// that a node that is down costs one connection attempt per interval, not one per request.
pub const NODE_RETRY_AFTER: Duration = Duration::from_secs(2);

/// One node, connected when first needed and again after its connection broke.
struct Node {
    address: String,
    conn: Mutex<Option<RemotePageServer>>,
    /// Set when a connection attempt failed: passed over until then.
    down_until: Mutex<Option<Instant>>,
}

impl ArchiveNodes {
    /// An archive on the nodes at `addresses`, each copy on at least `factor` of them. Nodes
    /// are connected when first used, so a store opens while they are down (reads of the past
    /// then fail, naming them); they must all hold pages of one size, the store's.
    pub fn new(
        addresses: &[String],
        factor: usize,
        credentials: Credentials,
    ) -> Result<ArchiveNodes> {
        if addresses.is_empty() || addresses.len() > NODES_MAX {
            return Err(Error::InvalidArgument(format!(
                "an archive names 1 to {NODES_MAX} nodes, not {}",
                addresses.len()
            )));
        }
        if factor == 0 || factor > addresses.len() {
            return Err(Error::InvalidArgument(format!(
                "replication factor {factor} with {} archive nodes: it must be 1 to {}",
                addresses.len(),
                addresses.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for address in addresses {
            if !seen.insert(address) {
                return Err(Error::InvalidArgument(format!(
                    "archive node {address} is named twice"
                )));
            }
        }
        Ok(ArchiveNodes {
            nodes: addresses
                .iter()
                .map(|address| Node {
                    address: address.clone(),
                    conn: Mutex::new(None),
                    down_until: Mutex::new(None),
                })
                .collect(),
            factor,
            credentials,
            page_size: OnceLock::new(),
        })
    }

    /// How many answers a read gathers: enough to include a node that took every put.
    fn read_quorum(&self) -> usize {
        self.nodes.len() - self.factor + 1
    }

    /// Runs `call` on node `index`'s connection, connecting first if needed; a connection that
    /// breaks is dropped, to be made again by the next request.
    fn on_node<T>(
        &self,
        index: usize,
        call: impl FnOnce(&RemotePageServer) -> Result<T>,
    ) -> Result<T> {
        let node = &self.nodes[index];
        let mut conn = lock(&node.conn);
        if conn.is_none() {
            match self.connect(&node.address) {
                Ok(remote) => {
                    *lock(&node.down_until) = None;
                    *conn = Some(remote);
                }
                Err(e) => {
                    *lock(&node.down_until) = Some(Instant::now() + NODE_RETRY_AFTER);
                    return Err(e);
                }
            }
        }
        let result = call(conn.as_ref().expect("connected above"));
        if let Err(Error::Connection { .. }) = &result {
            *conn = None;
        }
        result
    }

    /// Could node `index` not be reached lately? Such a node is tried only when the others
    /// are too few.
    fn lately_down(&self, index: usize) -> bool {
        lock(&self.nodes[index].down_until).is_some_and(|until| Instant::now() < until)
    }

    /// The nodes not down lately, then those that are.
    fn by_availability(&self) -> (Vec<usize>, Vec<usize>) {
        (0..self.nodes.len()).partition(|&index| !self.lately_down(index))
    }

    fn connect(&self, address: &str) -> Result<RemotePageServer> {
        let remote =
            RemotePageServer::connect_secured(address, "lodestore archive", &self.credentials)?;
        let welcome = remote.welcome();
        if welcome.recovery_method != ARCHIVE_NODE_METHOD {
            return Err(Error::InvalidArgument(format!(
                "{address} serves a store, not a snapshot archive node"
            )));
        }
        let page_size = *self.page_size.get_or_init(|| welcome.page_size);
        if welcome.page_size != page_size {
            return Err(Error::InvalidArgument(format!(
                "archive node {address} holds pages of {} bytes; the archive's others {page_size}",
                welcome.page_size
            )));
        }
        remote.set_reply_timeout(Some(NODE_REPLY_TIMEOUT))?;
        Ok(remote)
    }

    /// Asks nodes in turn until `read_quorum` have answered (those down lately last, and only
    /// if the others are too few); returns their answers, or an error naming every node that
    /// failed.
    fn gather<T>(
        &self,
        what: &str,
        ask: impl Fn(&RemotePageServer) -> Result<T>,
    ) -> Result<Vec<T>> {
        let want = self.read_quorum();
        let mut answers = Vec::with_capacity(want);
        let mut failures = Vec::new();
        let (up, down) = self.by_availability();
        for index in up.into_iter().chain(down) {
            match self.on_node(index, &ask) {
                Ok(answer) => {
                    answers.push(answer);
                    if answers.len() == want {
                        return Ok(answers);
                    }
                }
                Err(e) => failures.push(format!("{}: {e}", self.nodes[index].address)),
            }
        }
        Err(self.too_few(what, answers.len(), want, &failures))
    }

    fn too_few(&self, what: &str, answered: usize, want: usize, failures: &[String]) -> Error {
        Error::Remote(format!(
            "snapshot archive {}: {what} reached {answered} of the {want} nodes it needs; {}",
            self.name(),
            failures.join("; ")
        ))
    }

    /// The copies of a put (of pages of `page_size` bytes) in requests that fit a frame each.
    fn put_requests(copies: &[PageCopy<'_>], page_size: usize) -> Vec<Request> {
        let per_request = (PUT_BATCH_BYTES / (page_size + 32)).max(1);
        copies
            .chunks(per_request)
            .map(|chunk| Request::ArchivePut {
                copies: chunk
                    .iter()
                    .map(|c| WireCopy {
                        page: c.page.0,
                        time_us: c.time_us,
                        image: c.image.to_vec(),
                    })
                    .collect(),
            })
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Archive for ArchiveNodes {
    fn name(&self) -> String {
        let addresses: Vec<&str> = self.nodes.iter().map(|n| n.address.as_str()).collect();
        format!("lodestore://{}", addresses.join(","))
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let Some(first) = copies.first() else {
            return Ok(());
        };
        let page_size = first.image.len();
        assert!(
            copies.iter().all(|c| c.image.len() == page_size),
            "the copies of one put are pages of one size"
        );
        // A node holding pages of another size refuses the put, by name.
        let requests = Self::put_requests(copies, page_size);
        // Every node at once: the put waits for the slowest of the factor, not for the sum.
        let put_on = |indexes: &[usize]| -> Vec<(usize, Result<()>)> {
            std::thread::scope(|scope| {
                let handles: Vec<_> = indexes
                    .iter()
                    .map(|&index| {
                        let requests = &requests;
                        scope.spawn(move || {
                            self.on_node(index, |remote| {
                                requests.iter().try_for_each(|request| {
                                    remote.expect_done("archive-put", request)
                                })
                            })
                        })
                    })
                    .collect();
                indexes
                    .iter()
                    .zip(handles)
                    .map(|(&index, handle)| {
                        let result = handle.join().unwrap_or_else(|_| {
                            Err(Error::Remote("an archive put thread panicked".into()))
                        });
                        (index, result)
                    })
                    .collect()
            })
        };
        // Every node at once but those down lately; those too if the others are too few.
        let (up, down) = self.by_availability();
        let mut results = put_on(&up);
        if results.iter().filter(|(_, r)| r.is_ok()).count() < self.factor {
            results.extend(put_on(&down));
        } else {
            results.extend(down.into_iter().map(|index| {
                let address = &self.nodes[index].address;
                (
                    index,
                    Err(Error::Connection {
                        peer: address.clone(),
                        reason: "down lately; not tried".into(),
                    }),
                )
            }));
        }
        results.sort_by_key(|(index, _)| *index);
        let results: Vec<Result<()>> = results.into_iter().map(|(_, r)| r).collect();
        let mut failures = Vec::new();
        for (index, result) in results.iter().enumerate() {
            if let Err(e) = result {
                failures.push(format!("{}: {e}", self.nodes[index].address));
            }
        }
        let held = results.len() - failures.len();
        if held < self.factor {
            return Err(self.too_few("a put", held, self.factor, &failures));
        }
        if !failures.is_empty() {
            tracing::warn!(archive = %self.name(), failures = %failures.join("; "), "archive nodes missed a put; the others hold the copies");
        }
        Ok(())
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let request = Request::ArchiveGet {
            page: page.0,
            time_us,
        };
        let page_size = buf.len();
        let answers = self.gather("a read", |remote| match remote.call(&request)? {
            Response::Copy(None) => Ok(None),
            Response::Copy(Some(copy)) => {
                if copy.page == page.0 && copy.time_us >= time_us && copy.image.len() == page_size {
                    Ok(Some(copy))
                } else {
                    // Named without the image: a page of bytes is no message.
                    Err(Error::Remote(format!(
                        "archive node {} answered a read of page {page} at or after \
                         {time_us} with the copy of page {} at {} ({} bytes; pages here have \
                         {page_size})",
                        remote.peer(),
                        copy.page,
                        copy.time_us,
                        copy.image.len()
                    )))
                }
            }
            other => Err(remote.unexpected("archive-get", &other)),
        })?;
        let best = answers
            .into_iter()
            .flatten()
            .min_by_key(|copy| copy.time_us);
        Ok(best.map(|copy| {
            buf.copy_from_slice(&copy.image);
            copy.time_us
        }))
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        let Some(page_size) = batch_page_size(wants, bufs) else {
            return Ok(Vec::new());
        };
        let mut found = Vec::with_capacity(wants.len());
        // A request per batch a frame holds; each batch one round trip per node asked.
        let batch = crate::archive::node::get_many_max(page_size);
        for (chunk, chunk_bufs) in wants.chunks(batch).zip(bufs.chunks_mut(batch * page_size)) {
            let request = Request::ArchiveGetMany {
                wants: chunk.iter().map(|&(p, t)| (p.0, t)).collect(),
            };
            let answers = self.gather("a batch of reads", |remote| {
                match remote.call(&request)? {
                    Response::Copies(copies) if copies.len() == chunk.len() => {
                        for (copy, &(page, time_us)) in copies.iter().zip(chunk) {
                            if let Some(copy) = copy {
                                if copy.page != page.0
                                    || copy.time_us < time_us
                                    || copy.image.len() != page_size
                                {
                                    return Err(Error::Remote(format!(
                                        "archive node {} answered a read of page {page} at or \
                                         after {time_us} with the copy of page {} at {} ({} \
                                         bytes; pages here have {page_size})",
                                        remote.peer(),
                                        copy.page,
                                        copy.time_us,
                                        copy.image.len()
                                    )));
                                }
                            }
                        }
                        Ok(copies)
                    }
                    other => Err(remote.unexpected("archive-get-many", &other)),
                }
            })?;
            // Per copy asked, the oldest among the answers, as `get` takes it.
            let mut best: Vec<Option<WireCopy>> = vec![None; chunk.len()];
            for copies in answers {
                for (held, copy) in best.iter_mut().zip(copies) {
                    if let Some(copy) = copy {
                        if held.as_ref().is_none_or(|h| copy.time_us < h.time_us) {
                            *held = Some(copy);
                        }
                    }
                }
            }
            for (copy, buf) in best.into_iter().zip(chunk_bufs.chunks_exact_mut(page_size)) {
                found.push(copy.map(|copy| {
                    buf.copy_from_slice(&copy.image);
                    copy.time_us
                }));
            }
        }
        Ok(found)
    }

    fn read_ahead(&self) -> usize {
        // A batch is one request per node asked, as one copy is.
        READ_AHEAD
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        let request = Request::ArchiveGetTs { page: page.0 };
        let answers = self.gather("a newest-time read", |remote| {
            match remote.call(&request)? {
                Response::Time(time) => Ok(time),
                other => Err(remote.unexpected("archive-get-ts", &other)),
            }
        })?;
        Ok(answers.into_iter().flatten().max())
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        // Complete only as the union of a read quorum: one of them took every put.
        let answers = self
            .gather("a listing", |remote| {
                match remote.call(&Request::ArchiveNewestTimes)? {
                    Response::NewestTimes(Some(times)) => Ok(times),
                    Response::NewestTimes(None) => Err(Error::Unsupported(format!(
                        "archive node {} holds copies of too many pages to list",
                        remote.peer()
                    ))),
                    other => Err(remote.unexpected("archive-newest-times", &other)),
                }
            })
            .map_err(|e| tracing::info!(archive = %self.name(), error = %e, "no listing of the archive; pages are asked for one by one"))
            .ok()?;
        let mut newest: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for (page, time) in answers.into_iter().flatten() {
            let held = newest.entry(page).or_insert(time);
            *held = (*held).max(time);
        }
        Some(newest.into_iter().map(|(p, t)| (PageId(p), t)).collect())
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        // A node that misses a removal keeps copies no snapshot reads: space, never a wrong
        // page (a copy is the page as of its time). It fails only if no node took it.
        let mut failures = Vec::new();
        for index in 0..self.nodes.len() {
            let removed = self.on_node(index, |remote| {
                copies
                    .chunks(crate::archive::node::REMOVE_COPIES_MAX)
                    .try_for_each(|chunk| {
                        let request = Request::ArchiveRemove {
                            copies: chunk.iter().map(|(p, t)| (p.0, *t)).collect(),
                        };
                        remote.expect_done("archive-remove", &request)
                    })
            });
            if let Err(e) = removed {
                failures.push(format!("{}: {e}", self.nodes[index].address));
            }
        }
        if failures.len() == self.nodes.len() {
            return Err(self.too_few("a removal", 0, 1, &failures));
        }
        Ok(())
    }

    fn bytes(&self) -> u64 {
        // A figure for reports: the largest replica among the nodes up now.
        self.by_availability()
            .0
            .into_iter()
            .filter_map(|index| {
                self.on_node(index, |remote| {
                    match remote.call(&Request::ArchiveBytes)? {
                        Response::Bytes(bytes) => Ok(bytes),
                        other => Err(remote.unexpected("archive-bytes", &other)),
                    }
                })
                .ok()
            })
            .max()
            .unwrap_or(0)
    }
}
