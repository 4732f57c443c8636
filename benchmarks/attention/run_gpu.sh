#!/usr/bin/env bash
# Attention benchmark on the GPU machine (called by scripts/gpu-check.sh after the build):
# our kernels vs LibTorch FA2 varlen vs cuDNN SDPA (padded), JSON + markdown into $OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${FPTRAIN_BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
BENCH=$(find "$BUILD" -name attention_bench -type f -perm -u+x | head -1)
[ -n "$BENCH" ] || { echo "attention_bench not built in $BUILD"; exit 1; }
"$BENCH" --out "$OUT/attention_bench.json" --md "$OUT/attention_bench.md" "$@"
