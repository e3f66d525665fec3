//! The snapshot archive's interface (Moh chapter 4, section 4.1): `put` a page copy labelled
//! with a snapshot time, `get` the oldest copy at or after a time (a copy made for one snapshot
//! also serves every older one back to the previous copy, since the page did not change in
//! between), and `get_ts`, the newest time held for a page. It sits here, below the snapshot
//! component and the network crate, so that an archive can be served over the network and
//! reached through it: the backends live with what they need (the local archive in
//! `lodestore-snapshots`, archive nodes in `lodestore-net`).

mod read_ahead;
mod traffic;

pub use read_ahead::{ReadAhead, READ_AHEAD_MAX};
pub use traffic::{Traffic, TrafficCounters};

use lodestore_core::{PageId, Result};

/// The page size of a batch of reads into `bufs`, one page-sized buffer per copy wanted;
/// `None` for an empty batch.
pub fn batch_page_size(wants: &[(PageId, u64)], bufs: &[u8]) -> Option<usize> {
    if wants.is_empty() {
        return None;
    }
    assert_eq!(
        bufs.len() % wants.len(),
        0,
        "one page-sized buffer per copy"
    );
    Some(bufs.len() / wants.len())
}

/// A page copy to archive.
#[derive(Clone, Copy, Debug)]
pub struct PageCopy<'a> {
    pub page: PageId,
    /// The snapshot the copy was made for.
    pub time_us: u64,
    pub image: &'a [u8],
}

/// The copies labelled `labels` (page, time) with `images` in the same order.
pub fn page_copies<'a>(labels: &[(PageId, u64)], images: &'a [Vec<u8>]) -> Vec<PageCopy<'a>> {
    assert_eq!(labels.len(), images.len(), "one image per label");
    labels
        .iter()
        .zip(images)
        .map(|(&(page, time_us), image)| PageCopy {
            page,
            time_us,
            image,
        })
        .collect()
}

/// A snapshot archive.
pub trait Archive: Send + Sync {
    /// A name for errors and reports (the path of a local archive, the address of a remote).
    fn name(&self) -> String;

    /// Where the copies are, as the store records it to notice being opened with another
    /// archive later: stable across moves of the store (the local archive's is `local`, its
    /// path moves with the store); a remote archive's names its nodes. A wrapper (adding
    /// latency, say) returns its inner archive's.
    fn location(&self) -> String {
        self.name()
    }

    /// Stores the copies; returns once all are durable.
    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()>;

    /// Copies into `buf` the oldest copy of `page` whose time is at or after `time_us`, and
    /// returns that copy's time; `None` when there is none (the current page serves).
    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>>;

    /// The newest time held for `page`, if any.
    fn get_ts(&self, page: PageId) -> Result<Option<u64>>;

    /// `get` for each of `wants`, the images in the page-sized chunks of `bufs` in turn.
    /// Backends whose reads are round trips override it to overlap them (object storage sends
    /// them at once); the default reads one after the other.
    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        let Some(page_size) = batch_page_size(wants, bufs) else {
            return Ok(Vec::new());
        };
        wants
            .iter()
            .zip(bufs.chunks_exact_mut(page_size))
            .map(|(&(page, time_us), buf)| self.get(page, time_us, buf))
            .collect()
    }

    /// Copies worth reading per read of the past by default (`ReadAhead`): the copy asked
    /// for and those of the next pages a traversal is likely to want. 1, no reading ahead,
    /// where a read is cheap (a local file); more where each read is a round trip that
    /// `get_many` overlaps.
    fn read_ahead(&self) -> usize {
        1
    }

    /// The newest time held for every page, when the backend can list them cheaply (a local
    /// index can; a remote store would answer `get_ts` page by page instead).
    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        None
    }

    /// Every copy held (page, time), when the backend can list them cheaply; `None` means it
    /// cannot, and retention then reclaims only what the snapshot log still holds.
    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        None
    }

    /// Forgets copies no snapshot reads any more, and reclaims their space when it can. A
    /// crash may bring some back; that costs space, never a wrong page (a copy is the page as
    /// of its time, whoever reads it).
    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()>;

    /// Bytes the archive holds.
    fn bytes(&self) -> u64;

    /// Why the archive cannot serve at all, if it cannot (missing or damaged beyond use).
    fn unavailable(&self) -> Option<String> {
        None
    }
}

