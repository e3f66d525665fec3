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

#[cfg(test)]
mod tests {
    use super::*;

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
