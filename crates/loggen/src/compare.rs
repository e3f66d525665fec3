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
        }
    }
}
