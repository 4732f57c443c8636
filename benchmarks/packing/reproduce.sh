#!/usr/bin/env bash
# Reproduces the packing paper's FLAN / OrcaMath experiment (Kundu et al., arXiv 2407.09105) with
# fptrain and, in the same run, the transformers peer: one table and a few plots.
#
#   benchmarks/packing/reproduce.sh [--gpus N] [--models M,...] [--datasets D,...] [--examples K]
#                                   [--out DIR] [--smoke]
#
#   --smoke      tiny model (fptrain init --preset tiny), CPU, fp32, --examples 48 by default: what CI runs.
#   --models     llama2-7b,mistral-7b,granite-8b-code (default all three; --smoke: tiny)
#   --datasets   flan,orcamath (default both)
#   --examples   examples per dataset (default 20000 as in the paper; --smoke: 48)
#   --gpus       GPUs per run (default 1); above 1 fptrain and the peer run under torchrun
#   --out        where packing.json, packing.md and the PNGs go (default benchmarks/packing/results/<date>;
#                --smoke: runs/packing/smoke/results)
#
# Environment: PYTHON (default .venv/bin/python), FPTRAIN (default build/apps/fptrain),
# FPTRAIN_PACKING_WORK (default runs/packing[/smoke]): data, models and run folders, reused between runs.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

SMOKE=0 GPUS=1 MODELS="" DATASETS="flan,orcamath" EXAMPLES="" OUT_DIR=""
usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --gpus) GPUS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --datasets) DATASETS=$2; shift ;;
    --examples) EXAMPLES=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "reproduce.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=/opt/torch/.venv/bin/python
FPTRAIN=${FPTRAIN:-$ROOT/build/apps/fptrain}
TOOLS=$ROOT/benchmarks/packing/packing_report.py
[ -x "$FPTRAIN" ] || { echo "reproduce.sh: $FPTRAIN is not built (scripts/test.sh builds it)" >&2; exit 1; }

# The paper's recipe: 4 examples per GPU per micro-batch, gradient accumulation 2, max length 4096, 1 epoch.
PER_GPU=4 GRAD_ACCUM=2 MAX_LEN=4096
if [ "$SMOKE" = 1 ]; then
  MODELS=${MODELS:-tiny} EXAMPLES=${EXAMPLES:-48}  # --gpus N: N CPU processes
  WORK=${FPTRAIN_PACKING_WORK:-$ROOT/runs/packing/smoke}
  OUT_DIR=${OUT_DIR:-$WORK/results}
  DEVICE=cpu DTYPE=float32 CKPT=none WARMUP=1 LR=3.0e-3 EVAL_EXAMPLES=16
  NOTE="Smoke run (--smoke): the tiny fptrain-init Llama on the CPU in fp32, $EXAMPLES examples per dataset,
max length $MAX_LEN; the numbers show that the pipeline works, not the paper's speed-ups."
else
  MODELS=${MODELS:-llama2-7b,mistral-7b,granite-8b-code} EXAMPLES=${EXAMPLES:-20000}
  WORK=${FPTRAIN_PACKING_WORK:-$ROOT/runs/packing}
  OUT_DIR=${OUT_DIR:-$ROOT/benchmarks/packing/results/$(date -u +%Y-%m-%d)}
  DEVICE=cuda DTYPE=bfloat16 CKPT=every_layer WARMUP=5 LR=2.0e-5 EVAL_EXAMPLES=200
  NOTE="Random-weight models at the paper's shapes, $GPUS GPU(s), $EXAMPLES examples per dataset, bf16 weights
with fp32 master weights, activation checkpointing on every layer; the loss values of random weights mean little."
fi
IFS=, read -r -a MODEL_LIST <<< "$MODELS"
IFS=, read -r -a DATASET_LIST <<< "$DATASETS"
FP_MODES=(pad flatten pack)
PEER_MODES=(flatten)  # hf_ddp.py has no padded variant yet
mkdir -p "$WORK/data" "$WORK/models" "$WORK/runs" "$WORK/json" "$OUT_DIR"
LOGS=$WORK/logs; mkdir -p "$LOGS"

