#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages ufp4 builds against; installs only what is missing, so it is
# cheap to run every time. Uses sudo when not root.
set -euo pipefail
packages=(build-essential cmake ninja-build git pkg-config python3
          libtorch-dev libhdf5-dev libboost-program-options-dev catch2 libbenchmark-dev
          libtomlplusplus-dev libsentencepiece-dev libeigen3-dev libceres-dev gnuplot-nox libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
