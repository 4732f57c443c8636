#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) into build-fuzz/
# and runs each for a bounded time on its committed corpus (fuzz/README.md).
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   scripts/fuzz.sh --quick              # every target, 20 s each (CI: about 2 minutes of fuzzing)
#   scripts/fuzz.sh --time 600 jsonl_line tokenizer_json
#
# New inputs that raise coverage go to build-fuzz/fuzz-work/<target>/ (not to the
# committed corpus); a crash leaves its input in build-fuzz/fuzz-crashes/<target>/
# and makes the script exit 1. Environment: FPTRAIN_FUZZ_BUILD_DIR (default
# build-fuzz), FPTRAIN_FUZZ_JOBS (default nproc), FPTRAIN_FUZZ_RSS_MB (default 2048).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${FPTRAIN_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${FPTRAIN_FUZZ_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}  # the cores, whatever OMP says
RSS_MB=${FPTRAIN_FUZZ_RSS_MB:-2048}
ALL_TARGETS=(jsonl_line safetensors_header config_json tokenizer_json sentencepiece_model yaml_config jinja_template)
log() { printf '[fuzz] %s\n' "$*" >&2; }

seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) seconds=20 ;;
    --time) seconds=$2; shift ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
[ ${#targets[@]} -eq 0 ] && targets=("${ALL_TARGETS[@]}")

# clang 14 and its libFuzzer runtime (g++ has no libFuzzer). Debian packages
# them as clang-14 and libclang-rt-14-dev.
CLANG=${FPTRAIN_FUZZ_CXX:-clang++-14}
CC_CLANG=${FPTRAIN_FUZZ_CC:-clang-14}
has_libfuzzer() {
  command -v "$CLANG" >/dev/null 2>&1 &&
    echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
      "$CLANG" -x c++ -fsanitize=fuzzer,address -o /dev/null - >/dev/null 2>&1
}
if ! has_libfuzzer; then
  log "installing clang-14 and libclang-rt-14-dev (libFuzzer)"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null
  has_libfuzzer || { log "clang++-14 cannot link libFuzzer programs"; exit 1; }
fi

PYTHON=$ROOT/.venv/bin/python
[ -x "$PYTHON" ] || "$ROOT/scripts/setup.sh"   # the torch wheel provides LibTorch's CMake files
export CCACHE_BASEDIR=$ROOT CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  log "configuring $BUILD_DIR with $CLANG"
  TORCH_PREFIX=$("$PYTHON" -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
  CC=$CC_CLANG CXX=$CLANG cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DFPTRAIN_PYTHON="$PYTHON" \
    -DFPTRAIN_CUDA=OFF -DFPTRAIN_FUZZ=ON >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log"; exit 1; }
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
log "building ${build_targets[*]} ($JOBS jobs)"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${build_targets[@]}"

# Leaks are not checked: LibTorch (safetensors_header) and libsentencepiece keep
# global state for the life of the process.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The harnesses' scratch folders (libFuzzer may exit without running atexit handlers).
export TMPDIR=$BUILD_DIR/fuzz-tmp
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
failed=()
for t in "${targets[@]}"; do
  work=$BUILD_DIR/fuzz-work/$t crashes=$BUILD_DIR/fuzz-crashes/$t
  mkdir -p "$work" "$crashes"
  log "$t: ${seconds} s on fuzz/corpus/$t"
  if ! "$BUILD_DIR/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB" \
      -timeout=25 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" \
      "$work" "$ROOT/fuzz/corpus/$t" >"$BUILD_DIR/fuzz-$t.log" 2>&1; then
    tail -n 60 "$BUILD_DIR/fuzz-$t.log" >&2
    log "$t: FAILED; the input is in $crashes/ (fix it, then add it as fuzz/corpus/$t/regress-<what>)"
    failed+=("$t")
  else
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$BUILD_DIR/fuzz-$t.log" |
      sed "s/^/[fuzz] $t: /" >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  log "crashes in: ${failed[*]}"
  exit 1
fi
log "no crash in ${targets[*]}"
