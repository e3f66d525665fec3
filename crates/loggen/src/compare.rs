//! Wide comparison of two images: the runs of differing bytes. Diffing spends almost all its
//! time skipping equal bytes, so the scan compares 128 bytes per step with vector instructions
//! (AVX-512BW or AVX2, whichever is the widest the CPU has) and reads the runs off 64-bit masks
//! of differing bytes; elsewhere it falls back to 8-byte words. A byte loop is about 40 times
//! slower.

/// The index of the first byte where `a` and `b` are equal, or their length if none is: the
/// end of a run of changed bytes. Runs are short (a field or two), so words are enough.
fn first_equal(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len());
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let diff = word(x) ^ word(y);
        // The lowest byte of `diff` that is zero is flagged exactly (borrows only travel
        // upwards from it); little-endian loading makes the lowest byte the first in memory.
        let zero_bytes = diff.wrapping_sub(ONES) & !diff & HIGHS;
        if zero_bytes != 0 {
            return at + zero_bytes.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + a[at..]
        .iter()
        .zip(&b[at..])
        .position(|(x, y)| x == y)
        .unwrap_or(a.len() - at)
}

/// Calls `found` with every maximal run of differing bytes of `a` and `b`, in order, as
/// offsets into them. One pass: each step of vectors gives a mask of differing bytes, and runs
/// are read off the mask (trailing-zero counts), so a page with many small changes costs
/// little more than one with none; a scan restarted after each change paid a vector set-up,
/// a call and a word loop per change.
pub fn for_each_run(a: &[u8], b: &[u8], found: &mut impl FnMut(std::ops::Range<usize>)) {
    for_each_run_on(ScanPath::widest(), a, b, found)
}

/// [`for_each_run`] for a caller that joins runs separated by at most `bridge` equal bytes
/// anyway (the minimal-traffic rule, for which `bridge` is half a record's fixed cost): such
/// runs may come joined already, read off the masks a word at a time, so a page whose changed
/// bytes are dense (a new page, a rebuilt node) costs a few runs rather than thousands. Runs
/// further apart always come apart, so the caller's joining gives exactly what it would give
/// on the runs of [`for_each_run`].
pub fn for_each_run_bridged(
    a: &[u8],
    b: &[u8],
    bridge: usize,
    found: &mut impl FnMut(std::ops::Range<usize>),
) {
    for_each_run_bridged_on(ScanPath::widest(), a, b, bridge, found)
}

/// The instructions a scan for runs is made of. [`for_each_run`] takes the widest the CPU
/// has; benchmarks compare them all on the same pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanPath {
    /// 64-byte compares giving a 64-bit mask each (AVX-512BW).
    Avx512,
    /// 32-byte compares, two masks joined per 64 bytes (AVX2).
    Avx2,
    /// 8-byte words: the portable path.
    Words,
}

impl ScanPath {
    pub fn name(self) -> &'static str {
        match self {
            ScanPath::Avx512 => "AVX-512",
            ScanPath::Avx2 => "AVX2",
            ScanPath::Words => "words",
        }
    }

    /// Can this CPU run the path?
    pub fn is_available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            ScanPath::Avx512 => std::arch::is_x86_feature_detected!("avx512bw"),
            #[cfg(target_arch = "x86_64")]
            ScanPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            ScanPath::Avx512 | ScanPath::Avx2 => false,
            ScanPath::Words => true,
        }
    }

    /// The paths this CPU can run, widest first.
    pub fn available() -> Vec<ScanPath> {
        [ScanPath::Avx512, ScanPath::Avx2, ScanPath::Words]
            .into_iter()
            .filter(|path| path.is_available())
            .collect()
    }

    /// The widest path this CPU can run (the feature tests are cached by the standard
    /// library: a load and a test each).
    pub fn widest() -> ScanPath {
        if ScanPath::Avx512.is_available() {
            ScanPath::Avx512
        } else if ScanPath::Avx2.is_available() {
            ScanPath::Avx2
        } else {
            ScanPath::Words
        }
    }
}

