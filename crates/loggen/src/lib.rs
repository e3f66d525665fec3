//! Log generators: given the image of some bytes before a transaction changed them and the
//! image now, decide which byte ranges to log so the log is as small as it can be.
//!
//! - [`compare`]: the wide scans diffing is made of (next differing byte, end of a changed run).
//! - [`diff`]: modified regions of two images and the minimal-traffic merge rule of QuickStore
//!   section 3.2.2.
//! - [`page`]: page diffing: regions never span objects (nor header fields), as in ESM, where a
//!   log record describes bytes of one object.
//! - [`generator`]: the generators by name (page diff, sub-page diff, sub-page log, whole
//!   page), all checked by one property: replaying what they produce on the pre-image gives the
//!   after-image.
//!
//! The ESM recovery method uses page diffing on every shipped page. The client-side detectors
//! that feed the sub-page generators come with the update-detection schemes.

pub mod compare;
pub mod diff;
pub mod generator;
pub mod page;

pub use diff::{
    merge, modified_regions, traffic, OBJECT_REDO_RECORD_FIXED_BYTES, UPDATE_RECORD_FIXED_BYTES,
};
pub use generator::Generator;
pub use page::{page_ranges, page_ranges_cached, page_ranges_into, PageBounds};
