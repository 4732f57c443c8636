#!/usr/bin/env bash
# Data-parallel training on the GPU machine (scripts/gpu-check.sh bench distributed runs
# this with OUT and FPTRAIN_BUILD_DIR set):
#   1. a Llama-2-7B-shaped model (random init, bf16 weights, fp32 masters; made once in
#      the work folder), FLAN-like generated data, flatten mode, 4 examples per GPU per
#      micro-batch, activation checkpointing on every layer, optimizer sharded:
#      fptrain at 1 GPU and at 2 GPUs (torchrun --no-python fptrain train);
#   2. the peer on the same model and data: transformers + torch DDP +
#      DataCollatorWithFlattening + FA2 varlen + gradient checkpointing (hf_ddp.py),
#      at 1 GPU and at 2 GPUs;
#   3. bf16 loss parity on a Llama-3.2-1B shape: the first 10 steps at 1 GPU with 8
#      examples per micro-batch against 2 GPUs with 4 each (the same global batch).
# Steady-state non-padding tokens/s per GPU, scaling against each one's own 1-GPU rate,
# MFU (6 N tokens/s per GPU over 989 TFLOP/s), peak memory (max over ranks).
# Results: $OUT/distributed-bench.{json,md}; logs: $OUT/dist-*.log.
# With fewer than 2 GPUs only the 1-GPU runs are made (a note says so) and it exits 0.
# Otherwise it exits 1 if a run failed (the others still run; the report lists it as FAILED).
#
# Knobs: FPTRAIN_DIST_GPUS (GPUs of the data-parallel runs, default 2; a list such as "2 4"
# runs each; the targets and the parity use the first),
# FPTRAIN_DIST_STEPS (default 30; the first 5 are not measured), FPTRAIN_DIST_VARIANTS (below), FPTRAIN_DIST_RUN_TIMEOUT
# (seconds a run may take, default 420), FPTRAIN_DIST_MASTERS (default true; false: bf16 AdamW),
# FPTRAIN_DIST_PEERS (default 1; 0: fptrain's runs only), FPTRAIN_DIST_ROWS (row tokens: also a 2-GPU and a 1-GPU
# gradient-accumulation run of fixed rows of that many tokens, one a micro-batch: every rank the same tokens, so
# their scaling is the transfers' cost alone, without the ranks waiting on each other's longer examples), FPTRAIN_DIST_BENCH_DIR (work folder, default
# /tmp/fptrain-dist-bench), FPTRAIN_DIST_PARITY_TOL (default 0.01). To try the plumbing
# on a CPU: FPTRAIN_DIST_SHAPE=tiny FPTRAIN_DIST_PARITY_PRESET=tiny FPTRAIN_DIST_DEVICE=cpu
# FPTRAIN_DIST_DTYPE=float32.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build-gpu}
if [ -d "$BUILD_DIR/apps/fptrain" ]; then FPTRAIN=$BUILD_DIR/apps/fptrain/fptrain; else FPTRAIN=$BUILD_DIR/apps/fptrain; fi
PYTHON=/opt/torch/.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=$ROOT/.venv/bin/python
WORK=${FPTRAIN_DIST_BENCH_DIR:-/tmp/fptrain-dist-bench}
WORLDS=${FPTRAIN_DIST_GPUS:-2}  # data-parallel world sizes, e.g. "2 4" (each where as many GPUs are visible)
NPROC=${WORLDS%% *}             # the first: the one the targets and the parity use
STEPS=${FPTRAIN_DIST_STEPS:-30}
MASTERS=${FPTRAIN_DIST_MASTERS:-true}  # false: bf16 AdamW (a 7B with fp32 masters needs ~104 GiB on one GPU)
LOG_INTERVAL=5                 # fptrain's first record (steps 1-5) is warm-up; the peer skips as many steps
PARITY_STEPS=10
SHAPE=${FPTRAIN_DIST_SHAPE:-llama2-7b}
PARITY_PRESET=${FPTRAIN_DIST_PARITY_PRESET:-llama-1b}
DEVICE=${FPTRAIN_DIST_DEVICE:-cuda}
DTYPE=${FPTRAIN_DIST_DTYPE:-bfloat16}
RUN_TIMEOUT=${FPTRAIN_DIST_RUN_TIMEOUT:-420}
PARITY_TOL=${FPTRAIN_DIST_PARITY_TOL:-0.01}
# NVLink multicast stays off (the GPU machines share their hosts).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
cd "$ROOT" || exit 1
tools() { "$PYTHON" "$HERE/bench_tools.py" "$@"; }
start_all=$(date +%s)
results=()
failures=0
variant_sets=()  # --set arguments of the fptrain run being made (FPTRAIN_DIST_VARIANTS)

