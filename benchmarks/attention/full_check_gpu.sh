#!/usr/bin/env bash
# One call on the GPU machine for the record: benchmark vs peers, deviation study and
# compute-sanitizer on prebuilt binaries (BIN), then the CMake build and the GPU test suite.
#   BIN=.gpu-carry/attn [SKIP_CMAKE=1] benchmarks/attention/full_check_gpu.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-$ROOT/.gpu-carry/attn}
TORCH_LIB=$(/opt/torch/.venv/bin/python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
timeout 240 "$BIN/attention_bench" --out "$OUT/bench.json" --md "$OUT/bench.md" --reps 20 >"$OUT/bench.log" 2>&1
tail -36 "$OUT/bench.log" | grep "^|"
timeout 120 "$BIN/attention_bench" --deviation --out "$OUT/deviation.json" --md "$OUT/deviation.md" >"$OUT/deviation.log" 2>&1
tail -80 "$OUT/deviation.log"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 150 "$CS" --tool $tool "$BIN/test_attention_gpu" --gtest_filter='*Autograd*' >"$OUT/sanitizer_$tool.txt" 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/sanitizer_$tool.txt" | tr '\n' ' ')"
done
[ "${SKIP_CMAKE:-0}" = 1 ] && exit 0
start=$(date +%s)
if FPTRAIN_BUILD_DIR=$ROOT/build-gpu FPTRAIN_JOBS=$(nproc) FPTRAIN_TARGETS="test_attention_gpu attention_bench" \
   timeout 420 "$ROOT/scripts/setup.sh" >"$OUT/cmake_build.log" 2>&1; then
  echo "cmake build: $(( $(date +%s) - start )) s"
  (cd "$ROOT/build-gpu" && timeout 120 ctest -R 'HopperKernels' --output-on-failure) >"$OUT/ctest.log" 2>&1
  grep -E "tests passed|tests failed|Failed" "$OUT/ctest.log"
else
  echo "cmake build failed after $(( $(date +%s) - start )) s"; tail -20 "$OUT/cmake_build.log"
fi
