#!/usr/bin/env bash
# Model families against their peers on one GPU, same run: each shape (random init,
# bf16, transformers' own config classes) on FLAN-like data, flatten, 4 examples per
# micro-batch, examples in file order on both sides (so every run times the same
# tokens), 30 steps, the first 5 not measured.
#   fptrain       auto checkpointing, fp32 masters (its default) and bf16 AdamW (the peer's optimizer);
#                 selective, every-layer (replayed where memory allows; and plain: each layer keeps only its
#                 input, as the peer's) and no checkpointing with bf16 AdamW (its speed at the peer's
#                 memory; none: the peer's no-checkpointing setting)
#   transformers  + FA2 varlen (DataCollatorWithFlattening) with checkpointing;
#                 + Liger Kernel (apply_liger_kernel_to_<family>) without, and with, checkpointing
# Liger travels as a wheel in .whl/. Writes $OUT/families.{json,md} (families_report.py).
#   FPTRAIN_FAMILY_SHAPES="qwen2.5-7b qwen3-8b" FPTRAIN_BUILD_DIR=build-gpu OUT=out benchmarks/train/families.sh
# FPTRAIN_FAMILY_LORA=16: LoRA of that rank (alpha 2 r) on every projection instead, on both sides
# (transformers + PEFT, its adapters in fp32 as PEFT's defaults make them, + Liger; the peft wheel in
# .whl/ too): fptrain with no, selective, every-layer and auto checkpointing; FPTRAIN_FAMILY_PROFILE=1
# also profiles fptrain's auto run (steps 6-8: $OUT/profile-<shape>.md). FPTRAIN_FAMILY_ADAPTER=qlora: the
# same on a 4-bit NF4 base on both sides (the peer: bitsandbytes, whose wheel goes in .whl/ as well);
# FPTRAIN_FAMILY_NF4_CHECKPOINT=1 makes that base a 4-bit checkpoint both sides read as stored (how a
# 70B fits the disk: FPTRAIN_FAMILY_SHAPES=llama3-70b). FPTRAIN_FAMILY_OPTIM=adamw8bit: full fine-tuning with
# 8-bit AdamW moments on both sides (fptrain: optimizer.state_dtype int8 with split or no masters; the peer:
# bitsandbytes' AdamW8bit + Liger), the way a full 8B fits one 80 GB card. FPTRAIN_FAMILY_OPTIM=offload:
# fptrain alone, full fine-tuning with split masters, the optimizer state on the device against
# optimizer.offload: cpu (8-bit and fp32 moments; auto and no checkpointing; the 8-bit rows with
# optimizer.offload_update: host, and one with device, the state streamed through the GPU): step time and peak device
# memory of each, the host memory in its log (FPTRAIN_FAMILY_SHAPES=llama3-8b: issue 30's target; the
# fp32-moment row needs ~100 GiB of host memory). FPTRAIN_FAMILY_DATA=long: long documents instead (FLAN-like
# text, median 6k tokens, up to 16k, max_length 16384), 2 examples per micro-batch on both sides: the memory
# issue's second case (row names get "-long"). FPTRAIN_FAMILY_MEMORY_TRACE=N: both sides record the allocator's
# history of step N and write what is alive at its peak by phase (fptrain: logging.memory_trace_step; the peer:
# hf_ddp.py --memory-trace-dir): $OUT/memory-trace-<row>.{json,md} per row, and per shape each fptrain row beside
# its peer (none / every layer against Liger without / with checkpointing) in
# $OUT/memory-trace-<shape>-<fptrain row>-vs-<peer row>.md (benchmarks/train/memory_trace_report.py).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
FPTRAIN=$BUILD_DIR/apps/fptrain
OUT=${OUT:-$ROOT/gpu-out}
WORK=${FPTRAIN_BENCH_DIR:-/tmp/fptrain-families}
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
TOOLS=$ROOT/benchmarks/distributed/bench_tools.py
STEPS=${FPTRAIN_FAMILY_STEPS:-30}
LORA=${FPTRAIN_FAMILY_LORA:-0}
ADAPTER_TYPE=${FPTRAIN_FAMILY_ADAPTER:-lora}
ADAPTER=""
[ "$LORA" -gt 0 ] && ADAPTER="adapter: {type: $ADAPTER_TYPE, r: $LORA, alpha: $((2 * LORA)), target_modules: all-linear}"
SHAPES=${FPTRAIN_FAMILY_SHAPES:-"qwen2.5-7b qwen3-8b"}
DATA=${FPTRAIN_FAMILY_DATA:-flan} PER=4 MAXLEN=4096 TAG=""
TRACE_STEP=${FPTRAIN_FAMILY_MEMORY_TRACE:-0}
[ "$DATA" = long ] && PER=2 MAXLEN=16384 TAG=-long
mkdir -p "$OUT" "$WORK"
cd "$ROOT" || exit 1
if ls "$ROOT"/.whl/liger_kernel-*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/*.whl && export PYTHONPATH=$WORK/site
fi
{
  [ -s "$WORK/flan.jsonl" ] || "$PYTHON" scripts/make_dataset.py --profile flan --examples 4000 --seed 0 --out "$WORK/flan.jsonl"
  [ "$DATA" != long ] || [ -s "$WORK/long.jsonl" ] || "$PYTHON" scripts/make_dataset.py --profile flan --examples 400 \
    --median 6000 --sigma 0.5 --max-tokens 16384 --seed 0 --out "$WORK/long.jsonl"
  [ -s "$WORK/tok/config.json" ] || "$FPTRAIN" init "$WORK/tok" --preset tiny --corpus "$WORK/flan.jsonl"
} > "$OUT/families-prep.log" 2>&1 || { echo "prep failed"; tail -20 "$OUT/families-prep.log"; exit 1; }
results=()
# FPTRAIN_FAMILY_ONLY="fptrain-selective-bf16-adamw ...": only these rows.
wanted() { [ -z "${FPTRAIN_FAMILY_ONLY:-}" ] || [[ " $FPTRAIN_FAMILY_ONLY " == *" $1 "* ]]; }

fp() {  # shape, name, checkpointing, master weights[, more fptrain arguments]
  wanted "$2" || return 0
  local shape=$1 name=$1$TAG-$2 run=$WORK/run-$1$TAG-$2 more=${5:-}
  [ "$TRACE_STEP" -gt 0 ] && more="$more --set logging.memory_trace_step=$TRACE_STEP"
  rm -rf "$run"
  cat > "$WORK/$name.yaml" <<YAML
model: {path: $WORK/$shape, dtype: bfloat16, activation_checkpointing: $3}
data: {train: $WORK/$DATA.jsonl, max_length: $MAXLEN, workers: 8, shuffle: false}
batching: {mode: flatten, examples_per_micro_batch: $PER, grad_accumulation: 1}
optimizer: {lr: 1.0e-4, grad_clip: 1.0, master_weights: $4}
schedule: {warmup_steps: 2}
training: {max_steps: $STEPS}
logging: {log_interval: 5}
checkpoint: {save_final: false}
output_dir: $run
resume: none
device: cuda
$ADAPTER
YAML
  # shellcheck disable=SC2086  # $more: words
  if timeout "${FPTRAIN_FAMILY_TIMEOUT:-300}" "$FPTRAIN" train "$WORK/$name.yaml" $more > "$OUT/families-$name.log" 2>&1; then
    "$PYTHON" "$TOOLS" fptrain-run --run "$run" --name "$name" --world-size 1 --examples-per-gpu "$PER" > "$WORK/$name.json" &&
      results+=("$WORK/$name.json") && echo "$name: $(cut -c1-160 "$WORK/$name.json")"
    keep_traces "$run" "$name"
    if [ -s "$run/profile_trace.json" ]; then
      "$PYTHON" "$ROOT/benchmarks/train/profile_report.py" "$run" > /dev/null && cp "$run/profile.md" "$OUT/profile-$shape.md"
    fi
  else
    echo "FAILED $name"; tail -3 "$OUT/families-$name.log"
    keep_traces "$run" "$name"  # out of memory in the traced step: what was alive then
  fi
}
keep_traces() {  # run folder, row name: its memory trace (and an out-of-memory one) into $OUT
  local f
  for f in memory_trace memory_trace_oom; do
    [ -s "$1/$f.json" ] || continue
    cp "$1/$f.json" "$OUT/${f//_/-}-$2.json" && cp "$1/$f.md" "$OUT/${f//_/-}-$2.md"
  done
}
trace_pair() {  # shape, fptrain row, peer row: both traces side by side
  local a=$OUT/memory-trace-$1$TAG-$2.json b=$OUT/memory-trace-$1$TAG-$3.json
  [ -s "$a" ] && [ -s "$b" ] || return 0
  "$PYTHON" "$ROOT/benchmarks/train/memory_trace_report.py" "$a" "$b" --out "$OUT/memory-trace-$1$TAG-$2-vs-$3.md" \
    > /dev/null && echo "memory trace: $OUT/memory-trace-$1$TAG-$2-vs-$3.md"
}
hf() {  # shape, name, extra args...
  wanted "$2" || return 0
  local shape=$1 name=$1$TAG-$2; shift 2
  [ "$LORA" -gt 0 ] && set -- "$@" --lora "$LORA"
  [ "$LORA" -gt 0 ] && [ "$ADAPTER_TYPE" = qlora ] && set -- "$@" --qlora
  [ "$TRACE_STEP" -gt 0 ] && set -- "$@" --memory-trace-dir "$WORK/trace-$name" --memory-trace-step "$TRACE_STEP"
  rm -rf "$WORK/trace-$name"
  if timeout 300 "$PYTHON" benchmarks/distributed/hf_ddp.py --model "$WORK/$shape" --data "$WORK/$DATA.jsonl" --no-shuffle \
       --batch "$PER" --max-length "$MAXLEN" --steps "$STEPS" --warmup 5 --name "$name" "$@" > "$WORK/$name.out" 2> "$OUT/families-$name.log"; then
    grep '^{' "$WORK/$name.out" | tail -1 > "$WORK/$name.json" && results+=("$WORK/$name.json") &&
      echo "$name: $(cut -c1-160 "$WORK/$name.json")"
  else
    echo "FAILED $name"; tail -3 "$OUT/families-$name.log"
  fi
  keep_traces "$WORK/trace-$name" "$name"
}
for shape in $SHAPES; do
  nf4=""; [ "${FPTRAIN_FAMILY_NF4_CHECKPOINT:-0}" = 1 ] && nf4=--nf4
  # shellcheck disable=SC2086  # $nf4: a flag or nothing
  "$PYTHON" "$TOOLS" make-model --out "$WORK/$shape" --tokenizer-from "$WORK/tok" --shape "$shape" $nf4 \
    >> "$OUT/families-prep.log" 2>&1 || { echo "FAILED making $shape"; continue; }
  if [ "$LORA" -gt 0 ]; then  # the adapters' optimizer state is tiny: fp32 masters only
    profile=""; [ "${FPTRAIN_FAMILY_PROFILE:-0}" = 1 ] && profile="--set logging.profile_steps=3"
    a=$ADAPTER_TYPE
    fp "$shape" fptrain-$a-none none true
    fp "$shape" fptrain-$a-selective selective true
    fp "$shape" fptrain-$a-ckpt every_layer true
    fp "$shape" fptrain-$a-auto auto true "$profile"
    hf "$shape" hf-peft-$a-fa2-ckpt
    hf "$shape" hf-peft-$a-liger-nockpt --liger --no-checkpointing
    hf "$shape" hf-peft-$a-liger-ckpt --liger
  elif [ "${FPTRAIN_FAMILY_OPTIM:-}" = adamw8bit ]; then  # full fine-tuning at 8-bit moments on both sides
    fp "$shape" fptrain-split-int8-auto auto split "--set optimizer.state_dtype=int8"
    fp "$shape" fptrain-split-int8-ckpt every_layer split "--set optimizer.state_dtype=int8"
    fp "$shape" fptrain-bf16-int8-auto auto false "--set optimizer.state_dtype=int8"
    hf "$shape" hf-liger-8bit-ckpt --liger --optim adamw8bit
    hf "$shape" hf-liger-8bit-nockpt --liger --no-checkpointing --optim adamw8bit
  elif [ "${FPTRAIN_FAMILY_OPTIM:-}" = offload ]; then  # the optimizer state on the device vs in host memory
    fp "$shape" fptrain-split-int8-auto auto split "--set optimizer.state_dtype=int8"
    fp "$shape" fptrain-split-int8-offload-auto auto split \
      "--set optimizer.state_dtype=int8 --set optimizer.offload=cpu --set optimizer.offload_update=host"
    fp "$shape" fptrain-split-int8-offload-none none split \
      "--set optimizer.state_dtype=int8 --set optimizer.offload=cpu --set optimizer.offload_update=host"
    fp "$shape" fptrain-split-int8-offload-device-auto auto split \
      "--set optimizer.state_dtype=int8 --set optimizer.offload=cpu --set optimizer.offload_update=device"
    fp "$shape" fptrain-split-offload-auto auto split "--set optimizer.offload=cpu"
    for row in split-int8-offload-auto split-int8-offload-device-auto split-offload-auto; do  # host side, from the log
      grep -o 'optimizer.offload: cpu keeps [^;]*' "$OUT/families-$shape-fptrain-$row.log" 2>/dev/null | head -1
    done
  else
    fp "$shape" fptrain-auto auto true
    fp "$shape" fptrain-auto-bf16-adamw auto false
    fp "$shape" fptrain-selective-bf16-adamw selective false  # its best at the peer's memory
    fp "$shape" fptrain-ckpt-bf16-adamw every_layer false
    # every layer kept as the peer keeps it, its input alone (model.recompute plain): equal memory terms
    fp "$shape" fptrain-ckpt-plain-bf16-adamw every_layer false "--set model.recompute=plain"
    fp "$shape" fptrain-none-bf16-adamw none false  # the peer's no-checkpointing setting, equal memory terms
    hf "$shape" hf-fa2-ckpt
    hf "$shape" hf-liger-nockpt --liger --no-checkpointing
    hf "$shape" hf-liger-ckpt --liger
    trace_pair "$shape" fptrain-none-bf16-adamw hf-liger-nockpt
    trace_pair "$shape" fptrain-ckpt-bf16-adamw hf-liger-ckpt
    trace_pair "$shape" fptrain-ckpt-plain-bf16-adamw hf-liger-ckpt
  fi
  # disk: one shape at a time (FPTRAIN_FAMILY_KEEP=1 keeps it for the next call's rows: FPTRAIN_FAMILY_ONLY)
  [ "${FPTRAIN_FAMILY_KEEP:-0}" = 1 ] || rm -rf "${WORK:?}/$shape"
done
"$PYTHON" "$ROOT/benchmarks/train/families_report.py" "$OUT" "${results[@]}"
