#!/usr/bin/env bash
# Run a command as if on the 2-core AVX2-only machine kind (AMD EPYC without AVX-512, no native
# bf16), on a faster x86_64 machine: torch's AVX2 kernels, oneDNN capped at AVX2, ctk told that
# bf16 is not native, and the CPU time capped so that the quickstart's fp32 step runs at that
# machine's measured speed (586 images/s). The kernels are the AVX2 ones; the speed is an
# approximation (a CPU quota, not a slower core): say "emulated" beside every figure it gives.
#
#   scripts/like-avx2.sh [--cpus N] -- COMMAND [ARGS...]
#
# --cpus is the CPU time allowed per wall second (default 1.5, calibrated on a 2-core AMD EPYC
# with AVX512-BF16, where the AVX2-kernel fp32 step ran at ~1,000 images/s uncapped; a quota slows two threads that wait on each other more than in proportion:
# bench/vision_step.py --set precision=fp32 under this script should print ~586 images/s; set
# --cpus so that it does on your machine). Needs root (a cgroup); without it, only the kernels
# and the bf16 answer are emulated, and the script says so.
set -euo pipefail
cpus=1.5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpus) cpus="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--cpus N] -- COMMAND [ARGS...]" >&2; exit 2; }
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 CTK_CPU_BF16=none

period=20000
quota=$(awk -v c="$cpus" -v p="$period" 'BEGIN { printf "%d", c * p }')
name="ctk-like-avx2-$$"
if [[ -w /sys/fs/cgroup/cgroup.subtree_control || -f /sys/fs/cgroup/cgroup.controllers ]] \
    && mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
  echo "$quota $period" > "/sys/fs/cgroup/$name/cpu.max"         # cgroup v2
  echo $$ > "/sys/fs/cgroup/$name/cgroup.procs"
  root=/sys/fs/cgroup
elif mkdir "/sys/fs/cgroup/cpu/$name" 2>/dev/null; then
  echo "$period" > "/sys/fs/cgroup/cpu/$name/cpu.cfs_period_us"  # cgroup v1
  echo "$quota" > "/sys/fs/cgroup/cpu/$name/cpu.cfs_quota_us"
  echo $$ > "/sys/fs/cgroup/cpu/$name/cgroup.procs"
  root=/sys/fs/cgroup/cpu
else
  echo "like-avx2: cannot make a cgroup (not root?): AVX2 kernels only, at this machine's speed" >&2
  exec "$@"
fi
echo "like-avx2: AVX2 kernels, bf16 not native, CPU capped at $cpus cores (emulated)" >&2
rc=0
"$@" || rc=$?
echo $$ > "$root/cgroup.procs" && rmdir "$root/$name" 2>/dev/null || true
exit $rc