gpus=${FPTRAIN_DIST_VISIBLE_GPUS:-$("$PYTHON" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)}
echo "== $gpus GPU(s) visible: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)"
note=""
if [ "${gpus:-0}" -lt "$NPROC" ]; then
  note="$gpus GPU(s) visible, fewer than $NPROC: only the 1-GPU runs were made"
  echo "NOTE: $note"
fi

# flash_attn for the peer, where a wheel travels in .whl/ (the GPU image has none).
if ls "$ROOT"/.whl/flash_attn-*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/flash_attn-*.whl \
    > "$OUT/dist-prep.log" 2>&1 && export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi

echo "== data and models in $WORK (made once)"
{
  if [ ! -s "$WORK/flan.jsonl" ]; then
    "$PYTHON" scripts/make_dataset.py --profile flan --examples 6000 --seed 0 --out "$WORK/flan.jsonl.tmp" &&
      mv "$WORK/flan.jsonl.tmp" "$WORK/flan.jsonl"
  fi
  if [ -s "$WORK/flan.jsonl" ] && [ ! -s "$WORK/parity-$PARITY_PRESET/config.json" ]; then
    rm -rf "$WORK/parity-$PARITY_PRESET"
    "$FPTRAIN" init "$WORK/parity-$PARITY_PRESET" --preset "$PARITY_PRESET" --corpus "$WORK/flan.jsonl"
  fi
  # The 7B shape takes the parity model's tokenizer (trained on the same data).
  if [ -s "$WORK/parity-$PARITY_PRESET/config.json" ]; then
    tools make-model --out "$WORK/$SHAPE" --tokenizer-from "$WORK/parity-$PARITY_PRESET" --shape "$SHAPE"
  fi
} >> "$OUT/dist-prep.log" 2>&1
tail -3 "$OUT/dist-prep.log"
# The data and a model folder are there (the 7B one has make-model's stamp, written last).
prep_ok() { [ -s "$WORK/flan.jsonl" ] && [ -s "$1/config.json" ] && { [ "$1" != "$WORK/$SHAPE" ] || [ -s "$1/.bench-shape" ]; }; }

write_yaml() {  # yaml, model, examples per micro-batch, steps, log interval, output dir, [grad accumulation]
  cat > "$1" <<YAML
model:
  path: $2
  dtype: $DTYPE
  activation_checkpointing: every_layer
data:
  train: $WORK/flan.jsonl
  shuffle: false    # file order, as the peer's --no-shuffle: the same examples in every run's steps
  max_length: 4096
  workers: 8
batching:
  mode: flatten
  examples_per_micro_batch: $3
  grad_accumulation: ${7:-1}
optimizer:
  lr: 1.0e-4
  master_weights: $MASTERS
  grad_clip: 1.0
schedule:
  warmup_steps: 5
training:
  max_steps: $4
  seed: 0
logging:
  log_interval: $5
checkpoint:
  save_final: false
output_dir: $6
resume: none
device: $DEVICE
YAML
  # FPTRAIN_DIST_OMIT_DISTRIBUTED=1: for a binary that predates data parallelism (1-process runs only).
  [ -n "${FPTRAIN_DIST_OMIT_DISTRIBUTED:-}" ] || cat >> "$1" <<YAML
distributed:
  shard_optimizer: auto
  timeout: 600
YAML
}

fail() {  # name, impl, world size, log, reason
  echo "FAILED: $1 ($5)"
  if [ -f "$4" ]; then grep -m 5 -E '\] error |Error|what\(\)' "$4"; tail -5 "$4"; fi
  tools failed --name "$1" --impl "$2" --world-size "$3" --log "$4" --reason "$5" > "$WORK/res-$1.json"
  results+=("$WORK/res-$1.json")
  failures=$((failures + 1))
}

# fptrain: name, world size, model folder, examples per micro-batch, steps, log interval,
# [grad accumulation]. Leaves the run in $WORK/run-NAME; adds a result line for the 7B runs
# (not for parity ones).
fptrain_run() {
  local name=$1 world=$2 model=$3 examples=$4 steps=$5 interval=$6 accum=${7:-1} log=$OUT/dist-$1.log start
  local run=$WORK/run-$name
  echo "== fptrain $name: $world GPU(s), $examples examples per GPU, $steps steps"
  rm -rf "$run"
  if ! prep_ok "$model"; then
    fail "$name" fptrain "$world" "$OUT/dist-prep.log" "model or data not made"; return 1
  fi
  write_yaml "$WORK/$name.yaml" "$model" "$examples" "$steps" "$interval" "$run" "$accum"
  start=$(date +%s)
  if [ "$world" -eq 1 ]; then
    timeout -k 30 "$RUN_TIMEOUT" "$FPTRAIN" train "$WORK/$name.yaml" "${variant_sets[@]}" > "$log" 2>&1
  else
    timeout -k 30 "$RUN_TIMEOUT" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$world" \
      --no-python "$FPTRAIN" train "$WORK/$name.yaml" "${variant_sets[@]}" > "$log" 2>&1
  fi
  local rc=$?
  echo "   exit $rc in $(( $(date +%s) - start )) s"
  rm -rf "$run/checkpoints"  # only a stopped run (SIGTERM from the timeout) writes one: 7B ones are large
  if [ $rc -ne 0 ] || [ ! -s "$run/summary.json" ]; then
    fail "$name" fptrain "$world" "$log" "exit $rc$([ $rc -eq 124 ] && echo ", over ${RUN_TIMEOUT} s")"; return 1
  fi
  tail -3 "$log"
  return 0
}

