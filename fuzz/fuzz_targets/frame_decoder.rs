//! Fuzz target: the server's frame reader and request decoder on arbitrary bytes must return
//! an error or a value, never panic or allocate without bound; so must rebuilding a batch of
//! log records from a decoded request, and reading every record of it. Run with
//! `cargo fuzz run frame_decoder` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::{Oid, PageId};
use lodestore_net::frame::read_frame;
use lodestore_net::message::{decode, Request, Response, WireRecords};
use lodestore_server::{ObjectUpdates, PageUpdates};

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    // Frames one after another, as a connection would deliver them.
    while let Ok(frame) = read_frame(&mut input) {
        if let Ok(request) = decode::<Request>(&frame.body) {
            batches(request);
        }
        let _ = decode::<Response>(&frame.body);
    }
    if let Ok(request) = decode::<Request>(data) {
        batches(request);
    }
});

/// Log records as the server rebuilds them from a request, every record read.
fn batches(request: Request) {
    match request {
        Request::ShipRecords {
            records: WireRecords::Pages(records),
            ..
        } => {
            let parts = records.records.iter().map(|&(p, o, l)| (PageId(p), o, l));
            if let Ok(batch) = PageUpdates::from_parts(parts, records.bytes) {
                for update in batch.iter() {
                    assert_eq!(update.before.len(), update.after.len());
                }
            }
        }
        Request::ShipRecords {
            records: WireRecords::Objects(records),
            ..
        } => {
            let parts = records.records.iter().map(|&(oid, o, l)| (Oid(oid), o, l));
            if let Ok(batch) = ObjectUpdates::from_parts(parts, records.bytes) {
                assert_eq!(
                    batch.iter().map(|u| u.after.len()).sum::<usize>(),
                    batch.bytes().len()
                );
            }
        }
        _ => {}
    }
}
