//! `lodestore bench diff`: page-diffing throughput in GB/s on one core, next to a plain
//! comparison of the same bytes (slice equality, a vectorised memcmp) measured in the same run.
//!
//! Two kinds of page: a large object's data page (no objects: the diff is the scan) and a
//! slotted page full of small objects (the scan, then the runs kept inside objects and merged).
//! Workloads are timed in short samples taken in turn, so a burst of the machine's other work
//! falls on all of them alike; each figure is the median sample, with the best next to it. For
//! the page workloads the scan alone (finding the runs of changed bytes, before they are kept
//! inside objects and merged) is timed too; for the block workloads, in its place, the least a
//! block diff does ([`block_floor`]), on CPUs with AVX-512BW.

use crate::bench::median;
use lodestore::{Error, Result};
use lodestore_bench::workspace::progress_bar;
use lodestore_core::limits::{page_size_is_supported, PAGE_SIZES_SUPPORTED};
use lodestore_core::{PageId, TypeId};
use lodestore_loggen::compare::{for_each_run, for_each_run_on, ScanPath};
use lodestore_loggen::{
    page_ranges_cached, page_ranges_into, Generator, PageBounds, UPDATE_RECORD_FIXED_BYTES,
};
use lodestore_storage::slotted;
use std::ops::Range;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Payload bytes of each object on the slotted page (an OO7 atomic part's size).
const OBJECT_BYTES: usize = 96;
/// Objects changed on a page by the scattered workloads.
const CHANGED_OBJECTS: usize = 16;
/// The workloads whose scan is timed on every scan path the CPU has.
const PATH_WORKLOADS: [&str; 2] = [
    "data page, 16 scattered 8-byte fields",
    "objects, x and y incremented in 16 objects",
];
/// Pages diffed per sample.
const PAGES_PER_SAMPLE: usize = 2000;

/// One workload: a pre-image and an after-image to diff.
struct Workload {
    name: &'static str,
    before: AlignedPage,
    after: AlignedPage,
    /// Diff these pieces of [`BLOCK_BYTES`] (as sub-page diffing does) instead of the page.
    blocks: Vec<usize>,
    /// Keep the page's record bounds from one diff to the next, as a client does for a page
    /// whose structure stayed as it was since its last commit.
    kept_bounds: bool,
}

/// Bytes of a sub-page block (the `SD-ESM` scheme's).
const BLOCK_BYTES: usize = 64;

impl Workload {
    /// The page `before` changed to `after`, diffed whole.
    fn page(name: &'static str, before: &[u8], after: &[u8]) -> Workload {
        Workload {
            name,
            before: AlignedPage::from(before),
            after: AlignedPage::from(after),
            blocks: Vec::new(),
            kept_bounds: false,
        }
    }

    /// [`Workload::page`] with the page's record bounds kept from one diff to the next.
    fn kept_page(name: &'static str, before: &[u8], after: &[u8]) -> Workload {
        Workload {
            kept_bounds: true,
            ..Workload::page(name, before, after)
        }
    }

    /// The blocks of [`BLOCK_BYTES`] holding the changes from `before` to `after` (those a
    /// sub-page detector would have copied), diffed one by one as sub-page diffing does.
    fn blocks(name: &'static str, before: &[u8], after: &[u8]) -> Workload {
        let blocks = (0..before.len())
            .step_by(BLOCK_BYTES)
            .filter(|&at| before[at..at + BLOCK_BYTES] != after[at..at + BLOCK_BYTES])
            .collect();
        Workload {
            blocks,
            ..Workload::page(name, before, after)
        }
    }

    /// [`Workload::blocks`] with the page's record bounds kept from one commit to the next.
    fn kept_blocks(name: &'static str, before: &[u8], after: &[u8]) -> Workload {
        Workload {
            kept_bounds: true,
            ..Workload::blocks(name, before, after)
        }
    }
}

pub fn diff(page_size: usize, seconds: f64, csv: Option<&Path>) -> Result<ExitCode> {
    if !page_size_is_supported(page_size) {
        return Err(Error::InvalidArgument(format!(
            "bench diff --page-size {page_size} is not one of {PAGE_SIZES_SUPPORTED:?}"
        )));
    }
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(Error::InvalidArgument(format!(
            "bench diff --seconds {seconds} is not a positive number of seconds"
        )));
    }
    let workloads = workloads(page_size);
    // Sample 0 of every round is the memcmp ceiling, over the first workload's equal pages.
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); workloads.len() + 1];
    // The scan alone (finding the runs of changed bytes), for the page workloads.
    let mut scan_samples: Vec<Vec<f64>> = vec![Vec::new(); workloads.len() + 1];
    // Every scan path the CPU has, on the workloads of [`PATH_WORKLOADS`].
    let paths = ScanPath::available();
    let path_workloads: Vec<usize> = PATH_WORKLOADS
        .iter()
        .map(|name| {
            workloads
                .iter()
                .position(|w| w.name == *name)
                .expect("a workload of that name")
        })
        .collect();
    let mut path_samples: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); path_workloads.len()]; paths.len()];
    let mut ranges: Vec<Range<usize>> = Vec::new();
    // Each workload's own, as a client keeps them per page.
    let mut bounds: Vec<PageBounds> = workloads.iter().map(|_| PageBounds::default()).collect();
    let started = Instant::now();
    let budget = seconds * (workloads.len() + 1) as f64;
    // Rounds run until the budget is spent: the bar counts the budget's milliseconds.
    let bar = progress_bar((budget * 1000.0) as u64, "bench diff", false);
    while started.elapsed().as_secs_f64() < budget || samples[0].len() < 5 {
        bar.set_position(started.elapsed().as_millis() as u64);
        let ceiling = &workloads[0].before;
        let copy = AlignedPage::from(&ceiling[..]);
        samples[0].push(sample(page_size, || {
            u64::from(std::hint::black_box(&ceiling[..]) == std::hint::black_box(&copy[..]))
        }));
        for (i, workload) in workloads.iter().enumerate() {
            if !workload.blocks.is_empty() {
                let bytes = workload.blocks.len() * BLOCK_BYTES;
                let bounds = &mut bounds[i];
                samples[i + 1].push(sample(bytes, || {
                    let after = std::hint::black_box(&workload.after[..]);
                    let before = std::hint::black_box(&workload.before[..]);
                    // As a commit diffs a page's pieces: its bounds read once, if needed (or
                    // kept from the last commit), and one vector for the ranges of every piece.
                    if !workload.kept_bounds {
                        bounds.forget();
                    }
                    workload
                        .blocks
                        .iter()
                        .map(|&at| {
                            let piece = &before[at..at + BLOCK_BYTES];
                            Generator::SubPageDiff.piece_ranges_cached(
                                after,
                                at,
                                piece,
                                bounds,
                                1,
                                &mut ranges,
                            );
                            ranges.len() as u64
                        })
                        .sum()
                }));
                if block_floor::is_available() {
                    scan_samples[i + 1].push(sample(bytes, || {
                        block_floor::runs(
                            std::hint::black_box(&workload.before[..]),
                            std::hint::black_box(&workload.after[..]),
                            &workload.blocks,
                            &mut ranges,
                        );
                        ranges.len() as u64
                    }));
                }
                continue;
            }
            scan_samples[i + 1].push(sample(page_size, || {
                ranges.clear();
                for_each_run(
                    std::hint::black_box(&workload.before[..]),
                    std::hint::black_box(&workload.after[..]),
                    &mut |run| ranges.push(run),
                );
                ranges.len() as u64
            }));
            let bounds = &mut bounds[i];
            samples[i + 1].push(sample(page_size, || {
                // One vector for the ranges of every page, as a generator diffing many pages
                // keeps.
                let (before, after) = (
                    std::hint::black_box(&workload.before[..]),
                    std::hint::black_box(&workload.after[..]),
                );
                let header = UPDATE_RECORD_FIXED_BYTES;
                if workload.kept_bounds {
                    page_ranges_cached(before, after, header, bounds, 1, &mut ranges);
                } else {
                    page_ranges_into(before, after, header, &mut ranges);
                }
                ranges.len() as u64
            }));
        }
        for (p, &path) in paths.iter().enumerate() {
            for (k, &w) in path_workloads.iter().enumerate() {
                let workload = &workloads[w];
                path_samples[p][k].push(sample(page_size, || {
                    ranges.clear();
                    for_each_run_on(
                        path,
                        std::hint::black_box(&workload.before[..]),
                        std::hint::black_box(&workload.after[..]),
                        &mut |run| ranges.push(run),
                    );
                    ranges.len() as u64
                }));
            }
        }
    }
    bar.finish_and_clear();
    let medians: Vec<f64> = samples.iter().map(|s| median(s.clone())).collect();
    println!(
        "page size {page_size} B, one core, {} samples of {PAGES_PER_SAMPLE} pages per figure",
        samples[0].len()
    );
    println!(
        "{:<46} {:>12} {:>9} {:>10} {:>10}",
        "workload", "median GB/s", "best", "of memcmp", "scan GB/s"
    );
    let names = std::iter::once("memcmp, equal pages").chain(workloads.iter().map(|w| w.name));
    let mut lines = vec!["workload,part,sample,gb_per_s".to_string()];
    for (i, name) in names.enumerate() {
        let best = samples[i].iter().copied().fold(0.0, f64::max);
        let scan = if scan_samples[i].is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", median(scan_samples[i].clone()))
        };
        println!(
            "{name:<46} {:>12.1} {best:>9.1} {:>10.2} {scan:>10}",
            medians[i],
            medians[i] / medians[0]
        );
        for (part, list) in [("diff", &samples[i]), ("scan", &scan_samples[i])] {
            for (k, gbs) in list.iter().enumerate() {
                lines.push(format!("{name},{part},{k},{gbs:.2}"));
            }
        }
    }
    println!();
    println!("scan alone, by the instructions it uses (median GB/s; the widest is used):");
    print!("{:<12}", "scan path");
    for name in PATH_WORKLOADS {
        print!(" {name:>44}");
    }
    println!();
    for (p, path) in paths.iter().enumerate() {
        print!("{:<12}", path.name());
        for (k, name) in PATH_WORKLOADS.iter().enumerate() {
            print!(" {:>44.1}", median(path_samples[p][k].clone()));
            for (n, gbs) in path_samples[p][k].iter().enumerate() {
                lines.push(format!("{name},scan {},{n},{gbs:.2}", path.name()));
            }
        }
        println!();
    }
    if let Some(csv) = csv {
        std::fs::write(csv, lines.join("\n") + "\n").map_err(|e| Error::io(csv, "write", e))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The pages diffed: a data page and a slotted page, unchanged and changed in the ways updates
/// change them.
fn workloads(page_size: usize) -> Vec<Workload> {
    let data: Vec<u8> = (0..page_size).map(|i| (i * 7 % 251) as u8).collect();
    let objects = slotted_page(page_size);
    let slots: Vec<u16> = slotted::live_slots(&objects).collect();
    let payload = |page: &[u8], k: usize| {
        let slot = slots[k * slots.len() / CHANGED_OBJECTS];
        slotted::record(page, slot)
            .ok()
            .flatten()
            .expect("a live object")
            .payload()
    };
    let changed = |page: &[u8], edit: &dyn Fn(&mut [u8], Range<usize>)| {
        let mut after = page.to_vec();
        for k in 0..CHANGED_OBJECTS {
            edit(&mut after, payload(page, k));
        }
        after
    };
    let mut one_data_field = data.clone();
    one_data_field[page_size / 2..page_size / 2 + 8].fill(0xEE);
    let scattered_data_fields = {
        let mut after = data.clone();
        for k in 0..CHANGED_OBJECTS {
            let at = k * page_size / CHANGED_OBJECTS + 24;
            after[at..at + 8].fill(0xEE);
        }
        after
    };
    let mut one_object_field = objects.clone();
    let first = payload(&objects, 0);
    one_object_field[first.start + 24..first.start + 32].fill(0xEE);
    let field_in_16 = changed(&objects, &|page, p| {
        page[p.start + 24..p.start + 32].fill(0xEE)
    });
    let x_and_y_in_16 = changed(&objects, &|page, p| {
        page[p.start + 8] ^= 1;
        page[p.start + 16] ^= 1;
    });
    let mut inserted = objects.clone();
    slotted::remove(&mut inserted, slots[slots.len() / 2]);
    slotted::insert(&mut inserted, TypeId(2), OBJECT_BYTES / 2, false);
    vec![
        Workload::page("data page, equal", &data, &data),
        Workload::page("data page, one 8-byte field", &data, &one_data_field),
        Workload::page(
            "data page, 16 scattered 8-byte fields",
            &data,
            &scattered_data_fields,
        ),
        Workload::page("objects, equal", &objects, &objects),
        Workload::page("objects, one 8-byte field", &objects, &one_object_field),
        Workload::page(
            "objects, an 8-byte field in 16 objects",
            &objects,
            &field_in_16,
        ),
        Workload::page(
            "objects, x and y incremented in 16 objects",
            &objects,
            &x_and_y_in_16,
        ),
        Workload::kept_page("objects, x and y, bounds kept", &objects, &x_and_y_in_16),
        Workload::blocks(
            "64-byte blocks, a field in each of 16",
            &objects,
            &field_in_16,
        ),
        Workload::blocks(
            "64-byte blocks, x and y in each of 16",
            &objects,
            &x_and_y_in_16,
        ),
        Workload::kept_blocks(
            "64-byte blocks, x and y, bounds kept",
            &objects,
            &x_and_y_in_16,
        ),
        Workload::page("objects, one removed and one inserted", &objects, &inserted),
    ]
}

/// The least a sub-page diff does for its blocks, as a floor to read the block rows against
/// (as memcmp is a ceiling for the page rows): one 64-byte compare per block and the runs read
/// off its mask, in one loop over the blocks with no call, bound test or merge per block. Not
/// Lodestore's diff, which takes a call per block (a recovery-buffer entry) and keeps the runs
/// inside objects.
mod block_floor {
    use super::BLOCK_BYTES;
    use std::ops::Range;

    /// Can this CPU run the floor (AVX-512BW)?
    pub fn is_available() -> bool {
        #[cfg(target_arch = "x86_64")]
        return std::arch::is_x86_feature_detected!("avx512bw");
        #[cfg(not(target_arch = "x86_64"))]
        return false;
    }

    /// Fills `runs` with the runs of changed bytes of each block of `before` and `after` at
    /// `blocks`, as page offsets. Nothing on a CPU without AVX-512BW.
    pub fn runs(before: &[u8], after: &[u8], blocks: &[usize], runs: &mut Vec<Range<usize>>) {
        runs.clear();
        assert_eq!(before.len(), after.len());
        assert!(blocks.iter().all(|&at| at + BLOCK_BYTES <= before.len()));
        #[cfg(target_arch = "x86_64")]
        if is_available() {
            // SAFETY: the CPU has AVX-512BW, and every block lies inside both images.
            unsafe { runs_avx512(before, after, blocks, runs) }
        }
    }

    /// # Safety
    /// The CPU must support AVX-512BW, and every block must lie inside both images.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bw")]
    unsafe fn runs_avx512(
        before: &[u8],
        after: &[u8],
        blocks: &[usize],
        runs: &mut Vec<Range<usize>>,
    ) {
        use std::arch::x86_64::*;
        const _: () = assert!(BLOCK_BYTES == 64, "one mask per block");
        for &at in blocks {
            // SAFETY: `at + 64` lies inside both images (the caller's promise).
            let mut mask = unsafe {
                _mm512_cmpneq_epi8_mask(
                    _mm512_loadu_si512(before.as_ptr().add(at) as *const _),
                    _mm512_loadu_si512(after.as_ptr().add(at) as *const _),
                )
            };
            let mut from = at;
            while mask != 0 {
                let start = mask.trailing_zeros() as usize;
                let len = (!(mask >> start)).trailing_zeros() as usize;
                runs.push(from + start..from + start + len);
                if start + len == BLOCK_BYTES + at - from {
                    break;
                }
                mask >>= start + len;
                from += start + len;
            }
        }
    }
}

/// A page's bytes on a page boundary, as a client's frames and recovery buffer hold them:
/// the vector loads of a misaligned copy straddle cache lines and measure slower.
struct AlignedPage {
    storage: Vec<u8>,
    at: usize,
    len: usize,
}

/// The alignment of [`AlignedPage`].
const PAGE_ALIGN: usize = 4096;

impl From<&[u8]> for AlignedPage {
    fn from(bytes: &[u8]) -> AlignedPage {
        let mut storage = vec![0u8; bytes.len() + PAGE_ALIGN - 1];
        let at = storage.as_ptr().align_offset(PAGE_ALIGN);
        storage[at..at + bytes.len()].copy_from_slice(bytes);
        AlignedPage {
            storage,
            at,
            len: bytes.len(),
        }
    }
}

impl std::ops::Deref for AlignedPage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.at..self.at + self.len]
    }
}

