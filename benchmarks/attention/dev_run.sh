#!/usr/bin/env bash
# Kernel-development call on the GPU machine: runs prebuilt (or freshly built) test and
# benchmark binaries from BIN, logs to $OUT.  BIN=.gpu-carry/attn benchmarks/attention/dev_run.sh [gtest filter] [bench args]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-$ROOT/.gpu-carry/attn}
FILTER=${1:-*}
shift || true
TORCH_LIB=$(/opt/torch/.venv/bin/python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
if ! "$BIN/test_attention_gpu" --gtest_list_tests >/dev/null 2>"$OUT/load.err"; then
  echo "carried binaries do not load here ($(head -c 300 "$OUT/load.err")); building"
  BIN=$ROOT/build-attn-gpu
  "$ROOT/benchmarks/attention/build_standalone.sh" "$BIN" /opt/torch/.venv/bin/python >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
"$BIN/test_attention_gpu" --gtest_filter="$FILTER" 2>&1 | tee "$OUT/test.log" | grep -vE "^\[ +(RUN|OK) " | tail -c 6000
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$BIN/attention_bench" --out "$OUT/bench.json" --md "$OUT/bench.md" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^|" | tail -40
fi