fptrain_bench() {  # name, world size, [grad accumulation], [batching label of tools fptrain-run]
  fptrain_run "$1" "$2" "$WORK/$SHAPE" 4 "$STEPS" "$LOG_INTERVAL" "${3:-1}" || return 0
  if tools fptrain-run --run "$WORK/run-$1" --name "$1" --world-size "$2" --grad-accumulation "${3:-1}" \
       --batching "${4:-flatten}" \
       > "$WORK/res-$1.json" 2>> "$OUT/dist-$1.log"; then
    results+=("$WORK/res-$1.json"); cat "$WORK/res-$1.json"
  else
    fail "$1" fptrain "$2" "$OUT/dist-$1.log" "no readable metrics"
  fi
}

hf_bench() {  # name, world size, [grad accumulation]
  local name=$1 world=$2 accum=${3:-1} log=$OUT/dist-$1.log start
  echo "== peer $name: transformers$([ "$world" -gt 1 ] && echo " + DDP"), $world GPU(s), 4 examples per GPU, $STEPS steps"
  if ! prep_ok "$WORK/$SHAPE"; then
    fail "$name" transformers "$world" "$OUT/dist-prep.log" "model or data not made"; return 0
  fi
  start=$(date +%s)
  timeout -k 30 "$RUN_TIMEOUT" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$world" \
    "$HERE/hf_ddp.py" --model "$WORK/$SHAPE" --data "$WORK/flan.jsonl" --no-shuffle --batch 4 --grad-accum "$accum" \
    --steps "$STEPS" --warmup "$LOG_INTERVAL" --name "$name" > "$WORK/$name.out" 2> "$log"
  local rc=$?
  echo "   exit $rc in $(( $(date +%s) - start )) s"
  cat "$WORK/$name.out" >> "$log"
  if [ $rc -eq 0 ] && grep '^{' "$WORK/$name.out" | tail -1 > "$WORK/res-$name.json" && [ -s "$WORK/res-$name.json" ]; then
    results+=("$WORK/res-$name.json"); cat "$WORK/res-$name.json"
  else
    fail "$name" transformers "$world" "$log" "exit $rc$([ $rc -eq 124 ] && echo ", over ${RUN_TIMEOUT} s")"
  fi
}

# FPTRAIN_DIST_PART: all (default) | prep (make the data and models, then stop: a first
# device call can prepare while a second one measures) | parity (prep + the parity runs) |
# runs (the throughput runs and the report; the parity of an earlier 'parity' call is reused).
PART=${FPTRAIN_DIST_PART:-all}
[ "$PART" = prep ] && { echo "== prepared (FPTRAIN_DIST_PART=prep)"; exit 0; }
multi=0
[ "${gpus:-0}" -ge "$NPROC" ] && multi=1
[ "$PART" = parity ] && WORLDS="" && skip_1gpu=1
for w in $WORLDS; do [ "${gpus:-0}" -ge "$w" ] && fptrain_bench "fptrain-${w}gpu" "$w"; done
# FPTRAIN_DIST_VARIANTS: extra fptrain runs at the first world size with environment settings
# (upper case) or configuration settings (dotted keys, passed as --set), e.g.
# "nch8:NCCL_MAX_NCHANNELS=8 nccl:distributed.transfers=nccl" (rows fptrain-2gpu-nch8,
# fptrain-2gpu-nccl; the targets use the plain run).
for v in ${FPTRAIN_DIST_VARIANTS:-}; do
  [ $multi -eq 1 ] && [ "$PART" != parity ] || break
  IFS=, read -r -a assigns <<< "${v#*:}"
  variant_sets=()
  for kv in "${assigns[@]}"; do
    if [[ ${kv%%=*} == *.* ]]; then variant_sets+=(--set "$kv"); else export "${kv?}"; fi
  done
  fptrain_bench "fptrain-${NPROC}gpu-${v%%:*}" "$NPROC"
  for kv in "${assigns[@]}"; do [[ ${kv%%=*} == *.* ]] || unset "${kv%%=*}"; done
  variant_sets=()
