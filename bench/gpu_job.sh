#!/bin/sh
# bench/gpu_job.sh STAGE: a release's checks and measurements on a GPU, run in
# a configured and built tree (cudalua on PATH is not needed: src/cudalua is
# used). Logs go to $OUT (default ./gpu-job-out); a summary to stdout.
#
#   check   make check; the real-GPU fuzzer (seeds 1-4, 1,500 calls each);
#           compute-sanitizer memcheck over the VMM, IPC, graph-memory,
#           texture, registration and pageable tests
#   bench   Graph:launch batch by batch (bench/graph_launch_probe.lua);
#           register_host; cudalua bench's copy at 2^16 bytes (batch against
#           cold) twice; cuda-bench's BenchmarkResult reading cudalua's JSON;
#           make bench; launch_cost once more
#   all     both
#
# CUDA_BENCH_WHEEL names the cuda-bench wheel for the Python readers (it is
# unpacked into /tmp/cb, where t/bench_nvbench_py.t looks). SRC is the source
# tree holding bench/ (default: this script's parent folder).
# SPDX-License-Identifier: MIT
set -u
stage=${1:?usage: gpu_job.sh check|bench|all}
here=$(cd "$(dirname "$0")" && pwd)
src=${SRC:-$(dirname "$here")}
out=${OUT:-$PWD/gpu-job-out}
mkdir -p "$out"
cudalua=$PWD/src/cudalua
jobs=$(nproc)

say() { echo "== $(date -u +%H:%M:%S) $*"; }
summary() { grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):' "$1" | tr '\n' ' '; echo; }

unpack_cuda_bench() {
  [ -n "${CUDA_BENCH_WHEEL:-}" ] && [ -f "$CUDA_BENCH_WHEEL" ] || return 0
  rm -rf /tmp/cb && mkdir -p /tmp/cb && python3 -m zipfile -e "$CUDA_BENCH_WHEEL" /tmp/cb
}

stage_check() {
  unpack_cuda_bench
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    > "$out/gpu.csv" 2>&1
  cat "$out/gpu.csv"
  say "make check -j$jobs"
  make check -j"$jobs" > check.out 2>&1; echo "rc=$?"
  summary check.out
  grep -E '^(FAIL|ERROR|XPASS)' check.out
  cat check.out $(find . -name test-suite.log) 2>/dev/null | gzip > "$out/check.log.gz"

  say "real-GPU fuzzer: seeds 1-4, 1500 calls each"
  FUZZ_REAL=1 FUZZ_SEED="1 2 3 4" FUZZ_CALLS=1500 make check TESTS=t/fuzz.t > fuzz.out 2>&1; echo "rc=$?"
  summary fuzz.out
  cp t/fuzz.log "$out/fuzz.log"

  say "compute-sanitizer memcheck"
  tests="t/vmm.t t/ipc_gpu.t t/graph_memory_gpu.t t/array.t t/cubemap_gpu.t t/tensormap_gpu.t \
t/host_register_gpu.t t/pageable_gpu.t t/graph_def_gpu.t"
  make check -j4 TESTS="$tests" \
    T_LOG_COMPILER="compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 $cudalua" \
    > memcheck.out 2>&1; echo "rc=$?"
  summary memcheck.out
  for t in $tests; do
    log=${t%.t}.log
    echo "$t: $(grep -c '^ok' "$log") ok, $(grep -c '^not ok' "$log") not ok;" \
      "$(grep -h 'ERROR SUMMARY' "$log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  done | tee "$out/memcheck.txt"
  cat $(for t in $tests; do echo "${t%.t}.log"; done) 2>&1 | gzip > "$out/memcheck.log.gz"
  say "check stage done"
}

stage_bench() {
  unpack_cuda_bench
  say "Graph:launch batch by batch"
  "$cudalua" "$src/bench/graph_launch_probe.lua" 5 200 2>&1 | tee "$out/graph_probe.log"

  say "register_host"
  "$cudalua" "$src/bench/register_host.lua" 2>&1 | tee "$out/register_host.log"

  say "cudalua bench: copy at 2^16 bytes, twice"
  for i in 1 2; do
    "$cudalua" bench_example -b copy -a 'Bytes[pow2]=[16]' --devices 0 \
      --json "$out/copy16-$i.json" --md "$out/copy16-$i.md" > /dev/null 2>"$out/copy16-$i.err"; echo "rc=$?"
    grep -E '^\|' "$out/copy16-$i.md"
  done

  say "cuda-bench's BenchmarkResult reads cudalua's JSON"
  PYTHONPATH=/tmp/cb python3 - "$out/copy16-1.json" "$src/bench/recorded/nvbench-h200-2026-12-04/cudalua.json" <<'PY'
import sys
from cuda.bench.results import BenchmarkResult
for path in sys.argv[1:]:
    r = BenchmarkResult.from_json(path)
    for name, sub in r.items():
        for st in sub:
            gpu = st.summaries.get("nv/cold/time/gpu/mean")
            n = None if st.samples is None else len(st.samples)
            print(f"{path.split('/')[-1]}: {name} [{st.name()}] device {st.device} "
                  f"gpu mean {gpu.value if gpu else None} bw {st.bw} samples read {n}")
PY

  say "make bench"
  make bench > "$out/bench.log" 2>&1; echo "rc=$?"
  grep -iE 'record|graph|pageable|target|within' "$out/bench.log" | head -60

  say "launch_cost once more"
  "$cudalua" launch_cost --reference bench/launch_ref > "$out/launch_cost2.log" 2>&1; echo "rc=$?"
  grep -iE 'record|graph' "$out/launch_cost2.log"
  say "bench stage done"
}

case $stage in
  check) stage_check ;;
  bench) stage_bench ;;
  all) stage_check; stage_bench; say "all done" ;;
  *) echo "gpu_job.sh: no stage '$stage' (check, bench, all)" >&2; exit 2 ;;
esac
