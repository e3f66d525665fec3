//! How keys and values become the bytes a tree stores. Keys are ordered as their bytes compare,
//! so integers are stored big-endian, and signed ones with the sign bit flipped, which makes
//! the byte order the numeric order.

use crate::object::Oid;
use bytemuck::Pod;

/// Kinds of keys and values, recorded in a collection's header so that opening it with other
/// types fails instead of misreading it. The high half names the family, the low half a width
/// or a type id.
mod kind {
    pub const BYTES: u64 = 1 << 32;
    pub const STRING: u64 = 2 << 32;
    pub const UNSIGNED: u64 = 3 << 32;
    pub const SIGNED: u64 = 4 << 32;
    pub const UNIT: u64 = 5 << 32;
    pub const OID: u64 = 6 << 32;
    pub const PACKED: u64 = 7 << 32;
}

/// A key as bytes. Implemented by every [`Key`] type and by the borrowed forms (`str`,
/// `[u8]`) that look them up, which encode exactly as their owned forms do.
pub trait KeyBytes {
    /// Appends the key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);

    /// Runs `f` on the key's bytes. Integers and byte strings lend them without building a
    /// vector (every lookup, insert and remove encodes its key); the provided version writes
    /// them into one.
    fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut out = Vec::new();
        self.write_key(&mut out);
        f(&out)
    }
}

/// A type a collection can use as its key.
pub trait Key: KeyBytes + Sized {
    /// What the header records for this key type.
    const KIND: u64;
    /// The key whose bytes are `bytes`, or `None` if they are not one.
    fn read_key(bytes: &[u8]) -> Option<Self>;
}

/// A type a collection can store as a value.
pub trait Value: Sized {
    /// What the header records for this value type.
    const KIND: u64;
    /// Appends the value's bytes to `out`.
    fn write_value(&self, out: &mut Vec<u8>);
    /// Runs `f` on the value's bytes; as [`KeyBytes::with_key_bytes`].
    fn with_value_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut out = Vec::new();
        self.write_value(&mut out);
        f(&out)
    }
    /// The value whose bytes are `bytes`, or `None` if they are not one.
    fn read_value(bytes: &[u8]) -> Option<Self>;
}

macro_rules! unsigned_key {
    ($($t:ty),*) => {$(
        impl KeyBytes for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
                f(&self.to_be_bytes())
            }
        }
        impl Key for $t {
            const KIND: u64 = kind::UNSIGNED | size_of::<$t>() as u64;
            fn read_key(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_be_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}
unsigned_key!(u8, u16, u32, u64, u128);

macro_rules! signed_key {
    ($($t:ty => $u:ty),*) => {$(
        impl KeyBytes for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                self.with_key_bytes(|bytes| out.extend_from_slice(bytes))
            }
            fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
                // Flipping the sign bit puts negative numbers below positive ones bytewise.
                let flipped = (*self as $u) ^ (1 << (<$u>::BITS - 1));
                f(&flipped.to_be_bytes())
            }
        }
        impl Key for $t {
            const KIND: u64 = kind::SIGNED | size_of::<$t>() as u64;
            fn read_key(bytes: &[u8]) -> Option<Self> {
                let flipped = <$u>::from_be_bytes(bytes.try_into().ok()?);
                Some((flipped ^ (1 << (<$u>::BITS - 1))) as $t)
            }
        }
    )*};
}
signed_key!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, i128 => u128);

impl KeyBytes for [u8] {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}
impl KeyBytes for Vec<u8> {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}
impl Key for Vec<u8> {
    const KIND: u64 = kind::BYTES;
    fn read_key(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

impl KeyBytes for str {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}
impl KeyBytes for String {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn with_key_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}
impl Key for String {
    const KIND: u64 = kind::STRING;
    fn read_key(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

/// Every key type is also a value type, stored as it would be as a key.
macro_rules! key_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            const KIND: u64 = <$t as Key>::KIND;
            fn write_value(&self, out: &mut Vec<u8>) {
                self.write_key(out)
            }
            fn with_value_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
                self.with_key_bytes(f)
            }
            fn read_value(bytes: &[u8]) -> Option<Self> {
                <$t as Key>::read_key(bytes)
            }
        }
    )*};
}
key_value!(
    u8,
    u16,
    u32,
    u64,
    u128,
    i8,
    i16,
    i32,
    i64,
    i128,
    Vec<u8>,
    String
);

