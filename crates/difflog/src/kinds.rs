//! The family's record kinds, inside `lodestore_wal::kinds::DIFFERENTIAL`. Numbers never
//! change once written. Commits and aborts are the engine's own records (kinds 4 and 5), in
//! the stream of their transaction.

use lodestore_wal::kinds::DIFFERENTIAL;

/// Changed ranges as XOR deltas (see [`crate::xor`]).
pub const XOR_CHANGES: u8 = 32;
/// Changed ranges as before and after images, with a serial number: the physical-logging
/// baseline (see [`crate::physical`]).
pub const PHYSICAL_CHANGES: u8 = 33;
/// Redo-only after-images written when the baseline aborts a transaction (its CLRs).
pub const PHYSICAL_COMPENSATION: u8 = 34;
/// A checkpoint began: this stream's active transactions and their last records.
pub const STREAM_CHECKPOINT_BEGIN: u8 = 35;
/// A checkpoint's pages are all in its backup image.
pub const STREAM_CHECKPOINT_END: u8 = 36;

const _: () = {
    assert!(DIFFERENTIAL.contains(XOR_CHANGES));
    assert!(DIFFERENTIAL.contains(STREAM_CHECKPOINT_END));
};
