#!/usr/bin/env bash
# Nsight Compute profile of our forward and dK/dV kernels on one workload (device time: ~1 min).
#   BIN=... benchmarks/attention/profile_gpu.sh WORKLOAD [HEAD_DIM [BENCH ARGS...]]   (e.g. --heads-kv 32)
# KERNELS: the kernel-name regexes to profile (default: our forward and dK/dV kernels).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BIN=${BIN:-$ROOT/.gpu-carry/attn}
W=${1:-fixed-8192}
D=${2:-128}
shift 2 2>/dev/null || shift $#
EXTRA=("$@")
TAG=${W}_d${D}$(printf "_%s" "${EXTRA[@]}" | tr -d " -")
TORCH_LIB=$(/opt/torch/.venv/bin/python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH=$TORCH_LIB:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for k in ${KERNELS:-fwd_kernel bwd_dkdv_kernel}; do
  "$NCU" --clock-control none --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
    --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio \
    "$BIN/attention_bench" --only-ours --workload "$W" --head-dim "$D" --reps 1 "${EXTRA[@]}" >"$OUT/ncu_${k}_${TAG}.txt" 2>&1
  grep -E "Duration|Throughput|gmma|Stall|stalled|Active|Issued|Eligible|No Eligible|One or More|Hit Rate|DRAM" "$OUT/ncu_${k}_${TAG}.txt" | head -40
done
