#!/usr/bin/env bash
# On an offline GPU node: unpack .gpu-deps/debs into a local prefix (no root, no apt), then
# configure against the installed PyTorch's LibTorch with CUDA kernels for TORCH_CUDA_ARCH_LIST
# (default 9.0a, Hopper) and build. Usage: [UFP4_BUILD_TARGETS="ufp4 ..."] tools/gpu-build.sh [build-dir]
# UFP4_BUILD_TARGETS: only these targets (a campaign call needs only ufp4: a fresh node then skips the
# test binary's compile); all of them when unset.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix=$PWD/.gpu-deps/prefix
if ! ls .gpu-deps/debs/*.deb >/dev/null 2>&1; then
  echo "gpu-build: no .deb files in .gpu-deps/debs: run 'make gpu-deps' on a machine with apt and copy the folder here" >&2
  exit 2
fi
mkdir -p "$prefix"
for f in .gpu-deps/debs/*.deb; do dpkg -x "$f" "$prefix"; done
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
boost_dir=$(dirname "$(find "$prefix" -name BoostConfig.cmake | head -n 1)")
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DBoost_DIR="$boost_dir" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}" -DUFP4_CUDA=ON
cmake --build "$build" -j "$(nproc)" ${UFP4_BUILD_TARGETS:+--target $UFP4_BUILD_TARGETS}
