#!/usr/bin/env bash
# The fused element-wise kernels (model.fused_ops) on and off, in one run on one
# GPU: Llama-3.2-1B shape (fptrain init --preset llama-1b, bf16 + fp32 masters),
# FLAN-like data, pack mode with 16384 tokens per micro-batch, no activation
# checkpointing, 30 steps (the first 10 not measured). Prints one line per run
# and writes $OUT/fused-ab.md.
#   FPTRAIN_BUILD_DIR=build-gpu OUT=out benchmarks/train/fused_ab.sh [MODEL_DIR DATA.jsonl]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
FPTRAIN=$BUILD_DIR/apps/fptrain
OUT=${OUT:-$ROOT/gpu-out}
WORK=${FPTRAIN_BENCH_DIR:-/tmp/fptrain-fused-ab}
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
mkdir -p "$OUT" "$WORK"
MODEL=${1:-$WORK/llama-1b}
DATA=${2:-$WORK/flan.jsonl}
if [ ! -s "$DATA" ]; then "$PYTHON" "$ROOT/scripts/make_dataset.py" --profile flan --examples 6000 --seed 0 --out "$DATA"; fi
if [ ! -s "$MODEL/config.json" ]; then "$FPTRAIN" init "$MODEL" --preset llama-1b --corpus "$DATA"; fi
echo "| model.fused_ops | tokens/s | MFU | peak allocated GiB | ms/step |" > "$OUT/fused-ab.md"
echo "| --- | ---: | ---: | ---: | ---: |" >> "$OUT/fused-ab.md"
for fused in true false; do
  run=$WORK/run-$fused
  rm -rf "$run"
  cat > "$WORK/ab.yaml" <<YAML
model: {path: $MODEL, dtype: bfloat16, fused_ops: $fused}
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
  if "$FPTRAIN" train "$WORK/ab.yaml" > "$OUT/fused-ab-$fused.log" 2>&1; then
    "$PYTHON" - "$run" "$fused" >> "$OUT/fused-ab.md" <<'PY'
import json, sys
run, fused = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip() and "event" not in json.loads(l)]
steady = recs[1:] or recs
tok = sum(r["tokens"] for r in steady); sec = sum(r["step_time_s"] * r["steps_in_record"] for r in steady)
s = json.load(open(f"{run}/summary.json"))
n = s["num_parameters"]
print(f"| {fused} | {tok / sec:,.0f} | {100 * 6 * n * tok / sec / 989e12:.1f}% | {s.get('peak_allocated_bytes', 0) / 2**30:.1f} | "
      f"{1000 * sec / sum(r['steps_in_record'] for r in steady):.0f} |")
PY
  else
    echo "| $fused | FAILED (see fused-ab-$fused.log) | | | |" >> "$OUT/fused-ab.md"
  fi
done
cat "$OUT/fused-ab.md"
