#!/usr/bin/env bash
# Data-parallel training: starts `fptrain train` once per GPU through torchrun.
#
#   scripts/launch.sh [options] CONFIG.yaml [fptrain train arguments, e.g. --set key=value]
#
#   scripts/launch.sh configs/demo.yaml                  # every visible GPU of this machine
#   scripts/launch.sh --gpus 2 configs/demo.yaml         # 2 GPUs (2 CPU processes without GPUs)
#   scripts/launch.sh --nnodes 2 --node-rank 0 --master node0:29500 --job-id sft1 CONFIG.yaml
#                                                        # run on every node, same --master and --job-id
#
# One process per GPU (device cuda:LOCAL_RANK); torchrun sets RANK, LOCAL_RANK,
# WORLD_SIZE, MASTER_ADDR, ... for each. One node uses `torchrun --standalone`;
# several use a c10d rendezvous hosted by the torchrun on the --master host.
# The binary is FPTRAIN_BUILD_DIR/apps/fptrain (default build/); torchrun is
# FPTRAIN_TORCHRUN, else .venv/bin/torchrun, else /opt/torch/.venv/bin/torchrun,
# else the one on PATH. NCCL_NVLS_ENABLE=0 is always set (no NVLink multicast).
# FPTRAIN_LAUNCH_DRY_RUN=1 prints the environment and the command instead of
# running it.
#
# Signals: SIGINT (Ctrl-C) or SIGTERM to this script goes straight to the fptrain
# processes, which agree on a step, save one checkpoint and exit 0; torchrun then
# exits 0. torchrun itself is started deaf to SIGINT/SIGTERM, because when it
# forwards a signal it SIGKILLs the workers 30 s later, too soon for a large
# checkpoint. The workers start through `env --default-signal=INT,TERM` to get
# the default dispositions back (torchrun's failure summary therefore names `env`
# as the binary; fptrain's own error is above it). Where Slurm signals every
# process of the step, torchrun ignores the signal and the workers get it twice:
# harmless. (Without `torchrun --signals-to-handle`, `env --default-signal` or
# pkill, torchrun is exec'd plainly and forwards signals itself, 30 s limit.)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[launch] %s\n' "$*" >&2; }
die() { printf '[launch] error: %s\n' "$*" >&2; exit 2; }

usage() {
  cat <<'EOF'
Usage: scripts/launch.sh [options] CONFIG.yaml [fptrain train arguments...]

Runs `fptrain train CONFIG.yaml ...` data-parallel through torchrun, one process per GPU.

Options (before CONFIG.yaml):
  --gpus N          processes on this node (default: the visible GPUs, from
                    CUDA_VISIBLE_DEVICES or `nvidia-smi -L`; 1 without GPUs).
                    Without GPUs, N CPU processes (for smoke tests).
  --nnodes M        nodes in the job (default 1); M > 1 needs --master
  --node-rank R     this node's rank, 0..M-1 (passed to torchrun; the c10d
                    rendezvous assigns the ranks)
  --master HOST[:PORT]
                    c10d rendezvous endpoint: a node of the job that every node
                    reaches, the same on every node (default port 29500)
  --job-id ID       rendezvous id, the same on every node (default: fptrain)
  --max-restarts K  torchrun restarts of the worker group after a failure
                    (default 0); each restart resumes from the last checkpoint
  -h, --help        this text

Environment: FPTRAIN_BUILD_DIR (default build/), FPTRAIN_TORCHRUN (a torchrun),
OMP_NUM_THREADS (default: CPU cores / processes), FPTRAIN_LAUNCH_DRY_RUN=1 (print
the command, run nothing).

Per-rank vs global batch, the distributed: keys, failure and resume: README.md,
section "Many GPUs and nodes".
EOF
}

# --- arguments ---------------------------------------------------------------
gpus="" nnodes=1 node_rank="" master="" job_id="fptrain" max_restarts=0
need_value() {
  if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi
}
while [ "$#" -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --gpus | --nnodes | --node-rank | --master | --job-id | --max-restarts)
      need_value "$@"
      case $1 in
        --gpus) gpus=$2 ;;
        --nnodes) nnodes=$2 ;;
        --node-rank) node_rank=$2 ;;
        --master) master=$2 ;;
        --job-id) job_id=$2 ;;
        --max-restarts) max_restarts=$2 ;;
      esac
      shift 2 ;;
    --gpus=* | --nnodes=* | --node-rank=* | --master=* | --job-id=* | --max-restarts=*)
      set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (see --help); fptrain's own options go after CONFIG.yaml" ;;
    *) break ;;
  esac
