#!/usr/bin/env bash
# Where one kernel's warps stall, by SASS line (Nsight Compute source counters).
#   BIN=... benchmarks/attention/profile_source.sh KERNEL_REGEX WORKLOAD [HEAD_DIM]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-$ROOT/.gpu-carry/attn}
K=${1:-bwd_dkdv_kernel}
W=${2:-fixed-8192}
D=${3:-128}
TORCH_LIB=$(/opt/torch/.venv/bin/python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --clock-control none --kernel-name "regex:$K" --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o "$OUT/prof" -f \
  "$BIN/attention_bench" --only-ours --workload "$W" --head-dim "$D" --reps 1 >"$OUT/prof.log" 2>&1
"$NCU" --import "$OUT/prof.ncu-rep" --page source --csv --print-source sass >"$OUT/source.csv" 2>&1
"$NCU" --import "$OUT/prof.ncu-rep" --page details --section WarpStateStats >"$OUT/stalls.txt" 2>&1
head -3 "$OUT/source.csv" | cut -c1-600
rm -f "$OUT/prof.ncu-rep"