/// A slotted page full of objects of [`OBJECT_BYTES`], their payloads patterned.
fn slotted_page(page_size: usize) -> Vec<u8> {
    let mut page = vec![0u8; page_size];
    slotted::init(&mut page, PageId(1), 0);
    while slotted::insert(&mut page, TypeId(1), OBJECT_BYTES, false).is_some() {}
    let payloads: Vec<Range<usize>> = slotted::live_slots(&page)
        .filter_map(|slot| slotted::record(&page, slot).ok().flatten())
        .map(|record| record.payload())
        .collect();
    for payload in payloads {
        for i in payload {
            page[i] = (i * 7 % 251) as u8;
        }
    }
    page
}

/// GB/s of `work` over [`PAGES_PER_SAMPLE`] calls, each comparing `bytes`.
fn sample(bytes: usize, mut work: impl FnMut() -> u64) -> f64 {
    let started = Instant::now();
    let mut sink = 0u64;
    for _ in 0..PAGES_PER_SAMPLE {
        sink = sink.wrapping_add(work());
    }
    std::hint::black_box(sink);
    (PAGES_PER_SAMPLE * bytes) as f64 / started.elapsed().as_secs_f64() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floor finds the runs the library's scan finds, block by block (where it runs).
    #[test]
    fn the_block_floor_finds_the_runs_of_each_block() {
        let before: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
        let mut after = before.clone();
        // Runs at a block's start, its end, across its middle, the whole of one, and two.
        for range in [0..3, 61..64, 100..140, 192..256, 300..301, 310..320] {
            after[range].iter_mut().for_each(|b| *b ^= 0x5A);
        }
        let blocks = [0, 64, 128, 192, 256, 320, 4032];
        let mut expected = Vec::new();
        for &at in &blocks {
            let block = at..at + BLOCK_BYTES;
            for_each_run(&before[block.clone()], &after[block], &mut |run| {
                expected.push(run.start + at..run.end + at)
            });
        }
        let mut runs = Vec::new();
        block_floor::runs(&before, &after, &blocks, &mut runs);
        if block_floor::is_available() {
            assert_eq!(runs, expected);
        } else {
            assert!(runs.is_empty());
        }
    }
}
