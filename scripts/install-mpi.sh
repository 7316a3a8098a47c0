#!/usr/bin/env bash
# Installs OpenMPI (mpicc, mpirun and the headers gompi's cgo flags expect)
# from Debian's packages. Idempotent: does nothing when they are present.
# Needs root (CI runs as root on Debian bookworm); elsewhere it says what
# to install and fails.
set -euo pipefail

header=/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
have() {
  command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && [ -f "$header" ]
}

if have; then
  echo "install-mpi: OpenMPI present ($(mpirun --version 2>/dev/null | head -n1))"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "install-mpi: OpenMPI missing and not root: run as root or" >&2
  echo "  sudo apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-mpi: OpenMPI missing and no apt-get: install OpenMPI with its headers under /usr/lib/x86_64-linux-gnu/openmpi" >&2
  exit 1
fi

echo "install-mpi: installing openmpi-bin libopenmpi-dev"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
if ! have; then
  echo "install-mpi: installed, but mpicc/mpirun or $header still missing" >&2
  exit 1
fi
echo "install-mpi: installed $(mpirun --version 2>/dev/null | head -n1)"
