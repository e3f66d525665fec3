//! Reading ahead in the archive: where Thor reads one snapshot page per round trip (Moh
//! section 6.6: a remote archive at 1 ms a read made T1 as of a snapshot 60% slower), a read
//! of the past that must go to the archive asks, in the same `get_many`, for the copies of the
//! next pages (in page order, where OO7's clustering puts what a traversal reads next) that
//! the page map says changed since the snapshot. Their answers wait in a bounded cache (the
//! oldest answers leave first), so that no copy is fetched twice while it is there.
//!
//! Why a cached answer stays right: a copy is the page as of its time, and the oldest copy at
//! or after a snapshot's time cannot change once the archive holds one. Copies are made in
//! time order and archived in the order made, so when the archive holds a copy at `a`, every
//! copy between the snapshot and `a` was archived before it; a copy made later has a later
//! time. Removal takes only copies no snapshot reads, and a cached answer is dropped when its
//! copy is removed all the same, and when a copy of its page is put (the retry of a put that
//! failed part way may bring an older copy after the newer one was read ahead).

use super::{Archive, PageCopy};
use lodestore_core::{PageId, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Most copies one read may ask for.
pub const READ_AHEAD_MAX: usize = 256;
/// Bytes of copies the cache holds at most (and at least one batch).
pub const CACHE_BYTES_MAX: usize = 16 << 20;
/// Pages of the page map looked at past the one read, per copy wanted, when choosing the
/// pages to read ahead (most pages in a traversal's way changed or none did).
const SCAN_PER_COPY: usize = 8;

/// An archive that reads ahead; see the module's documentation.
pub struct ReadAhead {
    inner: Arc<dyn Archive>,
    /// Copies per read, the one asked for included.
    copies: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Every page's newest copy time, from the archive's listing and the puts since; `None`
    /// while the archive has not listed its pages (then nothing is read ahead).
    newest: Option<BTreeMap<PageId, u64>>,
    /// (page, time asked) -> (copy time, image), answers read ahead.
    cached: HashMap<(PageId, u64), Answer>,
    /// The keys of `cached`, oldest first, to leave in that order.
    order: VecDeque<(PageId, u64)>,
}

/// A copy read ahead: its time and image.
type Answer = (u64, Box<[u8]>);

impl State {
    fn insert(&mut self, key: (PageId, u64), time: u64, image: &[u8], max: usize) {
        if self.cached.contains_key(&key) {
            return;
        }
        while self.order.len() >= max {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.cached.remove(&oldest);
        }
        self.cached.insert(key, (time, image.into()));
        self.order.push_back(key);
        debug_assert_eq!(self.cached.len(), self.order.len());
    }
}

impl ReadAhead {
    /// `inner`, reading `copies` copies (at most `READ_AHEAD_MAX`) per read of the past.
    pub fn new(inner: Arc<dyn Archive>, copies: usize) -> ReadAhead {
        assert!(
            (1..=READ_AHEAD_MAX).contains(&copies),
            "read-ahead of {copies} copies; 1 to {READ_AHEAD_MAX}"
        );
        ReadAhead {
            inner,
            copies,
            state: Mutex::default(),
        }
    }

    /// `inner` reading ahead as many copies as it prefers, or as asked; `inner` itself
    /// when that is one.
    pub fn wrap(inner: Arc<dyn Archive>, copies: Option<usize>) -> Arc<dyn Archive> {
        let copies = copies
            .unwrap_or_else(|| inner.read_ahead())
            .min(READ_AHEAD_MAX);
        if copies <= 1 {
            inner
        } else {
            Arc::new(ReadAhead::new(inner, copies))
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pages after `page` whose copies a read as of `time_us` comes from the archive for
    /// and that are not cached yet.
    fn pages_ahead(&self, state: &State, page: PageId, time_us: u64) -> Vec<PageId> {
        let Some(newest) = &state.newest else {
            return Vec::new();
        };
        let wanted = self.copies - 1;
        newest
            .range(PageId(page.0.saturating_add(1))..)
            .take(wanted * SCAN_PER_COPY)
            .filter(|&(&ahead, &time)| {
                time >= time_us && ahead != page && !state.cached.contains_key(&(ahead, time_us))
            })
            .map(|(&ahead, _)| ahead)
            .take(wanted)
            .collect()
    }
}

impl Archive for ReadAhead {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let put = self.inner.put(copies);
        // Whatever the outcome, answers cached for these pages go: a put that failed part
        // way may have stored a newer copy without an older one, and an answer read ahead
        // then (the newer copy) is wrong once the older one arrives.
        let mut state = self.state();
        let pages: std::collections::HashSet<PageId> = copies.iter().map(|c| c.page).collect();
        let State { cached, order, .. } = &mut *state;
        cached.retain(|(page, _), _| !pages.contains(page));
        order.retain(|key| cached.contains_key(key));
        put?;
        if let Some(newest) = &mut state.newest {
            for copy in copies {
                let held = newest.entry(copy.page).or_insert(copy.time_us);
                *held = (*held).max(copy.time_us);
            }
        }
        Ok(())
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let ahead = {
            let state = self.state();
            if let Some((time, image)) = state.cached.get(&(page, time_us)) {
                buf.copy_from_slice(image);
                return Ok(Some(*time));
            }
            self.pages_ahead(&state, page, time_us)
        };
        if ahead.is_empty() {
            return self.inner.get(page, time_us, buf);
        }
        let page_size = buf.len();
        let wants: Vec<(PageId, u64)> = std::iter::once(page)
            .chain(ahead)
            .map(|p| (p, time_us))
            .collect();
        let mut bufs = vec![0u8; wants.len() * page_size];
        let found = self.inner.get_many(&wants, &mut bufs)?;
        assert_eq!(found.len(), wants.len(), "an answer per copy asked for");
        let mut images = bufs.chunks_exact(page_size);
        let first = images.next().expect("the page asked for is first");
        buf.copy_from_slice(first);
        let max = (CACHE_BYTES_MAX / page_size).max(self.copies);
        let mut state = self.state();
        for ((&(ahead, _), image), time) in wants[1..].iter().zip(images).zip(&found[1..]) {
            if let Some(time) = *time {
                state.insert((ahead, time_us), time, image, max);
            }
        }
        Ok(found[0])
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        self.inner.get_many(wants, bufs)
    }

    fn read_ahead(&self) -> usize {
        self.copies
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        self.inner.get_ts(page)
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        let listed = self.inner.newest_times();
        self.state().newest = listed.as_ref().map(|l| l.iter().copied().collect());
        listed
    }

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        self.inner.list()
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        {
            let mut state = self.state();
            state
                .cached
                .retain(|&(page, _), &mut (time, _)| !copies.contains(&(page, time)));
            let State { cached, order, .. } = &mut *state;
            order.retain(|key| cached.contains_key(key));
        }
        self.inner.remove(copies)
    }

    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }

    fn unavailable(&self) -> Option<String> {
        self.inner.unavailable()
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::{check_contract, image};
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An archive in memory that counts its round trips.
    #[derive(Default)]
    struct Counted {
        copies: Mutex<BTreeMap<(PageId, u64), Vec<u8>>>,
        round_trips: AtomicUsize,
    }

    impl Archive for Counted {
        fn name(&self) -> String {
            "counted".into()
        }
        fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
            let mut held = self.copies.lock().unwrap();
            for c in copies {
                held.insert((c.page, c.time_us), c.image.to_vec());
            }
            Ok(())
        }
        fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            let held = self.copies.lock().unwrap();
            Ok(held
                .range((page, time_us)..=(page, u64::MAX))
                .next()
                .map(|(&(_, time), image)| {
                    buf.copy_from_slice(image);
                    time
                }))
        }
        fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
            // One round trip for the lot.
            let page_size = bufs.len() / wants.len();
            let found = wants
                .iter()
                .zip(bufs.chunks_exact_mut(page_size))
                .map(|(&(page, time), buf)| {
                    let held = self.copies.lock().unwrap();
                    held.range((page, time)..=(page, u64::MAX))
                        .next()
                        .map(|(&(_, t), image)| {
                            buf.copy_from_slice(image);
                            t
                        })
                })
                .collect();
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            Ok(found)
        }
        fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
            let held = self.copies.lock().unwrap();
            Ok(held
                .keys()
                .filter(|(p, _)| *p == page)
                .map(|&(_, t)| t)
                .max())
        }
        fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
            let held = self.copies.lock().unwrap();
            let mut newest: BTreeMap<PageId, u64> = BTreeMap::new();
            for &(page, time) in held.keys() {
                newest.insert(page, time);
            }
            Some(newest.into_iter().collect())
        }
        fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
            let mut held = self.copies.lock().unwrap();
            for key in copies {
                held.remove(key);
            }
            Ok(())
        }
        fn bytes(&self) -> u64 {
            self.copies
                .lock()
                .unwrap()
                .values()
                .map(|v| v.len() as u64)
                .sum()
        }
    }

    #[test]
    fn reading_ahead_meets_the_contract() {
        let archive = ReadAhead::new(Arc::new(Counted::default()), 8);
        archive.newest_times();
        check_contract(&archive, 64).unwrap();
    }

    /// A scan of 64 changed pages as of a snapshot takes 64 / 8 round trips, reads every
    /// copy right (the oldest at or after the snapshot, or none for pages not changed since),
    /// and a removed copy is never served from the cache.
    #[test]
    fn a_scan_reads_the_right_copies_in_a_round_trip_per_batch() {
        let inner = Arc::new(Counted::default());
        let size = 64;
        let (mut labels, mut images) = (Vec::new(), Vec::new());
        for page in 0..64u32 {
            // Pages changed after the snapshot at 100 (copies at 100 and 200); every fourth
            // page changed only before it (a copy at 50: the current page serves).
            let times: &[u64] = if page % 4 == 3 { &[50] } else { &[100, 200] };
            for &time in times {
                labels.push((PageId(page), time));
                images.push(image(PageId(page), time, size));
            }
        }
        inner
            .put(&super::super::page_copies(&labels, &images))
            .unwrap();
        let archive = ReadAhead::new(inner.clone(), 8);
        archive.newest_times();
        let mut buf = vec![0u8; size];
        for page in 0..64u32 {
            let got = archive.get(PageId(page), 90, &mut buf).unwrap();
            let want = if page % 4 == 3 { None } else { Some(100) };
            assert_eq!(got, want, "page {page}");
            if let Some(time) = want {
                assert_eq!(buf, image(PageId(page), time, size), "page {page}");
            }
        }
        // 48 pages with copies after the snapshot, 8 a round trip (the 16 without one asked
        // alone: they are not in the page map's way).
        let trips = inner.round_trips.load(Ordering::Relaxed);
        assert!(trips <= 48 / 8 + 16, "{trips} round trips");
        assert!(trips < 64, "{trips} round trips");
        // Read ahead, then the copy removed: the cache does not serve it.
        archive.get(PageId(0), 150, &mut buf).unwrap();
        archive.remove(&[(PageId(1), 200)]).unwrap();
        assert_eq!(archive.get(PageId(1), 150, &mut buf).unwrap(), None);
        // Read ahead, then an older copy put (as the retry of a put that stored only the
        // newer one): the cache does not serve the newer one.
        archive.get(PageId(4), 150, &mut buf).unwrap();
        let older = image(PageId(5), 160, size);
        archive
            .put(&[PageCopy {
                page: PageId(5),
                time_us: 160,
                image: &older,
            }])
            .unwrap();
        assert_eq!(archive.get(PageId(5), 150, &mut buf).unwrap(), Some(160));
        assert_eq!(buf, older);
    }
}
