#!/usr/bin/env bash
# Runs the whole test suite: sets up and builds first (scripts/setup.sh).
# Extra arguments go to ctest, e.g. scripts/test.sh -R models
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One intra-op thread per test: ctest runs tests side by side on every core.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$ROOT/scripts/setup.sh"
cd "${FPTRAIN_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j "${FPTRAIN_TEST_JOBS:-$(nproc)}" "$@"
