#!/usr/bin/env bash
# Runs the whole test suite: sets up and builds first (scripts/setup.sh).
# Extra arguments go to ctest, e.g. scripts/test.sh -R models
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
cd "${FPTRAIN_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j "${FPTRAIN_TEST_JOBS:-$(nproc)}" "$@"
