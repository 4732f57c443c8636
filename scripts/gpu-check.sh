#!/usr/bin/env bash
# The one call on the GPU machine: build with all cores, run the GPU test areas
# (tests/*_gpu) and every benchmarks/<name>/run_gpu.sh. Logs, JSON and plots go
# to a work folder that is packed at the end into $OUT/gpu-check-<phase>.tar.gz
# next to $OUT/summary-<phase>.txt (the device tool returns only a few files).
#
#   scripts/gpu-check.sh [tests|bench|all] [benchmark names...]   (default: all)
#
# FPTRAIN_GPU_TESTS: which test areas (a ctest regex, default '_gpu': all of them).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
PHASE=${1:-all}
shift || true
ONLY=("$@")
WORK=$(mktemp -d /tmp/gpu-check.XXXX)
SUMMARY=$OUT/summary-$PHASE.txt
mkdir -p "$OUT"
export FPTRAIN_BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
export FPTRAIN_JOBS=$(nproc)
export PYTHONUNBUFFERED=1
status=0
say() { echo "$*" | tee -a "$SUMMARY"; }

pack() {
  tar -czf "$OUT/gpu-check-$PHASE.tar.gz" -C "$WORK" . 2>/dev/null
}
trap pack EXIT
trap "exit 143" TERM INT

say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) | $(date -u +%FT%TZ)"
start=$(date +%s)
if ! "$ROOT/scripts/setup.sh" >"$WORK/build.log" 2>&1; then
  tail -60 "$WORK/build.log" | tee -a "$SUMMARY"; say "BUILD FAILED"; exit 1
fi
say "build: $(( $(date +%s) - start )) s"

if [ "$PHASE" = all ] || [ "$PHASE" = tests ]; then
  start=$(date +%s)
  (cd "$FPTRAIN_BUILD_DIR" && ctest -R "${FPTRAIN_GPU_TESTS:-_gpu}" -V -j1) >"$WORK/gpu-tests.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Bf16|error|max rel" "$WORK/gpu-tests.log" | tail -40 | tee -a "$SUMMARY"
  say "gpu tests: $(( $(date +%s) - start )) s"
fi
if [ "$PHASE" = all ] || [ "$PHASE" = bench ]; then
  for b in "$ROOT"/benchmarks/*/run_gpu.sh; do
    name=$(basename "$(dirname "$b")")
    if [ ${#ONLY[@]} -gt 0 ] && [[ ! " ${ONLY[*]} " =~ " $name " ]]; then continue; fi
    start=$(date +%s)
    say "== benchmark $name"
    mkdir -p "$WORK/$name"
    FPTRAIN_BUILD_DIR=$FPTRAIN_BUILD_DIR OUT=$WORK/$name bash "$b" >"$WORK/bench-$name.log" 2>&1 || { status=1; say "FAILED"; }
    tail -30 "$WORK/bench-$name.log" | tee -a "$SUMMARY" >/dev/null
    find "$WORK/$name" -name '*.md' -exec cat {} \; | tee -a "$SUMMARY" >/dev/null
    say "($name: $(( $(date +%s) - start )) s)"
  done
fi
exit $status
