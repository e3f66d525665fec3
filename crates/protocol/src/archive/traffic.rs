//! Requests made and bytes moved by a remote archive, for reports (the as-of experiment gives
//! them per backend): counted as the backend goes, read at any time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests made and bytes moved since an archive was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub requests: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

/// The counters behind `Traffic`, shared by an archive's calls and tasks.
#[derive(Debug, Default)]
pub struct TrafficCounters {
    requests: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

impl TrafficCounters {
    pub fn count(&self, requests: u64, sent: u64, received: u64) {
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.bytes_sent.fetch_add(sent, Ordering::Relaxed);
        self.bytes_received.fetch_add(received, Ordering::Relaxed);
    }

    pub fn read(&self) -> Traffic {
        Traffic {
            requests: self.requests.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
        }
    }
}