/// A page copy as one self-checking blob, for backends that keep copies as opaque objects
/// (object storage, peer-to-peer records): a header naming the page and the time, so a blob
/// stored or served under the wrong key is caught, and a checksum over header and image.
pub mod sealed {
    use lodestore_core::checksum::crc32c_two;
    use lodestore_core::PageId;

    /// First bytes of every sealed copy.
    pub const MAGIC: [u8; 8] = *b"LSPGCOPY";
    /// The format version written; readers refuse others by name.
    pub const VERSION: u32 = 1;
    /// Header bytes before the image: magic, version, page, time, image length, checksum.
    pub const HEADER_BYTES: usize = 8 + 4 + 4 + 8 + 4 + 4;

    /// The blob for the copy of `page` at `time_us`.
    pub fn seal(page: PageId, time_us: u64, image: &[u8]) -> Vec<u8> {
        let len = u32::try_from(image.len()).expect("a page image is far below 4 GiB");
        let mut blob = Vec::with_capacity(HEADER_BYTES + image.len());
        blob.extend_from_slice(&MAGIC);
        blob.extend_from_slice(&VERSION.to_le_bytes());
        blob.extend_from_slice(&page.0.to_le_bytes());
        blob.extend_from_slice(&time_us.to_le_bytes());
        blob.extend_from_slice(&len.to_le_bytes());
        let crc = crc32c_two(&blob, image);
        blob.extend_from_slice(&crc.to_le_bytes());
        blob.extend_from_slice(image);
        debug_assert_eq!(blob.len(), HEADER_BYTES + image.len());
        blob
    }

    /// The page, time and image length `blob`'s header claims, unchecked (`open` with them
    /// checks them): for holders of copies that know neither the key nor the page size (a
    /// peer-to-peer archive's peers). `None` when `blob` is too short to have a header.
    pub fn label(blob: &[u8]) -> Option<(PageId, u64, usize)> {
        if blob.len() < HEADER_BYTES {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes(blob[at..at + 4].try_into().expect("4 bytes"));
        let time = u64::from_le_bytes(blob[16..24].try_into().expect("8 bytes"));
        Some((PageId(u32_at(12)), time, u32_at(24) as usize))
    }

    /// The image of `blob`, checked to be the copy of `page` at `time_us` of `page_size`
    /// bytes; the reason when it is not.
    pub fn open(
        blob: &[u8],
        page: PageId,
        time_us: u64,
        page_size: usize,
    ) -> Result<&[u8], String> {
        if blob.len() < HEADER_BYTES || blob[..8] != MAGIC {
            return Err(format!(
                "not a sealed page copy ({} bytes, no {:?} header)",
                blob.len(),
                std::str::from_utf8(&MAGIC).unwrap_or("magic")
            ));
        }
        let u32_at = |at: usize| u32::from_le_bytes(blob[at..at + 4].try_into().expect("4 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "sealed copy format version {version}; this build reads version {VERSION}"
            ));
        }
        let (held_page, len, crc) = (u32_at(12), u32_at(24) as usize, u32_at(28));
        let held_time = u64::from_le_bytes(blob[16..24].try_into().expect("8 bytes"));
        let image = &blob[HEADER_BYTES..];
        if crc != crc32c_two(&blob[..HEADER_BYTES - 4], image) {
            return Err("checksum mismatch".into());
        }
        if (held_page, held_time) != (page.0, time_us) {
            return Err(format!(
                "holds the copy of page {held_page} at time {held_time}"
            ));
        }
        if len != image.len() || len != page_size {
            return Err(format!(
                "image of {} bytes (header says {len}); pages here have {page_size}",
                image.len()
            ));
        }
        Ok(image)
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// A sealed copy opens to its image; any flipped bit or wrong label is refused.
            #[test]
            fn sealed_copies_open_to_their_image_and_refuse_damage(
                page in 0u32..1000,
                time in 0u64..u64::MAX / 2,
                image in proptest::collection::vec(any::<u8>(), 8..64),
                flip in any::<prop::sample::Index>(),
            ) {
                let blob = seal(PageId(page), time, &image);
                prop_assert_eq!(label(&blob), Some((PageId(page), time, image.len())));
                prop_assert_eq!(open(&blob, PageId(page), time, image.len()).unwrap(), &image[..]);
                prop_assert!(open(&blob, PageId(page + 1), time, image.len()).is_err());
                prop_assert!(open(&blob, PageId(page), time + 1, image.len()).is_err());
                prop_assert!(open(&blob, PageId(page), time, image.len() + 1).is_err());
                prop_assert!(open(&blob[..blob.len() - 1], PageId(page), time, image.len()).is_err());
                let mut damaged = blob.clone();
                let bit = flip.index(damaged.len() * 8);
                damaged[bit / 8] ^= 1 << (bit % 8);
                prop_assert!(open(&damaged, PageId(page), time, image.len()).is_err());
            }
        }
    }
}

