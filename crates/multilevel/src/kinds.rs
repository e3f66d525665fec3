//! The family's record kinds, inside `lodestore_wal::kinds::MULTI_LEVEL`. Numbers never change
//! once written. A transaction's end is the engine's commit record (kind 4) or the EOT flag of
//! an L0 write; an abort whose compensations are all done ends with the engine's end record.

use lodestore_wal::kinds::MULTI_LEVEL;

/// L1: the inverse of a high-level operation a subtransaction ran (see
/// [`crate::records::UndoRecord`]).
pub const OPERATION_UNDO: u8 = 64;
/// L1: a compensating subtransaction undid a subtransaction (see
/// [`crate::records::Compensated`]).
pub const COMPENSATED: u8 = 65;
/// L0: page after-images of one atomic write, the last record flagged EOS (see
/// [`crate::records::AfterImages`]).
pub const AFTER_IMAGES: u8 = 66;

const _: () = {
    assert!(MULTI_LEVEL.contains(OPERATION_UNDO));
    assert!(MULTI_LEVEL.contains(AFTER_IMAGES));
};
