//! What the server remembers about each active transaction.

use lodestore_core::PageId;
use std::collections::HashMap;

#[derive(Default)]
pub struct TxnState {
    /// Every page the transaction holds a lock on.
    pub locked: Vec<PageId>,
    /// Dirty pages the client shipped, latest image per page. Not on disk before commit.
    pub shipped: HashMap<PageId, Box<[u8]>>,
    /// Pages handed out by `allocate_pages` (reserved in the space map until the end).
    pub allocated: Vec<PageId>,
    /// Pages to format as free at commit.
    pub freed: Vec<PageId>,
}

impl TxnState {
    pub fn shipped_bytes(&self) -> usize {
        self.shipped.values().map(|p| p.len()).sum()
    }
}
