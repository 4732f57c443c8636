#!/usr/bin/env bash
# The numerics study on the GPU machine (scripts/gpu-check.sh bench numerics; OUT and
# FPTRAIN_BUILD_DIR set): 1. the emulated forward microbenchmark (numerics_bench: precision,
# sequence length, tile size and shape), 2. our kernels, FA2, cuDNN and bf16 math attention against
# float64 (attention_bench --deviation), 3. the training-level study (study.sh). Results in $OUT.
# FPTRAIN_NUMERICS_PARTS (default "forward kernels training") picks parts.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${FPTRAIN_BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
PARTS=${FPTRAIN_NUMERICS_PARTS:-forward kernels training}
mkdir -p "$OUT"
status=0
for part in $PARTS; do
  case $part in
    forward) "$BUILD/benchmarks/numerics_bench" --device cuda --json "$OUT/numerics-forward.json" \
               --md "$OUT/numerics-forward.md" || status=1 ;;
    kernels) "$BUILD/benchmarks/attention_bench" --deviation --out "$OUT/numerics-kernels.json" \
               --md "$OUT/numerics-kernels.md" || status=1 ;;
    training) bash "$HERE/study.sh" || status=1 ;;
    *) echo "run_gpu.sh: unknown part $part (forward, kernels, training)"; exit 2 ;;
  esac
done
exit $status