# ---- estimate ------------------------------------------------------------------------------
n_runs=$(( ${#MODEL_LIST[@]} * ${#DATASET_LIST[@]} * (${#FP_MODES[@]} + ${#PEER_MODES[@]}) ))
if [ "$SMOKE" = 1 ]; then
  est=$(( n_runs * 10 + 20 ))  # about 10 s a run on 2 cores (the peer pays for importing transformers)
else
  # tokens of one epoch (FLAN ~471 tokens/example, OrcaMath ~600) over an assumed 2000 tokens/s per GPU
  # for the slowest mode, per run, plus 3 minutes a run for loading a 7B model and warm-up.
  est=$(( n_runs * (EXAMPLES * 550 / (2000 * GPUS) + 180) ))
fi
echo "reproduce.sh: ${#MODEL_LIST[@]} model(s) [$MODELS] x ${#DATASET_LIST[@]} dataset(s) [$DATASETS] x" \
     "modes fptrain {${FP_MODES[*]}} + transformers {${PEER_MODES[*]}} = $n_runs runs, $EXAMPLES examples each," \
     "$GPUS process(es) per run, device $DEVICE; estimated $((est / 60)) min $((est % 60)) s (a rough guess)"
START=$(date +%s)

# ---- data (made once) ------------------------------------------------------------------------
for d in "${DATASET_LIST[@]}"; do
  case $d in flan|orcamath) ;; *) echo "reproduce.sh: unknown dataset $d (flan, orcamath)" >&2; exit 2 ;; esac
  train=$WORK/data/$d-$EXAMPLES.jsonl eval=$WORK/data/$d-eval-$EVAL_EXAMPLES.jsonl
  [ -s "$train" ] || "$PYTHON" scripts/make_dataset.py --profile "$d" --examples "$EXAMPLES" --seed 0 \
    --out "$train" || exit 1
  [ -s "$eval" ] || "$PYTHON" scripts/make_dataset.py --profile "$d" --examples "$EVAL_EXAMPLES" --seed 1 \
    --out "$eval" || exit 1
done

# ---- models (made once) ----------------------------------------------------------------------
first_data=$WORK/data/${DATASET_LIST[0]}-$EXAMPLES.jsonl
for m in "${MODEL_LIST[@]}"; do
  dir=$WORK/models/$m
  if [ "$m" = tiny ]; then
    [ -s "$dir/config.json" ] || "$FPTRAIN" init "$dir" --preset tiny --corpus "$first_data" \
      > "$LOGS/init-$m.log" 2>&1 || { echo "fptrain init failed:"; tail -5 "$LOGS/init-$m.log"; exit 1; }
  else
    # a 32000-id tokenizer trained on the generated data (the vocabulary of Llama-2 and Mistral; Granite's
    # model has 49152 rows, the extra ids are never produced)
    tok=$WORK/models/tokenizer-32k
    [ -s "$tok/config.json" ] || "$FPTRAIN" init "$tok" --preset tiny --vocab-size 32000 --corpus "$first_data" \
      > "$LOGS/init-tokenizer.log" 2>&1 || { echo "fptrain init failed:"; tail -5 "$LOGS/init-tokenizer.log"; exit 1; }
    "$PYTHON" "$TOOLS" make-model --out "$dir" --tokenizer-from "$tok" --shape "$m" || exit 1
  fi
done

# ---- runs ------------------------------------------------------------------------------------
done_runs=0 failures=0 results=()
progress() {  # what was just run
  done_runs=$((done_runs + 1))
  local el=$(( $(date +%s) - START ))
  local eta=$(( el * (n_runs - done_runs) / done_runs ))
  echo "[$done_runs/$n_runs] $1 — elapsed $((el / 60))m$((el % 60))s, ETA $((eta / 60))m$((eta % 60))s"
}
launch() {  # a command on GPUS processes: torchrun for more than one
  if [ "$GPUS" -gt 1 ]; then
    local torchrun=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$GPUS")
    if [ "$1" = "$FPTRAIN" ]; then NCCL_NVLS_ENABLE=0 "${torchrun[@]}" --no-python "$@"
    else shift; NCCL_NVLS_ENABLE=0 "${torchrun[@]}" "$@"; fi  # drop "$PYTHON": torchrun runs the script
  else
    "$@"
  fi
}
fp_run() {  # model dataset mode
  local m=$1 d=$2 mode=$3 name=fptrain-$1-$2-$3
  local run=$WORK/runs/$name cfg=$WORK/runs/$name.yaml
  rm -rf "$run"
  # pack: a token budget per rank of the paper's 4 rows of max_length tokens, filled best-fit-decreasing
  # (whole examples, positions restarting per example); pad and flatten: 4 examples per micro-batch.
  cat > "$cfg" <<YAML
model: {path: $WORK/models/$m, dtype: $DTYPE, attention: auto, activation_checkpointing: $CKPT}
data:
  train: $WORK/data/$d-$EXAMPLES.jsonl
  eval: $WORK/data/$d-eval-$EVAL_EXAMPLES.jsonl
  max_length: $MAX_LEN
  overlong: truncate
  max_zero_supervised_fraction: 0.05   # a long prompt truncated at max_length can leave no response token
  shuffle: true
batching: {mode: $mode, examples_per_micro_batch: $PER_GPU, max_tokens: $((PER_GPU * MAX_LEN)), grad_accumulation: $GRAD_ACCUM}
optimizer: {lr: $LR, weight_decay: 0.0, grad_clip: 1.0, master_weights: true}
schedule: {warmup_steps: 0, decay: cosine}
training: {epochs: 1, seed: 0}
logging: {log_interval: 1, eval_interval: 0}
checkpoint: {interval: 0, save_final: false}
output_dir: $run
resume: none
device: $DEVICE
YAML
  if launch "$FPTRAIN" train "$cfg" > "$LOGS/$name.log" 2>&1 &&
     "$PYTHON" "$TOOLS" fptrain-run --run "$run" --model "$m" --dataset "$d" --mode "$mode" \
       --warmup-steps "$WARMUP" --world-size "$GPUS" > "$WORK/json/$name.json" 2>> "$LOGS/$name.log"; then
    progress "$name: $("$PYTHON" "$TOOLS" line "$WORK/json/$name.json")"
  else
    failures=$((failures + 1))
    echo "{\"impl\": \"fptrain\", \"model\": \"$m\", \"dataset\": \"$d\", \"mode\": \"$mode\", \"failed\": true}" \
      > "$WORK/json/$name.json"
    progress "$name: FAILED (log: $LOGS/$name.log)"; tail -5 "$LOGS/$name.log"
  fi
  results+=("$WORK/json/$name.json")
}
peer_run() {  # model dataset mode: the same examples and steps as fptrain's flatten run
  local m=$1 d=$2 mode=$3 name=transformers-$1-$2-$3
  local steps=$(( EXAMPLES / (PER_GPU * GRAD_ACCUM * GPUS) ))
  local warm=$WARMUP; [ "$warm" -ge "$steps" ] && warm=$((steps - 1))
  local ckpt=(); [ "$CKPT" = none ] && ckpt=(--no-checkpointing)
  if launch "$PYTHON" "$TOOLS" peer --model "$m" --dataset "$d" --mode "$mode" -- \
       --model "$WORK/models/$m" --data "$WORK/data/$d-$EXAMPLES.jsonl" --batch "$PER_GPU" \
       --grad-accum "$GRAD_ACCUM" --steps "$steps" --warmup "$warm" --max-length "$MAX_LEN" --lr "$LR" \
       --device "$DEVICE" --name "$name" "${ckpt[@]}" > "$WORK/json/$name.out" 2> "$LOGS/$name.log" &&
     grep '^{' "$WORK/json/$name.out" | tail -1 > "$WORK/json/$name.json" && [ -s "$WORK/json/$name.json" ]; then
    progress "$name: $("$PYTHON" "$TOOLS" line "$WORK/json/$name.json")"
  else
    failures=$((failures + 1))
    echo "{\"impl\": \"transformers\", \"model\": \"$m\", \"dataset\": \"$d\", \"mode\": \"$mode\", \"failed\": true}" \
      > "$WORK/json/$name.json"
    progress "$name: FAILED (log: $LOGS/$name.log)"; tail -5 "$LOGS/$name.log"
  fi
  results+=("$WORK/json/$name.json")
}

for m in "${MODEL_LIST[@]}"; do
  for d in "${DATASET_LIST[@]}"; do
    for mode in "${FP_MODES[@]}"; do fp_run "$m" "$d" "$mode"; done
    for mode in "${PEER_MODES[@]}"; do peer_run "$m" "$d" "$mode"; done
  done
done

"$PYTHON" "$TOOLS" report --out "$OUT_DIR" --runs "${results[@]}" --note "$NOTE" || failures=$((failures + 1))
el=$(( $(date +%s) - START ))
echo "reproduce.sh: $n_runs runs, $failures failure(s), $((el / 60)) min $((el % 60)) s; results in $OUT_DIR"
[ "$failures" = 0 ]
