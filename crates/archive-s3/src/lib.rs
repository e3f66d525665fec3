//! A snapshot archive on S3-compatible object storage (Moh chapter 4: the archive may live on
//! storage other than the store's own disk), reached through the `object_store` crate, so AWS
//! S3, MinIO, Garage, Ceph and the rest serve alike.
//!
//! Layout: one object per page copy, its key naming the page and the time in fixed-width hex,
//! so keys sort as (page, time) do:
//!
//! ```text
//! <prefix>/pages/<page: 8 hex digits>/<time in µs: 16 hex digits>
//! ```
//!
//! The body is the copy sealed with its page, time and checksum
//! (`lodestore_protocol::archive::sealed`), so a damaged object or one under the wrong key is
//! refused by name, never served. Listing the whole prefix gives every page's newest time
//! when a store opens (one request per 1,000 copies) and an index of every copy, which this
//! archive's puts and removals keep up to date: "the oldest copy at or after a time" is then
//! one GET of the key the index names. Without the index, or when that object is gone
//! (removed by another process), it is two requests: a listing of the page's keys, then a GET
//! of the chosen one. `get_ts` is a listing of the page's keys.
//!
//! `object_store` is asynchronous and the engine is not: each archive keeps one tokio runtime
//! on threads of its own, and a call hands its work to that runtime and waits on a channel, so
//! no async reaches the engine and a caller inside another runtime does not panic. Every
//! request has a timeout, and retries are bounded (`RETRIES`, `REQUEST_TIMEOUT`).

pub mod servers;
mod url;

/// Requests made and bytes moved (`traffic()`).
pub use lodestore_protocol::archive::Traffic;
pub use url::{S3Url, S3_SCHEME};

use futures::stream::{StreamExt, TryStreamExt};
use lodestore_core::{Error, PageId, Result};
use lodestore_protocol::archive::{batch_page_size, sealed, Archive, PageCopy, TrafficCounters};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Longest one HTTP request may take before it counts as failed (and is retried).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest to wait for a connection to the endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Retries of a failed request (server errors, timeouts, dropped connections), with backoff.
pub const RETRIES: usize = 3;
/// Longest one archive call (a put of many copies included) may take in all.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Requests a put or a removal keeps in flight at once.
pub const REQUESTS_IN_FLIGHT: usize = 16;
/// Copies a read of the past asks for at once by default (`Archive::read_ahead`): the one
/// wanted and those of the next pages changed since the snapshot, their requests overlapped.
pub const READ_AHEAD: usize = 32;
/// Threads of the runtime that drives the requests.
const RUNTIME_THREADS: usize = 2;

/// A snapshot archive in an S3 bucket under a prefix; see the module's documentation.
pub struct S3Archive {
    store: Arc<AmazonS3>,
    /// Taken only when the archive is dropped.
    runtime: Option<tokio::runtime::Runtime>,
    url: S3Url,
    counters: Arc<TrafficCounters>,
    /// Every page's copy times, from the last full listing and this archive's puts and
    /// removals since (`None` until listed), so that a read of a copy it names is one GET.
    index: Mutex<Option<Index>>,
}

/// Page -> the times of its copies.
type Index = HashMap<PageId, BTreeSet<u64>>;

impl S3Archive {
    /// An archive at `url` (`s3://bucket/prefix?endpoint=http://host:port&region=...`).
    /// Credentials come from the environment, as AWS tools take them (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from the URL, so they stay out
    /// of command lines, errors and logs. Nothing is asked of the endpoint until first use,
    /// so a store opens while it is down.
    pub fn open(url: &str) -> Result<S3Archive> {
        Self::with_builder(S3Url::parse(url)?, AmazonS3Builder::from_env())
    }

    /// An archive at `url` reached with the keys given rather than the environment's.
    pub fn open_with_keys(url: &str, access_key: &str, secret_key: &str) -> Result<S3Archive> {
        let builder = AmazonS3Builder::new()
            .with_access_key_id(access_key)
            .with_secret_access_key(secret_key)
            .with_region("us-east-1");
        Self::with_builder(S3Url::parse(url)?, builder)
    }