/// [`for_each_run`] on a given path; one the CPU cannot run falls back to [`ScanPath::Words`].
pub fn for_each_run_on(
    path: ScanPath,
    a: &[u8],
    b: &[u8],
    found: &mut impl FnMut(std::ops::Range<usize>),
) {
    for_each_run_bridged_on(path, a, b, 0, found)
}

/// [`for_each_run_bridged`] on a given path. The word path joins nothing (it finds each run
/// by scanning to its end, so joining would save no work).
pub fn for_each_run_bridged_on(
    path: ScanPath,
    a: &[u8],
    b: &[u8],
    bridge: usize,
    found: &mut impl FnMut(std::ops::Range<usize>),
) {
    assert_eq!(a.len(), b.len());
    // Gaps of 64 bytes or more never lie inside one mask.
    let bridge = bridge.min(63) as u32;
    // Compiled twice, so that the exact scan (a commit diffs thousands of sub-page blocks)
    // does not test for joining on every mask.
    #[cfg(target_arch = "x86_64")]
    match (path, bridge) {
        (ScanPath::Avx512, 0) if path.is_available() => {
            // SAFETY: the CPU supports AVX-512BW, checked just above.
            return unsafe { x86::for_each_run_avx512::<false>(a, b, 0, found) };
        }
        (ScanPath::Avx512, _) if path.is_available() => {
            // SAFETY: as above.
            return unsafe { x86::for_each_run_avx512::<true>(a, b, bridge, found) };
        }
        (ScanPath::Avx2, 0) if path.is_available() => {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { x86::for_each_run_avx2::<false>(a, b, 0, found) };
        }
        (ScanPath::Avx2, _) if path.is_available() => {
            // SAFETY: as above.
            return unsafe { x86::for_each_run_avx2::<true>(a, b, bridge, found) };
        }
        _ => {}
    }
    let _ = (path, bridge);
    for_each_run_words(a, b, found)
}

/// Runs of differing bytes by word scans: the next differing byte, then the next equal one.
fn for_each_run_words(a: &[u8], b: &[u8], found: &mut impl FnMut(std::ops::Range<usize>)) {
    let mut at = 0;
    while at < a.len() {
        at += first_difference_words(&a[at..], &b[at..]);
        if at == a.len() {
            break;
        }
        let start = at;
        at += first_equal(&a[at..], &b[at..]);
        found(start..at);
    }
}

/// Reads the runs off `differing`, a mask of the `width` (at most 64) bytes starting at `base`
/// (bit i: byte `base + i` differs; no bit at or past `width`), continuing the run `open`
/// from an earlier mask and leaving the run still open at the mask's end in it. Each run
/// costs two trailing-zero counts and a shift, whatever its length.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn runs_of_word<const BRIDGING: bool>(
    differing: u64,
    width: u32,
    base: usize,
    bridge: u32,
    open: &mut Option<usize>,
    found: &mut impl FnMut(std::ops::Range<usize>),
) {
    debug_assert!((1..=64).contains(&width));
    debug_assert!(
        width == 64 || differing >> width == 0,
        "bits past the mask's width"
    );
    let mut differing = if BRIDGING {
        bridge_gaps(differing, bridge)
    } else {
        differing
    };
    if let Some(start) = *open {
        // The first equal byte ends the open run; none within the width continues it.
        let end = (!differing).trailing_zeros();
        if end >= width {
            return;
        }
        found(start..base + end as usize);
        *open = None;
        differing &= u64::MAX << end;
    }
    while differing != 0 {
        let start = differing.trailing_zeros();
        // The run's length: the ones from `start` on (bits past the width are zero).
        let end = start + (!(differing >> start)).trailing_zeros();
        if end >= width {
            *open = Some(base + start as usize);
            return;
        }
        found(base + start as usize..base + end as usize);
        differing &= u64::MAX << end;
    }
}

