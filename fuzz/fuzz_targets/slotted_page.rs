//! Fuzz target: any page whose checksum is right (a bug or a foreign writer, not a torn
//! write) must be read without a panic: verified, its records, large-object descriptors,
//! space map and root directory decoded or refused. A slotted page that validates stays valid
//! through inserts, resizes, removals and compaction, and keeps every record it does not touch.
//! Run with `cargo fuzz run slotted_page` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::TypeId;
use lodestore_storage::large::Descriptor;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::{directory, slotted, spacemap, superblock};

const PAGE_BYTES: usize = 4096;

fuzz_target!(|data: &[u8]| {
    // The first bytes are the page (zero-filled to a page), the rest a list of operations.
    let (image, operations) = data.split_at(data.len().min(PAGE_BYTES));
    let mut page = vec![0u8; PAGE_BYTES];
    page[..image.len()].copy_from_slice(image);
    page::seal(&mut page);
    let number = page::number(&page);
    let Ok(kind) = page::verify(&page, number, page::volume(&page)) else {
        return;
    };
    let _ = directory::decode(&page[page::PAGE_HEADER_BYTES..]);
    let _ = superblock::decode(&page, 0);
    match kind {
        PageKind::SpaceMap => {
            let _ = spacemap::validate(&page, number);
        }
        PageKind::Slotted => {
            for slot in slotted::live_slots(&page) {
                if let Ok(Some(record)) = slotted::record(&page, slot) {
                    if record.large {
                        let _ = Descriptor::decode(&page[record.payload()], PAGE_BYTES);
                    }
                }
            }
            if slotted::validate(&page).is_ok() {
                apply(&mut page, operations);
            }
        }
        _ => {}
    }
});

/// Runs `operations` (three bytes each) on a valid slotted page, checking it after each.
fn apply(page: &mut [u8], operations: &[u8]) {
    for operation in operations.chunks_exact(3) {
        let (op, slot, len) = (
            operation[0] % 4,
            u16::from(operation[1]),
            usize::from(operation[2]) * 8,
        );
        let before = page.to_vec();
        match op {
            0 => {
                let _ = slotted::insert(page, TypeId(7), len, false);
            }
            1 => {
                let _ = slotted::remove(page, slot);
            }
            2 => {
                let _ = slotted::resize(page, slot, len);
            }
            _ => slotted::compact(page),
        }
        if let Err(problem) = slotted::validate(page) {
            panic!("operation {op} left an invalid page: {problem}");
        }
        // Every other record keeps its type, size and bytes.
        for other in slotted::live_slots(&before) {
            if (op == 1 || op == 2) && other == slot {
                continue;
            }
            let was = slotted::record(&before, other).unwrap().unwrap();
            let is = slotted::record(page, other)
                .unwrap()
                .expect("a record vanished");
            assert_eq!(
                (was.type_id, was.payload_len, was.large),
                (is.type_id, is.payload_len, is.large)
            );
            assert_eq!(before[was.payload()], page[is.payload()]);
        }
    }
}