    fn with_builder(url: S3Url, builder: AmazonS3Builder) -> Result<S3Archive> {
        let mut builder = builder.with_bucket_name(&url.bucket);
        if let Some(endpoint) = &url.endpoint {
            // Servers other than AWS take the bucket in the path, not in the host name.
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if let Some(region) = &url.region {
            builder = builder.with_region(region);
        }
        let client = ClientOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_allow_http(url.allows_http());
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: RETRIES,
            retry_timeout: REQUEST_TIMEOUT * (RETRIES as u32 + 1),
        };
        let store = builder
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|e| {
                Error::InvalidArgument(format!("archive {}: {}", url.location(), redact(&e)))
            })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("lodestore-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io(PathBuf::from(url.location()), "start the S3 runtime", e))?;
        Ok(S3Archive {
            store: Arc::new(store),
            runtime: Some(runtime),
            url,
            counters: Arc::default(),
            index: Mutex::new(None),
        })
    }

    /// Requests made and bytes moved since the archive was opened.
    pub fn traffic(&self) -> Traffic {
        self.counters.read()
    }

    /// Writes `bytes` under `key` as they are, for tests that damage a stored copy.
    #[doc(hidden)]
    pub fn overwrite_object(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let store = self.store.clone();
        let path = Path::from(key);
        self.run("a test overwrite", async move {
            store.put(&path, bytes.into()).await.map(|_| ())
        })
    }

    /// The key of the copy of `page` at `time_us`.
    pub fn copy_key(&self, page: PageId, time_us: u64) -> String {
        format!("{}{time_us:016x}", self.page_prefix(page))
    }

    fn page_prefix(&self, page: PageId) -> String {
        format!("{}{:08x}/", self.pages_prefix(), page.0)
    }

    fn pages_prefix(&self) -> String {
        match self.url.prefix.as_str() {
            "" => "pages/".into(),
            prefix => format!("{prefix}/pages/"),
        }
    }

