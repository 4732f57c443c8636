#!/usr/bin/env bash
# Prepares everything fptrain needs and builds it. Safe to run again: each step
# is skipped when already done.
#
#   scripts/setup.sh                # apt packages, .venv, configure, build
#   FPTRAIN_BUILD_DIR=build-x scripts/setup.sh
#
# On the GPU machine (torch at /opt/torch/.venv, no package registry) the apt
# and pip steps are skipped and that torch is used.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${FPTRAIN_BUILD_DIR:-$ROOT/build}
# The cores, not OMP_NUM_THREADS (GNU nproc honours it, and test.sh sets it to 1 per test).
JOBS=${FPTRAIN_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
log() { printf '[setup] %s\n' "$*" >&2; }

APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config libgtest-dev nlohmann-json3-dev
              libcli11-dev libspdlog-dev libyaml-cpp-dev libsentencepiece-dev libpcre2-dev python3-venv)
GPU_TORCH_VENV=/opt/torch/.venv

install_apt_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

make_venv() {
  local venv=$ROOT/.venv stamp=$ROOT/.venv/.fptrain-requirements
  if [ -f "$stamp" ] && cmp -s "$stamp" "$ROOT/scripts/requirements.txt"; then return; fi
  log "creating the Python environment in .venv (torch, transformers, ...)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$ROOT/scripts/requirements.txt"
  cp "$ROOT/scripts/requirements.txt" "$stamp"
}

if [ -x "$GPU_TORCH_VENV/bin/python" ] && command -v nvidia-smi >/dev/null 2>&1; then
  PYTHON=$GPU_TORCH_VENV/bin/python
  EXTRA_INCLUDE=$ROOT/.gpu-carry/include   # pcre2.h travels here (scripts/gpu-check.sh)
  GPU_TESTS=ON
else
  install_apt_packages
  make_venv
  PYTHON=$ROOT/.venv/bin/python
  EXTRA_INCLUDE=""
  GPU_TESTS=OFF
fi

export CCACHE_BASEDIR=$ROOT CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  log "configuring $BUILD_DIR"
  TORCH_PREFIX=$("$PYTHON" -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=${FPTRAIN_BUILD_TYPE:-Release} \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DFPTRAIN_PYTHON="$PYTHON" \
    -DFPTRAIN_EXTRA_INCLUDE="$EXTRA_INCLUDE" \
    -DFPTRAIN_GPU_TESTS=$GPU_TESTS >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log"; exit 1; }
fi
log "building ($JOBS jobs)"
cmake --build "$BUILD_DIR" -j "$JOBS" ${FPTRAIN_TARGETS:+--target $FPTRAIN_TARGETS}
