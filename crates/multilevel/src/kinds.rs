//! The family's record kinds, inside `lodestore_wal::kinds::MULTI_LEVEL`. Numbers never change
//! once written.

use lodestore_wal::kinds::MULTI_LEVEL;

/// L1: the inverse of a high-level operation a subtransaction ran (see
/// [`crate::records::UndoRecord`]).
pub const OPERATION_UNDO: u8 = 64;
/// L1: a compensating subtransaction undid a subtransaction (see
/// [`crate::records::Compensated`]).
pub const COMPENSATED: u8 = 65;
/// L1: a transaction ended, committed or with every compensation done (see
/// [`crate::records::TransactionEnd`]).
pub const TRANSACTION_END: u8 = 67;
/// L1: at a checkpoint, the transactions with L1 records and no end yet, and where their
/// records are (see [`crate::records::ActiveTransactions`]).
pub const ACTIVE_TRANSACTIONS: u8 = 68;
/// L0: page after-images of one atomic write, the last record flagged EOS (see
/// [`crate::records::AfterImages`]).
pub const AFTER_IMAGES: u8 = 66;

const _: () = {
    assert!(MULTI_LEVEL.contains(OPERATION_UNDO));
    assert!(MULTI_LEVEL.contains(AFTER_IMAGES));
};
