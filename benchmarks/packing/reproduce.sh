#!/usr/bin/env bash
# Reproduces the packing paper's FLAN / OrcaMath experiment (Kundu et al., arXiv 2407.09105) with
# fptrain and, in the same run, the transformers peer: one table and a few plots.
#
#   benchmarks/packing/reproduce.sh [--gpus N] [--models M,...] [--datasets D,...] [--examples K]
#                                   [--out DIR] [--smoke] [--convergence | --convergence-only]
#                                   [--convergence-examples K] [--modes M,...] [--peer-modes M,...]
#                                   [--report-only] [--skip-done] [--fptrain-set KEY=VALUE ...]
#
#   --smoke      tiny model (fptrain init --preset tiny), CPU, fp32, --examples 48 by default: what CI runs.
#   --models     llama2-7b,mistral-7b,granite-8b-code (default all three; --smoke: tiny)
#   --datasets   flan,orcamath (default both)
#   --examples   examples per dataset (default 20000 as in the paper; --smoke: 48)
#   --gpus       GPUs per run (default 1); above 1 fptrain and the peer run under torchrun
#   --out        where packing.json, packing.md and the PNGs go (default benchmarks/packing/results/<date>;
#                --smoke: runs/packing/smoke/results)
#   --convergence       also the convergence study: a small model (fptrain init --preset small; --smoke: tiny)
#                       from one init, one epoch of FLAN-like data in pad, flatten, pack and fixed:
#                       convergence.json, convergence.md and convergence.png in the --out folder
#   --convergence-only  the convergence study alone
#   --convergence-examples  its training examples (default 20000; --smoke: 96)
#   --convergence-data  flan (default: FLAN-like generated text) or real (scripts/make_real_dataset.py:
#                       the documentation of the installed torch as instruction pairs, its own held-out
#                       split as the evaluation set, a tokenizer trained on it)
#   --modes      fptrain modes (default pad,flatten,pack,fixed,fixed-nopos; none: no fptrain run)
#   --peer-modes transformers modes (default flatten,pad; none: no peer run)
#   --report-only  no runs: the table and plots from the run results already in the work folder's json/
#                (those of the selected models, datasets and modes), e.g. gathered from several calls
#   --skip-done  keep a run that an earlier call of the same work folder finished (its JSON says so, with the
#                same examples and processes) instead of running it again: the same command, repeated, goes on
#                where a cut-off call stopped (runs of other code or --fptrain-set are kept too: use a new
#                work folder for those)
#   --fptrain-set  one more setting for every fptrain run (repeatable), e.g. distributed.transfers=nccl
#
# Environment: PYTHON (default .venv/bin/python), FPTRAIN (default build/apps/fptrain),
# FPTRAIN_PACKING_WORK (default runs/packing[/smoke]): data, models and run folders, reused between runs.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

SMOKE=0 GPUS=1 MODELS="" DATASETS="flan,orcamath" EXAMPLES="" OUT_DIR="" CONVERGENCE=0 MAIN=1 CONV_EXAMPLES=""
MODES="pad,flatten,pack,fixed,fixed-nopos" PEER_MODES_ARG="flatten,pad" REPORT_ONLY=0 SKIP_DONE=0 FP_SETS=() CONV_DATA=flan
usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) SMOKE=1 ;;
    --gpus) GPUS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --datasets) DATASETS=$2; shift ;;
    --examples) EXAMPLES=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --convergence) CONVERGENCE=1 ;;
    --convergence-only) CONVERGENCE=1 MAIN=0 ;;
    --convergence-examples) CONV_EXAMPLES=$2; shift ;;
    --convergence-data) CONV_DATA=$2; shift ;;
    --modes) MODES=$2; shift ;;
    --peer-modes) PEER_MODES_ARG=$2; shift ;;
    --report-only) REPORT_ONLY=1 ;;
    --skip-done) SKIP_DONE=1 ;;
    --fptrain-set) FP_SETS+=(--set "$2"); shift ;;
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
# fixed: the paper's rows, PER_GPU of exactly MAX_LEN tokens per micro-batch
ROW_TOKENS=$MAX_LEN ROWS=$PER_GPU
if [ "$SMOKE" = 1 ]; then
  MODELS=${MODELS:-tiny} EXAMPLES=${EXAMPLES:-48}  # --gpus N: N CPU processes
  WORK=${FPTRAIN_PACKING_WORK:-$ROOT/runs/packing/smoke}
  OUT_DIR=${OUT_DIR:-$WORK/results}
  DEVICE=cpu DTYPE=float32 CKPT=none WARMUP=1 LR=3.0e-3 EVAL_EXAMPLES=16
  # The CPU's reference attention over a whole 4096-token row (fixed-nopos) costs ~15 s a step: shorter
  # rows, as many tokens per micro-batch.
  ROW_TOKENS=512 ROWS=$(( PER_GPU * MAX_LEN / 512 ))
  NOTE="Smoke run (--smoke): the tiny fptrain-init Llama on the CPU in fp32, $EXAMPLES examples per dataset,
