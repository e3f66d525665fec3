//! One measured run, as the reports and `summary.json` carry it, and the meter that fills it
//! from the counters of a session and its store.

use lodestore::{ClientStats, DetectionStats, Session, Store};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One measured transaction (or, for long-running OO1 transactions, one commit interval).
/// Flat, so the CSV has one column per field; fields an experiment does not use are empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    /// `oo7` or one of `oo1-lookup`, `oo1-traversal`, `oo1-update`, `oo1-long`.
    pub experiment: String,
    /// OO7 preset, or `oo1-N` for OO1 with N parts.
    pub preset: String,
    pub scheme: String,
    /// The server's recovery method: esm, redo or wpl.
    pub method: String,
    /// OO7 traversal or OO1 operation.
    pub traversal: String,
    pub clients: u32,
    /// Which client of the run this is (0-based).
    pub client: u32,
    /// Repetition, 1-based.
    pub run: u32,
    /// OO1: iteration of a cold-warm or hot series, 1-based.
    pub iteration: Option<u32>,
    /// OO1: `cold`, `warm` or `hot`; OO7: `warm`, or `cold` when asked for.
    pub temperature: String,
    pub recovery_buffer_bytes: u64,
    pub cache_bytes: u64,
    pub update_probability: Option<f64>,
    /// OO1 long-running transactions: hot traversals per commit.
    pub iterations_per_commit: Option<u32>,
    pub elapsed_ms: f64,
    /// Times the transaction was a deadlock victim and ran again (included in `elapsed_ms`).
    pub retries: u32,
    pub atomic_parts_visited: Option<u64>,
    pub parts_visited: Option<u64>,
    pub updates: u64,
    pub distinct_objects_modified: u64,
    pub distinct_composite_parts_visited: Option<u64>,
    pub log_records: u64,
    pub log_bytes: u64,
    pub pages_shipped: u64,
    pub log_pages_shipped: u64,
    /// Pages the server's log wrote per transaction. OO7 divides the log writes of all
    /// clients' measured transactions among them; OO1 meters its one client.
    pub server_log_pages_written: f64,
    pub pages_fetched: u64,
    /// Lock requests the client sent the server: each a round trip when the store is remote.
    pub lock_requests: u64,
    pub traps: u64,
    pub bytes_copied: u64,
    pub bytes_compared: u64,
    pub buffer_evictions: u64,
    /// Hosking's phases of the commit(s), in milliseconds.
    pub running_ms: f64,
    pub old_ms: f64,
    pub new_ms: f64,
    pub write_ms: f64,
    pub other_ms: f64,
}

/// Counters read before a measured piece of work; [`Meter::finish`] fills a record with the
/// differences. Server log pages are the bytes the store's log flushed, in pages.
pub struct Meter {
    client: ClientStats,
    detection: DetectionStats,
    log_bytes_flushed: u64,
}

impl Meter {
    pub fn start(store: &Store, session: &Session) -> Meter {
        Meter {
            client: session.stats(),
            detection: session.detection_stats(),
            log_bytes_flushed: store.log_stats().bytes_flushed,
        }
    }

    pub fn finish(
        &self,
        store: &Store,
        session: &Session,
        elapsed: Duration,
        record: &mut RunRecord,
    ) {
        let client = session.stats();
        let detection = session.detection_stats();
        record.elapsed_ms = ms(elapsed);
        record.log_records = detection.log_records - self.detection.log_records;
        record.log_bytes = detection.log_bytes - self.detection.log_bytes;
        record.traps = detection.traps - self.detection.traps;
        record.bytes_copied = detection.bytes_copied - self.detection.bytes_copied;
        record.bytes_compared = detection.bytes_compared - self.detection.bytes_compared;
        record.buffer_evictions = detection.buffer_evictions - self.detection.buffer_evictions;
        record.pages_shipped = client.pages_shipped - self.client.pages_shipped;
        record.log_pages_shipped = client.log_pages_shipped - self.client.log_pages_shipped;
        record.pages_fetched = client.pages_fetched - self.client.pages_fetched;
        record.lock_requests = client.lock_requests - self.client.lock_requests;
        let flushed = store.log_stats().bytes_flushed - self.log_bytes_flushed;
        record.server_log_pages_written = flushed as f64 / store.page_size() as f64;
        let phases = client.phases.since(&self.client.phases);
        record.running_ms = ms(phases.running);
        record.old_ms = ms(phases.old_objects);
        record.new_ms = ms(phases.new_objects);
        record.write_ms = ms(phases.write);
        record.other_ms = ms(phases.other);
    }
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
