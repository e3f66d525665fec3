//! Counters a server keeps, for `info` and the benchmark reports. Lock waits, deadlocks and
//! timeouts are counted by the lock manager (`LockStats`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    pub pages_read: u64,
    pub pages_written: u64,
    /// Pages of `pages_written` that went through the double-write file first.
    #[serde(default)]
    pub pages_double_written: u64,
    /// New pages of large shipments written to the data file at once, logged only by number
    /// (`ServerOptions::pages_home_min`); counted in `pages_written` too.
    #[serde(default)]
    pub new_pages_written_home: u64,
    pub pages_fetched_by_clients: u64,
    pub dirty_pages_shipped: u64,
    /// Log records clients generated and shipped themselves.
    pub log_records_shipped: u64,
    pub pool_hits: u64,
    pub pool_evictions: u64,
    pub commits: u64,
    pub aborts: u64,
    pub checkpoints: u64,
    /// Page images appended to the log (whole-page logging: every change logged; ESM and
    /// redo: the first change of a fresh page).
    pub page_images_logged: u64,
    /// Whole-page logging: pages read back from the log (evicted and used again, or installed).
    pub pages_reread_from_log: u64,
    /// Whole-page logging: committed pages written from the log to their home location.
    pub pages_installed: u64,
    /// Whole-page logging: dirty pages evicted without a write home, their commit not yet
    /// durable (the installer takes them home later from the log).
    #[serde(default)]
    pub pages_evicted_unwritten: u64,
    /// Multi-level transactions: subtransactions committed (their EOS).
    #[serde(default)]
    pub subtransactions: u64,
    /// Multi-level transactions that ended, and the pages of their persistence spheres
    /// (Hasse & Weikum section 2) in all and at most.
    #[serde(default)]
    pub spheres: u64,
    #[serde(default)]
    pub sphere_pages: u64,
    /// The largest since the server started or the last `Server::take_sphere_pages_max`.
    #[serde(default)]
    pub sphere_pages_max: u64,
    /// Deferred page writes (the database-cache method, `dbcache`): atomic writes of page
    /// after-images to the log (each ending with its EOS record), the page images they held,
    /// and the writes a page leaving the pool forced.
    #[serde(default)]
    pub after_image_writes: u64,
    #[serde(default)]
    pub after_images_written: u64,
    #[serde(default)]
    pub spheres_forced_by_eviction: u64,
    /// Spheres written at a subtransaction's end for reaching `sphere_write_pages`.
    #[serde(default)]
    pub spheres_written_early: u64,
}