max length $MAX_LEN, fixed rows of $ROW_TOKENS tokens ($ROWS per micro-batch; the paper's $PER_GPU of $MAX_LEN on a
GPU); the numbers show that the pipeline works, not the paper's speed-ups."
  CONV_PRESET=tiny CONV_EXAMPLES=${CONV_EXAMPLES:-96} CONV_LR=3.0e-3
else
  MODELS=${MODELS:-llama2-7b,mistral-7b,granite-8b-code} EXAMPLES=${EXAMPLES:-20000}
  WORK=${FPTRAIN_PACKING_WORK:-$ROOT/runs/packing}
  OUT_DIR=${OUT_DIR:-$ROOT/benchmarks/packing/results/$(date -u +%Y-%m-%d)}
  DEVICE=cuda DTYPE=bfloat16 CKPT=every_layer WARMUP=5 LR=2.0e-5 EVAL_EXAMPLES=200
  NOTE="Random-weight models at the paper's shapes, $GPUS GPU(s), $EXAMPLES examples per dataset, max length
$MAX_LEN, fixed rows of $ROW_TOKENS tokens ($ROWS per micro-batch), bf16 weights with fp32 master weights,
activation checkpointing on every layer; the loss values of random weights mean little."
  CONV_PRESET=small CONV_EXAMPLES=${CONV_EXAMPLES:-20000} CONV_LR=1.0e-3
fi
IFS=, read -r -a MODEL_LIST <<< "$MODELS"
IFS=, read -r -a DATASET_LIST <<< "$DATASETS"
FP_MODES=() PEER_MODES=()
[ "$MODES" = none ] || IFS=, read -r -a FP_MODES <<< "$MODES"
[ "$PEER_MODES_ARG" = none ] || IFS=, read -r -a PEER_MODES <<< "$PEER_MODES_ARG"
for mode in "${FP_MODES[@]}"; do
  case $mode in pad|flatten|pack|fixed|fixed-nopos) ;; *) echo "reproduce.sh: unknown mode $mode" >&2; exit 2 ;; esac
done
for mode in "${PEER_MODES[@]}"; do
  case $mode in pad|flatten) ;; *) echo "reproduce.sh: unknown peer mode $mode (flatten, pad)" >&2; exit 2 ;; esac
done
CONV_MODES=(pad flatten flatten-1mb pack fixed)
[ "$MAIN" = 1 ] || MODEL_LIST=() DATASET_LIST=()
mkdir -p "$WORK/data" "$WORK/models" "$WORK/runs" "$WORK/json" "$OUT_DIR"
LOGS=$WORK/logs; mkdir -p "$LOGS"