/// `differing` with the bits of every gap of at most `bridge` (below 64) equal bytes that lies
/// between two differing bytes of the mask set, as if those bytes differed. Gaps at either end
/// of the mask are left alone: their other side is in another mask.
#[inline(always)]
fn bridge_gaps(differing: u64, bridge: u32) -> u64 {
    debug_assert!(bridge < 64);
    // Two runs or fewer (the usual mask of a small change): joining would save less than it
    // costs; the caller joins them.
    if bridge == 0 || drop_lowest_run(drop_lowest_run(differing)) == 0 {
        return differing;
    }
    let equal = !differing;
    // Bit p: bytes p ..= p + bridge all equal, so a gap longer than `bridge` covers p.
    let long_starts = all_in_window(equal, bridge + 1);
    // Every byte of such a gap: within `bridge` bytes after one of those starts.
    let in_long_gaps = any_in_window_below(long_starts, bridge + 1);
    let first = differing.trailing_zeros();
    let last = 63 - differing.leading_zeros();
    let inside = (u64::MAX << first) & (u64::MAX >> (63 - last));
    differing | (equal & !in_long_gaps & inside)
}

/// `bits` without its lowest run of ones (adding the lowest one carries through the run).
#[inline(always)]
fn drop_lowest_run(bits: u64) -> u64 {
    bits & bits.wrapping_add(bits & bits.wrapping_neg())
}

/// Bit p set when bits p .. p + len (1 to 64) of `bits` are all set; bits past the top read
/// as clear.
#[inline(always)]
fn all_in_window(bits: u64, len: u32) -> u64 {
    // Windows of doubling length, combined along the binary digits of `len`.
    let (mut result, mut done) = (u64::MAX, 0);
    let (mut power, mut power_len) = (bits, 1);
    let mut rest = len;
    while rest != 0 {
        if rest & 1 != 0 {
            result &= power.checked_shr(done).unwrap_or(0);
            done += power_len;
        }
        rest >>= 1;
        if rest != 0 {
            power &= power.checked_shr(power_len).unwrap_or(0);
            power_len *= 2;
        }
    }
    result
}

/// Bit p set when any of bits p - len + 1 ..= p of `bits` is set (`len` 1 to 64).
#[inline(always)]
fn any_in_window_below(bits: u64, len: u32) -> u64 {
    let (mut result, mut done) = (0, 0);
    let (mut power, mut power_len) = (bits, 1);
    let mut rest = len;
    while rest != 0 {
        if rest & 1 != 0 {
            result |= power.checked_shl(done).unwrap_or(0);
            done += power_len;
        }
        rest >>= 1;
        if rest != 0 {
            power |= power.checked_shl(power_len).unwrap_or(0);
            power_len *= 2;
        }
    }
    result
}

/// The runs in the whole 128-byte steps of two slices of `len` bytes, for the vector paths:
/// `equal(at)` tells whether the step at `at` is all equal, `masks(at)` gives its two 64-bit
/// masks of differing bytes; both are called only with `at + 128 <= len`. Returns where the
/// steps end. Equal stretches, the common case, are skipped in a loop of their own, which
/// keeps nothing but the position live.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn runs_of_steps<const BRIDGING: bool>(
    len: usize,
    equal: impl Fn(usize) -> bool,
    masks: impl Fn(usize) -> [u64; 2],
    bridge: u32,
    open: &mut Option<usize>,
    found: &mut impl FnMut(std::ops::Range<usize>),
) -> usize {
    const STEP_BYTES: usize = 128;
    let mut at = 0;
    while at + STEP_BYTES <= len {
        if equal(at) {
            if let Some(start) = open.take() {
                found(start..at);
            }
            at += STEP_BYTES;
            while at + STEP_BYTES <= len && equal(at) {
                at += STEP_BYTES;
            }
            continue;
        }
        // The step's compares again, for its masks: they are in L1, and a step that is
        // tested and masked in one go keeps more live across the equal steps.
        let [low, high] = masks(at);
        runs_of_word::<BRIDGING>(low, 64, at, bridge, open, found);
        runs_of_word::<BRIDGING>(high, 64, at + 64, bridge, open, found);
        at += STEP_BYTES;
    }
    at
}

