#!/bin/sh
# What the linux-arm64 checks need on Debian / Ubuntu (docs/PORTS.md §4): qemu-aarch64 (package
# qemu-user) runs aarch64 Linux programs on this machine, and libc6-arm64-cross puts the aarch64
# C library (its loader, libc, libm, libpthread) in /usr/aarch64-linux-gnu, where the checks point
# qemu (QEMU_LD_PREFIX). Without them test/arm64.test.ts skips, by name.
#   sudo sh tools/setup/arm64-emulation.sh
set -eu
if [ "$(id -u)" != 0 ]; then
  echo "needs root to install packages: sudo sh $0" >&2
  exit 1
fi
apt-get update
apt-get install -y qemu-user libc6-arm64-cross
qemu-aarch64 --version | head -n 1
ls /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1