# ---- configurations ------------------------------------------------------------------------
write_cfg() {  # file run-dir model-dir train.jsonl eval.jsonl mode lr warmup-steps dtype checkpointing
  local cfg=$1 run=$2 model=$3 train=$4 eval=$5 mode=$6 lr=$7 warmup=$8 dtype=$9 ckpt=${10}
  # pad and flatten: 4 examples per micro-batch; pack: a token budget per rank of the paper's 4 rows of
  # max_length tokens, filled best-fit-decreasing (whole examples, positions restarting per example);
  # fixed: the paper's offline packing, the examples concatenated and cut into rows of exactly ROW_TOKENS
  # (max_length; an example may go on in the next row), positions restarting per piece; fixed-nopos: the
  # same rows, each one sequence with attention across examples (the paper's "without position ids").
  local batching="mode: $mode, examples_per_micro_batch: $PER_GPU, max_tokens: $((PER_GPU * MAX_LEN))"
  local accum=$GRAD_ACCUM
  case $mode in
    flatten-1mb)  # the rounding reference: flatten's steps as one micro-batch of all their examples
      batching="mode: flatten, examples_per_micro_batch: $((PER_GPU * GRAD_ACCUM))" accum=1 ;;
    fixed|fixed-nopos)
      local cross=false; [ "$mode" = fixed-nopos ] && cross=true
      batching="mode: fixed, row_tokens: $ROW_TOKENS, rows_per_micro_batch: $ROWS, cross_example_attention: $cross" ;;
  esac
  cat > "$cfg" <<YAML
model: {path: $model, dtype: $dtype, attention: auto, activation_checkpointing: $ckpt}
data:
  train: $train
  eval: $eval
  max_length: $MAX_LEN
  overlong: truncate
  max_zero_supervised_fraction: 0.05   # a long prompt truncated at max_length can leave no response token
  shuffle: true
batching: {$batching, grad_accumulation: $accum}
optimizer: {lr: $lr, weight_decay: 0.0, grad_clip: 1.0, master_weights: true}
schedule: {warmup_steps: $warmup, decay: cosine}
training: {epochs: 1, seed: 0}
logging: {log_interval: 1, eval_interval: 0}
checkpoint: {interval: 0, save_final: false}
output_dir: $run
resume: none
device: $DEVICE
YAML
}

