#!/usr/bin/env bash
# The step issue's seed setup and best-against-best on one GPU, fptrain and the
# transformers peers in the same run: Llama-2-7B shape (random init, bf16),
# FLAN-like data, flatten, 4 examples per micro-batch.
#   fptrain  every_layer, grad accumulation 2, fp32 masters   (the seed setup), also with bf16 AdamW as the peer's
#   fptrain  auto checkpointing, grad accumulation 1           (its best setting), also with bf16 AdamW
#            (optimizer.master_weights: false, as the peer's optimizer)
#   transformers + FA2 varlen (torch's) + checkpointing, grad accumulation 2, with and without Liger Kernel
#   transformers + Liger, no checkpointing, grad accumulation 1 (the peer's best in the issue)
#   fptrain  selective / every-layer checkpointing with bf16 AdamW: its best at the peer's memory
#   the seed setup again on OrcaMath-like data (longer examples), fptrain and transformers + FA2
#   short documents (alpaca-like, median ~100 tokens, 32 examples per micro-batch), fptrain and transformers + FA2
#   a step profile of fptrain's best setting (logging.profile_steps; profile-7b.{md,json})
#   the Llama-3.2-1B shape (fptrain init --preset llama-1b: vocabulary 128k, tied), no checkpointing, ~16k tokens
#   per step: fptrain pack 16384 tokens and flatten 35 examples (~16.5k tokens, the peer's batch), fp32 masters;
#   transformers + FA2 and + Liger on the same 35 examples (rows fptrain-1b-*, hf-1b-*)
# Both sides take the examples in file order (fptrain data.shuffle false, the peer --no-shuffle),
# so every run is timed on the same steps' tokens: with FLAN-like lengths the tokens of 4
# examples vary by ~75% and a dozen shuffled steps differ by ±10% between runs.
# 30 steps (FPTRAIN_SEED_STEPS), the first 5 not measured; FPTRAIN_SEED_ONLY picks rows by name. Liger travels as a wheel in .whl/ (installed
# into the work folder). Writes $OUT/seed-7b.{json,md} (seed_report.py; --merge joins several calls').
#   FPTRAIN_BUILD_DIR=build-gpu OUT=out benchmarks/train/seed_7b.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
FPTRAIN=$BUILD_DIR/apps/fptrain
OUT=${OUT:-$ROOT/gpu-out}
WORK=${FPTRAIN_BENCH_DIR:-/tmp/fptrain-seed-7b}
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
TOOLS=$ROOT/benchmarks/distributed/bench_tools.py
STEPS=${FPTRAIN_SEED_STEPS:-30}
mkdir -p "$OUT" "$WORK"
cd "$ROOT" || exit 1
if ls "$ROOT"/.whl/liger_kernel-*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/*.whl && export PYTHONPATH=$WORK/site
fi
{
  [ -s "$WORK/flan.jsonl" ] || "$PYTHON" scripts/make_dataset.py --profile flan --examples 4000 --seed 0 --out "$WORK/flan.jsonl"
  [ -s "$WORK/orca.jsonl" ] || "$PYTHON" scripts/make_dataset.py --profile orcamath --examples 2000 --seed 0 --out "$WORK/orca.jsonl"
  [ -s "$WORK/alpaca.jsonl" ] || "$PYTHON" scripts/make_dataset.py --profile alpaca --examples 8000 --seed 0 --out "$WORK/alpaca.jsonl"
  [ -s "$WORK/tok/config.json" ] || "$FPTRAIN" init "$WORK/tok" --preset tiny --corpus "$WORK/flan.jsonl"
  "$PYTHON" "$TOOLS" make-model --out "$WORK/llama2-7b" --tokenizer-from "$WORK/tok" --shape llama2-7b
  [ -s "$WORK/llama-1b/config.json" ] || "$FPTRAIN" init "$WORK/llama-1b" --preset llama-1b --corpus "$WORK/flan.jsonl"
} > "$OUT/seed-prep.log" 2>&1 || { echo "prep failed"; tail -20 "$OUT/seed-prep.log"; exit 1; }
results=()
# FPTRAIN_SEED_ONLY="name ...": only these rows (e.g. the seed setup's four).
wanted() { [ -z "${FPTRAIN_SEED_ONLY:-}" ] || [[ " $FPTRAIN_SEED_ONLY " == *" $1 "* ]]; }
fp() {  # name, checkpointing, grad accumulation, master weights (true: fp32 masters and moments), [data], [profile],
        # [examples per micro-batch]
  wanted "$1" || return 0
  local run=$WORK/run-$1 data=${5:-flan} profile=${6:-0} examples=${7:-4} model=${MODEL:-llama2-7b}
  local batching="{mode: flatten, examples_per_micro_batch: $examples, grad_accumulation: $3}"
  [ -n "${PACK_TOKENS:-}" ] && batching="{mode: pack, max_tokens: $PACK_TOKENS, grad_accumulation: $3}"
  rm -rf "$run"
  cat > "$WORK/$1.yaml" <<YAML
model: {path: $WORK/$model, dtype: bfloat16, activation_checkpointing: $2}
data: {train: $WORK/$data.jsonl, max_length: 4096, workers: 8, shuffle: false}
batching: $batching
optimizer: {lr: 1.0e-4, grad_clip: 1.0, master_weights: ${4:-true}}
schedule: {warmup_steps: 2}
training: {max_steps: $STEPS}
logging: {log_interval: 5, profile_warmup: $((profile > 0 ? 6 : 0)), profile_steps: $profile}
checkpoint: {save_final: false}
output_dir: $run
resume: none
device: cuda
YAML
  if timeout 240 "$FPTRAIN" train "$WORK/$1.yaml" > "$OUT/seed-$1.log" 2>&1; then
    if [ "$profile" -gt 0 ]; then
      "$PYTHON" benchmarks/train/profile_report.py "$run" >> "$OUT/seed-$1.log" 2>&1 || return 1
      cp "$run/profile.md" "$OUT/profile-7b.md"; cp "$run/profile.json" "$OUT/profile-7b.json"; return 0
    fi
    "$PYTHON" "$TOOLS" fptrain-run --run "$run" --name "$1" --world-size 1 --examples-per-gpu "$([ -n "${PACK_TOKENS:-}" ] && echo 0 || echo "$examples")" > "$WORK/$1.json" &&
      results+=("$WORK/$1.json") && tail -1 "$WORK/$1.json"
  else
    echo "FAILED $1"; tail -5 "$OUT/seed-$1.log"
  fi
}
hf() {  # name, data, extra args...
  wanted "$1" || return 0
  local name=$1 data=$2; shift 2
  local batch=${BATCH:-4}; [ "$data" = alpaca ] && batch=32
  if timeout 240 "$PYTHON" benchmarks/distributed/hf_ddp.py --model "$WORK/${MODEL:-llama2-7b}" --data "$WORK/$data.jsonl" --no-shuffle \
       --batch "$batch" --steps "$STEPS" --warmup 5 --name "$name" "$@" > "$WORK/$name.out" 2> "$OUT/seed-$name.log"; then
    grep '^{' "$WORK/$name.out" | tail -1 > "$WORK/$name.json" && results+=("$WORK/$name.json") && cat "$WORK/$name.json" | cut -c1-300
  else
    echo "FAILED $name"; tail -5 "$OUT/seed-$name.log"
  fi
}
fp fptrain-ckpt-ga2 every_layer 2
fp fptrain-auto auto 1
fp fptrain-auto-bf16-adamw auto 1 false
fp fptrain-selective-bf16-adamw selective 1 false
fp fptrain-ckpt-bf16-adamw every_layer 1 false
fp fptrain-orca-ckpt-ga2 every_layer 2 true orca
# The seed setup with the peer's optimizer (bf16 AdamW, no master weights): the issue's own setting.
fp fptrain-ckpt-ga2-bf16-adamw every_layer 2 false
fp fptrain-orca-ckpt-ga2-bf16-adamw every_layer 2 false orca
hf hf-ckpt-ga2 flan --grad-accum 2
hf hf-liger-nockpt flan --liger --no-checkpointing
hf hf-orca-ckpt-ga2 orca --grad-accum 2
# Short documents (alpaca-like, median ~100 tokens): 32 examples per micro-batch (~3,900 tokens), the seed
# setup otherwise.
fp fptrain-alpaca-ckpt-ga2 every_layer 2 true alpaca 0 32
hf hf-alpaca-ckpt-ga2 alpaca --grad-accum 2
# Llama-3.2-1B shape, no checkpointing, ~16k tokens per step (the issue's 1B target).
MODEL=llama-1b PACK_TOKENS=16384 fp fptrain-1b-pack16k none 1
MODEL=llama-1b fp fptrain-1b-flatten35 none 1 true flan 0 35
MODEL=llama-1b BATCH=35 hf hf-1b-fa2 flan --no-checkpointing
MODEL=llama-1b BATCH=35 hf hf-1b-liger flan --liger --no-checkpointing
# The step profile (FPTRAIN_SEED_PROFILE: 1 fptrain's best setting, orca the OrcaMath seed setup, 0 none).
case "${FPTRAIN_SEED_PROFILE:-1}" in
  0) ;;
  orca) fp fptrain-orca-ckpt-ga2-profile every_layer 2 true orca 5 ;;
  *) fp fptrain-auto-bf16-adamw-profile auto 1 false flan 5 ;;
esac
"$PYTHON" "$ROOT/benchmarks/train/seed_report.py" "$OUT" "${results[@]}"
