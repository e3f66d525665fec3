//! crc32c (Castagnoli), hardware accelerated where the CPU has it. Every on-disk structure is
//! protected by it.

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

#[cfg(test)]
mod tests {
    use super::*;

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