# ---- estimate ------------------------------------------------------------------------------
n_runs=$(( ${#MODEL_LIST[@]} * ${#DATASET_LIST[@]} * (${#FP_MODES[@]} + ${#PEER_MODES[@]}) ))
[ "$CONVERGENCE" = 1 ] && n_runs=$(( n_runs + ${#CONV_MODES[@]} ))
if [ "$SMOKE" = 1 ]; then
  est=$(( n_runs * 6 + 20 ))  # about 6 s a run on 2 cores (the peer pays for importing transformers)
else
  # tokens of one epoch (FLAN ~471 tokens/example, OrcaMath ~600) over an assumed 2000 tokens/s per GPU
  # for the slowest mode, per run, plus 3 minutes a run for loading a 7B model and warm-up; the
  # convergence study's small model is taken as 20x faster.
  est=$(( (n_runs - ${#CONV_MODES[@]} * CONVERGENCE) * (EXAMPLES * 550 / (2000 * GPUS) + 180) ))
  est=$(( est + ${#CONV_MODES[@]} * CONVERGENCE * (CONV_EXAMPLES * 550 / (40000 * GPUS) + 30) ))
fi
if [ "$MAIN" = 1 ]; then
  echo "reproduce.sh: ${#MODEL_LIST[@]} model(s) [$MODELS] x ${#DATASET_LIST[@]} dataset(s) [$DATASETS] x" \
       "modes fptrain {${FP_MODES[*]}} + transformers {${PEER_MODES[*]}}, $EXAMPLES examples each," \
       "$GPUS process(es) per run, device $DEVICE"
fi
[ "$CONVERGENCE" = 1 ] && echo "reproduce.sh: convergence study: $CONV_PRESET model, $CONV_DATA, $CONV_EXAMPLES examples," \
  "modes {${CONV_MODES[*]}}"
echo "reproduce.sh: $n_runs runs; estimated $((est / 60)) min $((est % 60)) s (a rough guess)"
START=$(date +%s)

# ---- data (made once) ------------------------------------------------------------------------
make_data() {  # profile examples: the training file and the evaluation file
  local d=$1 k=$2
  case $d in flan|orcamath) ;; *) echo "reproduce.sh: unknown dataset $d (flan, orcamath)" >&2; exit 2 ;; esac
  local train=$WORK/data/$d-$k.jsonl eval=$WORK/data/$d-eval-$EVAL_EXAMPLES.jsonl
  [ -s "$train" ] || "$PYTHON" scripts/make_dataset.py --profile "$d" --examples "$k" --seed 0 \
    --out "$train" || exit 1
  [ -s "$eval" ] || "$PYTHON" scripts/make_dataset.py --profile "$d" --examples "$EVAL_EXAMPLES" --seed 1 \
    --out "$eval" || exit 1
}
[ "$REPORT_ONLY" = 1 ] || for d in "${DATASET_LIST[@]}"; do make_data "$d" "$EXAMPLES"; done
case $CONV_DATA in
  flan) [ "$CONVERGENCE" = 1 ] && make_data flan "$CONV_EXAMPLES" ;;
  real) [ "$CONVERGENCE" = 1 ] && { [ -s "$WORK/data/real-$CONV_EXAMPLES.jsonl" ] ||
          "$PYTHON" scripts/make_real_dataset.py --out "$WORK/data/real-$CONV_EXAMPLES.jsonl" \
            --examples "$CONV_EXAMPLES" --stats "$WORK/data/real-$CONV_EXAMPLES.stats.json" || exit 1; } ;;
  *) echo "reproduce.sh: --convergence-data is flan or real, not $CONV_DATA" >&2; exit 2 ;;
esac

# ---- models (made once) ----------------------------------------------------------------------
# The tokenizer (and with it the seeded random model) comes from one fixed corpus, FLAN-like, 1600
# examples, seed 0, whatever --datasets and --examples say: every call on any machine makes the same
# model, so runs gathered from several calls (--report-only) are comparable.
first_data=$WORK/data/tokenizer-corpus-flan-1600.jsonl
if [ "$REPORT_ONLY" = 0 ] && [ ! -s "$first_data" ]; then
  "$PYTHON" scripts/make_dataset.py --profile flan --examples 1600 --seed 0 --out "$first_data.tmp" > /dev/null &&
    mv "$first_data.tmp" "$first_data" || exit 1
fi
[ "$REPORT_ONLY" = 1 ] && MAKE_MODELS=() || MAKE_MODELS=("${MODEL_LIST[@]}")
for m in "${MAKE_MODELS[@]}"; do
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
run_failed() {  # impl name model dataset mode: counts it, leaves a FAILED row for the report
  failures=$((failures + 1))
  echo "{\"impl\": \"$1\", \"model\": \"$3\", \"dataset\": \"$4\", \"mode\": \"$5\", \"failed\": true}" \
    > "$WORK/json/$2.json"
  progress "$2: FAILED (log: $LOGS/$2.log)"; tail -5 "$LOGS/$2.log"
}
kept() {  # name [the peer's steps]: with --skip-done, an earlier call's finished run of this size is kept
  [ "$SKIP_DONE" = 1 ] && [ -s "$WORK/json/$1.json" ] || return 1
  "$PYTHON" - "$WORK/json/$1.json" "$GPUS" "$EXAMPLES" "${2:-}" <<'PY' || return 1
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ok = not r.get("failed") and r.get("world_size") == int(sys.argv[2])
ok = ok and (r.get("examples") == int(sys.argv[3]) if "examples" in r else str(r.get("steps")) == sys.argv[4])
sys.exit(0 if ok else 1)
PY
  progress "$1: kept from an earlier call ($("$PYTHON" "$TOOLS" line "$WORK/json/$1.json"))"
}
train_run() {  # name config model dataset mode: trains, then the run's JSON line in $WORK/json/NAME.json
  local name=$1 cfg=$2 m=$3 d=$4 mode=$5 run=$WORK/runs/$1
  rm -rf "$run"
  if launch "$FPTRAIN" train "$cfg" "${FP_SETS[@]}" > "$LOGS/$name.log" 2>&1 &&
     "$PYTHON" "$TOOLS" fptrain-run --run "$run" --model "$m" --dataset "$d" --mode "$mode" \
       --warmup-steps "$WARMUP" --world-size "$GPUS" > "$WORK/json/$name.json" 2>> "$LOGS/$name.log"; then
    progress "$name: $("$PYTHON" "$TOOLS" line "$WORK/json/$name.json")"
  else
    run_failed fptrain "$name" "$m" "$d" "$mode"
  fi
}
fp_run() {  # model dataset mode
  local m=$1 d=$2 mode=$3 name=fptrain-$1-$2-$3
  results+=("$WORK/json/$name.json")
  kept "$name" && return 0
  write_cfg "$WORK/runs/$name.yaml" "$WORK/runs/$name" "$WORK/models/$m" "$WORK/data/$d-$EXAMPLES.jsonl" \
    "$WORK/data/$d-eval-$EVAL_EXAMPLES.jsonl" "$mode" "$LR" 0 "$DTYPE" "$CKPT"
  train_run "$name" "$WORK/runs/$name.yaml" "$m" "$d" "$mode"
}
peer_run() {  # model dataset mode: the same examples and steps as fptrain's flatten and pad runs
  local m=$1 d=$2 mode=$3 name=transformers-$1-$2-$3
  local steps=$(( EXAMPLES / (PER_GPU * GRAD_ACCUM * GPUS) ))
  results+=("$WORK/json/$name.json")
  kept "$name" "$steps" && return 0
  local warm=$WARMUP; [ "$warm" -ge "$steps" ] && warm=$((steps - 1))
  local extra=(); [ "$CKPT" = none ] && extra=(--no-checkpointing)
  [ "$mode" = pad ] && extra+=(--pad)
  if launch "$PYTHON" "$TOOLS" peer --model "$m" --dataset "$d" --mode "$mode" -- \
       --model "$WORK/models/$m" --data "$WORK/data/$d-$EXAMPLES.jsonl" --batch "$PER_GPU" \
       --grad-accum "$GRAD_ACCUM" --steps "$steps" --warmup "$warm" --max-length "$MAX_LEN" --lr "$LR" \
       --device "$DEVICE" --name "$name" --eval-data "$WORK/data/$d-eval-$EVAL_EXAMPLES.jsonl" "${extra[@]}" \
       > "$WORK/json/$name.out" 2> "$LOGS/$name.log" &&
     grep '^{' "$WORK/json/$name.out" | tail -1 > "$WORK/json/$name.json" && [ -s "$WORK/json/$name.json" ]; then
    progress "$name: $("$PYTHON" "$TOOLS" line "$WORK/json/$name.json")"
  else
    run_failed transformers "$name" "$m" "$d" "$mode"
  fi
}

for m in "${MODEL_LIST[@]}"; do
  for d in "${DATASET_LIST[@]}"; do
    if [ "$REPORT_ONLY" = 1 ]; then  # the results of earlier calls, where they exist
      for mode in "${FP_MODES[@]}"; do f=$WORK/json/fptrain-$m-$d-$mode.json; [ -s "$f" ] && results+=("$f"); done
      for mode in "${PEER_MODES[@]}"; do f=$WORK/json/transformers-$m-$d-$mode.json; [ -s "$f" ] && results+=("$f"); done
      continue
    fi
    for mode in "${FP_MODES[@]}"; do fp_run "$m" "$d" "$mode"; done
    for mode in "${PEER_MODES[@]}"; do peer_run "$m" "$d" "$mode"; done
  done
done

[ "$MAIN" = 1 ] && { "$PYTHON" "$TOOLS" report --out "$OUT_DIR" --runs "${results[@]}" --note "$NOTE" ||
  failures=$((failures + 1)); }

# ---- convergence study -----------------------------------------------------------------------
# One small model, one initialisation (made once, the same weights for every mode), one epoch of the
# FLAN-like data per mode at the same peak learning rate, warm-up ~3% of each mode's own steps.
if [ "$CONVERGENCE" = 1 ]; then
  cm=$WORK/models/convergence-$CONV_PRESET ctrain=$WORK/data/flan-$CONV_EXAMPLES.jsonl
  ceval=$WORK/data/flan-eval-$EVAL_EXAMPLES.jsonl cruns=()
  if [ "$CONV_DATA" = real ]; then  # its own held-out split; a model (and tokenizer) of its own text
    cm=$WORK/models/convergence-$CONV_PRESET-real ctrain=$WORK/data/real-$CONV_EXAMPLES.jsonl
    ceval=$WORK/data/real-$CONV_EXAMPLES-eval.jsonl
  fi
  [ -s "$cm/config.json" ] || "$FPTRAIN" init "$cm" --preset "$CONV_PRESET" --corpus "$ctrain" \
    > "$LOGS/init-convergence-$CONV_PRESET.log" 2>&1 ||
    { echo "fptrain init failed:"; tail -5 "$LOGS/init-convergence-$CONV_PRESET.log"; exit 1; }
  for mode in "${CONV_MODES[@]}"; do
    name=convergence-$CONV_PRESET-$CONV_DATA-$mode cfg=$WORK/runs/convergence-$CONV_PRESET-$CONV_DATA-$mode.yaml
    write_cfg "$cfg" "$WORK/runs/$name" "$cm" "$ctrain" "$ceval" "$mode" "$CONV_LR" 0 "$DTYPE" none
    # the mode's steps per epoch from fptrain's own data report (one rank's; divided among GPUS ranks)
    csteps=$("$FPTRAIN" data "$cfg" 2>> "$LOGS/$name.log" | awk -v m="${mode%-nopos}" '$1 == m {print $3; exit}')
    csteps=${csteps:-$(( CONV_EXAMPLES / (PER_GPU * GRAD_ACCUM) ))}
    cwarm=$(( (csteps * 3 / GPUS + 50) / 100 )); [ "$cwarm" -ge 1 ] || cwarm=1
    write_cfg "$cfg" "$WORK/runs/$name" "$cm" "$ctrain" "$ceval" "$mode" "$CONV_LR" "$cwarm" "$DTYPE" none
    train_run "$name" "$cfg" "$CONV_PRESET" "$CONV_DATA" "$mode"
    cruns+=("$WORK/json/$name.json")
  done
  cdata="FLAN-like data"; [ "$CONV_DATA" = real ] && cdata="real text (the installed torch's documentation as instruction pairs, scripts/make_real_dataset.py)"
  cnote="fptrain init --preset $CONV_PRESET, one initialisation for every mode; $cdata, $CONV_EXAMPLES examples,
one epoch, max length $MAX_LEN; peak lr $CONV_LR for every mode, linear warm-up over ~3% of the mode's steps,
cosine decay to 0; $DTYPE weights (fp32 master weights and moments), no activation checkpointing, device $DEVICE, $GPUS
process(es). pad and flatten: $PER_GPU examples per micro-batch; pack: $((PER_GPU * MAX_LEN)) tokens of whole
examples; fixed: $ROWS rows of exactly $ROW_TOKENS tokens, examples split across rows, positions restarting per
piece; $GRAD_ACCUM micro-batches per step in every mode but flatten-1mb, the rounding reference: flatten's
steps, each as one micro-batch of $((PER_GPU * GRAD_ACCUM)) examples (the same examples and loss, other GEMM shapes
and summation order)."
  "$PYTHON" "$TOOLS" convergence --out "$OUT_DIR" --runs "${cruns[@]}" --note "$cnote" || failures=$((failures + 1))
fi
el=$(( $(date +%s) - START ))
if [ "$REPORT_ONLY" = 1 ]; then
  echo "reproduce.sh: report of ${#results[@]} earlier run(s), $failures failure(s); results in $OUT_DIR"
else
  echo "reproduce.sh: $n_runs runs, $failures failure(s), $((el / 60)) min $((el % 60)) s; results in $OUT_DIR"
fi
[ "$failures" = 0 ]
