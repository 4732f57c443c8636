#!/usr/bin/env bash
# Training on the GPU machine (scripts/gpu-check.sh runs this with OUT set):
#   0. one optimizer step (clip + AdamW + zero grads) with the flat buffers against
#      the old per-parameter tensors (optimizer_bench), Llama-2-7B shape
#      (FPTRAIN_TRAIN_BENCH=optimizer: only this);
#   1. the demo (scripts/demo.sh): must pick CUDA and bf16 by itself;
#   2. a Llama-3.2-1B-shaped model (random init, bf16 weights, fp32 masters),
#      FLAN-like generated data, pack mode, 16k tokens per micro-batch: tokens/s,
#      MFU (6 N tokens/s over 989 TFLOP/s) and peak memory with torch-fa2 and,
#      where they run, our kernels; plus torch-fa2 with activation checkpointing;
#      and the peer baseline: a plain transformers loop with padded batches
#      (hf_baseline.py) on the same model and data.
# Results: $OUT/optimizer-bench.{json,md}, $OUT/train-bench.json and $OUT/train-bench.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
FPTRAIN=$BUILD_DIR/apps/fptrain
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
WORK=${FPTRAIN_BENCH_DIR:-/tmp/fptrain-train-bench}
mkdir -p "$OUT" "$WORK"
cd "$ROOT"

echo "== optimizer step: flat buffers vs per-parameter tensors (optimizer_bench)"
# Llama-2-7B needs about 126 GiB (H200); a smaller GPU gets the Llama-3.2-3B shape.
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
opt_shape=${FPTRAIN_OPTIMIZER_SHAPE:-$([ "${mem_mib:-0}" -ge 130000 ] && echo llama2-7b || echo llama3-3b)}
if "$BUILD_DIR/benchmarks/optimizer_bench" --shape "$opt_shape" --out "$OUT" > "$OUT/optimizer-bench.log" 2>&1; then
  cat "$OUT/optimizer-bench.md"
else
  echo "FAILED: optimizer_bench"; tail -20 "$OUT/optimizer-bench.log"
fi
# FPTRAIN_TRAIN_BENCH=optimizer: this part only (scripts/gpu-check.sh bench train).
[ "${FPTRAIN_TRAIN_BENCH:-all}" = optimizer ] && exit 0

echo "== demo"
start=$(date +%s)
FPTRAIN_BUILD_DIR=$BUILD_DIR scripts/demo.sh 2>&1 | tee "$OUT/train-demo.log" | grep -E "device|step .*/|done|eval|stopped|error" || true
echo "demo wall time: $(( $(date +%s) - start )) s"
cp demo/run/summary.json "$OUT/train-demo-summary.json"
[ -f demo/run/loss.png ] && cp demo/run/loss.png "$OUT/train-demo-loss.png"

echo "== Llama-3.2-1B shape"
if [ ! -s "$WORK/llama-1b/config.json" ]; then
  "$PYTHON" scripts/make_dataset.py --profile flan --examples 12000 --seed 0 --out "$WORK/flan.jsonl"
  rm -rf "$WORK/llama-1b"
  "$FPTRAIN" init "$WORK/llama-1b" --preset llama-1b --corpus "$WORK/flan.jsonl"
fi
results=()
bench() {  # name, extra --set arguments...
  local name=$1; shift
  rm -rf "$WORK/run-$name"
  cat > "$WORK/bench.yaml" <<YAML
model:
  path: $WORK/llama-1b
  dtype: bfloat16
data:
  train: $WORK/flan.jsonl
  max_length: 4096
  workers: 8
batching:
  mode: pack
  max_tokens: 16384
optimizer:
  lr: 1.0e-4
  grad_clip: 1.0
schedule:
  warmup_steps: 5
training:
  max_steps: 40
logging:
  log_interval: 10
checkpoint:
  save_final: false
output_dir: $WORK/run-$name
device: cuda
YAML
  if "$FPTRAIN" train "$WORK/bench.yaml" "$@" > "$OUT/train-1b-$name.log" 2>&1; then
    tail -4 "$OUT/train-1b-$name.log"
    # Steady state: the records after the first (warm-up, allocator growth).
    "$PYTHON" - "$WORK/run-$name" "$name" > "$WORK/$name.json" <<'PY'
import json, sys
run, name = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if l.strip() and "event" not in json.loads(l)]
steady = recs[1:] or recs
tok = sum(r["tokens"] for r in steady); sec = sum(r["step_time_s"] * r["steps_in_record"] for r in steady)
s = json.load(open(f"{run}/summary.json"))
print(json.dumps({"name": name, "attention": s["attention"], "tokens_per_s": tok / sec,
                  "mfu": 6 * s["num_parameters"] * tok / sec / 989e12, "num_parameters": s["num_parameters"],
                  "peak_allocated_gib": s.get("peak_allocated_bytes", 0) / 2**30,
                  "peak_reserved_gib": s.get("peak_reserved_bytes", 0) / 2**30,
                  "first_loss": s.get("first_loss"), "last_loss": s.get("last_loss"), "device": s["device"]}))
PY
    results+=("$WORK/$name.json")
  else
    echo "FAILED: $name"; tail -20 "$OUT/train-1b-$name.log"
  fi
}
bench torch-fa2 --set model.attention=torch-fa2
bench hopper --set model.attention=hopper || true
bench torch-fa2-ckpt --set model.attention=torch-fa2 --set model.activation_checkpointing=every_layer

echo "== peer: transformers, padded batches, SDPA, same model and data"
for batch in 8 4; do
  if "$PYTHON" benchmarks/train/hf_baseline.py --model "$WORK/llama-1b" --data "$WORK/flan.jsonl" --batch $batch \
       --steps 20 > "$WORK/hf.out" 2> "$OUT/train-1b-hf.log"; then
    tail -1 "$WORK/hf.out" | "$PYTHON" -c "
import json, sys
r = json.loads(sys.stdin.read()); r.update(attention='sdpa (padded, batch %s)' % r['batch'], device='$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)', first_loss=float('nan'))
print(json.dumps(r))" > "$WORK/hf.json" && results+=("$WORK/hf.json") && cat "$WORK/hf.json"
    break
  fi
  echo "transformers baseline with batch $batch failed (see train-1b-hf.log)"
done

"$PYTHON" - "$OUT" "${results[@]}" <<'PY'
import datetime, json, sys
out, files = sys.argv[1], sys.argv[2:]
rows = [json.load(open(f)) for f in files]
date = datetime.date.today().isoformat()
json.dump({"date": date, "runs": rows}, open(f"{out}/train-bench.json", "w"), indent=2)
with open(f"{out}/train-bench.md", "w") as f:
    dev = rows[0]["device"] if rows else "?"
    f.write(f"Llama-3.2-1B shape ({rows[0]['num_parameters'] / 1e9:.2f}B parameters), bf16 + fp32 masters, "
            f"pack 16384 tokens/micro-batch, FLAN-like data; {dev}, {date}\n\n")
    f.write("| run | attention | tokens/s | MFU | peak allocated GiB | peak reserved GiB | loss first -> last |\n")
    f.write("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
    for r in rows:
        f.write(f"| {r['name']} | {r['attention']} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | {r['peak_allocated_gib']:.1f} | "
                f"{r['peak_reserved_gib']:.1f} | {r['first_loss']:.3f} -> {r['last_loss']:.3f} |\n")
print(open(f"{out}/train-bench.md").read())
PY
