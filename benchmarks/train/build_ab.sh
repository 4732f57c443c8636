#!/usr/bin/env bash
# Two builds of fptrain on the same training run, in one lease on one GPU: a
# code change's A/B (same model, data and settings; runs alternate A B A B so
# that drift hits both). Llama-3.2-1B shape (fptrain init --preset llama-1b,
# bf16 + fp32 masters), FLAN-like data, pack mode with 16384 tokens per
# micro-batch, 30 steps (the first 10 not measured); without activation
# checkpointing (twice), with selective (MLPs recomputed) and recomputing every
# layer. SETS_A / SETS_B: space-separated key=value overrides of each side (the
# same build twice with other settings is a settings A/B, e.g. the fused kernels:
# SETS_A=model.fused_ops=true SETS_B=model.fused_ops=false); CKPTS: the
# checkpointing settings to run. Writes $OUT/build-ab.md.
#   OUT=out [SETS_A=...] [SETS_B=...] [CKPTS="none selective"] benchmarks/train/build_ab.sh BUILD_A BUILD_B [NAME_A NAME_B]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
A=$1 B=$2 NAME_A=${3:-A} NAME_B=${4:-B}
OUT=${OUT:-$ROOT/gpu-out}
WORK=${FPTRAIN_BENCH_DIR:-/tmp/fptrain-build-ab}
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
mkdir -p "$OUT" "$WORK"
MODEL=$WORK/llama-1b
DATA=$WORK/flan.jsonl
[ -s "$DATA" ] || "$PYTHON" "$ROOT/scripts/make_dataset.py" --profile flan --examples 6000 --seed 0 --out "$DATA"
[ -s "$MODEL/config.json" ] || "$A/apps/fptrain" init "$MODEL" --preset llama-1b --corpus "$DATA"

run_one() {  # build name checkpointing "key=value ..." -> one markdown row
  local build=$1 name=$2 ckpt=$3 run=$WORK/run-$2-$3 sets=()
  for kv in $4; do sets+=(--set "$kv"); done
  rm -rf "$run"
  cat > "$WORK/ab.yaml" <<YAML
model: {path: $MODEL, dtype: bfloat16, activation_checkpointing: $ckpt}
data: {train: $DATA, max_length: 4096, workers: 8}
batching: {mode: pack, max_tokens: 16384}
optimizer: {lr: 1.0e-4, grad_clip: 1.0}
schedule: {warmup_steps: 5}
training: {max_steps: 30}
logging: {log_interval: 10}
checkpoint: {save_final: false}
output_dir: $run
resume: none
device: cuda
YAML
  if ! "$build/apps/fptrain" train "$WORK/ab.yaml" "${sets[@]}" > "$OUT/build-ab-$name-$ckpt.log" 2>&1; then
    echo "| $name | $ckpt | FAILED (build-ab-$name-$ckpt.log) | | | |"
    return
  fi
  "$PYTHON" - "$run" "$name" "$ckpt" <<'PY'
import json, sys
run, name, ckpt = sys.argv[1:4]
recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip() and "event" not in json.loads(l)]
steady = recs[1:] or recs
tok = sum(r["tokens"] for r in steady); sec = sum(r["step_time_s"] * r["steps_in_record"] for r in steady)
s = json.load(open(f"{run}/summary.json"))
loss = steady[-1]["loss"]
print(f"| {name} | {ckpt} | {tok / sec:,.0f} | {1000 * sec / sum(r['steps_in_record'] for r in steady):.1f} | "
      f"{s.get('peak_allocated_bytes', 0) / 2**30:.2f} | {loss:.6f} |")
PY
}

{
  echo "| build | activation_checkpointing | tokens/s | ms/step | peak allocated GiB | loss at step 30 |"
  echo "| --- | --- | ---: | ---: | ---: | ---: |"
  for ckpt in ${CKPTS:-none selective every_layer none}; do  # none twice: the spread of equal runs
    run_one "$A" "$NAME_A" "$ckpt" "${SETS_A:-}"
    run_one "$B" "$NAME_B" "$ckpt" "${SETS_B:-}"
  done
} | tee "$OUT/build-ab.md"