done
[ "$#" -ge 1 ] || { usage >&2; exit 2; }
config=$1
shift

# number WHAT VALUE MIN MAX: VALUE (decimal digits; leading zeros allowed) as a
# number within MIN..MAX, or an error naming WHAT.
number() {
  if [[ $2 =~ ^[0-9]{1,6}$ ]] && [ $((10#$2)) -ge "$3" ] && [ $((10#$2)) -le "$4" ]; then
    echo $((10#$2))
  else
    die "$1 must be a whole number from $3 to $4, not '$2'"
  fi
}
nnodes=$(number --nnodes "$nnodes" 1 100000)
max_restarts=$(number --max-restarts "$max_restarts" 0 100000)
[ -z "$node_rank" ] || node_rank=$(number --node-rank "$node_rank" 0 $((nnodes - 1)))
[[ $job_id =~ ^[A-Za-z0-9._-]+$ ]] || die "--job-id may hold letters, digits, '.', '_' and '-' only, not '$job_id'"
if [ -n "$master" ]; then
  master_host=$master master_port=29500
  if [[ $master =~ ^(.*):([0-9]+)$ ]]; then master_host=${BASH_REMATCH[1]} master_port=${BASH_REMATCH[2]}; fi
  host_re='^[][A-Za-z0-9._:%-]+$'  # a name, an IPv4 address or a bracketed IPv6 address
  [[ $master_host =~ $host_re ]] || die "--master must be HOST or HOST:PORT, not '$master'"
  master_port=$(number "the --master port" "$master_port" 1 65535)
elif [ "$nnodes" -gt 1 ]; then
  die "--nnodes $nnodes needs --master HOST[:PORT]: a node of the job that every node reaches (the same on every node)"
fi
[ -e "$config" ] || die "config '$config' not found"
if [ ! -f "$config" ] || [ ! -r "$config" ]; then die "config '$config' is not a readable file"; fi

# --- processes per node ----------------------------------------------------------
visible_gpus() {
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local list=${CUDA_VISIBLE_DEVICES//[[:space:]]/}
    if [ -z "$list" ] || [[ $list == -* ]]; then echo 0; return; fi
    local -a ids
    IFS=, read -r -a ids <<<"$list"
    echo "${#ids[@]}"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    { nvidia-smi -L 2>/dev/null || true; } | grep -c '^GPU ' || true
  else
    echo 0
  fi
}
n_visible=$(visible_gpus)
if [ -n "$gpus" ]; then
  gpus=$(number --gpus "$gpus" 1 4096)
  if [ "$n_visible" -gt 0 ] && [ "$gpus" -gt "$n_visible" ]; then
    die "--gpus $gpus, but only $n_visible GPU(s) are visible (CUDA_VISIBLE_DEVICES / nvidia-smi -L)"
  fi
else
  gpus=$n_visible
  [ "$gpus" -ge 1 ] || gpus=1
fi
if [ "$n_visible" -eq 0 ]; then
  log "no GPU visible: $gpus CPU process(es) per node"
fi

# --- the binary and torchrun -----------------------------------------------------
build_dir=${FPTRAIN_BUILD_DIR:-$ROOT/build}
fptrain=$build_dir/apps/fptrain
[ -d "$fptrain" ] && fptrain=$fptrain/fptrain
if [ ! -f "$fptrain" ] || [ ! -x "$fptrain" ]; then
  die "no fptrain binary at $fptrain: build it first (scripts/setup.sh, or FPTRAIN_TARGETS=fptrain scripts/setup.sh), or set FPTRAIN_BUILD_DIR"
fi

torchrun=""
if [ -n "${FPTRAIN_TORCHRUN:-}" ]; then
  [ -x "$FPTRAIN_TORCHRUN" ] || die "FPTRAIN_TORCHRUN=$FPTRAIN_TORCHRUN is not an executable file"
  torchrun=$FPTRAIN_TORCHRUN
else
  for candidate in "$ROOT/.venv/bin/torchrun" /opt/torch/.venv/bin/torchrun; do
    if [ -x "$candidate" ]; then torchrun=$candidate; break; fi
  done
  [ -n "$torchrun" ] || torchrun=$(command -v torchrun || true)
  [ -n "$torchrun" ] ||
    die "no torchrun: looked for .venv/bin/torchrun, /opt/torch/.venv/bin/torchrun and PATH; scripts/setup.sh makes .venv with torch, or set FPTRAIN_TORCHRUN"
fi

# --- environment -----------------------------------------------------------------
# NVLink multicast (NVLS) stays off: on shared hosts it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${OMP_NUM_THREADS:-}" ]; then
  cores=$(nproc 2>/dev/null || echo 1)
  threads=$((cores / gpus))
  [ "$threads" -ge 1 ] || threads=1
  export OMP_NUM_THREADS=$threads
fi

# --- the command -----------------------------------------------------------------
# Forwarding mode needs torchrun's --signals-to-handle (to leave SIGINT/SIGTERM
# ignored in torchrun), `env --default-signal` (so the workers start with the
# default dispositions again) and pkill (to signal torchrun's children).
forward=0
if env --default-signal=INT,TERM true 2>/dev/null && command -v pkill >/dev/null 2>&1 &&
   "$torchrun" --help 2>/dev/null | grep -q -- '--signals-to-handle'; then
  forward=1
fi

cmd=("$torchrun")
[ "$forward" -eq 1 ] && cmd+=(--signals-to-handle 'SIGHUP,SIGQUIT')
if [ -n "$master" ]; then
  cmd+=(--nnodes "$nnodes")
  [ -n "$node_rank" ] && cmd+=(--node_rank "$node_rank")
  cmd+=(--rdzv-backend c10d --rdzv-endpoint "$master_host:$master_port" --rdzv-id "$job_id")
else
  cmd+=(--standalone --nnodes 1)
fi
cmd+=(--nproc_per_node "$gpus" --max-restarts "$max_restarts" --no-python)
[ "$forward" -eq 1 ] && cmd+=(env '--default-signal=INT,TERM')
cmd+=("$fptrain" train "$config" "$@")

if [ "${FPTRAIN_LAUNCH_DRY_RUN:-0}" != 0 ]; then
  printf 'NCCL_NVLS_ENABLE=%s TORCH_SYMM_MEM_DISABLE_MULTICAST=%s NVSHMEM_DISABLE_NVLS=%s OMP_NUM_THREADS=%s \\\n ' \
    "$NCCL_NVLS_ENABLE" "$TORCH_SYMM_MEM_DISABLE_MULTICAST" "$NVSHMEM_DISABLE_NVLS" "$OMP_NUM_THREADS"
  for word in "${cmd[@]}"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf ' %s' "$word"; else printf ' %q' "$word"; fi
  done
  printf '\n'
  exit 0
fi

log "$((gpus * nnodes)) process(es): $gpus on this node x $nnodes node(s); $fptrain train $config"
if [ "$forward" -eq 0 ]; then
  log "torchrun forwards signals itself here (its workers get 30 s to save before SIGKILL)"
  exec "${cmd[@]}"
fi

# torchrun runs in the background with SIGINT/SIGTERM ignored; this shell forwards them.
(
  trap '' INT TERM
  exec "${cmd[@]}"
) &
torchrun_pid=$!
# shellcheck disable=SC2317  # called by the traps below
forward_signal() {
  # The workers are torchrun's children. None yet (still starting): stop torchrun with SIGHUP.
  if ! pkill "-$1" -P "$torchrun_pid" 2>/dev/null; then
    log "no fptrain process yet; stopping torchrun"
    kill -HUP "$torchrun_pid" 2>/dev/null || true
  fi
}
trap 'forward_signal INT' INT
trap 'forward_signal TERM' TERM
status=0
while :; do
  # wait returns early (status > 128) when a trapped signal arrives; wait again.
  if wait "$torchrun_pid"; then status=0; else status=$?; fi
  kill -0 "$torchrun_pid" 2>/dev/null || break
done
exit "$status"
