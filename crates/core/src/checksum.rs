//! Checksums of on-disk structures: crc32c (Castagnoli), hardware accelerated where the CPU
//! has it, for records, headers and files; a non-linear hash for pages written in place.
//!
//! Why pages differ: a CRC is linear, so two versions of a page whose only difference lies
//! inside a block that carries its own crc32c at its end (a collection's header, or any
//! application object sealed the usual way) have the same page crc32c. A torn write that mixes
//! the two versions then passes the check, and recovery trusts a page that lost a change. A
//! hash without that algebra (xxh3) sees every such difference.

/// Checksum of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Checksum of the concatenation of `first` and `second` without copying them together.
#[inline]
pub fn crc32c_two(first: &[u8], second: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(first), second)
}

/// Checksum of a page's bytes (after its checksum field): the low 32 bits of xxh3-64.
#[inline]
pub fn page_checksum(bytes: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(bytes) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason pages are not checked by crc32c: a block sealed with its own crc32c at its
    /// end changes without changing the crc32c of what contains it.
    #[test]
    fn a_sealed_block_hides_from_crc32c_but_not_from_the_page_checksum() {
        let sealed = |body: &[u8]| -> Vec<u8> {
            let mut block = body.to_vec();
            block.extend_from_slice(&crc32c(body).to_le_bytes());
            block
        };
        let mut old = vec![7u8; 4032];
        let mut new = old.clone();
        old.extend(sealed(&[4u8; 60]));
        new.extend(sealed(&[15u8; 60]));
        assert_ne!(old, new);
        assert_eq!(
            crc32c(&old),
            crc32c(&new),
            "crc32c is blind to the sealed block"
        );
        assert_ne!(page_checksum(&old), page_checksum(&new));
    }

    #[test]
    fn known_vector() {
        // The standard check value of CRC-32C for the ASCII digits 1..9.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn split_equals_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for cut in [0, 1, 500, 999, 1000] {
            assert_eq!(crc32c_two(&data[..cut], &data[cut..]), crc32c(&data));
        }
    }
}
