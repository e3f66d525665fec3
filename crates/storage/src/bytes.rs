//! Little-endian field access on byte buffers. Callers check bounds before calling; these
//! helpers only spare the conversions.

#[inline]
pub fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

#[inline]
pub fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

#[inline]
pub fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

#[inline]
pub fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub fn put_u64(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Are all bytes zero? Folds 64-byte blocks with OR so the compiler can use vector
/// instructions; a byte-at-a-time loop with early exit is an order of magnitude slower.
pub fn is_all_zero(bytes: &[u8]) -> bool {
    let mut blocks = bytes.chunks_exact(64);
    let blocks_zero = blocks
        .by_ref()
        .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0);
    blocks_zero && blocks.remainder().iter().all(|&b| b == 0)
}

/// The index of the first byte of `bytes` that is not zero. Zeros are passed over 64 at a
/// time (the tail of a log segment is mostly zeros, and the end of the log is searched past).
pub fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    let mut blocks = bytes.chunks_exact(64);
    let zero_blocks = blocks
        .by_ref()
        .take_while(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0)
        .count();
    let from = zero_blocks * 64;
    bytes[from..]
        .iter()
        .position(|&b| b != 0)
        .map(|at| from + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_nonzero_finds_every_position() {
        for len in [0usize, 1, 63, 64, 65, 200] {
            assert_eq!(first_nonzero(&vec![0u8; len]), None);
            for at in 0..len {
                let mut bytes = vec![0u8; len];
                bytes[at] = 0x10;
                if at + 1 < len {
                    bytes[len - 1] = 1;
                }
                assert_eq!(first_nonzero(&bytes), Some(at), "len {len}, at {at}");
            }
        }
    }

    #[test]
    fn zero_detection_sees_every_position() {
        for len in [0usize, 1, 63, 64, 65, 200] {
            let mut bytes = vec![0u8; len];
            assert!(is_all_zero(&bytes));
            for at in 0..len {
                bytes[at] = 1;
                assert!(!is_all_zero(&bytes), "len {len} at {at}");
                bytes[at] = 0;
            }
        }
    }
}
