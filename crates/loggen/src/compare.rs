//! Wide comparison of two images: where the next differing byte is, and where a run of
//! differing bytes ends. Diffing spends almost all its time skipping equal bytes, so that scan
//! compares 64 bytes per step with vector instructions (AVX2 when the CPU has it, SSE2
//! otherwise on x86-64, 8-byte words elsewhere); a byte loop is about 40 times slower.

/// The index of the first byte where `a` and `b` differ, or their length if none does.
pub fn first_difference(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { x86::first_difference_avx2(a, b) };
        }
        // SAFETY: SSE2 is part of the x86-64 baseline.
        unsafe { x86::first_difference_sse2(a, b) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        first_difference_words(a, b)
    }
}

/// The index of the first byte where `a` and `b` are equal, or their length if none is: the
/// end of a run of changed bytes. Runs are short (a field or two), so words are enough.
pub fn first_equal(a: &[u8], b: &[u8]) -> usize {
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
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { x86::for_each_run_avx2(a, b, found) };
        }
    }
    for_each_run_words(a, b, found)
}

/// Runs of differing bytes by word scans: the next differing byte, then the next equal one.
fn for_each_run_words(a: &[u8], b: &[u8], found: &mut impl FnMut(std::ops::Range<usize>)) {
    let mut at = 0;
    while at < a.len() {
        at += first_difference(&a[at..], &b[at..]);
        if at == a.len() {
            break;
        }
        let start = at;
        at += first_equal(&a[at..], &b[at..]);
        found(start..at);
    }
}

/// Reads the runs off `differing`, a mask of `width` (at most 32) bytes starting at `base`
/// (bit i: byte `base + i` differs), continuing the run `open` from an earlier mask and
/// leaving the run still open at the mask's end in it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn runs_of_mask(
    differing: u32,
    width: u32,
    base: usize,
    open: &mut Option<usize>,
    found: &mut impl FnMut(std::ops::Range<usize>),
) {
    debug_assert!(width <= 32);
    let valid = u32::MAX.checked_shr(32 - width).unwrap_or(0);
    let (differing, equal) = (differing & valid, !differing & valid);
    let mut i = 0u32;
    while i < width {
        match *open {
            Some(start) => {
                let rest = equal >> i;
                if rest == 0 {
                    return;
                }
                i += rest.trailing_zeros();
                found(start..base + i as usize);
                *open = None;
            }
            None => {
                let rest = differing >> i;
                if rest == 0 {
                    return;
                }
                i += rest.trailing_zeros();
                *open = Some(base + i as usize);
            }
        }
    }
}

/// Eight bytes as a little-endian word.
fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("an 8-byte chunk"))
}

