#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for SECONDS each (cargo fuzz, libFuzzer; nightly Rust).
# Installs cargo-fuzz if it is missing. A crash stops the run and leaves its input under
# fuzz/artifacts/TARGET/, replayed with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/FILE`.
#
#   scripts/fuzz.sh [SECONDS=300] [TARGET...]
#
# .ci/run calls it with a few seconds per target when a nightly toolchain is present.
set -euo pipefail
seconds=${1:-300}
shift || true
cd "$(dirname "$0")/.."
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly); nothing fuzzed" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in "${targets[@]}"; do
    echo "== fuzz $target for ${seconds}s"
    if ! cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz target $target failed; its input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E "^Done [0-9]+ runs" "$log" || tail -3 "$log"
done
