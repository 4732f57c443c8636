#!/usr/bin/env bash
# The training-level study of "Is Flash Attention Stable?" (README.md): pairs of fptrain runs of a
# small Llama (fptrain init --preset study: ~150M parameters, its tokenizer trained on the data) on
# real text (scripts/make_real_dataset.py), the same start and examples unless the pair varies them,
# weights kept every EVERY steps; weight_distance.py measures each pair, study_report.py writes
# $OUT/numerics-study.{json,md} and the plots.
#
#   pair                       runs                          what it measures
#   attention (the paper's)    hopper vs reference, bf16     our flash attention against baseline attention
#   low precision (band)       reference bf16 vs fp32        what bf16 training itself moves
#   random init (band)         two initialisation seeds      what a different start moves
#   torch-fa2                  hopper vs torch-fa2, bf16     two flash attention kernels
#   padding                    flatten vs pad, hopper        our packing against padded batches
#   backward                   atomic vs deterministic dQ    training.deterministic's atomic-free dQ pass
#   optimizer                  fp32 vs int8 moments          optimizer.state_dtype: int8 (bitsandbytes' AdamW8bit)
#   ranks                      1 vs 2 GPUs (NCCL, sharded)   data parallelism: the same global batch on two ranks
#
#   study.sh [--smoke]     OUT, FPTRAIN_BUILD_DIR as scripts/gpu-check.sh sets them
# --smoke: a few steps of the test preset on the CPU (reference attention; the hopper and torch-fa2
# runs become reference runs), the plumbing only. Knobs: FPTRAIN_NUMERICS_STEPS (default 2000),
# FPTRAIN_NUMERICS_EVERY (steps between kept weights, default 200), FPTRAIN_NUMERICS_EXAMPLES_PER_STEP
# (default 16), FPTRAIN_NUMERICS_WORK (work
# folder, default /tmp/fptrain-numerics; finished runs are kept and not run again),
# FPTRAIN_NUMERICS_RUNS (the runs this call trains, default all: parallel calls on separate GPUs split
# them), FPTRAIN_NUMERICS_REPORT (0: train only), FPTRAIN_NUMERICS_RANKS (ranks of the "ranks" pair's
# second run: default 2 where the machine has 2 or more GPUs, else that run is left out; the smoke
# test can set 2 to run it as CPU processes). Pairs whose runs are not both finished are left out.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${FPTRAIN_BUILD_DIR:-$ROOT/build}
FPTRAIN=$BUILD/apps/fptrain
[ -d "$FPTRAIN" ] && FPTRAIN=$FPTRAIN/fptrain
OUT=${OUT:-$ROOT/gpu-out}
WORK=${FPTRAIN_NUMERICS_WORK:-/tmp/fptrain-numerics}
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
STEPS=${FPTRAIN_NUMERICS_STEPS:-2000}
EVERY=${FPTRAIN_NUMERICS_EVERY:-200}
PRESET=study DEVICE=cuda EXAMPLES=0 PER_MICRO_BATCH=${FPTRAIN_NUMERICS_EXAMPLES_PER_STEP:-16} FAST=hopper FA2=torch-fa2
if [ "${1:-}" = --smoke ]; then
  STEPS=4 EVERY=2 PRESET=test DEVICE=cpu EXAMPLES=200 PER_MICRO_BATCH=4 FAST=reference FA2=reference
fi
RUNS=${FPTRAIN_NUMERICS_RUNS:-base reference fp32 seed1 fa2 pad det int8 ranks2}
GPUS=$( [ "$DEVICE" = cuda ] && nvidia-smi -L 2>/dev/null | wc -l || echo 0)
RANKS=${FPTRAIN_NUMERICS_RANKS:-$( [ "${GPUS:-0}" -ge 2 ] && echo 2 || echo 1)}
mkdir -p "$OUT" "$WORK"
cd "$ROOT" || exit 1
say() { echo "[$(date +%H:%M:%S)] $*"; }

data=$WORK/data/real.jsonl
if [ ! -s "$data" ]; then
  mkdir -p "$WORK/data"
  "$PYTHON" scripts/make_real_dataset.py --out "$data" --examples "$EXAMPLES" --stats "$WORK/data/stats.json" \
    > "$WORK/data.log" 2>&1 || { tail -5 "$WORK/data.log"; exit 1; }
