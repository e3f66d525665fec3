//! The remote `PageServer`: a client's end of one connection. Each request waits for its
//! response (one in flight per connection; a session owns its connection). Batches of pages or
//! log records larger than a frame are split.

use crate::frame::{read_frame, write_frame, FrameError, MAX_FRAME_BODY, STREAM_BUFFER_BYTES};
use crate::message::{decode, encode, Request, Response, WireObjectUpdate, WirePage, WireUpdates};
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_server::{
    LockMode, LockStats, ObjectUpdate, PageServer, PageUpdates, RestartReport, ServerStats,
    ShippedPage,
};
use lodestore_storage::large::Extent;
use lodestore_wal::LogStats;

/// Most bytes a log record's page, offset and length take in a frame (three varints).
const WIRE_UPDATE_FIXED_BYTES: usize = 15;
use std::io::{BufReader, BufWriter};
use std::net::TcpStream;
use std::sync::Mutex;

/// What the server said when the connection opened.
#[derive(Clone, Debug)]
pub struct Welcome {
    pub page_size: usize,
    pub volume: VolumeId,
    pub root_directory: Oid,
    pub recovery_method: String,
    pub restart: RestartReport,
}

pub struct RemotePageServer {
    peer: String,
    welcome: Welcome,
    conn: Mutex<Option<Conn>>,
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    next_id: u64,
}

