//! The client cache: page frames in one anonymous memory mapping, a page table from page to
//! frame, and clock replacement. Frames are aligned to the operating system's pages, so a later
//! update detector can protect them one by one.

use lodestore_core::frames::{FrameId, FrameTable};
use lodestore_core::{Error, PageId, Result, TxnId};
use memmap2::MmapMut;

/// What the cache knows about one frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameState {
    /// Changed by the current transaction and not yet shipped to the server.
    pub dirty: bool,
    /// The transaction in which this copy was last confirmed current.
    pub validated_in: Option<TxnId>,
}

pub struct ClientCache {
    page_size: usize,
    arena: MmapMut,
    table: FrameTable,
    states: Vec<FrameState>,
}

/// A frame that had to be given up to make room, with its bytes if the server must get them.
pub struct Evicted {
    pub page: PageId,
    pub dirty: bool,
}

impl ClientCache {
    pub fn new(page_size: usize, frame_count: usize) -> Result<ClientCache> {
        if frame_count == 0 {
            return Err(Error::InvalidArgument(
                "client cache needs at least one page".into(),
            ));
        }
        let bytes = page_size.checked_mul(frame_count).ok_or_else(|| {
            Error::InvalidArgument(format!("client cache of {frame_count} pages is too large"))
        })?;
        let arena = MmapMut::map_anon(bytes)
            .map_err(|source| Error::io("client cache arena", "map", source))?;
        Ok(ClientCache {
            page_size,
            arena,
            table: FrameTable::new(frame_count),
            states: vec![FrameState::default(); frame_count],
        })
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    pub fn resident(&self) -> usize {
        self.table.len()
    }

    /// The frame holding `page`, if cached.
    #[inline]
    pub fn lookup(&mut self, page: PageId) -> Option<FrameId> {
        self.table.lookup(page)
    }

    /// A frame for `page` (not cached yet). If a dirty page had to leave, its bytes are still in
    /// the frame: the caller ships them (`frame_bytes`) before it writes the new page there.
    pub fn assign(&mut self, page: PageId) -> Result<(FrameId, Option<Evicted>)> {
        let assigned = self
            .table
            .assign(page, |_, _| true)
            .ok_or_else(|| Error::InvalidArgument("client cache has no frame to give".into()))?;
        let previous = self.states[assigned.frame];
        self.states[assigned.frame] = FrameState::default();
        let evicted = assigned.evicted.map(|old| Evicted {
            page: old,
            dirty: previous.dirty,
        });
        Ok((assigned.frame, evicted))
    }

    /// The frame holding `page`, without counting it as a use.
    pub fn peek(&self, page: PageId) -> Option<FrameId> {
        self.table.peek(page)
    }

    pub fn state(&self, frame: FrameId) -> FrameState {
        self.states[frame]
    }

    pub fn state_mut(&mut self, frame: FrameId) -> &mut FrameState {
        &mut self.states[frame]
    }

    pub fn frame(&self, frame: FrameId) -> &[u8] {
        &self.arena[frame * self.page_size..][..self.page_size]
    }

    pub fn frame_mut(&mut self, frame: FrameId) -> &mut [u8] {
        &mut self.arena[frame * self.page_size..][..self.page_size]
    }

    /// Forgets `page` (its frame becomes free), dirty or not.
    pub fn drop_page(&mut self, page: PageId) {
        if let Some(frame) = self.table.remove(page) {
            self.states[frame] = FrameState::default();
        }
    }

    /// Every cached page with its frame.
    pub fn pages(&self) -> Vec<(PageId, FrameId)> {
        self.table.pages().collect()
    }
}
