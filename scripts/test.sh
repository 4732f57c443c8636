#!/usr/bin/env bash
# Runs the whole test suite: sets up and builds first (scripts/setup.sh).
# Extra arguments go to ctest, e.g. scripts/test.sh -R models. With CI=true (and
# no arguments) scripts/fuzz.sh --quick runs after the tests.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One intra-op thread per test: ctest runs tests side by side on every core. The cores are
# counted without OMP_NUM_THREADS, which GNU nproc honours (with it, CI built and tested on
# one job: 39.5 min for a fresh clone on 2 cores).
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$ROOT/scripts/setup.sh"
cd "${FPTRAIN_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j "${FPTRAIN_TEST_JOBS:-$CORES}" "$@"
# CI also fuzzes every reader of outside files for a short while (fuzz/README.md;
# about 2 minutes of fuzzing plus a clang build of the harnesses into build-fuzz/).
if [ "${CI:-}" = "true" ] && [ $# -eq 0 ]; then
  "$ROOT/scripts/fuzz.sh" --quick
fi