/// A set is a map whose values are empty.
impl Value for () {
    const KIND: u64 = kind::UNIT;
    fn write_value(&self, _: &mut Vec<u8>) {}
    fn with_value_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&[])
    }
    fn read_value(bytes: &[u8]) -> Option<Self> {
        bytes.is_empty().then_some(())
    }
}

/// A reference to a stored object: the map from keys to objects.
impl<T: crate::Persistent> Value for Oid<T> {
    const KIND: u64 = kind::OID | T::TYPE_ID as u64;
    fn write_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.raw().0.to_le_bytes());
    }
    fn with_value_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.raw().0.to_le_bytes())
    }
    fn read_value(bytes: &[u8]) -> Option<Self> {
        let raw = u64::from_le_bytes(bytes.try_into().ok()?);
        Some(Oid::from_raw(lodestore_core::Oid(raw)))
    }
}

/// Any plain-old-data value stored by its bytes (a small struct kept in the tree itself rather
/// than as an object of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Packed<T>(pub T);

impl<T: Pod> Value for Packed<T> {
    const KIND: u64 = kind::PACKED | size_of::<T>() as u64;
    fn write_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(bytemuck::bytes_of(&self.0));
    }
    fn with_value_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(bytemuck::bytes_of(&self.0))
    }
    fn read_value(bytes: &[u8]) -> Option<Self> {
        (bytes.len() == size_of::<T>()).then(|| Packed(bytemuck::pod_read_unaligned(bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes_of<K: KeyBytes + ?Sized>(key: &K) -> Vec<u8> {
        let mut out = Vec::new();
        key.write_key(&mut out);
        out
    }

    /// What a key or value lends equals what it writes.
    fn lends_what_it_writes<K: KeyBytes + ?Sized>(key: &K) -> bool {
        key.with_key_bytes(|lent| lent == bytes_of(key).as_slice())
    }

    fn value_lends_what_it_writes<V: Value>(value: &V) -> bool {
        let mut written = Vec::new();
        value.write_value(&mut written);
        value.with_value_bytes(|lent| lent == written.as_slice())
    }

    proptest! {
        #[test]
        fn keys_and_values_lend_the_bytes_they_write(
            a: u64, b: i32, c: i128, d: u8, e: i16, bytes: Vec<u8>, text: String, packed: [u8; 5]
        ) {
            prop_assert!(lends_what_it_writes(&a) && lends_what_it_writes(&b));
            prop_assert!(lends_what_it_writes(&c) && lends_what_it_writes(&d));
            prop_assert!(lends_what_it_writes(&e) && lends_what_it_writes(&bytes));
            prop_assert!(lends_what_it_writes(bytes.as_slice()));
            prop_assert!(lends_what_it_writes(&text) && lends_what_it_writes(text.as_str()));
            prop_assert!(value_lends_what_it_writes(&a) && value_lends_what_it_writes(&c));
            prop_assert!(value_lends_what_it_writes(&Packed(packed)));
            prop_assert!(value_lends_what_it_writes(&()) && value_lends_what_it_writes(&text));
        }

        #[test]
        fn signed_keys_order_as_their_bytes(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), bytes_of(&a).cmp(&bytes_of(&b)));
            prop_assert_eq!(i64::read_key(&bytes_of(&a)), Some(a));
        }

        #[test]
        fn unsigned_keys_order_as_their_bytes(a: u32, b: u32) {
            prop_assert_eq!(a.cmp(&b), bytes_of(&a).cmp(&bytes_of(&b)));
            prop_assert_eq!(u32::read_key(&bytes_of(&a)), Some(a));
        }

        #[test]
        fn strings_encode_as_their_borrowed_form(s: String) {
            prop_assert_eq!(bytes_of(&s), bytes_of(s.as_str()));
            prop_assert_eq!(String::read_key(&bytes_of(&s)), Some(s));
        }
    }

    #[test]
    fn a_key_of_the_wrong_width_is_refused() {
        assert_eq!(u64::read_key(&[1, 2, 3]), None);
        assert_eq!(String::read_key(&[0xFF]), None);
        assert_eq!(<()>::read_value(&[0]), None);
    }
}
