#!/usr/bin/env bash
# Checkpoint loading on the GPU machine: makes a Llama-2-7B-shaped bf16 checkpoint
# with transformers (sharded at 5 GB), then times fptrain's load_pretrained_weights
# to CUDA next to reading the files' bytes, safetensors' load_file and transformers'
# from_pretrained, cold and warm. Results: $OUT/models/load_bench.{md,json}.
#
#   FPTRAIN_BUILD_DIR=build-gpu OUT=gpu-out benchmarks/models/run_gpu.sh
#   FPTRAIN_BENCH_SHAPE=tiny ...    # the same path on a tiny model (any machine)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${FPTRAIN_BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/benchmarks/models/results}/models
SHAPE=${FPTRAIN_BENCH_SHAPE:-llama2-7b}
CKPT=${FPTRAIN_BENCH_CHECKPOINT:-${TMPDIR:-/tmp}/fptrain-bench-$SHAPE}
REPEATS=${FPTRAIN_BENCH_REPEATS:-1}
if [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python; else PY=${FPTRAIN_PYTHON:-$ROOT/.venv/bin/python}; fi
DEVICE=cpu
command -v nvidia-smi >/dev/null 2>&1 && DEVICE=cuda
mkdir -p "$OUT"

start=$(date +%s)
echo "== making the $SHAPE checkpoint in $CKPT"
"$PY" "$ROOT/benchmarks/models/bench_helper.py" make --out "$CKPT" --shape "$SHAPE" \
  $( [ "$SHAPE" = tiny ] && echo "--max-shard-size 300KB" )

echo "== building load_bench"
cmake --build "$BUILD" --target load_bench >/dev/null

echo "== fptrain and the bytes floor ($DEVICE)"
"$BUILD/benchmarks/load_bench" --checkpoint "$CKPT" --device "$DEVICE" --dtype bfloat16 \
  --repeats "$REPEATS" --json "$OUT/load_fptrain.json"

echo "== peers: safetensors, transformers ($DEVICE)"
"$PY" "$ROOT/benchmarks/models/bench_helper.py" peers --checkpoint "$CKPT" --device "$DEVICE" \
  --dtype bfloat16 --repeats "$REPEATS" --json "$OUT/load_peers.json"

"$PY" "$ROOT/benchmarks/models/bench_helper.py" report --inputs "$OUT/load_fptrain.json" "$OUT/load_peers.json" \
  --md "$OUT/load_bench.md" --json "$OUT/load_bench.json"
[ -n "${FPTRAIN_BENCH_KEEP:-}" ] || rm -rf "$CKPT"
echo "== done in $(( $(date +%s) - start )) s"