fi
for seed in 0 1; do
  [ -s "$WORK/model-$seed/config.json" ] || "$FPTRAIN" init "$WORK/model-$seed" --preset "$PRESET" --seed "$seed" \
    --corpus "$data" > "$WORK/init-$seed.log" 2>&1 || { tail -5 "$WORK/init-$seed.log"; exit 1; }
done

# run NAME MODEL_SEED ATTENTION DTYPE MODE [KEY=VALUE...]: trained in segments of EVERY steps (training.stop_at_step;
# each resume is bit-identical), the weights of each segment's end copied to weights/step-N. NPROC=N before
# the call: N ranks under torchrun.
run() {
  local name=$1 dir=$WORK/run-$1 step sets=() kv launch=("$FPTRAIN")
  for kv in "${@:6}"; do sets+=(--set "$kv"); done  # the pair's own settings
  [[ " $RUNS " == *" $name "* ]] || return 0
  [ -f "$dir/.done" ] && { say "$name: kept from an earlier call"; return 0; }
  [ "${NPROC:-1}" -gt 1 ] && launch=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC"
                                     --no-python "$FPTRAIN")
  cat > "$WORK/$name.yaml" <<YAML
model: {path: $WORK/model-$2, dtype: $4, attention: $3, activation_checkpointing: none}
data: {train: $data, max_length: 1024, shuffle: true}
batching: {mode: $5, examples_per_micro_batch: $PER_MICRO_BATCH}
optimizer: {lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: $(( STEPS / 20 )), decay: cosine, min_lr: 3.0e-5}
training: {max_steps: $STEPS, seed: 0}
logging: {log_interval: $EVERY}
checkpoint: {keep_last: 1}
output_dir: $dir
device: $DEVICE
YAML
  for (( step = EVERY; step <= STEPS; step += EVERY )); do
    [ -d "$dir/weights/step-$(printf %08d "$step")" ] && continue
    NCCL_NVLS_ENABLE=0 "${launch[@]}" train "$WORK/$name.yaml" "${sets[@]}" --set "training.stop_at_step=$step" >> "$WORK/$name.log" 2>&1 ||
      { say "FAILED $name at step $step"; tail -5 "$WORK/$name.log"; return 1; }
    local ckpt
    ckpt=$(ls -d "$dir"/checkpoints/step-* | tail -1)
    mkdir -p "$dir/weights/step-$(printf %08d "$step")"
    cp "$ckpt"/model*.safetensors "$dir/weights/step-$(printf %08d "$step")/"
  done
  touch "$dir/.done"
  say "$name: $STEPS steps"
}

run base 0 "$FAST" bfloat16 flatten
run reference 0 reference bfloat16 flatten
run fp32 0 reference float32 flatten
run seed1 1 "$FAST" bfloat16 flatten
run fa2 0 "$FA2" bfloat16 flatten
run pad 0 "$FAST" bfloat16 pad
run det 0 "$FAST" bfloat16 flatten training.deterministic=true
run int8 0 "$FAST" bfloat16 flatten optimizer.state_dtype=int8
# the same global batch: examples_per_micro_batch is per rank
[ "$RANKS" -gt 1 ] && NPROC=$RANKS run ranks2 0 "$FAST" bfloat16 flatten \
  "batching.examples_per_micro_batch=$(( PER_MICRO_BATCH / RANKS ))"
[ "${FPTRAIN_NUMERICS_REPORT:-1}" = 0 ] && exit 0

rows=$WORK/distances.jsonl
: > "$rows"
pair() {  # LABEL RUN_A RUN_B
  [ -f "$WORK/run-$2/.done" ] && [ -f "$WORK/run-$3/.done" ] || { say "left out (runs not finished): $1"; return 0; }
  "$PYTHON" benchmarks/numerics/weight_distance.py "$WORK/run-$2" "$WORK/run-$3" --label "$1" >> "$rows" ||
    say "FAILED distance $1"
}
pair "attention: hopper vs reference (bf16)" base reference
pair "low precision: bf16 vs fp32 (reference attention)" reference fp32
pair "random init: seed 0 vs seed 1" base seed1
pair "flash kernels: hopper vs torch-fa2" base fa2
pair "batching: flatten vs pad" base pad
pair "backward: atomic vs deterministic dQ" base det
pair "optimizer: fp32 vs 8-bit moments" base int8
pair "ranks: 1 vs 2 GPUs" base ranks2
"$PYTHON" benchmarks/numerics/study_report.py "$rows" --out "$OUT" --steps "$STEPS" --preset "$PRESET" \
  --device "$( [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo cpu)"
