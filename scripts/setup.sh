#!/usr/bin/env bash
# Installs what coldstart needs to build on Debian 12 / Ubuntu 24.04 (idempotent: installs only
# what is missing) and configures + builds it into ./build.
#
#   scripts/setup.sh            configure and build everything (tests and benchmarks too)
#
# libxml2-utils gives xmllint, which the JUnit test validates the XML with against its XSD.
# The CUDA toolkit (NVRTC and headers; CUDA 12.8+ for sm_100) must be present, e.g. in
# /usr/local/cuda from NVIDIA's packages; a GPU and driver are optional (without them coldstart
# runs in compile-only mode). libtorch comes from an importable PyTorch install when there is one
# (the GPU build), else from Debian's libtorch-dev (CPU only: compile-only mode).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
torch_from_python() {
  python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' >/dev/null 2>&1
}
for p in build-essential cmake ninja-build git pkg-config libcli11-dev libfmt-dev \
         libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libxml2-utils; do
  have_pkg "$p" || need+=("$p")
done
if ! torch_from_python && ! have_pkg libtorch-dev; then need+=(libtorch-dev); fi

if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# CUDA toolkit: NVRTC and headers.
if [ -z "${CUDAToolkit_ROOT:-}" ]; then
  for d in /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-12.8 /usr/lib/cuda; do
    if [ -e "$d/include/nvrtc.h" ]; then export CUDAToolkit_ROOT="$d"; break; fi
  done
fi
if [ -z "${CUDAToolkit_ROOT:-}" ] || [ ! -e "$CUDAToolkit_ROOT/include/nvrtc.h" ]; then
  cat >&2 <<'MSG'
setup: no CUDA toolkit with NVRTC found (looked in /usr/local/cuda*, /usr/lib/cuda).
  coldstart compiles its kernels with NVRTC at run time, also without a GPU. Install the toolkit
  from NVIDIA's apt repository (e.g. `apt-get install cuda-toolkit-13-0`) or point
  CUDAToolkit_ROOT at one, then run this again.
MSG
  exit 1
fi

BUILD_DIR=${COLDSTART_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="$CUDAToolkit_ROOT" ${COLDSTART_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