done
# FPTRAIN_DIST_ROWS: the same rows of fixed mode at both world sizes (scaling without imbalance).
if [ -n "${FPTRAIN_DIST_ROWS:-}" ] && [ $multi -eq 1 ] && [ "$PART" != parity ]; then
  variant_sets=(--set batching.mode=fixed --set "batching.row_tokens=$FPTRAIN_DIST_ROWS" --set batching.rows_per_micro_batch=1)
  fptrain_bench "fptrain-${NPROC}gpu-rows$FPTRAIN_DIST_ROWS" "$NPROC" 1 "fixed rows of $FPTRAIN_DIST_ROWS"
  fptrain_bench "fptrain-1gpu-ga$NPROC-rows$FPTRAIN_DIST_ROWS" 1 "$NPROC" "fixed rows of $FPTRAIN_DIST_ROWS"
  variant_sets=()
fi
# The scaling baselines: one GPU on the same examples as the data-parallel runs (gradient
# accumulation = world size), and the plain 1-GPU runs (FPTRAIN_DIST_PLAIN_1GPU=0 skips them).
if [ -z "${skip_1gpu:-}" ]; then
  for w in $WORLDS; do [ "${gpus:-0}" -ge "$w" ] && fptrain_bench "fptrain-1gpu-ga$w" 1 "$w"; done
  [ "${FPTRAIN_DIST_PLAIN_1GPU:-1}" = 0 ] || fptrain_bench fptrain-1gpu 1
fi
[ "${FPTRAIN_DIST_PEERS:-1}" = 0 ] && skip_peers=1
for w in $WORLDS; do [ -z "${skip_peers:-}" ] && [ "${gpus:-0}" -ge "$w" ] && hf_bench "hf-ddp-${w}gpu" "$w"; done
if [ -z "${skip_1gpu:-}" ] && [ -z "${skip_peers:-}" ]; then
  for w in $WORLDS; do [ "${gpus:-0}" -ge "$w" ] && hf_bench "hf-1gpu-ga$w" 1 "$w"; done
  [ "${FPTRAIN_DIST_PLAIN_1GPU:-1}" = 0 ] || hf_bench hf-1gpu 1
fi

parity_args=()
if [ "$PART" = runs ]; then
  [ -s "$WORK/parity.json" ] && parity_args=(--parity "$WORK/parity.json")
elif [ $multi -eq 1 ]; then
  # The same global batch: 8 examples on one GPU, 4 on each of two.
  # A second 1-GPU run gives the noise floor: bf16 training drifts from itself run to run.
  if fptrain_run parity-1gpu 1 "$WORK/parity-$PARITY_PRESET" 8 "$PARITY_STEPS" 1 &&
     fptrain_run parity-2gpu 2 "$WORK/parity-$PARITY_PRESET" 4 "$PARITY_STEPS" 1; then
    again=()
    fptrain_run parity-1gpu-again 1 "$WORK/parity-$PARITY_PRESET" 8 "$PARITY_STEPS" 1 && again=(--again "$WORK/run-parity-1gpu-again")
    if tools parity --one "$WORK/run-parity-1gpu" --two "$WORK/run-parity-2gpu" "${again[@]}" --steps "$PARITY_STEPS" \
         > "$WORK/parity.json" 2>> "$OUT/dist-parity-2gpu.log"; then
      parity_args=(--parity "$WORK/parity.json"); cat "$WORK/parity.json"
    else
      echo "FAILED: parity (see dist-parity-2gpu.log)"; failures=$((failures + 1))
    fi
  fi
  # fptrain_run's failures above add rows of their own: keep them out of the 7B table.
  kept=(); for r in "${results[@]}"; do case $r in *res-parity-*) ;; *) kept+=("$r") ;; esac; done
  results=("${kept[@]}")
fi

[ "$PART" = parity ] && { echo "== parity done (FPTRAIN_DIST_PART=parity)"; [ $failures -eq 0 ]; exit; }
echo "== report"
tools report --out "$OUT" --runs "${results[@]}" "${parity_args[@]}" --parity-tol "$PARITY_TOL" \
  --gpus "${gpus:-0}" --note "$note" --shape "$SHAPE" --parity-preset "$PARITY_PRESET" \
  --masters "$MASTERS" || failures=$((failures + 1))
echo "== done in $(( $(date +%s) - start_all )) s"
if [ $multi -eq 0 ]; then
  echo "NOTE: $note (exit 0; $failures failed run(s) listed above)"; exit 0
fi
[ $failures -eq 0 ]