    /// Runs `work` on the archive's runtime and waits for it from this (synchronous) thread.
    fn run<T, F>(&self, what: &str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = object_store::Result<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let runtime = self
            .runtime
            .as_ref()
            .expect("the runtime lives until the drop");
        runtime.spawn(async move {
            let outcome = tokio::time::timeout(CALL_TIMEOUT, work).await;
            // The caller may have given up waiting; nobody to tell then.
            let _ = tx.send(outcome);
        });
        match rx.recv() {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(e))) => Err(self.failed(what, &redact(&e))),
            Ok(Err(_elapsed)) => Err(self.failed(
                what,
                &format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
            )),
            Err(_) => Err(self.failed(what, "the request's task ended without an answer")),
        }
    }

    fn failed(&self, what: &str, why: &str) -> Error {
        Error::Connection {
            peer: self.url.location(),
            reason: format!("{what} failed: {why}"),
        }
    }

    fn index(&self) -> MutexGuard<'_, Option<Index>> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The oldest copy of `page` (of `page_size` bytes) at or after `time_us` (its time, key
    /// and sealed bytes), as work for the runtime: a GET of the copy the index names; without
    /// one (or when the object is gone), a listing of the page's keys, then a GET of the one
    /// chosen. An object longer than a sealed copy is refused before its body is read: a
    /// hostile or confused endpoint does not get to fill memory.
    fn fetch(
        &self,
        page: PageId,
        time_us: u64,
        page_size: usize,
    ) -> impl Future<Output = object_store::Result<Option<Found>>> + Send + 'static {
        let longest = (sealed::HEADER_BYTES + page_size) as u64;
        let store = self.store.clone();
        let counters = self.counters.clone();
        let prefix = self.page_prefix(page);
        let indexed = self
            .index()
            .as_ref()
            .and_then(|index| index.get(&page)?.range(time_us..).next().copied());
        async move {
            if let Some(time) = indexed {
                let key = format!("{prefix}{time:016x}");
                match store.get(&Path::from(key.as_str())).await {
                    Ok(reply) => {
                        let blob = bounded_body(reply, longest).await?;
                        counters.count(1, 0, blob.len() as u64);
                        return Ok(Some(Found { time, key, blob }));
                    }
                    // Removed since the listing (by another process): the listing decides.
                    Err(object_store::Error::NotFound { .. }) => counters.count(1, 0, 0),
                    Err(e) => return Err(e),
                }
            }
            let listed: Vec<_> = store
                .list(Some(&Path::from(prefix.as_str())))
                .try_collect()
                .await?;
            counters.count(1 + listed.len() as u64 / 1000, 0, 0);
            let best = listed
                .into_iter()
                .filter_map(|meta| {
                    let key = meta.location.to_string();
                    let time = parse_time(key.get(prefix.len()..)?)?;
                    (time >= time_us).then_some((time, key))
                })
                .min_by_key(|&(time, _)| time);
            let Some((time, key)) = best else {
                return Ok(None);
            };
            let blob = bounded_body(store.get(&Path::from(key.as_str())).await?, longest).await?;
            counters.count(1, 0, blob.len() as u64);
            Ok(Some(Found { time, key, blob }))
        }
    }

    /// The image of a copy found, checked to be the copy of `page` at its time, into `buf`.
    fn open_copy(&self, page: PageId, found: Found, buf: &mut [u8]) -> Result<u64> {
        let image = sealed::open(&found.blob, page, found.time, buf.len()).map_err(|reason| {
            Error::CorruptArchive {
                path: PathBuf::from(format!("{}/{}", self.url.bucket_url(), found.key)),
                page,
                time_us: found.time,
                reason,
            }
        })?;
        buf.copy_from_slice(image);
        Ok(found.time)
    }

    /// Every (time, key) stored under `prefix` of keys `<prefix><16 hex digits>`, with the
    /// objects' sizes; keys of other shapes are skipped with a warning (not ours to read).
    fn list_times(&self, page: PageId) -> Result<Vec<(u64, String)>> {
        let prefix = self.page_prefix(page);
        let listed = self.list_prefix("a listing of a page's copies", &prefix)?;
        Ok(listed
            .into_iter()
            .filter_map(|(key, _)| {
                let time = parse_time(&key[prefix.len()..])?;
                Some((time, key))
            })
            .collect())
    }

    /// Every key under `prefix` with its size.
    fn list_prefix(&self, what: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        let store = self.store.clone();
        let path = Path::from(prefix);
        let counters = self.counters.clone();
        self.run(what, async move {
            let listed: Vec<_> = store.list(Some(&path)).try_collect().await?;
            // One request per 1,000 keys, the most S3 returns at once.
            counters.count(1 + listed.len() as u64 / 1000, 0, 0);
            Ok(listed
                .into_iter()
                .map(|meta| (meta.location.to_string(), meta.size))
                .collect())
        })
    }

    /// Every copy held, as (page, time, size); the index is made afresh from it.
    fn list_all(&self) -> Result<Vec<(PageId, u64, u64)>> {
        let prefix = self.pages_prefix();
        let listed = self.list_prefix("a listing of the archive", &prefix)?;
        let mut copies = Vec::with_capacity(listed.len());
        for (key, size) in listed {
            match parse_copy_key(&key[prefix.len()..]) {
                Some((page, time)) => copies.push((page, time, size)),
                None => {
                    tracing::warn!(archive = %self.url.location(), key, "an object under the archive's prefix is not a page copy; left alone")
                }
            }
        }
        let mut index = Index::new();
        for &(page, time, _) in &copies {
            index.entry(page).or_default().insert(time);
        }
        *self.index() = Some(index);
        Ok(copies)
    }
}

