#!/usr/bin/env bash
# Installs the Debian packages Chorus needs to build, test and run. Idempotent:
# packages already present are not touched, and nothing runs when all are there.
set -euo pipefail

# EXTRA_PACKAGES: more for one script (scripts/fuzz.sh: clang).
packages=(
  ${EXTRA_PACKAGES:-}
  build-essential cmake ninja-build pkg-config
  libfabric-dev libfabric-bin
  libcapnp-dev capnproto
  libasio-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev
  libopenblas-dev libopenblas0-openmp libdnnl-dev ocl-icd-opencl-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libsodium-dev libssl-dev libexpected-dev zlib1g-dev
  dataset-fashion-mnist
  gnuplot-nox iproute2 chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
