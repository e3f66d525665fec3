//! An archive node (Moh section 4.3.1, storage nodes on the network): a server that keeps
//! page copies in an archive of its own (the local archive format, given by its caller) and
//! answers the archive requests over the project's framing, with the same handshake, tokens,
//! TLS, deadlines and limits as the page server (`crate::serve`'s connection loop).

use crate::auth::{Access, ServerAuth};
use crate::limits::ServeLimits;
use crate::message::{Request, Response, WireCopy};
use crate::serve::{serve_service, Service};
use lodestore_core::{Error, PageId, Result};
use lodestore_protocol::archive::{Archive, PageCopy};
use lodestore_server::RestartReport;
use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What an archive node names as its recovery method in the welcome: a client of a store
/// refuses such a server, and a store's archive client refuses anything else.
pub const ARCHIVE_NODE_METHOD: &str = "archive-node";

/// Most copies one `ArchiveGetMany` asks for; the answer must also fit half a frame.
pub const GET_MANY_MAX: usize = 256;

/// Copies of `page_size` bytes one `ArchiveGetMany` may ask for: at most `GET_MANY_MAX`, and
/// few enough that the answer stays within half a frame.
pub fn get_many_max(page_size: usize) -> usize {
    (crate::frame::MAX_FRAME_BODY / 2 / page_size.max(1)).clamp(1, GET_MANY_MAX)
}

/// Most copies one removal request names.
pub const REMOVE_COPIES_MAX: usize = 1 << 16;

/// Most pages a listing of newest times answers (12 bytes each on the wire, well under a
/// frame); a node holding copies of more pages answers that it cannot list them, and the
/// store asks page by page instead.
pub const NEWEST_TIMES_MAX: usize = 1 << 20;

/// Serves `archive` (holding pages of `page_size` bytes) on `listener` until `stop` is set,
/// as [`crate::serve::serve`] serves a store: a thread per connection, closed when it breaks
/// the protocol, stays silent past its deadline or exceeds a limit.
pub fn serve_archive(
    archive: Arc<dyn Archive>,
    page_size: usize,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    limits: ServeLimits,
    auth: ServerAuth,
) -> Result<usize> {
    assert!(page_size > 0, "an archive node holds pages of a known size");
    tracing::info!(archive = %archive.name(), page_size, "serving a snapshot archive");
    serve_service(listener, stop, limits, auth, move || ArchiveService {
        archive: archive.clone(),
        page_size,
    })
}

/// One client's connection to an archive node.
struct ArchiveService {
    archive: Arc<dyn Archive>,
    page_size: usize,
}

impl ArchiveService {
    fn put(&self, copies: &[WireCopy]) -> Result<()> {
        for copy in copies {
            if copy.image.len() != self.page_size {
                return Err(Error::InvalidArgument(format!(
                    "copy of page {} at {} has {} bytes; this archive holds pages of {}",
                    copy.page,
                    copy.time_us,
                    copy.image.len(),
                    self.page_size
                )));
            }
        }
        let copies: Vec<PageCopy<'_>> = copies
            .iter()
            .map(|c| PageCopy {
                page: PageId(c.page),
                time_us: c.time_us,
                image: &c.image,
            })
            .collect();
        self.archive.put(&copies)
    }
}

impl Service for ArchiveService {
    fn handle(&mut self, request: Request) -> Result<Response> {
        Ok(match request {
            Request::ArchivePut { copies } => {
                self.put(&copies)?;
                Response::Done
            }
            Request::ArchiveGet { page, time_us } => {
                let mut image = vec![0u8; self.page_size];
                let held = self.archive.get(PageId(page), time_us, &mut image)?;
                Response::Copy(held.map(|time_us| WireCopy {
                    page,
                    time_us,
                    image,
                }))
            }
            Request::ArchiveGetMany { wants } => {
                let max = get_many_max(self.page_size);
                if wants.len() > max {
                    return Err(Error::InvalidArgument(format!(
                        "{} copies in one read; at most {max} of {}-byte pages",
                        wants.len(),
                        self.page_size
                    )));
                }
                let wants: Vec<(PageId, u64)> =
                    wants.into_iter().map(|(p, t)| (PageId(p), t)).collect();
                let mut images = vec![0u8; wants.len() * self.page_size];
                let found = self.archive.get_many(&wants, &mut images)?;
                let copies = wants
                    .iter()
                    .zip(found)
                    .zip(images.chunks_exact(self.page_size.max(1)))
                    .map(|((&(page, _), time), image)| {
                        time.map(|time_us| WireCopy {
                            page: page.0,
                            time_us,
                            image: image.to_vec(),
                        })
                    })
                    .collect();
                Response::Copies(copies)
            }
            Request::ArchiveGetTs { page } => Response::Time(self.archive.get_ts(PageId(page))?),
            Request::ArchiveRemove { copies } => {
                if copies.len() > REMOVE_COPIES_MAX {
                    return Err(Error::InvalidArgument(format!(
                        "{} copies in one removal; at most {REMOVE_COPIES_MAX}",
                        copies.len()
                    )));
                }
                let copies: Vec<(PageId, u64)> =
                    copies.into_iter().map(|(p, t)| (PageId(p), t)).collect();
                self.archive.remove(&copies)?;
                Response::Done
            }
            Request::ArchiveBytes => Response::Bytes(self.archive.bytes()),
            Request::ArchiveNewestTimes => Response::NewestTimes(
                self.archive
                    .newest_times()
                    .filter(|times| times.len() <= NEWEST_TIMES_MAX)
                    .map(|times| times.into_iter().map(|(p, t)| (p.0, t)).collect()),
            ),
            other => {
                return Err(Error::Unsupported(format!(
                    "{}: this server is a snapshot archive node, not a store",
                    other.name()
                )))
            }
        })
    }