/// The portable scan: 8-byte words, then bytes.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
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

    /// Bytes compared per step: two 32-byte or four 16-byte vectors of each image.
    const STEP: usize = 64;

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn first_difference_avx2(a: &[u8], b: &[u8]) -> usize {
        debug_assert_eq!(a.len(), b.len());
        let mut at = 0;
        // Equal stretches are the common case: 128 bytes per step with one branch, then the
        // step that differs is searched vector by vector.
        while at + 2 * STEP <= a.len() {
            // SAFETY: `at + 128 <= len` for both slices; unaligned loads are allowed.
            let equal = unsafe {
                let pa = a.as_ptr().add(at) as *const __m256i;
                let pb = b.as_ptr().add(at) as *const __m256i;
                [0, 1, 2, 3].map(|i| {
                    _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(i)), _mm256_loadu_si256(pb.add(i)))
                })
            };
            let all = _mm256_and_si256(
                _mm256_and_si256(equal[0], equal[1]),
                _mm256_and_si256(equal[2], equal[3]),
            );
            if _mm256_movemask_epi8(all) as u32 != u32::MAX {
                // One 128-bit mask of the step's equal bytes: the first differing byte is its
                // lowest clear bit, found without a branch per vector.
                let equal_bits = equal.iter().enumerate().fold(0u128, |bits, (i, vector)| {
                    bits | (u128::from(_mm256_movemask_epi8(*vector) as u32) << (32 * i))
                });
                return at + (!equal_bits).trailing_zeros() as usize;
            }
            at += 2 * STEP;
        }
        while at + STEP <= a.len() {
            // SAFETY: `at + 64 <= len` for both slices; unaligned loads are allowed.
            let (equal_low, equal_high) = unsafe {
                let pa = a.as_ptr().add(at) as *const __m256i;
                let pb = b.as_ptr().add(at) as *const __m256i;
                (
                    _mm256_cmpeq_epi8(_mm256_loadu_si256(pa), _mm256_loadu_si256(pb)),
                    _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(1)), _mm256_loadu_si256(pb.add(1))),
                )
            };
            let low = !(_mm256_movemask_epi8(equal_low) as u32);
            if low != 0 {
                return at + low.trailing_zeros() as usize;
            }
            let high = !(_mm256_movemask_epi8(equal_high) as u32);
            if high != 0 {
                return at + 32 + high.trailing_zeros() as usize;
            }
            at += STEP;
        }
        at + super::first_difference_words(&a[at..], &b[at..])
    }

    /// Byte-equality vectors of bytes `at..at + 128` of `a` and `b`.
    ///
    /// # Safety
    /// The CPU must support AVX2, and `at + 128` must not exceed either slice.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn equal_vectors(a: &[u8], b: &[u8], at: usize) -> [__m256i; 4] {
        debug_assert!(at + 2 * STEP <= a.len() && at + 2 * STEP <= b.len());
        // SAFETY: in bounds by the caller's promise; unaligned loads are allowed.
        unsafe {
            let pa = a.as_ptr().add(at) as *const __m256i;
            let pb = b.as_ptr().add(at) as *const __m256i;
            [0, 1, 2, 3].map(|i| {
                _mm256_cmpeq_epi8(_mm256_loadu_si256(pa.add(i)), _mm256_loadu_si256(pb.add(i)))
            })
        }
    }

    /// Are all 128 bytes behind `equal` equal?
    #[target_feature(enable = "avx2")]
    #[inline]
    fn all_equal(equal: &[__m256i; 4]) -> bool {
        let all = _mm256_and_si256(
            _mm256_and_si256(equal[0], equal[1]),
            _mm256_and_si256(equal[2], equal[3]),
        );
        _mm256_movemask_epi8(all) as u32 == u32::MAX
    }

    /// The runs of differing bytes, read off masks of 128 bytes per step (32 at the tail,
    /// then bytes).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn for_each_run_avx2(
        a: &[u8],
        b: &[u8],
        found: &mut impl FnMut(std::ops::Range<usize>),
    ) {
        debug_assert_eq!(a.len(), b.len());
        if (32..=STEP).contains(&a.len()) {
            // SAFETY: the CPU supports AVX2 (this function's contract); the length is in range.
            return unsafe { for_each_run_in_one_mask(a, b, found) };
        }
        let mut open: Option<usize> = None;
        let mut at = 0;
        while at + 2 * STEP <= a.len() {
            // SAFETY: `at + 128 <= len` for both slices.
            let equal = unsafe { equal_vectors(a, b, at) };
            if all_equal(&equal) {
                if let Some(start) = open.take() {
                    found(start..at);
                }
                at += 2 * STEP;
                // Equal stretches are the common case: skip them in a loop of their own.
                // SAFETY: `at + 128 <= len` for both slices.
                while at + 2 * STEP <= a.len() && all_equal(&unsafe { equal_vectors(a, b, at) }) {
                    at += 2 * STEP;
                }
                continue;
            }
            for (i, vector) in equal.iter().enumerate() {
                let differing = !(_mm256_movemask_epi8(*vector) as u32);
                let base = at + 32 * i;
                match (differing, open) {
                    (0, None) => {}
                    (0, Some(start)) => {
                        found(start..base);
                        open = None;
                    }
                    (u32::MAX, Some(_)) => {}
                    _ => super::runs_of_mask(differing, 32, base, &mut open, found),
                }
            }
            at += 2 * STEP;
        }
        while at + 32 <= a.len() {
            // SAFETY: `at + 32 <= len` for both slices; unaligned loads are allowed.
            let equal = unsafe {
                _mm256_cmpeq_epi8(
                    _mm256_loadu_si256(a.as_ptr().add(at) as *const __m256i),
                    _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i),
                )
            };
            let differing = !(_mm256_movemask_epi8(equal) as u32);
            super::runs_of_mask(differing, 32, at, &mut open, found);
            at += 32;
        }
        let tail = if at == a.len() {
            0
        } else if a.len() >= 32 {
            // The last 32 bytes, overlapping what was scanned: no byte loop.
            let last = a.len() - 32;
            // SAFETY: `last + 32 == len` for both slices; unaligned loads are allowed.
            let equal = unsafe {
                _mm256_cmpeq_epi8(
                    _mm256_loadu_si256(a.as_ptr().add(last) as *const __m256i),
                    _mm256_loadu_si256(b.as_ptr().add(last) as *const __m256i),
                )
            };
            !(_mm256_movemask_epi8(equal) as u32) >> (at - last)
        } else {
            a[at..]
                .iter()
                .zip(&b[at..])
                .enumerate()
                .fold(0u32, |bits, (i, (x, y))| bits | (u32::from(x != y) << i))
        };
        super::runs_of_mask(tail, (a.len() - at) as u32, at, &mut open, found);
        if let Some(start) = open {
            found(start..a.len());
        }
    }

    /// [`for_each_run_avx2`] for 32 to 64 bytes (a sub-page block, of which a commit diffs
    /// thousands): one 64-bit mask of differing bytes from two overlapping 32-byte compares,
    /// the runs read off it with nothing carried from one vector to the next.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn for_each_run_in_one_mask(
        a: &[u8],
        b: &[u8],
        found: &mut impl FnMut(std::ops::Range<usize>),
    ) {
        let len = a.len();
        assert!((32..=STEP).contains(&len) && b.len() == len);
        let last = len - 32;
        // SAFETY: `last + 32 == len` for both slices; unaligned loads are allowed.
        let [low, high] = unsafe {
            [0, last].map(|at| {
                let equal = _mm256_cmpeq_epi8(
                    _mm256_loadu_si256(a.as_ptr().add(at) as *const __m256i),
                    _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i),
                );
                u64::from(!(_mm256_movemask_epi8(equal) as u32))
            })
        };
        // Bit i: byte i differs; the two vectors overlap where `last < 32`, and no bit lies
        // at or past `len`.
        let mut differing = low | high << last;
        while differing != 0 {
            let start = differing.trailing_zeros();
            let end = start + (!(differing >> start)).trailing_zeros();
            found(start as usize..end as usize);
            differing = if end < 64 {
                differing & (u64::MAX << end)
            } else {
                0
            };
        }
    }

    /// # Safety
    /// The CPU must support SSE2 (every x86-64 CPU does).
    #[target_feature(enable = "sse2")]
    pub unsafe fn first_difference_sse2(a: &[u8], b: &[u8]) -> usize {
        debug_assert_eq!(a.len(), b.len());
        let mut at = 0;
        while at + STEP <= a.len() {
            // SAFETY: `at + 64 <= len` for both slices; unaligned loads are allowed.
            let equal = unsafe {
                let pa = a.as_ptr().add(at) as *const __m128i;
                let pb = b.as_ptr().add(at) as *const __m128i;
                [0, 1, 2, 3]
                    .map(|i| _mm_cmpeq_epi8(_mm_loadu_si128(pa.add(i)), _mm_loadu_si128(pb.add(i))))
            };
            let all = _mm_and_si128(
                _mm_and_si128(equal[0], equal[1]),
                _mm_and_si128(equal[2], equal[3]),
            );
            if _mm_movemask_epi8(all) != 0xFFFF {
                for (i, vector) in equal.iter().enumerate() {
                    let differing = !(_mm_movemask_epi8(*vector) as u32) & 0xFFFF;
                    if differing != 0 {
                        return at + 16 * i + differing.trailing_zeros() as usize;
                    }
                }
            }
            at += STEP;
        }
        at + super::first_difference_words(&a[at..], &b[at..])
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
            prop_assert_eq!(first_difference(a, b), expected);
            prop_assert_eq!(first_difference_words(a, b), expected);
            #[cfg(target_arch = "x86_64")]
            {
                // SAFETY: SSE2 is part of the x86-64 baseline.
                prop_assert_eq!(unsafe { x86::first_difference_sse2(a, b) }, expected);
            }

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
        }
    }
}
