#!/usr/bin/env bash
# Installs the S3 protocol servers the S3 archive's tests and benchmarks start on loopback:
# s3s-fs (Rust, objects kept as files) and moto (Python). Does nothing for a server already
# installed.
set -euo pipefail

# The newest s3s-fs that builds with the toolchain here (0.15 and later need a newer rustc).
S3S_FS_VERSION=0.14.1
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"

if "$cargo_bin/s3s-fs" --version >/dev/null 2>&1 || s3s-fs --version >/dev/null 2>&1; then
    echo "s3s-fs: installed"
else
    echo "s3s-fs: installing $S3S_FS_VERSION (cargo install, a minute or two)"
    cargo install --quiet --locked "s3s-fs@$S3S_FS_VERSION" --features binary
fi

python="${LODESTORE_PYTHON:-python3}"
if "$python" -c "import moto.server" >/dev/null 2>&1; then
    echo "moto: installed"
else
    echo "moto: installing (pip)"
    "$python" -m pip install --quiet 'moto[server]>=5,<6'
fi
