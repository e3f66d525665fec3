//! Limits and format constants shared by every layer. A limit carries its unit in its name.

/// Page sizes a store may be created with.
pub const PAGE_SIZES_SUPPORTED: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// The page size used when the caller does not choose one.
pub const PAGE_SIZE_DEFAULT: usize = 8192;

/// The smallest page size; the superblock layout must fit inside it.
pub const PAGE_SIZE_MIN: usize = 4096;

/// The largest page size; slot offsets are 16-bit, so a page may not exceed 64 KiB.
pub const PAGE_SIZE_MAX: usize = 65536;

/// Longest name of a named root, in bytes of UTF-8.
pub const ROOT_NAME_BYTES_MAX: usize = 255;

/// Largest object the store accepts, in bytes (1 GiB). Large objects are stored as extents of
/// whole pages; this bound keeps a descriptor and an in-memory copy of an object sane.
pub const OBJECT_BYTES_MAX: u64 = 1 << 30;

// The named sizes are the ends and a member of the supported list, which is in order; slot
// offsets are 16-bit.
const _: () = {
    let sizes = PAGE_SIZES_SUPPORTED;
    assert!(sizes[0] == PAGE_SIZE_MIN);
    assert!(sizes[sizes.len() - 1] == PAGE_SIZE_MAX);
    assert!(PAGE_SIZE_MAX <= u16::MAX as usize + 1);
    let mut i = 1;
    let mut default_listed = sizes[0] == PAGE_SIZE_DEFAULT;
    while i < sizes.len() {
        assert!(sizes[i - 1] < sizes[i] && sizes[i].is_power_of_two());
        default_listed |= sizes[i] == PAGE_SIZE_DEFAULT;
        i += 1;
    }
    assert!(default_listed);
};

/// Is `page_size` one the format supports?
pub fn page_size_is_supported(page_size: usize) -> bool {
    PAGE_SIZES_SUPPORTED.contains(&page_size)
}
