//! Large objects: objects too big for a slotted page live in runs of whole pages. The object's
//! slot holds a descriptor (its length and the page runs, "extents"); each data page carries the
//! owner's OID in its header so `check` can tie pages to objects.
//!
//! ```text
//! descriptor (payload of a record with the LARGE flag)
//!   0  8 length in bytes
//!   8  4 extent count
//!  12  4 reserved, 0
//!  16  8 per extent: u32 first page, u32 page count
//!
//! large-data page: common header, kind area = owner OID; bytes 32..page_size hold object bytes
//! ```

use crate::bytes::{get_u32, get_u64, put_u32, put_u64};
use crate::page::{self, PageKind, PAGE_HEADER_BYTES};
use lodestore_core::limits::OBJECT_BYTES_MAX;
use lodestore_core::{Oid, PageId, VolumeId};

pub const DESCRIPTOR_HEADER_BYTES: usize = 16;
pub const EXTENT_BYTES: usize = 8;

/// A run of consecutive pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub first: PageId,
    pub count: u32,
}

impl Extent {
    pub fn pages(self) -> impl Iterator<Item = PageId> {
        (self.first.0..self.first.0 + self.count).map(PageId)
    }
}

/// Where a large object's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub length: u64,
    pub extents: Vec<Extent>,
}

/// Object bytes one large-data page holds.
pub fn data_bytes_per_page(page_size: usize) -> usize {
    page_size - PAGE_HEADER_BYTES
}

/// Pages needed for `length` bytes.
pub fn pages_needed(length: u64, page_size: usize) -> u64 {
    length.div_ceil(data_bytes_per_page(page_size) as u64)
}

impl Descriptor {
    pub fn encoded_len(&self) -> usize {
        DESCRIPTOR_HEADER_BYTES + EXTENT_BYTES * self.extents.len()
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.encoded_len());
        put_u64(out, 0, self.length);
        put_u32(out, 8, self.extents.len() as u32);
        put_u32(out, 12, 0);
        for (i, extent) in self.extents.iter().enumerate() {
            let at = DESCRIPTOR_HEADER_BYTES + EXTENT_BYTES * i;
            put_u32(out, at, extent.first.0);
            put_u32(out, at + 4, extent.count);
        }
    }

    /// Decodes and checks a descriptor: sizes consistent, page total matching the length,
    /// no extent touching the superblocks or wrapping around.
    pub fn decode(bytes: &[u8], page_size: usize) -> Result<Descriptor, String> {
        if bytes.len() < DESCRIPTOR_HEADER_BYTES {
            return Err(format!(
                "large-object descriptor of {} bytes is shorter than its header",
                bytes.len()
            ));
        }
        let length = get_u64(bytes, 0);
        let count = get_u32(bytes, 8) as usize;
        if get_u32(bytes, 12) != 0 {
            return Err("large-object descriptor reserved bytes are not zero".into());
        }
        if bytes.len() != DESCRIPTOR_HEADER_BYTES + EXTENT_BYTES * count {
            return Err(format!(
                "large-object descriptor of {} bytes cannot hold {count} extents",
                bytes.len()
            ));
        }
        if length == 0 || length > OBJECT_BYTES_MAX {
            return Err(format!("large-object length {length} is out of range"));
        }
        let mut extents = Vec::with_capacity(count);
        let mut total: u64 = 0;
        for i in 0..count {
            let at = DESCRIPTOR_HEADER_BYTES + EXTENT_BYTES * i;
            let extent = Extent {
                first: PageId(get_u32(bytes, at)),
                count: get_u32(bytes, at + 4),
            };
            if extent.count == 0
                || extent.first.0 < 2
                || extent.first.0.checked_add(extent.count).is_none()
            {
                return Err(format!("large-object extent {i} {extent:?} is invalid"));
            }
            total += u64::from(extent.count);
            extents.push(extent);
        }
        if total != pages_needed(length, page_size) {
            return Err(format!(
                "large object of {length} bytes needs {} pages but its extents hold {total}",
                pages_needed(length, page_size)
            ));
        }
        Ok(Descriptor { length, extents })
    }

    /// Every page of the object, in byte order.
    pub fn pages(&self) -> impl Iterator<Item = PageId> + '_ {
        self.extents.iter().flat_map(|e| e.pages())
    }

    /// The page holding byte `offset` of the object (index into `pages()`), and the position of
    /// that byte in the page's data area.
    pub fn locate(&self, offset: u64, page_size: usize) -> (usize, usize) {
        let per_page = data_bytes_per_page(page_size) as u64;
        ((offset / per_page) as usize, (offset % per_page) as usize)
    }
}

/// Formats a large-data page owned by `owner`.
pub fn init_data_page(page: &mut [u8], number: PageId, volume: VolumeId, owner: Oid) {
    page::format(page, PageKind::LargeData, number, volume);
    page::set_kind_area_u64(page, owner.0);
}

/// The object a large-data page belongs to.
pub fn owner(page: &[u8]) -> Oid {
    Oid(page::kind_area_u64(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_locate() {
        let page_size = 4096;
        let per = data_bytes_per_page(page_size) as u64;
        let d = Descriptor {
            length: per * 3 + 1,
            extents: vec![
                Extent {
                    first: PageId(10),
                    count: 3,
                },
                Extent {
                    first: PageId(20),
                    count: 1,
                },
            ],
        };
        let mut bytes = vec![0u8; d.encoded_len()];
        d.encode(&mut bytes);
        assert_eq!(Descriptor::decode(&bytes, page_size), Ok(d.clone()));
        let pages: Vec<_> = d.pages().collect();
        assert_eq!(pages, vec![PageId(10), PageId(11), PageId(12), PageId(20)]);
        assert_eq!(d.locate(per * 3, page_size), (3, 0));
        assert_eq!(d.locate(per + 5, page_size), (1, 5));
    }

    #[test]
    fn inconsistent_descriptor_is_rejected() {
        let d = Descriptor {
            length: 100_000,
            extents: vec![Extent {
                first: PageId(10),
                count: 1,
            }],
        };
        let mut bytes = vec![0u8; d.encoded_len()];
        d.encode(&mut bytes);
        assert!(Descriptor::decode(&bytes, 4096)
            .unwrap_err()
            .contains("needs"));
        assert!(Descriptor::decode(&bytes[..10], 4096).is_err());
    }
}