impl RemotePageServer {
    /// Sends `records` in order, as few requests as fit half a frame each (`bytes` estimates a
    /// record's encoded size), each answered `Done`.
    fn send_in_batches<T, W>(
        &self,
        what: &'static str,
        records: &[T],
        bytes: impl Fn(&T) -> usize,
        wire: impl Fn(&T) -> W,
        request: impl Fn(Vec<W>) -> Request,
    ) -> Result<()> {
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for record in records {
            let size = bytes(record);
            if batch_bytes + size > MAX_FRAME_BODY / 2 && !batch.is_empty() {
                self.expect_done(what, &request(std::mem::take(&mut batch)))?;
                batch_bytes = 0;
            }
            batch.push(wire(record));
            batch_bytes += size;
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.expect_done(what, &request(batch))
    }

    fn ship_wire_updates(&self, txn: TxnId, records: WireUpdates) -> Result<()> {
        self.expect_done(
            "ship-log-records",
            &Request::ShipLogRecords {
                txn: txn.0,
                records,
            },
        )
    }

    /// Connects to the server at `address` and says hello.
    pub fn connect(address: &str, client: &str) -> Result<RemotePageServer> {
        let stream = TcpStream::connect(address)
            .map_err(|e| connection(address, format!("connect: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connection(address, format!("socket setup: {e}")))?;
        let reader = BufReader::with_capacity(
            STREAM_BUFFER_BYTES,
            stream
                .try_clone()
                .map_err(|e| connection(address, format!("socket setup: {e}")))?,
        );
        let conn = Conn {
            reader,
            writer: BufWriter::with_capacity(STREAM_BUFFER_BYTES, stream),
            next_id: 1,
        };
        let mut remote = RemotePageServer {
            peer: address.to_string(),
            welcome: Welcome {
                page_size: 0,
                volume: 0,
                root_directory: Oid(0),
                recovery_method: String::new(),
                restart: RestartReport::default(),
            },
            conn: Mutex::new(Some(conn)),
        };
        match remote.call(&Request::Hello {
            client: client.to_string(),
        })? {
            Response::Welcome {
                page_size,
                volume,
                root_directory,
                recovery_method,
                restart,
            } => {
                remote.welcome = Welcome {
                    page_size: page_size as usize,
                    volume,
                    root_directory: Oid(root_directory),
                    recovery_method,
                    restart,
                };
                Ok(remote)
            }
            other => Err(remote.unexpected("hello", &other)),
        }
    }

    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The server's counters.
    pub fn stats(&self) -> Result<(ServerStats, LogStats, LockStats)> {
        match self.call(&Request::Stats)? {
            Response::Stats { server, log, locks } => Ok((server, log, locks)),
            other => Err(self.unexpected("stats", &other)),
        }
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.expect_done("checkpoint", &Request::Checkpoint)
    }

    /// Sends `request` and waits for its response; a failed response becomes its error. Any
    /// transport failure breaks the connection for good: later calls fail at once.
    fn call(&self, request: &Request) -> Result<Response> {
        let mut guard = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let conn = guard
            .as_mut()
            .ok_or_else(|| connection(&self.peer, "the connection broke earlier".into()))?;
        let id = conn.next_id;
        conn.next_id += 1;
        let body = encode(request);
        if body.len() > MAX_FRAME_BODY {
            return Err(Error::InvalidArgument(format!(
                "{} request of {} bytes exceeds the frame limit",
                request.name(),
                body.len()
            )));
        }
        let exchanged = write_frame(&mut conn.writer, id, &body)
            .map_err(FrameError::from)
            .and_then(|()| read_frame(&mut conn.reader));
        let frame = match exchanged {
            Ok(frame) => frame,
            Err(e) => {
                *guard = None;
                return Err(connection(&self.peer, format!("{}: {e}", request.name())));
            }
        };
        if frame.request_id != id {
            *guard = None;
            return Err(connection(
                &self.peer,
                format!(
                    "response to request {} arrived for request {id}",
                    frame.request_id
                ),
            ));
        }
        match decode::<Response>(&frame.body) {
            Ok(Response::Failed(error)) => Err(error.into()),
            Ok(response) => Ok(response),
            Err(e) => {
                *guard = None;
                Err(connection(
                    &self.peer,
                    format!("malformed response to {}: {e}", request.name()),
                ))
            }
        }
    }

    fn unexpected(&self, what: &str, response: &Response) -> Error {
        connection(
            &self.peer,
            format!("unexpected response to {what}: {response:?}"),
        )
    }

    fn expect_done(&self, what: &str, request: &Request) -> Result<()> {
        match self.call(request)? {
            Response::Done => Ok(()),
            other => Err(self.unexpected(what, &other)),
        }
    }

    /// Pages per request so a frame stays under the limit.
    fn pages_per_frame(&self) -> usize {
        (MAX_FRAME_BODY / (self.welcome.page_size + 32)).max(1) - 1
    }

    fn wire_pages(pages: &[ShippedPage<'_>]) -> Vec<WirePage> {
        pages
            .iter()
            .map(|p| WirePage {
                page: p.page.0,
                logged: p.logged,
                image: p.image.to_vec(),
            })
            .collect()
    }

    fn lsns(&self, response: Response, what: &str) -> Result<Vec<Lsn>> {
        match response {
            Response::Lsns(lsns) => Ok(lsns.into_iter().map(Lsn).collect()),
            other => Err(self.unexpected(what, &other)),
        }
    }
}

fn connection(peer: &str, reason: String) -> Error {
    Error::Connection {
        peer: peer.to_string(),
        reason,
    }
}

impl Drop for RemotePageServer {
    fn drop(&mut self) {
        // Closing the socket is the goodbye: the server aborts what this connection left open.
        if let Ok(mut guard) = self.conn.lock() {
            guard.take();
        }
    }
}

impl PageServer for RemotePageServer {
    fn page_size(&self) -> usize {
        self.welcome.page_size
    }

    fn volume_id(&self) -> VolumeId {
        self.welcome.volume
    }

    fn root_directory(&self) -> Oid {
        self.welcome.root_directory
    }

    fn begin(&self) -> Result<TxnId> {
        match self.call(&Request::Begin)? {
            Response::Txn(txn) => Ok(TxnId(txn)),
            other => Err(self.unexpected("begin", &other)),
        }
    }

    fn lock_page(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<Lsn> {
        let request = Request::LockPage {
            txn: txn.0,
            page: page.0,
            exclusive: mode == LockMode::Exclusive,
        };
        match self.call(&request)? {
            Response::Lsn(lsn) => Ok(Lsn(lsn)),
            other => Err(self.unexpected("lock-page", &other)),
        }
    }

    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()> {
        match self.call(&Request::FetchPage {
            txn: txn.0,
            page: page.0,
        })? {
            Response::Page(image) if image.len() == buf.len() => {
                buf.copy_from_slice(&image);
                Ok(())
            }
            other => Err(self.unexpected("fetch-page", &other)),
        }
    }

    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>> {
        let request = Request::FindSpace {
            txn: txn.0,
            bytes: bytes as u64,
            skip: skip.iter().map(|p| p.0).collect(),
        };
        match self.call(&request)? {
            Response::Space(found) => Ok(found.map(|(page, lsn)| (PageId(page), Lsn(lsn)))),
            other => Err(self.unexpected("find-space", &other)),
        }
    }

    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>> {
        match self.call(&Request::AllocatePages { txn: txn.0, count })? {
            Response::Extents(extents) => Ok(extents
                .into_iter()
                .map(|(first, count)| Extent {
                    first: PageId(first),
                    count,
                })
                .collect()),
            other => Err(self.unexpected("allocate-pages", &other)),
        }
    }

    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        let request = Request::FreePages {
            txn: txn.0,
            pages: pages.iter().map(|p| p.0).collect(),
        };
        self.expect_done("free-pages", &request)
    }

    fn ship_log_records(&self, txn: TxnId, records: &PageUpdates) -> Result<()> {
        // Frames stay under the limit: a batch too large for one goes in several, in order.
        let mut chunk = WireUpdates::default();
        for update in records.iter() {
            let size = WIRE_UPDATE_FIXED_BYTES + update.before.len() + update.after.len();
            if chunk.bytes.len() + WIRE_UPDATE_FIXED_BYTES * chunk.records.len() + size
                > MAX_FRAME_BODY / 2
                && !chunk.records.is_empty()
            {
                self.ship_wire_updates(txn, std::mem::take(&mut chunk))?;
            }
            chunk
                .records
                .push((update.page.0, update.offset, update.after.len() as u32));
            chunk.bytes.extend_from_slice(update.before);
            chunk.bytes.extend_from_slice(update.after);
        }
        if chunk.records.is_empty() {
            return Ok(());
        }
        self.ship_wire_updates(txn, chunk)
    }

    fn ship_object_updates(&self, txn: TxnId, records: &[ObjectUpdate]) -> Result<()> {
        self.send_in_batches(
            "ship-object-updates",
            records,
            |r| r.after.len() + 24,
            |r| WireObjectUpdate {
                oid: r.oid.0,
                offset: r.offset,
                after: r.after.clone(),
            },
            |records| Request::ShipObjectUpdates {
                txn: txn.0,
                records,
            },
        )
    }

    fn ship_dirty_pages(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<Vec<Lsn>> {
        let mut lsns = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(self.pages_per_frame()) {
            let request = Request::ShipDirtyPages {
                txn: txn.0,
                pages: Self::wire_pages(chunk),
            };
            let response = self.call(&request)?;
            lsns.extend(self.lsns(response, "ship-dirty-pages")?);
        }
        Ok(lsns)
    }

    fn commit(&self, txn: TxnId) -> Result<Lsn> {
        match self.call(&Request::Commit { txn: txn.0 })? {
            Response::Lsn(lsn) => Ok(Lsn(lsn)),
            other => Err(self.unexpected("commit", &other)),
        }
    }

    fn ship_and_commit(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<(Vec<Lsn>, Lsn)> {
        let per_frame = self.pages_per_frame();
        let split = pages.len().saturating_sub(per_frame);
        let mut lsns = if split > 0 {
            self.ship_dirty_pages(txn, &pages[..split])?
        } else {
            Vec::new()
        };
        let request = Request::ShipAndCommit {
            txn: txn.0,
            pages: Self::wire_pages(&pages[split..]),
        };
        match self.call(&request)? {
            Response::Committed { pages, commit } => {
                lsns.extend(pages.into_iter().map(Lsn));
                Ok((lsns, Lsn(commit)))
            }
            other => Err(self.unexpected("ship-and-commit", &other)),
        }
    }

    fn abort(&self, txn: TxnId) -> Result<()> {
        self.expect_done("abort", &Request::Abort { txn: txn.0 })
    }
}
