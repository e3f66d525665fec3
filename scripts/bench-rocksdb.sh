#!/usr/bin/env bash
# `lodestore bench peers` with RocksDB among the stores. RocksDB is a C++ library: the
# `rocksdb` feature links the system's (Debian's librocksdb-dev), and its bindings are made by
# bindgen, which needs libclang. This installs both when missing (apt-get; as root or through
# sudo), points the build at the library, and runs the comparison; arguments go to
# `bench peers` (for example --preset oo7-medium --oo1-parts 1000000 for the large size).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
dpkg -s librocksdb-dev >/dev/null 2>&1 || missing+=(librocksdb-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
if ((${#missing[@]})); then
    echo "installing ${missing[*]} (apt-get)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

library=$(dpkg -L librocksdb-dev | grep -m1 '/librocksdb\.so$')
export ROCKSDB_LIB_DIR
ROCKSDB_LIB_DIR=$(dirname "$library")

# Every store unless the arguments name some.
stores=(--stores lodestore,lmdb,redb,sqlite,rocksdb)
for arg in "$@"; do
    case "$arg" in --stores | --stores=*) stores=() ;; esac
done
cargo run --release --locked -p lodestore-cli --features rocksdb -- \
    bench peers "${stores[@]}" "$@"
