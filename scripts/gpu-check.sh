#!/usr/bin/env bash
# The one call on the GPU machine: build with all cores, run the GPU test areas
# (tests/*_gpu) and every benchmarks/<name>/run_gpu.sh, logs and JSON under $OUT.
#
#   scripts/gpu-check.sh [tests|bench|all]   (default all)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
WHAT=${1:-all}
export FPTRAIN_BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
export FPTRAIN_JOBS=$(nproc)
export PYTHONUNBUFFERED=1
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
start=$(date +%s)
if ! "$ROOT/scripts/setup.sh" >"$OUT/build.log" 2>&1; then
  tail -50 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"

if [ "$WHAT" = all ] || [ "$WHAT" = tests ]; then
  (cd "$FPTRAIN_BUILD_DIR" && ctest -R '_gpu' --output-on-failure -j1) >"$OUT/gpu-tests.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu-tests.log" | tail -20
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  for b in "$ROOT"/benchmarks/*/run_gpu.sh; do
    [ -f "$b" ] || continue
    name=$(basename "$(dirname "$b")")
    echo "== benchmark $name"
    FPTRAIN_BUILD_DIR=$FPTRAIN_BUILD_DIR OUT=$OUT bash "$b" >"$OUT/bench-$name.log" 2>&1 || { status=1; echo "FAILED"; }
    tail -25 "$OUT/bench-$name.log"
  done
fi
exit $status
