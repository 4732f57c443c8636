#!/usr/bin/env bash
# Builds only the attention kernels, their GPU test and the benchmark, straight with
# nvcc/g++ against the Python environment's LibTorch (no CMake, none of the rest of the
# project): the fast loop for kernel work.
#
#   benchmarks/attention/build_standalone.sh OUT_DIR [PYTHON]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:?usage: build_standalone.sh OUT_DIR [PYTHON]}
PY=${2:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=/opt/torch/.venv/bin/python
mkdir -p "$OUT/obj"
TORCH=$("$PY" -c "import torch, os; print(os.path.dirname(torch.__file__))")
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC="$CUDA/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Xcompiler -fPIC -I$ROOT"
CXX="g++ -std=c++17 -O2 -fPIC -I$ROOT -isystem $TORCH/include -isystem $TORCH/include/torch/csrc/api/include -isystem $CUDA/include -DFPTRAIN_HOPPER_KERNELS=1"
# Up to date when the object is newer than the source and every header it may include.
fresh() {
  local obj=$1 src=$2
  [ -f "$obj" ] || return 1
  [ "$obj" -nt "$src" ] || return 1
  for h in "$ROOT"/attention/*.h "$ROOT"/attention/cuda/*.h "$ROOT"/attention/cuda/*.cuh; do
    [ "$obj" -nt "$h" ] || return 1
  done
}
pids=()
for f in "$ROOT"/attention/cuda/*.cu; do
  fresh "$OUT/obj/$(basename "$f").o" "$f" && continue
  $NVCC -Xptxas -v -c "$f" -o "$OUT/obj/$(basename "$f").o" 2>"$OUT/obj/$(basename "$f").ptxas.txt" &
  pids+=($!)
done
for f in "$ROOT"/attention/cuda/*.cpp "$ROOT"/tests/attention_gpu/*_test.cpp "$ROOT"/benchmarks/attention/attention_bench.cpp; do
  fresh "$OUT/obj/$(basename "$f").o" "$f" && continue
  $CXX -c "$f" -o "$OUT/obj/$(basename "$f").o" &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [ $fail -ne 0 ]; then cat "$OUT"/obj/*.ptxas.txt | grep -i error || true; exit 1; fi
LIBS="-L$TORCH/lib -Wl,-rpath,$TORCH/lib -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -L$CUDA/lib64 -lcudart -lpthread"
KOBJ=""
for f in "$ROOT"/attention/cuda/*.cu "$ROOT"/attention/cuda/*.cpp; do KOBJ="$KOBJ $OUT/obj/$(basename "$f").o"; done
g++ -o "$OUT/test_attention_gpu" $KOBJ "$OUT"/obj/*_test.cpp.o -Wl,--no-as-needed $LIBS -lgtest -lgtest_main
g++ -o "$OUT/attention_bench" $KOBJ "$OUT/obj/attention_bench.cpp.o" -Wl,--no-as-needed $LIBS
grep -h -A2 "Compiling entry" "$OUT"/obj/launch_bf16.cu.ptxas.txt | grep -E "entry|Used|spill" > "$OUT/ptxas_summary.txt" || true
echo "built $OUT/test_attention_gpu $OUT/attention_bench"