/// The contract every backend meets, as a check its tests run against an empty archive of
/// pages of `page_size` bytes (at least 8): copies read back at, before, between and after
/// their times, a page never archived, `get_ts`, the listing of newest times where the
/// backend gives one, and removal. Returns the first broken rule.
pub mod conformance {
    use super::Archive;
    use lodestore_core::PageId;

    /// An image of `page_size` bytes that tells the copy (`page`, `time_us`) apart.
    pub fn image(page: PageId, time_us: u64, page_size: usize) -> Vec<u8> {
        let mut image = vec![(time_us % 251) as u8; page_size];
        image[..4].copy_from_slice(&page.0.to_le_bytes());
        image[4..8].copy_from_slice(&(time_us as u32).to_le_bytes());
        image
    }

    pub fn check_contract(archive: &dyn Archive, page_size: usize) -> Result<(), String> {
        let (p, q, never) = (PageId(9), PageId(3), PageId(8));
        let copies = [(p, 10), (p, 20), (q, 15)];
        let images: Vec<Vec<u8>> = copies
            .iter()
            .map(|&(page, time)| image(page, time, page_size))
            .collect();
        let put = super::page_copies(&copies, &images);
        archive.put(&put).map_err(|e| format!("put: {e}"))?;
        let mut buf = vec![0u8; page_size];
        let mut expect = |page: PageId, at: u64, want: Option<u64>| -> Result<(), String> {
            let got = archive
                .get(page, at, &mut buf)
                .map_err(|e| format!("get page {page} at {at}: {e}"))?;
            if got != want {
                return Err(format!(
                    "get page {page} at {at}: copy of time {got:?}, want {want:?}"
                ));
            }
            if let Some(time) = want {
                if buf != image(page, time, page_size) {
                    return Err(format!("get page {page} at {at}: wrong bytes"));
                }
            }
            Ok(())
        };
        expect(p, 5, Some(10))?; // before the first copy
        expect(p, 10, Some(10))?; // at a copy's time
        expect(p, 11, Some(20))?; // between two
        expect(p, 20, Some(20))?;
        expect(p, 21, None)?; // after the last: the current page serves
        expect(q, 0, Some(15))?;
        expect(never, 0, None)?; // never archived
                                 // Several at once, answers in the order asked.
        let mut bufs = vec![0u8; 3 * page_size];
        let found = archive
            .get_many(&[(p, 15), (never, 0), (q, 0)], &mut bufs)
            .map_err(|e| format!("get_many: {e}"))?;
        if found != [Some(20), None, Some(15)] {
            return Err(format!("get_many: times {found:?}"));
        }
        if bufs[..page_size] != image(p, 20, page_size)[..]
            || bufs[2 * page_size..] != image(q, 15, page_size)[..]
        {
            return Err("get_many: wrong bytes".into());
        }
        let ts = |page: PageId| {
            archive
                .get_ts(page)
                .map_err(|e| format!("get_ts {page}: {e}"))
        };
        if ts(p)? != Some(20) || ts(q)? != Some(15) || ts(never)?.is_some() {
            return Err("get_ts: wrong newest times".into());
        }
        if archive.bytes() == 0 {
            return Err("bytes: 0 while holding three copies".into());
        }
        // A backend that lists its newest times lists exactly the pages it holds.
        if let Some(mut listed) = archive.newest_times() {
            listed.sort_unstable();
            if listed != [(q, 15), (p, 20)] {
                return Err(format!("newest_times: {listed:?}"));
            }
        }
        archive
            .remove(&[(p, 10)])
            .map_err(|e| format!("remove: {e}"))?;
        expect(p, 5, Some(20))?; // the next copy serves
        expect(q, 0, Some(15))?;
        if ts(p)? != Some(20) {
            return Err("get_ts after a removal: wrong newest time".into());
        }
        Ok(())
    }
}