/// The body of a GET's `reply`, refused unread when it is longer than `longest` bytes (the
/// length is the reply's Content-Length, which the HTTP client holds the body to).
async fn bounded_body(
    reply: object_store::GetResult,
    longest: u64,
) -> object_store::Result<bytes::Bytes> {
    if reply.meta.size > longest {
        return Err(object_store::Error::Generic {
            store: "S3",
            source: format!(
                "{}: an object of {} bytes where a page copy has at most {longest}",
                reply.meta.location, reply.meta.size
            )
            .into(),
        });
    }
    reply.bytes().await
}

/// A copy read: its time, its key and its sealed bytes.
struct Found {
    time: u64,
    key: String,
    blob: bytes::Bytes,
}

/// A time from 16 hex digits.
fn parse_time(digits: &str) -> Option<u64> {
    (digits.len() == 16)
        .then(|| u64::from_str_radix(digits, 16).ok())
        .flatten()
}

/// (page, time) from `<8 hex digits>/<16 hex digits>`.
fn parse_copy_key(rest: &str) -> Option<(PageId, u64)> {
    let (page, time) = rest.split_once('/')?;
    if page.len() != 8 {
        return None;
    }
    Some((
        PageId(u32::from_str_radix(page, 16).ok()?),
        parse_time(time)?,
    ))
}

