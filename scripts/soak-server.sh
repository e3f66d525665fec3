#!/usr/bin/env bash
# Soak test of a Lodestore server: CLIENTS `lodestore stress --connect` processes run bank
# transfers against one `lodestore serve` for SECONDS. Every 10 s the server's resident memory
# is sampled; at the end the script checks that every client finished cleanly, that transfers
# kept flowing in every interval (no stall), that resident memory stayed flat after warm-up
# (the first half of the run: buffers grow to their working size early; a leak keeps
# growing, so the second half must stay within 10%), and that the store's total balance is
# conserved.
#
#   scripts/soak-server.sh [CLIENTS=16] [SECONDS=600] [WORKDIR=target/soak] [METHOD=esm]
#
# METHOD is the server's recovery method: esm, redo or wpl.
set -euo pipefail
clients=${1:-16}
seconds=${2:-600}
work=${3:-target/soak}
method=${4:-esm}
cd "$(dirname "$0")/.."
cargo build --release --locked -p lodestore-cli
bin=target/release/lodestore
rm -rf "$work" && mkdir -p "$work"
store="$work/store"

"$bin" serve "$store" --listen 127.0.0.1:0 --method "$method" > "$work/serve.out" 2> "$work/serve.err" &
server=$!
trap 'kill -9 $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "listening on" "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
address=$(awk '/listening on/ {print $3}' "$work/serve.out")
echo "server $server ($method) on $address; $clients clients for $seconds s"

accounts=100
"$bin" stress --connect "$address" --accounts $accounts --threads 1 --seconds 0 --acks "$work/acks-init"
pids=()
for c in $(seq "$clients"); do
  "$bin" stress --connect "$address" --accounts $accounts --threads 1 --seconds "$seconds" \
    --acks "$work/acks-$c" > "$work/client-$c.out" 2>&1 &
  pids+=($!)
done

echo "elapsed_s,rss_kib,acknowledged" > "$work/samples.csv"
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  sleep 10
  rss=$(awk '/VmRSS/ {print $2}' /proc/$server/status)
  acked=$(cat "$work"/acks-* 2>/dev/null | wc -l)
  echo "$(( $(date +%s) - start )),$rss,$acked" | tee -a "$work/samples.csv"
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
kill -TERM $server; wait $server || true
trap - EXIT

[ "$failed" -eq 0 ] || { echo "FAIL: $failed clients did not finish cleanly"; exit 1; }
python3 - "$work/samples.csv" <<'PY'
import csv, sys
rows = [(int(r["elapsed_s"]), int(r["rss_kib"]), int(r["acknowledged"])) for r in csv.DictReader(open(sys.argv[1]))]
stalls = [b[0] for a, b in zip(rows, rows[1:]) if b[2] <= a[2]]
if stalls:
    sys.exit(f"FAIL: no transfer acknowledged in the 10 s before {stalls}")
half = rows[-1][0] / 2
warm = [r for r in rows if r[0] >= half] or rows
base, last, peak = warm[0][1], rows[-1][1], max(r[1] for r in warm)
print(f"transfers acknowledged: {rows[-1][2]}; resident memory at half time {base} KiB, "
      f"peak after {peak} KiB, at the end {last} KiB")
if peak > base * 1.1:
    sys.exit("FAIL: resident memory grew more than 10% in the second half")
PY
"$bin" check "$store"
"$bin" dump "$store" --json | python3 -c '
import json, struct, sys
dump = json.load(sys.stdin)
objects = {o["oid"]: bytes.fromhex(o["bytes"]) for o in dump["objects"]}
bank = objects[dump["roots"]["bank"]]
oids = struct.unpack(f"<{len(bank) // 8}Q", bank)
total = sum(struct.unpack("<q", objects[oid][:8])[0] for oid in oids)
expected = 1000 * len(oids)
print(f"total balance {total} of {expected}")
sys.exit(0 if total == expected else "FAIL: money created or lost")
'
echo "soak passed"
