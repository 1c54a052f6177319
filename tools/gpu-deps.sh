#!/usr/bin/env bash
# On a machine with apt and network: download the .deb files an offline GPU node lacks into
# .gpu-deps/debs (git-ignored). Carry that folder to the node and run `make gpu` there.
# Our H200 image (Ubuntu 24.04, PyTorch wheel) has everything else ufp4 needs.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev libtomlplusplus-dev libgloo-dev)
mkdir -p .gpu-deps/debs
cd .gpu-deps/debs
if [ "$(ls ./*.deb 2>/dev/null | wc -l)" -ge "${#packages[@]}" ]; then
  echo "gpu-deps: already downloaded: $(ls)"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q >/dev/null
apt-get download "${packages[@]}"
echo "gpu-deps: $(ls | wc -l) packages in .gpu-deps/debs ($(du -sh . | cut -f1))"
