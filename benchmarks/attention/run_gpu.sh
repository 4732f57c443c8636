#!/usr/bin/env bash
# Attention benchmark on the GPU machine (called by scripts/gpu-check.sh after the build):
# our kernels vs LibTorch FA2 varlen vs cuDNN SDPA (padded), and BinFlash where .binflash/ holds
# its code; JSON + markdown into $OUT. Arguments go to attention_bench (then BinFlash is skipped).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${FPTRAIN_BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
BENCH=$(find "$BUILD" -name attention_bench -type f -perm -u+x | head -1)
[ -n "$BENCH" ] || { echo "attention_bench not built in $BUILD"; exit 1; }
"$BENCH" --out "$OUT/attention_bench.json" --md "$OUT/attention_bench.md" "$@"
# BinFlash as a peer on the same documents, where its code was fetched into .binflash/ (ignored;
# carried to the GPU machine): see README.md.
if [ -d "$ROOT/.binflash/binflash" ] && [ $# -eq 0 ]; then
  PYTHON=/opt/torch/.venv/bin/python
  [ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
  "$BENCH" --dump-workloads "$OUT/workloads.json"
  "$PYTHON" "$ROOT/benchmarks/attention/binflash_peer.py" --binflash "$ROOT/.binflash" --workloads "$OUT/workloads.json" \
    --merge "$OUT/attention_bench.json" --md "$OUT/attention_bench.md" || echo "binflash peer failed (see above)"
fi
