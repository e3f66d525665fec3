//! The registry of log record kinds: every kind number in one table, each family of mechanisms
//! with a named range of its own. The log frames a record as (kind, flags, body); it decodes the
//! bodies of the engine's own kinds (the first range) and hands every other registered kind
//! over as an opaque [`crate::RecordBody::Family`] body for its family to read. A number
//! outside every range is damage, not a record.
//!
//! Numbers never change once written: a store's log holds them. The first families' kinds
//! keep the numbers they were given before the registry.

/// A family's range of kind numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindRange {
    pub family: &'static str,
    pub first: u8,
    pub last: u8,
}

impl KindRange {
    pub const fn contains(&self, kind: u8) -> bool {
        self.first <= kind && kind <= self.last
    }
}

/// The engine's own kinds, decoded by the log crate: changes, compensations, page images,
/// transaction ends, checkpoints, padding, and the checkpoint's list of pages kept in the log.
pub const ENGINE: KindRange = KindRange {
    family: "engine (every page-level recovery method)",
    first: 1,
    last: 31,
};
/// Differential (XOR) logging.
pub const DIFFERENTIAL: KindRange = KindRange {
    family: "differential logging",
    first: 32,
    last: 63,
};
/// Multi-level transactions (DASDBS): high-level undo records, subtransaction ends.
pub const MULTI_LEVEL: KindRange = KindRange {
    family: "multi-level transactions",
    first: 64,
    last: 95,
};
/// Snapshots (Thor): snapshot records, pre-image pages.
pub const SNAPSHOTS: KindRange = KindRange {
    family: "snapshots",
    first: 96,
    last: 127,
};
/// Kinds defined outside the project's families: tests and extensions.
pub const EXTENSIONS: KindRange = KindRange {
    family: "extensions",
    first: 224,
    last: 255,
};

/// Every range, in order.
pub const RANGES: [KindRange; 5] = [ENGINE, DIFFERENTIAL, MULTI_LEVEL, SNAPSHOTS, EXTENSIONS];

// The engine's kinds.
pub const UPDATE: u8 = 1;
pub const COMPENSATION: u8 = 2;
pub const PAGE_IMAGE: u8 = 3;
pub const COMMIT: u8 = 4;
pub const ABORT: u8 = 5;
pub const END: u8 = 6;
pub const CHECKPOINT_BEGIN: u8 = 7;
pub const CHECKPOINT_END: u8 = 8;
pub const SKIP: u8 = 9;
pub const FLUSH_MARK: u8 = 10;
pub const LOGGED_PAGES: u8 = 11;
pub const PAGES_HOME: u8 = 12;

/// The range `kind` belongs to, if any.
pub fn range_of(kind: u8) -> Option<KindRange> {
    RANGES.into_iter().find(|r| r.contains(kind))
}

// Ranges do not overlap and are in order; the engine's kinds are in its range.
const _: () = {
    let mut i = 1;
    while i < RANGES.len() {
        assert!(RANGES[i - 1].first <= RANGES[i - 1].last);
        assert!(RANGES[i - 1].last < RANGES[i].first);
        i += 1;
    }
    assert!(ENGINE.first == UPDATE && PAGES_HOME <= ENGINE.last);
    assert!(
        RANGES[0].first > 0,
        "kind 0 is never a record (zeroed bytes)"
    );
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_range() {
        assert_eq!(range_of(0), None);
        assert_eq!(range_of(UPDATE), Some(ENGINE));
        assert_eq!(range_of(LOGGED_PAGES), Some(ENGINE));
        assert_eq!(range_of(40), Some(DIFFERENTIAL));
        assert_eq!(range_of(200), None);
        assert_eq!(range_of(255), Some(EXTENSIONS));
    }
}
