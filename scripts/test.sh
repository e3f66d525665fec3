#!/usr/bin/env bash
# The whole test suite: installs the servers some tests run against (scripts/test-servers.sh),
# then runs every test, those included (a missing server fails them instead of skipping).
# Arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/test-servers.sh
LODESTORE_REQUIRE_S3_SERVERS=1 cargo test --workspace --locked "$@"
