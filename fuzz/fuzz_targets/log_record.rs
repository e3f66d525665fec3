//! Fuzz target: a log record whose header and checksum are right but whose body is anything
//! (as a damaged or foreign writer could leave it) must decode to an error or a record, never
//! panic or allocate without bound; a record that decodes re-encodes to itself. Run with
//! `cargo fuzz run log_record` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::checksum::crc32c;
use lodestore_core::limits::PAGE_SIZE_MAX;
use lodestore_core::Lsn;
use lodestore_wal::record::{
    decode, encode, Record, RecordBody, RECORD_FORMAT_VERSION, RECORD_HEADER_BYTES,
};

/// The checksum covers everything after its own four bytes (the log's record format).
fn seal(record: &mut [u8]) {
    let sum = crc32c(&record[4..]);
    record[0..4].copy_from_slice(&sum.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    // The first three bytes choose the kind and the flags; the rest is the body.
    let [kind, flag_low, flag_high, body @ ..] = data else {
        return;
    };
    let lsn = Lsn(4096);
    let len = (RECORD_HEADER_BYTES + body.len()).div_ceil(8) * 8;
    let mut record = vec![0u8; len];
    record[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    record[8..16].copy_from_slice(&lsn.0.to_le_bytes());
    record[32] = *kind;
    record[33] = RECORD_FORMAT_VERSION;
    record[34] = *flag_low;
    record[35] = *flag_high;
    record[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + body.len()].copy_from_slice(body);
    seal(&mut record);
    if let Ok(decoded) = decode(&record, lsn, PAGE_SIZE_MAX) {
        let again = encoded(&decoded);
        let redecoded = decode(&again, lsn, PAGE_SIZE_MAX).expect("an encoded record decodes");
        assert_eq!(
            without_trailing_zeros(redecoded.clone()),
            without_trailing_zeros(decoded)
        );
        assert_eq!(encoded(&redecoded), again);
    }
});

fn encoded(record: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    encode(record.lsn, record.prev, record.txn, &record.body, &mut out);
    out
}

/// A page image's trailing zeros are implied, not stored: an image equals itself without them.
fn without_trailing_zeros(mut record: Record) -> Record {
    if let RecordBody::PageImage { image, .. } = &mut record.body {
        let kept = image.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        image.truncate(kept);
    }
    record
}