    fn welcome(&self, access: Access, server_proof: Option<Vec<u8>>) -> Response {
        Response::Welcome {
            page_size: self.page_size as u32,
            volume: 0,
            root_directory: 0,
            recovery_method: ARCHIVE_NODE_METHOD.into(),
            restart: RestartReport::default(),
            access,
            server_proof: server_proof.map(serde_bytes::ByteBuf::from),
        }
    }

    fn holds_state(&self) -> bool {
        false
    }

    fn close(&mut self, _peer: &str) {}
}

/// An archive node served by a thread of this process (a program that embeds one, tests,
/// benchmarks); stopped by [`RunningNode::stop`] or when dropped.
pub struct RunningNode {
    address: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<usize>>>,
}

impl RunningNode {
    /// Serves `archive` on `listener` from a new thread (see [`serve_archive`]).
    pub fn spawn(
        archive: Arc<dyn Archive>,
        page_size: usize,
        listener: TcpListener,
        limits: ServeLimits,
        auth: ServerAuth,
    ) -> Result<RunningNode> {
        let address = listener
            .local_addr()
            .map_err(|e| Error::io("archive node", "listen", e))?
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("lodestore-archive-node-{address}"))
            .spawn(move || serve_archive(archive, page_size, listener, flag, limits, auth))
            .map_err(|e| Error::io(&address, "spawn the archive node's thread", e))?;
        Ok(RunningNode {
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Stops serving and waits for the node's connections to end; returns the node's error,
    /// if serving failed.
    pub fn stop(&mut self) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(served)) => served.map(|_| ()),
            Some(Err(_)) => Err(Error::Remote(format!(
                "the archive node at {} panicked",
                self.address
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(address = %self.address, error = %e, "archive node stopped with an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_protocol::archive::conformance::image;

    /// A batch of reads answers in the order asked, and one past the bound is refused by
    /// name before anything is read.
    #[test]
    fn a_batch_of_reads_is_answered_in_order_and_bounded() {
        let fs = Arc::new(lodestore_storage::MemoryFileSystem::new());
        let local =
            lodestore_snapshots::LocalArchive::open(fs, std::path::Path::new("/a"), 512).unwrap();
        let bytes = image(PageId(3), 7, 512);
        local
            .put(&[PageCopy {
                page: PageId(3),
                time_us: 7,
                image: &bytes,
            }])
            .unwrap();
        let mut service = ArchiveService {
            archive: Arc::new(local),
            page_size: 512,
        };
        let answer = service
            .handle(Request::ArchiveGetMany {
                wants: vec![(4, 0), (3, 1), (3, 8)],
            })
            .unwrap();
        match answer {
            Response::Copies(copies) => {
                assert_eq!(copies.len(), 3);
                assert!(copies[0].is_none() && copies[2].is_none());
                let copy = copies[1].as_ref().unwrap();
                assert_eq!((copy.page, copy.time_us, &copy.image), (3, 7, &bytes));
            }
            other => panic!("{other:?}"),
        }
        let err = service
            .handle(Request::ArchiveGetMany {
                wants: vec![(3, 0); GET_MANY_MAX + 1],
            })
            .unwrap_err();
        assert!(err.to_string().contains("at most 256"), "{err}");
        // Large pages: fewer copies fit a frame.
        assert!(get_many_max(1 << 20) < GET_MANY_MAX);
        assert!(get_many_max(1 << 20) >= 1);
    }
}
