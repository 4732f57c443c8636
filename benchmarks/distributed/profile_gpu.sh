#!/usr/bin/env bash
# Where the data-parallel step loses time: step profiles (logging.profile_steps: time per
# kernel category, GPU idle time, top kernels) of the benchmark's 7B run on 2 GPUs and on
# one GPU over the same examples (gradient accumulation 2), rank 0's view. The same data,
# model and settings as run_gpu.sh (whose prep makes them). Results: $OUT/profile-*.md/json.
#
#   FPTRAIN_BUILD_DIR=build-gpu OUT=... benchmarks/distributed/profile_gpu.sh
#
# Knobs: FPTRAIN_PROFILE_WARMUP (default 15 steps), FPTRAIN_PROFILE_STEPS (default 10),
# FPTRAIN_DIST_BENCH_DIR (the work folder of run_gpu.sh, default /tmp/fptrain-dist-bench),
# FPTRAIN_PROFILE_SETS (extra `--set` overrides for every run, space-separated),
# FPTRAIN_PROFILE_VARIANTS (more 2-GPU runs, below), FPTRAIN_PROFILE_BASE=0 (only those).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
if [ -d "$BUILD_DIR/apps/fptrain" ]; then FPTRAIN=$BUILD_DIR/apps/fptrain/fptrain; else FPTRAIN=$BUILD_DIR/apps/fptrain; fi
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
WORK=${FPTRAIN_DIST_BENCH_DIR:-/tmp/fptrain-dist-bench}
WARMUP=${FPTRAIN_PROFILE_WARMUP:-15}
STEPS=${FPTRAIN_PROFILE_STEPS:-10}
read -r -a EXTRA <<< "${FPTRAIN_PROFILE_SETS:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
FPTRAIN_DIST_PART=prep FPTRAIN_DIST_BENCH_DIR=$WORK OUT=$OUT bash "$HERE/run_gpu.sh" > "$OUT/profile-prep.log" 2>&1 ||
  { tail -20 "$OUT/profile-prep.log"; exit 1; }

status=0
profile() {  # name, processes, grad accumulation, [KEY=VALUE environment or key=value --set overrides...]
  local name=$1 world=$2 accum=$3 run=$WORK/profile-$1 envs=() sets=()
  shift 3
  for kv in "$@"; do if [[ $kv =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$kv"); else sets+=("$kv"); fi; done
  rm -rf "$run"
  cat > "$WORK/profile-$name.yaml" <<YAML
model:
  path: $WORK/llama2-7b
  dtype: bfloat16
  activation_checkpointing: every_layer
data:
  train: $WORK/flan.jsonl
  max_length: 4096
  workers: 8
batching:
  mode: flatten
  examples_per_micro_batch: 4
  grad_accumulation: $accum
optimizer:
  lr: 1.0e-4
  master_weights: true
  grad_clip: 1.0
training:
  max_steps: $((WARMUP + STEPS))
logging:
  log_interval: 5
  profile_warmup: $WARMUP
  profile_steps: $STEPS
checkpoint:
  save_final: false
output_dir: $run
resume: none
device: cuda
YAML
  local args=(train "$WORK/profile-$name.yaml")
  for s in "${EXTRA[@]}" "${sets[@]}"; do args+=(--set "$s"); done
  echo "== profile $name: $world GPU(s), grad accumulation $accum, steps $((WARMUP + 1))-$((WARMUP + STEPS))"
  if [ "$world" -eq 1 ]; then
    timeout -k 30 400 env "${envs[@]}" "$FPTRAIN" "${args[@]}" > "$OUT/profile-$name.log" 2>&1
  else
    timeout -k 30 400 env "${envs[@]}" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$world" \
      --no-python "$FPTRAIN" "${args[@]}" > "$OUT/profile-$name.log" 2>&1
  fi
  local rc=$?
  [ $rc -eq 0 ] && { "$PYTHON" "$HERE/../train/profile_report.py" "$run" >> "$OUT/profile-$name.log" 2>&1 || rc=1; }
  cp "$run/profile.md" "$OUT/profile-$name.md" 2>/dev/null
  cp "$run/profile.json" "$OUT/profile-$name.json" 2>/dev/null
  cp "$run/metrics.jsonl" "$OUT/profile-$name.metrics.jsonl" 2>/dev/null
  [ $rc -eq 0 ] && [ -s "$OUT/profile-$name.md" ] || { echo "FAILED: $name (exit $rc)"; tail -5 "$OUT/profile-$name.log"; status=1; }
  grep -E "profile:|done:" "$OUT/profile-$name.log" | tail -2
}
[ "${FPTRAIN_PROFILE_BASE:-1}" = 0 ] || { profile 2gpu 2 1; profile 1gpu-ga2 1 2; }
# FPTRAIN_PROFILE_VARIANTS: more 2-GPU profiles, "name:key=value,KEY=VALUE ..." (lower-case keys
# are --set overrides, upper-case ones environment variables, e.g. NCCL_PROTO=Simple).
for v in ${FPTRAIN_PROFILE_VARIANTS:-}; do
  IFS=, read -r -a sets <<< "${v#*:}"
  profile "2gpu-${v%%:*}" 2 1 "${sets[@]}"
done
exit $status
