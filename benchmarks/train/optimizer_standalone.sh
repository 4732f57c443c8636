#!/usr/bin/env bash
# The fast loop for the optimizer's kernels on the GPU machine: builds the flat-buffer
# optimizer (trainer/flat_*, optim/adamw.cpp, trainer/cuda/), its GPU test
# (tests/trainer_gpu/flat_adamw_gpu_test.cpp) and optimizer_bench straight with
# nvcc/g++ against the Python environment's LibTorch (no CMake, none of the rest
# of the project: about a minute), runs the test, then the benchmark into $OUT.
#
#   OUT=dir benchmarks/train/optimizer_standalone.sh [optimizer_bench arguments]
#   BUILD_ONLY=1 benchmarks/train/optimizer_standalone.sh     # compile here, run nothing
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-/tmp/fptrain-optimizer}
PY=/opt/torch/.venv/bin/python
[ -x "$PY" ] || PY=$ROOT/.venv/bin/python
TORCH=$("$PY" -c "import torch, os; print(os.path.dirname(torch.__file__))")
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT" "$BIN/obj"
NVCC="$CUDA/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -fPIC -I$ROOT"
CXX="g++ -std=c++17 -O2 -fPIC -I$ROOT -isystem $TORCH/include -isystem $TORCH/include/torch/csrc/api/include
     -isystem $CUDA/include -DFPTRAIN_TRAINER_CUDA_KERNELS=1"
pids=()
$NVCC -c "$ROOT/optim/cuda/flat_adamw_kernels.cu" -o "$BIN/obj/flat_adamw_kernels.o" & pids+=($!)
$CXX -ffp-contract=off -c "$ROOT/optim/flat_adamw.cpp" -o "$BIN/obj/flat_adamw.o" & pids+=($!)
for f in optim/cuda/flat_adamw_cuda.cpp optim/flat_layout.cpp optim/flat_parameters.cpp optim/adamw.cpp \
         models/parameter_layout.cpp tests/trainer_gpu/flat_adamw_gpu_test.cpp benchmarks/train/optimizer_bench.cpp \
         benchmarks/train/bench_setup.cpp; do
  $CXX -c "$ROOT/$f" -o "$BIN/obj/$(basename "$f" .cpp).o" & pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { echo "build failed"; exit 1; }
LIBS="-L$TORCH/lib -Wl,-rpath,$TORCH/lib -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -L$CUDA/lib64 -lcudart -lpthread"
CORE="$BIN/obj/flat_adamw_kernels.o $BIN/obj/flat_adamw.o $BIN/obj/flat_adamw_cuda.o $BIN/obj/flat_layout.o
      $BIN/obj/flat_parameters.o $BIN/obj/adamw.o $BIN/obj/parameter_layout.o"
g++ -o "$BIN/test_flat_adamw_gpu" $CORE "$BIN/obj/flat_adamw_gpu_test.o" -Wl,--no-as-needed $LIBS -lgtest -lgtest_main
g++ -o "$BIN/optimizer_bench" $CORE "$BIN/obj/optimizer_bench.o" "$BIN/obj/bench_setup.o" -Wl,--no-as-needed $LIBS
echo "built $BIN/test_flat_adamw_gpu $BIN/optimizer_bench"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
"$BIN/test_flat_adamw_gpu" 2>&1 | tee "$OUT/optimizer-gpu-test.log" | grep -vE "^\[ +(RUN|OK) " || status=1
"$BIN/optimizer_bench" --out "$OUT" "$@" 2>&1 | tee "$OUT/optimizer-bench.log" | tail -40 || status=1
exit $status