/// Eight bytes as a little-endian word.
fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("an 8-byte chunk"))
}

/// The index of the first byte where `a` and `b` differ, or their length if none does: 8-byte
/// words, then bytes.
fn first_difference_words(a: &[u8], b: &[u8]) -> usize {
    let mut at = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let diff = word(x) ^ word(y);
        if diff != 0 {
            return at + diff.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + a[at..]
        .iter()
        .zip(&b[at..])
        .position(|(x, y)| x != y)
        .unwrap_or(a.len() - at)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Bytes behind one 64-bit mask of differing bytes; a step of the scan is two.
    const MASK_BYTES: usize = 64;

    /// Equality vectors of the 128 bytes at `at` of `a` and `b`.
    ///
    /// # Safety
    /// The CPU must support AVX2, and `at + 128` must not exceed either slice.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn equal_vectors(a: &[u8], b: &[u8], at: usize) -> [__m256i; 4] {
        debug_assert!(at + 2 * MASK_BYTES <= a.len() && at + 2 * MASK_BYTES <= b.len());
        // SAFETY: in bounds by the caller's promise; unaligned loads are allowed.
        unsafe {
            let pa = a.as_ptr().add(at) as *const __m256i;
            let pb = b.as_ptr().add(at) as *const __m256i;
            [
                _mm256_cmpeq_epi8(_mm256_loadu_si256(pa), _mm256_loadu_si256(pb)),
                _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(1)), _mm256_loadu_si256(pb.add(1))),
                _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(2)), _mm256_loadu_si256(pb.add(2))),
                _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(3)), _mm256_loadu_si256(pb.add(3))),
            ]
        }
    }

    /// Are the 128 bytes at `at` of `a` and `b` equal?
    ///
    /// # Safety
    /// The CPU must support AVX2, and `at + 128` must not exceed either slice.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn equal_128_avx2(a: &[u8], b: &[u8], at: usize) -> bool {
        // SAFETY: passed on from the caller.
        let [e0, e1, e2, e3] = unsafe { equal_vectors(a, b, at) };
        let all = _mm256_and_si256(_mm256_and_si256(e0, e1), _mm256_and_si256(e2, e3));
        _mm256_movemask_epi8(all) as u32 == u32::MAX
    }

    /// Masks of the bytes that differ in `at..at + 64` and `at + 64..at + 128` of `a` and `b`
    /// (bit i: byte i of the half differs).
    ///
    /// # Safety
    /// The CPU must support AVX2, and `at + 128` must not exceed either slice.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn differing_128_avx2(a: &[u8], b: &[u8], at: usize) -> [u64; 2] {
        // SAFETY: passed on from the caller.
        let [e0, e1, e2, e3] = unsafe { equal_vectors(a, b, at) };
        // Written out: a closure mapping the vectors would be compiled without AVX2, and
        // each movemask would become a call.
        let mask = |low: i32, high: i32| !(u64::from(low as u32) | u64::from(high as u32) << 32);
        [
            mask(_mm256_movemask_epi8(e0), _mm256_movemask_epi8(e1)),
            mask(_mm256_movemask_epi8(e2), _mm256_movemask_epi8(e3)),
        ]
    }

    /// The mask of the bytes that differ in the 32 bytes at `at` (bit i: byte `at + i`).
    ///
    /// # Safety
    /// The CPU must support AVX2, and `at + 32` must not exceed either slice.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn differing_32_avx2(a: &[u8], b: &[u8], at: usize) -> u64 {
        debug_assert!(at + 32 <= a.len() && at + 32 <= b.len());
        // SAFETY: in bounds by the caller's promise; unaligned loads are allowed.
        let equal = unsafe {
            _mm256_cmpeq_epi8(
                _mm256_loadu_si256(a.as_ptr().add(at) as *const __m256i),
                _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i),
            )
        };
        u64::from(!(_mm256_movemask_epi8(equal) as u32))
    }

    /// The runs of differing bytes, read off a 64-bit mask per 64 bytes (two per 128-byte
    /// step, whose all-equal test is one branch), then 32 bytes at a time at the tail.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn for_each_run_avx2<const BRIDGING: bool>(
        a: &[u8],
        b: &[u8],
        bridge: u32,
        found: &mut impl FnMut(std::ops::Range<usize>),
    ) {
        let len = a.len();
        assert_eq!(b.len(), len);
        let mut open: Option<usize> = None;
        if len < 32 {
            let differing = a
                .iter()
                .zip(b)
                .enumerate()
                .fold(0u64, |bits, (i, (x, y))| bits | (u64::from(x != y) << i));
            if len > 0 {
                super::runs_of_word::<BRIDGING>(differing, len as u32, 0, bridge, &mut open, found);
            }
        } else if len <= MASK_BYTES {
            // A sub-page block: one mask from two overlapping compares.
            let last = len - 32;
            // SAFETY: `32 <= len`, and `last + 32 == len`.
            let differing =
                unsafe { differing_32_avx2(a, b, 0) | differing_32_avx2(a, b, last) << last };
            super::runs_of_word::<BRIDGING>(differing, len as u32, 0, bridge, &mut open, found);
        } else {
            let mut at = super::runs_of_steps::<BRIDGING>(
                len,
                // SAFETY: `runs_of_steps` asks only for steps with `at + 128 <= len`.
                |at| unsafe { equal_128_avx2(a, b, at) },
                // SAFETY: as above.
                |at| unsafe { differing_128_avx2(a, b, at) },
                bridge,
                &mut open,
                found,
            );
            while at + 32 <= len {
                // SAFETY: `at + 32 <= len` for both slices.
                let differing = unsafe { differing_32_avx2(a, b, at) };
                super::runs_of_word::<BRIDGING>(differing, 32, at, bridge, &mut open, found);
                at += 32;
            }
            if at < len {
                // The last 32 bytes, overlapping what was scanned: no byte loop.
                let last = len - 32;
                // SAFETY: `last + 32 == len` for both slices.
                let differing = unsafe { differing_32_avx2(a, b, last) } >> (at - last);
                super::runs_of_word::<BRIDGING>(
                    differing,
                    (len - at) as u32,
                    at,
                    bridge,
                    &mut open,
                    found,
                );
            }
        }
        if let Some(start) = open {
            found(start..len);
        }
    }

    /// The mask of the bytes that differ in the `width` (1 to 64) bytes at `at`; bytes past
    /// `width` are not read.
    ///
    /// # Safety
    /// The CPU must support AVX-512BW, and `at + width` must not exceed either slice.
    #[target_feature(enable = "avx512bw")]
    #[inline]
    unsafe fn differing_avx512(a: &[u8], b: &[u8], at: usize, width: usize) -> u64 {
        debug_assert!((1..=MASK_BYTES).contains(&width));
        debug_assert!(at + width <= a.len() && at + width <= b.len());
        let keep = u64::MAX >> (MASK_BYTES - width);
        // SAFETY: the masked loads touch only the `width` bytes in bounds (masked-off bytes
        // are neither read nor faulted on).
        unsafe {
            let pa = a.as_ptr().add(at) as *const i8;
            let pb = b.as_ptr().add(at) as *const i8;
            _mm512_mask_cmpneq_epi8_mask(
                keep,
                _mm512_maskz_loadu_epi8(keep, pa),
                _mm512_maskz_loadu_epi8(keep, pb),
            )
        }
    }

    /// Are the 128 bytes at `at` of `a` and `b` equal?
    ///
    /// # Safety
    /// The CPU must support AVX-512BW, and `at + 128` must not exceed either slice.
    #[target_feature(enable = "avx512bw")]
    #[inline]
    unsafe fn equal_128_avx512(a: &[u8], b: &[u8], at: usize) -> bool {
        debug_assert!(at + 2 * MASK_BYTES <= a.len() && at + 2 * MASK_BYTES <= b.len());
        // SAFETY: in bounds by the caller's promise; unaligned loads are allowed.
        unsafe {
            let pa = a.as_ptr().add(at) as *const __m512i;
            let pb = b.as_ptr().add(at) as *const __m512i;
            let low = _mm512_cmpneq_epi8_mask(_mm512_loadu_si512(pa), _mm512_loadu_si512(pb));
            let high = _mm512_cmpneq_epi8_mask(
                _mm512_loadu_si512(pa.add(1)),
                _mm512_loadu_si512(pb.add(1)),
            );
            low | high == 0
        }
    }

    /// The runs of differing bytes with AVX-512: a 64-bit mask of differing bytes straight
    /// from each 64-byte compare, two per step, and a masked compare for the tail (and for a
    /// sub-page block, whole).
    ///
    /// # Safety
    /// The CPU must support AVX-512BW.
    #[target_feature(enable = "avx512bw")]
    pub unsafe fn for_each_run_avx512<const BRIDGING: bool>(
        a: &[u8],
        b: &[u8],
        bridge: u32,
        found: &mut impl FnMut(std::ops::Range<usize>),
    ) {
        let len = a.len();
        assert_eq!(b.len(), len);
        if (1..=MASK_BYTES).contains(&len) {
            // A sub-page block (a commit diffs thousands): one compare, no loop to set up.
            // SAFETY: `len` bytes are in bounds for both slices.
            let differing = unsafe { differing_avx512(a, b, 0, len) };
            let mut open = None;
            super::runs_of_word::<BRIDGING>(differing, len as u32, 0, bridge, &mut open, found);
            if let Some(start) = open {
                found(start..len);
            }
            return;
        }
        let mut open: Option<usize> = None;
        let mut at = super::runs_of_steps::<BRIDGING>(
            len,
            // SAFETY: `runs_of_steps` asks only for steps with `at + 128 <= len`.
            |at| unsafe { equal_128_avx512(a, b, at) },
            // SAFETY: as above.
            |at| unsafe {
                [
                    differing_avx512(a, b, at, MASK_BYTES),
                    differing_avx512(a, b, at + MASK_BYTES, MASK_BYTES),
                ]
            },
            bridge,
            &mut open,
            found,
        );
        while at < len {
            let width = (len - at).min(MASK_BYTES);
            // SAFETY: `at + width <= len` for both slices.
            let differing = unsafe { differing_avx512(a, b, at, width) };
            super::runs_of_word::<BRIDGING>(differing, width as u32, at, bridge, &mut open, found);
            at += width;
        }
        if let Some(start) = open {
            found(start..len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn first_difference_bytes(a: &[u8], b: &[u8]) -> usize {
        a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len())
    }

    fn first_equal_bytes(a: &[u8], b: &[u8]) -> usize {
        a.iter().zip(b).position(|(x, y)| x == y).unwrap_or(a.len())
    }

    fn runs_bytes(a: &[u8], b: &[u8]) -> Vec<std::ops::Range<usize>> {
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for i in (0..a.len()).filter(|&i| a[i] != b[i]) {
            match runs.last_mut() {
                Some(last) if last.end == i => last.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        runs
    }

    proptest! {
        /// Every scan finds the same byte a byte loop finds, at any length and offset (so
        /// every tail and every lane of a vector is exercised).
        #[test]
        fn wide_scans_agree_with_a_byte_loop(
            len in 0usize..300,
            skip in 0usize..9,
            differing in proptest::collection::vec(0usize..300, 0..4),
            run in 0usize..300,
            changed_after in proptest::collection::vec(any::<bool>(), 0..300),
        ) {
            let a: Vec<u8> = (0..len + skip).map(|i| (i * 31 % 251) as u8).collect();
            let mut b = a.clone();
            for at in differing {
                if at < b.len() {
                    b[at] ^= 0x5A;
                }
            }
            let (a, b) = (&a[skip.min(len)..], &b[skip.min(len)..]);
            let expected = first_difference_bytes(a, b);
            prop_assert_eq!(first_difference_words(a, b), expected);

            // A run of `run` changed bytes, then bytes changed at random.
            let mut c = a.to_vec();
            for (i, byte) in c.iter_mut().enumerate() {
                let change = i < run || changed_after.get(i - run).copied().unwrap_or(false);
                if change {
                    *byte ^= 0xFF;
                }
            }
            prop_assert_eq!(first_equal(a, &c), first_equal_bytes(a, &c));

            // The runs, by every path, against a byte loop.
            let expected_runs = runs_bytes(a, &c);
            let mut runs = Vec::new();
            for_each_run(a, &c, &mut |r| runs.push(r));
            prop_assert_eq!(&runs, &expected_runs);
            let mut runs = Vec::new();
            for_each_run_words(a, &c, &mut |r| runs.push(r));
            prop_assert_eq!(&runs, &expected_runs);
            // Every path this CPU has, not only the one `for_each_run` picks.
            for path in ScanPath::available() {
                let mut runs = Vec::new();
                for_each_run_on(path, a, &c, &mut |r| runs.push(r));
                prop_assert_eq!(&runs, &expected_runs, "{}", path.name());
            }
        }

        /// Runs joined across short gaps, once joined by the caller's rule, are the exact runs
        /// joined by it; each still starts and ends at a differing byte.
        #[test]
        fn bridged_runs_join_to_the_exact_answer(
            len in 0usize..400,
            bridge in 0usize..80,
            changes in proptest::collection::vec((0usize..400, 1usize..40), 0..12),
        ) {
            let a: Vec<u8> = (0..len).map(|i| (i * 17 % 253) as u8).collect();
            let mut b = a.clone();
            // Short runs with gaps of every width, some dense patches of single bytes.
            for (at, width) in changes {
                for i in (at..(at + width).min(len)).step_by(1 + width % 3) {
                    b[i] ^= 0x33;
                }
            }
            let join = |runs: &[std::ops::Range<usize>]| {
                let mut joined: Vec<std::ops::Range<usize>> = Vec::new();
                for run in runs {
                    match joined.last_mut() {
                        Some(last) if run.start - last.end <= bridge => last.end = run.end,
                        _ => joined.push(run.clone()),
                    }
                }
                joined
            };
            let expected = join(&runs_bytes(&a, &b));
            for path in ScanPath::available() {
                let mut runs = Vec::new();
                for_each_run_bridged_on(path, &a, &b, bridge, &mut |r| runs.push(r));
                for run in &runs {
                    prop_assert!(a[run.start] != b[run.start] && a[run.end - 1] != b[run.end - 1]);
                }
                prop_assert_eq!(join(&runs), expected.clone(), "{}", path.name());
            }
        }
    }

    #[test]
    fn gaps_are_bridged_inside_a_mask_only() {
        // Ones at 0, 3 (gap 2), 10 (gap 6), and the top bit: gaps of 2 and 6 join at 6,
        // the gap of 53 before the top bit does not, and bytes past the last one stay clear.
        let mask = 1 | 1 << 3 | 1 << 10 | 1 << 63;
        assert_eq!(bridge_gaps(mask, 6), 0b111_1111_1111 | 1 << 63);
        assert_eq!(bridge_gaps(mask, 5), 0b1111 | 1 << 10 | 1 << 63);
        assert_eq!(bridge_gaps(mask, 0), mask);
        // Two runs are left for the caller to join.
        assert_eq!(bridge_gaps(1 << 5 | 1 << 9, 63), 1 << 5 | 1 << 9);
        assert_eq!(bridge_gaps(1 << 5 | 1 << 9 | 1 << 12, 63), 0b1111_1111 << 5);
        assert_eq!(bridge_gaps(0, 10), 0);
        assert_eq!(bridge_gaps(u64::MAX, 10), u64::MAX);
    }
}
