#!/usr/bin/env bash
# Installs what coldstart needs to build on Debian 12 / Ubuntu 24.04 (idempotent: installs only
# what is missing) and configures + builds it into ./build.
#
#   scripts/setup.sh            configure and build everything (tests and benchmarks too)
#
# libxml2-utils gives xmllint, which the JUnit test validates the XML with against its XSD.
# The CUDA toolkit (NVRTC and headers) is taken from /usr/local/cuda (NVIDIA's packages; CUDA
# 12.8+ compiles for sm_100) when there is one, else the distribution's nvidia-cuda-toolkit is
# installed (Debian 12: 11.8 from non-free + contrib, Ubuntu 24.04: 12.0 from multiverse; neither targets
# sm_100, which coldstart then refuses with exit 2); a GPU and driver are optional (without them
# coldstart runs in compile-only mode). libtorch comes from an importable PyTorch install when there is one
# (the GPU build), else from Debian's libtorch-dev (CPU only: compile-only mode).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
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
# Gloo's headers: Debian's libtorch ships ProcessGroupGloo.hpp, which includes them (engine.ranks:
# all uses c10d's Gloo backend where they are installed; harness/dist/rank_group.h).
if ! torch_from_python && ! have_pkg libgloo-dev; then need+=(libgloo-dev); fi

if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# CUDA toolkit: NVRTC and headers. One already installed is preferred (CUDAToolkit_ROOT, then
# /usr/local/cuda, then the newest /usr/local/cuda-X.Y); else the distribution's own toolkit
# (/usr/lib/cuda, headers in /usr/include), installed from its non-free + contrib (Debian) /
# multiverse (Ubuntu) components when missing.
find_toolkit() {
  local d
  for d in ${CUDAToolkit_ROOT:-} /usr/local/cuda $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV) \
           /usr/lib/cuda /usr; do
    # A bare /usr counts only with the distribution's nvcc next to it (CMake finds it by nvcc).
    if [ -e "$d/include/nvrtc.h" ] && { [ "$d" != /usr ] || [ -x /usr/bin/nvcc ]; }; then
      echo "$d"; return 0
    fi
  done
  return 1
}

cat_existing() {  # cat the given files that exist (globs that matched nothing are skipped)
  local f
  for f in "$@"; do if [ -f "$f" ]; then cat "$f"; fi; done
}

# Adds the apt components that carry nvidia-cuda-toolkit when no configured source has them:
# Debian's `non-free` plus `contrib` (the toolkit's libcuda1 dependency needs nvidia-support from
# contrib), Ubuntu's `multiverse`. Each new source reuses the mirror and suite of the
# distribution's existing main source; nothing else is changed.
enable_cuda_components() {
  local id codename components mirror component one_line deb822
  id=$(. /etc/os-release && echo "${ID:-}")
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  case "$id" in
    debian) components="non-free contrib" ;;
    ubuntu) components="multiverse" ;;
    *) echo "setup: no CUDA toolkit found, and this is neither Debian nor Ubuntu ($id): install" \
            "one (NVIDIA's packages, /usr/local/cuda) or set CUDAToolkit_ROOT" >&2; return 1 ;;
  esac
  # Every configured source, one-line (.list) and deb822 (.sources) formats alike.
  one_line=$(cat_existing /etc/apt/sources.list /etc/apt/sources.list.d/*.list | grep -v '^[[:space:]]*#' || true)
  deb822=$(cat_existing /etc/apt/sources.list.d/*.sources | grep -v '^[[:space:]]*#' || true)
  mirror=$(awk -v c="$codename" '$1 == "deb" && $3 == c { print $2; exit }' <<<"$one_line")
  if [ -z "$mirror" ]; then mirror=$(awk '/^URIs:/ { print $2; exit }' <<<"$deb822"); fi
  if [ -z "$mirror" ]; then
    case "$id" in debian) mirror=http://deb.debian.org/debian ;; *) mirror=http://archive.ubuntu.com/ubuntu ;; esac
  fi
  for component in $components; do
    if grep -Eq "^deb[[:space:]].*[[:space:]]$component([[:space:]]|$)" <<<"$one_line" ||
       grep -Eq "^Components:.*[[:space:]]$component([[:space:]]|$)" <<<"$deb822"; then
      continue
    fi
    echo "setup: enabling the '$component' apt component ($mirror $codename) for" \
         "nvidia-cuda-toolkit: /etc/apt/sources.list.d/coldstart-$component.list" >&2
    echo "deb $mirror $codename $component" |
      $SUDO tee "/etc/apt/sources.list.d/coldstart-$component.list" >/dev/null
  done
}

if ! CUDAToolkit_ROOT=$(find_toolkit); then
  echo "setup: no CUDA toolkit with NVRTC found (looked in \$CUDAToolkit_ROOT, /usr/local/cuda*," \
       "/usr/lib/cuda, /usr); installing the distribution's nvidia-cuda-toolkit" >&2
  enable_cuda_components
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit
  if ! CUDAToolkit_ROOT=$(find_toolkit); then
    echo "setup: nvidia-cuda-toolkit is installed but no nvrtc.h + nvcc was found; point" \
         "CUDAToolkit_ROOT at a CUDA toolkit" >&2
    exit 1
  fi
fi
export CUDAToolkit_ROOT
echo "setup: CUDA toolkit in $CUDAToolkit_ROOT" >&2

BUILD_DIR=${COLDSTART_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="$CUDAToolkit_ROOT" ${COLDSTART_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