/// An `object_store` error as a line that names no secret: its messages quote requests and
/// responses, never the credentials (it signs with them, it does not send them), but a URL
/// with a presigned query could carry a signature, so queries are cut.
fn redact(e: &object_store::Error) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    for word in text.split_inclusive(char::is_whitespace) {
        match word.find("?X-Amz-") {
            Some(at) => {
                out.push_str(&word[..at]);
                out.push_str("?<query cut>");
                if word.ends_with(char::is_whitespace) {
                    out.push(' ');
                }
            }
            None => out.push_str(word),
        }
    }
    // Bounded: a hostile endpoint's reply is no place to fill a log from.
    if out.len() > 400 {
        let mut cut = 400;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

impl Archive for S3Archive {
    fn name(&self) -> String {
        self.url.location()
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let blobs: Vec<(Path, bytes::Bytes)> = copies
            .iter()
            .map(|copy| {
                let key = self.copy_key(copy.page, copy.time_us);
                let blob = sealed::seal(copy.page, copy.time_us, copy.image);
                (Path::from(key), bytes::Bytes::from(blob))
            })
            .collect();
        let store = self.store.clone();
        let counters = self.counters.clone();
        let added: Vec<(PageId, u64)> = copies.iter().map(|c| (c.page, c.time_us)).collect();
        // A PUT is durable when S3 answers it; the put returns when every one has answered,
        // and the index names the copies before it returns (before the snapshot log lets
        // them go, so a read never finds a copy in neither).
        self.run("a put", async move {
            futures::stream::iter(blobs)
                .map(|(path, blob)| {
                    let (store, counters) = (store.clone(), counters.clone());
                    async move {
                        let len = blob.len() as u64;
                        store.put(&path, blob.into()).await?;
                        counters.count(1, len, 0);
                        Ok::<(), object_store::Error>(())
                    }
                })
                .buffer_unordered(REQUESTS_IN_FLIGHT)
                .try_collect::<Vec<()>>()
                .await
                .map(|_| ())
        })?;
        if let Some(index) = self.index().as_mut() {
            for (page, time) in added {
                index.entry(page).or_default().insert(time);
            }
        }
        Ok(())
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let fetch = self.fetch(page, time_us, buf.len());
        match self.run("a read of a page copy", fetch)? {
            Some(found) => self.open_copy(page, found, buf).map(Some),
            None => Ok(None),
        }
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        let Some(page_size) = batch_page_size(wants, bufs) else {
            return Ok(Vec::new());
        };
        let fetches: Vec<_> = wants
            .iter()
            .map(|&(page, time_us)| self.fetch(page, time_us, page_size))
            .collect();
        // The reads at once, REQUESTS_IN_FLIGHT at a time, answers in the order asked.
        let found = self.run("reads of page copies", async move {
            futures::stream::iter(fetches)
                .buffered(REQUESTS_IN_FLIGHT)
                .try_collect::<Vec<_>>()
                .await
        })?;
        wants
            .iter()
            .zip(found)
            .zip(bufs.chunks_exact_mut(page_size))
            .map(|((&(page, _), found), buf)| match found {
                Some(found) => self.open_copy(page, found, buf).map(Some),
                None => Ok(None),
            })
            .collect()
    }

    fn read_ahead(&self) -> usize {
        READ_AHEAD
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        Ok(self
            .list_times(page)?
            .into_iter()
            .map(|(time, _)| time)
            .max())
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        let copies = self
            .list_all()
            .map_err(|e| tracing::info!(archive = %self.url.location(), error = %e, "no listing of the archive; pages are asked for one by one"))
            .ok()?;
        let mut newest: std::collections::HashMap<PageId, u64> = Default::default();
        for (page, time, _) in copies {
            let held = newest.entry(page).or_insert(time);
            *held = (*held).max(time);
        }
        Some(newest.into_iter().collect())
    }

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        let copies = self
            .list_all()
            .map_err(|e| tracing::info!(archive = %self.url.location(), error = %e, "no listing of the archive; only the snapshot log's copies are reclaimed"))
            .ok()?;
        Some(
            copies
                .into_iter()
                .map(|(page, time, _)| (page, time))
                .collect(),
        )
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        let paths: Vec<object_store::Result<Path>> = copies
            .iter()
            .map(|&(page, time)| Ok(Path::from(self.copy_key(page, time))))
            .collect();
        let store = self.store.clone();
        let counters = self.counters.clone();
        let count = paths.len() as u64;
        // Out of the index first: a read of a copy the index does not name lists the page,
        // so a removal that then fails costs a listing, never a copy missed.
        if let Some(index) = self.index().as_mut() {
            for (page, time) in copies {
                if let Some(times) = index.get_mut(page) {
                    times.remove(time);
                }
            }
        }
        self.run("a removal", async move {
            // Bulk deletes of up to 1,000 keys a request; a key already gone is no error.
            let results: Vec<object_store::Result<Path>> = store
                .delete_stream(futures::stream::iter(paths).boxed())
                .collect()
                .await;
            counters.count(count.div_ceil(1000), 0, 0);
            for result in results {
                match result {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    }

    fn bytes(&self) -> u64 {
        // A figure for reports: a listing (one request per 1,000 copies).
        self.list_all()
            .map(|copies| copies.iter().map(|&(_, _, size)| size).sum())
            .unwrap_or(0)
    }
}

impl Drop for S3Archive {
    fn drop(&mut self) {
        // Requests still in flight belong to callers that gave up; do not wait for them.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_pages_and_times_and_parse_back() {
        let archive = S3Archive::open("s3://bkt/some/prefix?endpoint=http://127.0.0.1:1").unwrap();
        let key = archive.copy_key(PageId(0x1234), 0xabc);
        assert_eq!(key, "some/prefix/pages/00001234/0000000000000abc");
        let rest = &key[archive.pages_prefix().len()..];
        assert_eq!(parse_copy_key(rest), Some((PageId(0x1234), 0xabc)));
        assert!(archive.copy_key(PageId(1), 9) < archive.copy_key(PageId(1), 10));
        assert!(archive.copy_key(PageId(1), u64::MAX) < archive.copy_key(PageId(2), 0));
        for bad in [
            "1234/0abc",
            "00001234/xyz",
            "00001234",
            "0000123g/0000000000000abc",
        ] {
            assert_eq!(parse_copy_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_down_endpoint_fails_by_name_without_hanging() {
        // Nothing listens on port 1: every request fails at once, after bounded retries.
        let archive = S3Archive::open("s3://bkt/p?endpoint=http://127.0.0.1:1").unwrap();
        let mut buf = vec![0u8; 64];
        let err = archive.get(PageId(1), 0, &mut buf).unwrap_err().to_string();
        assert!(
            err.contains("s3://bkt/p") && err.contains("failed"),
            "{err}"
        );
        assert_eq!(archive.newest_times(), None);
        assert_eq!(archive.bytes(), 0);
    }
}
