#!/usr/bin/env bash
# The main job: fine-tune a tiny Llama on a generated instruction dataset.
#
#   scripts/demo.sh [--set key=value ...]     (extra arguments go to `fptrain train`)
#
# Sets up and builds (scripts/setup.sh), then once: generates the dataset
# (scripts/make_dataset.py) and writes a tiny random model with a tokenizer
# trained on that data (`fptrain init`); then fine-tunes it with
# configs/demo.yaml (a fresh run each time) and draws demo/run/loss.png.
# On a GPU it trains in bf16 on CUDA by itself; on a 2-core CPU it takes a few minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[demo] %s\n' "$*" >&2; }

export FPTRAIN_TARGETS=${FPTRAIN_TARGETS:-fptrain}
"$ROOT/scripts/setup.sh"
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build}
FPTRAIN=$BUILD_DIR/apps/fptrain
if [ -x /opt/torch/.venv/bin/python ] && command -v nvidia-smi >/dev/null 2>&1; then
  PYTHON=/opt/torch/.venv/bin/python
else
  PYTHON=$ROOT/.venv/bin/python
fi

DEMO=$ROOT/demo
mkdir -p "$DEMO/data"
if [ ! -s "$DEMO/data/train.jsonl" ]; then
  log "generating the instruction dataset (FLAN-like lengths, shortened for the demo)"
  "$PYTHON" scripts/make_dataset.py --profile flan --median 72 --max-tokens 320 --examples 6000 --seed 0 \
    --out "$DEMO/data/train.jsonl.tmp"
  "$PYTHON" scripts/make_dataset.py --profile flan --median 72 --max-tokens 320 --examples 256 --seed 1 \
    --out "$DEMO/data/eval.jsonl"
  mv "$DEMO/data/train.jsonl.tmp" "$DEMO/data/train.jsonl"
fi
if [ ! -s "$DEMO/model/config.json" ]; then
  log "writing a tiny random Llama and training its tokenizer on the dataset"
  rm -rf "$DEMO/model"
  "$FPTRAIN" init "$DEMO/model" --preset tiny --corpus "$DEMO/data/train.jsonl"
fi

rm -rf "$DEMO/run"
log "fine-tuning (configs/demo.yaml)"
"$FPTRAIN" train configs/demo.yaml "$@"
if "$PYTHON" scripts/plot_metrics.py "$DEMO/run"; then
  log "loss curve: demo/run/loss.png; metrics: demo/run/metrics.jsonl; model: demo/run/checkpoints/"
fi
