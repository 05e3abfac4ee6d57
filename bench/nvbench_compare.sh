#!/bin/sh
# Runs NVBench (cuda-bench 0.3.0, bench/nvbench_ref.py) and `cudalua bench`
# on the same kernels and GPU, then writes the comparison table (markdown).
#
#   bench/nvbench_compare.sh [OUTDIR]   (default bench/recorded/nvbench-<date>)
#
# Needs python3 with cuda-bench and cuda.core, and cudalua on PATH (or
# CUDALUA=path/to/cudalua). Both run with NVBench's defaults (stdrel,
# 0.5% noise, 0.5 s min-time, 75% throttle threshold). CUDALUA_BENCH_OPTS adds
# options to cudalua's run (e.g. "--l2-flush 1": NVBench's flush size).
# COMPARE_ARGS replaces the states both run (default: every copy and sleep
# state), e.g. "-b copy -a Bytes[pow2]=[16]" for the 2^16-byte copies alone.
# The options are NVBench's on both sides: an -a after a -b applies to that
# benchmark alone, so --devices comes before the -b's.
# SPDX-License-Identifier: MIT
set -euf   # -f: the axis overrides' brackets are no file patterns
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
out=${1:-$here/recorded/nvbench-$(date -u +%Y%m%d-%H%M)}
cudalua=${CUDALUA:-cudalua}
mkdir -p "$out"
states=${COMPARE_ARGS:--b copy -a Bytes[pow2]=[16:28:4] -b sleep}
python3 "$here/nvbench_ref.py" --devices 0 ${COMPARE_ARGS:-} --json "$out/nvbench.json" --md "$out/nvbench.md" \
  >"$out/nvbench.log" 2>&1
# CUDALUA_BENCH_OPTS before the -b's: they apply to every benchmark (NVBench's scoping)
"$cudalua" "$top/scripts/bench.lua" "$top/scripts/bench_example.lua" --devices 0 ${CUDALUA_BENCH_OPTS:-} $states \
  --json "$out/cudalua.json" --md "$out/cudalua.md" \
  >"$out/cudalua.out" 2>"$out/cudalua.log"
"$cudalua" "$here/nvbench_table.lua" "$out/nvbench.json" "$out/cudalua.json" >"$out/table.md"
"$cudalua" compare "$out/nvbench.json" "$out/cudalua.json" >"$out/compare.md"
cat "$out/table.md"
echo "(written to $out)"
