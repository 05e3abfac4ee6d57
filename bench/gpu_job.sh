#!/bin/sh
# bench/gpu_job.sh STAGE: a release's checks and measurements on a GPU, run in
# a configured and built tree (cudalua on PATH is not needed: src/cudalua is
# used). Logs go to $OUT (default ./gpu-job-out); a summary to stdout.
#
#   check   side by side: make check, and compute-sanitizer memcheck over the
#           VMM, IPC, graph-memory, texture, registration and pageable tests;
#           then the real-GPU fuzzer (FUZZ_SEEDS, default 1-4, 1,500 calls
#           each, traced, FUZZ_TIMEOUT seconds each, default 40; a crash is
#           reduced to the calls it needs by bench/fuzz_reduce.lua)
#   bench   make bench's four scripts (launch_cost and memory_resources
#           first); between them Graph:launch batch by batch
#           (bench/graph_launch_probe.lua), cudalua bench's copy at 2^16 bytes
#           (batch against cold), cuda-bench's BenchmarkResult reading its
#           JSON, register_host
#   all     both, the fuzzer beside make check and memcheck
#   release the check stage (fuzzer beside), then the release's figures
#           alone on the GPU: bench/nvbench_compare.sh (cuda-bench against
#           cudalua bench, into $OUT/nvbench), launch_cost and
#           memory_resources against raw C, register_host
#   gate    the release stage without cuda-bench: what a change to the core
#           needs before it lands (checks, fuzzer beside, then the figures)
#   fuzz    the real-GPU fuzzer alone (FUZZ_SEEDS picks the seeds)
#   nvbench04  0.4's figures alone on the GPU: stdrel and ci beside NVBench, launch_cost,
#           NVBench's ten examples beside their ports (below)
#   check04 make check and memcheck, then memcheck of cudalua bench on the example
#
# CUDA_BENCH_WHEEL names the cuda-bench wheel for the Python readers (it is
# unpacked into /tmp/cb, where t/bench_nvbench_py.t looks). SRC is the source
# tree holding bench/ (default: this script's parent folder).
# SPDX-License-Identifier: MIT
set -u
stage=${1:?usage: gpu_job.sh check|bench|all|release|gate|fuzz}
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

# make check and memcheck side by side (neither times anything), then the fuzzer
stage_check() {
  run_checks_in_parallel
  say "the real-GPU fuzzer"
  run_fuzzer | tee "$out/fuzz.txt"
  say "check stage done"
}

run_checks_in_parallel() {
  unpack_cuda_bench
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    > "$out/gpu.csv" 2>&1
  cat "$out/gpu.csv"
  say "make check and compute-sanitizer memcheck, side by side"
  run_make_check > "$out/check.txt" 2>&1 &
  run_memcheck > "$out/memcheck.txt" 2>&1 &
  [ -z "${FUZZ_BESIDE:-}" ] || run_fuzzer > "$out/fuzz.txt" 2>&1 &
  wait
  cat "$out/check.txt" "$out/memcheck.txt" "$out/fuzz.txt" 2>/dev/null
}

run_make_check() {
  make check -j"$jobs" > check.out 2>&1; echo "make check: rc=$?"
  summary check.out
  grep -E '^(FAIL|ERROR|XPASS)' check.out
  cat check.out $(find . -name test-suite.log) 2>/dev/null | gzip > "$out/check.log.gz"
}

# Each seed on its own (FUZZ_SEEDS, default 1-4), traced (FUZZ_TRACE: a run
# that does not end names its last action) and timed out, with
# bench/segv_backtrace.c preloaded where cc builds it (a crash then says where
# it died, a run that timed out where it hung). The first seed that dies of a
# signal is cut down to the calls the crash needs (bench/fuzz_reduce.lua, at
# most FUZZ_REDUCE_TIMEOUT seconds, default 300), into
# $out/fuzz-reduce-SEED.txt.
run_fuzzer() {
  preload=
  cc -shared -fPIC -O1 -pthread -o /tmp/segv_backtrace.so "$src/bench/segv_backtrace.c" 2>/dev/null &&
    preload=/tmp/segv_backtrace.so
  crashed=
  for seed in ${FUZZ_SEEDS:-1 2 3 4}; do
    t0=$(date +%s)
    LUA_PATH="$PWD/t/?.lua;;" CUDALUA_SRCDIR=$PWD CUDALUA_BUILDDIR=$PWD CUDALUA_CACHE=off FUZZ_REAL=1 \
      FUZZ_SEED=$seed FUZZ_CALLS=1500 FUZZ_TRACE=1 LD_PRELOAD=$preload timeout "${FUZZ_TIMEOUT:-40}" \
      "$cudalua" t/fuzz.t > "$out/fuzz-$seed.tap" 2> fuzz-$seed.trace
    rc=$?
    last=$(grep -E '^[0-9]+ [0-9]+$' fuzz-$seed.trace | tail -1)
    echo "fuzzer seed $seed: rc=$rc, $(( $(date +%s) - t0 )) s, $(grep -c '^ok' "$out/fuzz-$seed.tap") ok," \
      "$(grep -c '^not ok' "$out/fuzz-$seed.tap") not ok; last action: $last"
    tail -c 20000 fuzz-$seed.trace > "$out/fuzz-$seed.trace"
    [ $rc -ne 124 ] || show_backtrace fuzz-$seed.trace     # where it hung
    if [ $rc -gt 128 ] && [ -z "$crashed" ]; then crashed=$seed; crash_call=${last%% *}; fi
  done
  [ -n "$crashed" ] || return 0
  show_backtrace fuzz-$crashed.trace
  echo "reducing seed $crashed's crash at call $crash_call"
  timeout "${FUZZ_REDUCE_TIMEOUT:-300}" "$cudalua" "$src/bench/fuzz_reduce.lua" "$crashed" "$crash_call" 8 -- \
    env LUA_PATH="$PWD/t/?.lua;;" CUDALUA_SRCDIR="$PWD" CUDALUA_BUILDDIR="$PWD" FUZZ_REAL=1 \
    timeout 60 "$cudalua" t/fuzz.t > "$out/fuzz-reduce-$crashed.txt" 2>&1
  echo "fuzz_reduce: rc=$?"; tail -40 "$out/fuzz-reduce-$crashed.txt"
}

# The backtrace segv_backtrace.so wrote into TRACE, and cudalua's own frames
# as functions and lines (libcuda has no symbols to give); a frame's address
# is where its call returns to, so look one before.
show_backtrace() {
  sed -n '/^segv_backtrace:/,$p' "$1" | head -30
  sed -n '/^segv_backtrace:/,$s/^\([^(]*cudalua[^(]*\)(+\(0x[0-9a-f]*\)).*/\1 \2/p' "$1" |
    while read -r file offset; do
      echo "  $offset: $(addr2line -f -e "$file" "$(printf '0x%x' $((offset - 1)))" | tr '\n' ' ')"
    done
}

# --report-api-errors no: memory errors only. With API errors reported, memcheck also counts
# cudalua's parameter probe (cuFuncGetParamInfo past the last parameter answers
# CUDA_ERROR_INVALID_VALUE: how a kernel's parameter count is learned), 1-3 a test on the H100.
run_memcheck() {
  tests="t/vmm.t t/ipc_gpu.t t/graph_memory_gpu.t t/array.t t/cubemap_gpu.t t/tensormap_gpu.t \
t/host_register_gpu.t t/pageable_gpu.t t/graph_def_gpu.t"
  # its own copy of the tree's test logs: make check writes t/*.log beside
  mkdir -p memcheck && for t in $tests; do
    log=memcheck/$(basename "${t%.t}").log
    LUA_PATH="$PWD/t/?.lua;;" CUDALUA_SRCDIR=$PWD CUDALUA_BUILDDIR=$PWD CUDALUA_CACHE=off \
      compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20 \
      "$cudalua" "$t" > "$log" 2>&1
    echo "memcheck $t: rc=$?, $(grep -c '^ok' "$log") ok, $(grep -c '^not ok' "$log") not ok;" \
      "$(grep -h 'ERROR SUMMARY' "$log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  done
  cat memcheck/*.log | gzip > "$out/memcheck.log.gz"
}

# make bench's four scripts, the figures the release names first, the quick probes between.
stage_bench() {
  unpack_cuda_bench
  make bench/launch_ref bench/copy_ref bench/overlap_ref bench/bandwidth_ref > /dev/null
  say "launch_cost --reference"
  "$cudalua" launch_cost --reference bench/launch_ref > "$out/launch_cost.log" 2>&1; echo "rc=$?"
  grep -iE 'record|graph|launch' "$out/launch_cost.log"
  say "memory_resources --bandwidth --reference"
  "$cudalua" memory_resources --bandwidth --reference bench/copy_ref > "$out/memory_resources.log" 2>&1; echo "rc=$?"
  grep -iE 'pageable|ratio|within|cudalua' "$out/memory_resources.log" | head -30

  say "Graph:launch batch by batch"
  "$cudalua" "$src/bench/graph_launch_probe.lua" 5 200 2>&1 | tee "$out/graph_probe.log"

  say "cudalua bench: copy at 2^16 bytes"
  "$cudalua" bench_example -b copy -a 'Bytes[pow2]=[16]' --devices 0 \
    --json "$out/copy16.json" --md "$out/copy16.md" > /dev/null 2>"$out/copy16.err"; echo "rc=$?"
  grep -E '^\|' "$out/copy16.md"

  say "cuda-bench's BenchmarkResult reads cudalua's JSON"
  PYTHONPATH=/tmp/cb python3 - "$out/copy16.json" "$src/bench/recorded/nvbench-h200-2026-12-04/cudalua.json" <<'PY'
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

  say "register_host"
  "$cudalua" "$src/bench/register_host.lua" 2>&1 | tee "$out/register_host.log"

  say "bench stage: first part done"
}

# NVBench's Python API and cudalua bench on the same kernels, one after the other
stage_nvbench() {
  unpack_cuda_bench
  say "bench/nvbench_compare.sh"
  CUDALUA=$cudalua PYTHONPATH=/tmp/cb${PYTHONPATH:+:$PYTHONPATH} sh "$src/bench/nvbench_compare.sh" "$out/nvbench"
  echo "nvbench_compare: rc=$?"
}

stage_figures() {
  make bench/launch_ref bench/copy_ref > /dev/null
  say "launch_cost --reference"
  "$cudalua" launch_cost --reference bench/launch_ref > "$out/launch_cost.log" 2>&1; echo "rc=$?"
  cat "$out/launch_cost.log"
  say "memory_resources --bandwidth --reference"
  "$cudalua" memory_resources --bandwidth --reference bench/copy_ref > "$out/memory_resources.log" 2>&1; echo "rc=$?"
  sed -n '/--- Copy bandwidth/,$p' "$out/memory_resources.log"
  say "register_host"
  "$cudalua" "$src/bench/register_host.lua" 2>&1 | tee "$out/register_host.log"
}

stage_bench_rest() {
  say "streaming_overlap --auto --reference, bandwidth --reference"
  "$cudalua" streaming_overlap --auto --reference bench/overlap_ref > "$out/overlap.log" 2>&1; echo "rc=$?"
  tail -15 "$out/overlap.log"
  "$cudalua" bandwidth --reference bench/bandwidth_ref > "$out/bandwidth.log" 2>&1; echo "rc=$?"
  tail -25 "$out/bandwidth.log"
  say "bench stage done"
}

# 0.4's figures alone on the GPU (issue 37): NVBench's stdrel and cudalua bench on the
# same 15 states (bench/nvbench_compare.sh), cudalua bench's ci criterion on them
# (bench/ci_compare.lua against NVBench's run), launch_cost against raw C, and NVBench's
# ten examples beside their ports, twice (bench/nvbench_examples.sh; CARRIED: the
# checkout holding .whl and .nvex; EXAMPLE_OPTS: options for both sides).
stage_nvbench04() {
  unpack_cuda_bench
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    > "$out/gpu.csv" 2>&1; cat "$out/gpu.csv"
  say "bench/nvbench_compare.sh (stdrel on both sides)"
  CUDALUA=$cudalua PYTHONPATH=/tmp/cb${PYTHONPATH:+:$PYTHONPATH} sh "$src/bench/nvbench_compare.sh" "$out/nvbench" \
    > "$out/nvbench_compare.txt" 2>&1
  echo "nvbench_compare: rc=$?"; tail -3 "$out/nvbench_compare.txt"
  say "cudalua bench --stopping-criterion ci, the same states"
  "$cudalua" "$src/scripts/bench.lua" "$src/scripts/bench_example.lua" --devices 0 --stopping-criterion ci \
    -b copy -b sleep --json "$out/nvbench/ci.json" --md "$out/nvbench/ci.md" > "$out/nvbench/ci.out" 2>&1
  echo "ci run: rc=$?"
  "$cudalua" "$src/bench/ci_compare.lua" "$out/nvbench/nvbench.json" "$out/nvbench/ci.json" > "$out/nvbench/ci_compare.md"
  tail -2 "$out/nvbench/ci_compare.md"
  say "launch_cost --reference"
  make bench/launch_ref > /dev/null && "$cudalua" launch_cost --reference bench/launch_ref > "$out/launch_cost.log" 2>&1
  echo "launch_cost: rc=$?"; grep -iE 'floor|record|launch|copy_to' "$out/launch_cost.log" | tail -12
  say "NVBench's ten examples beside their ports"
  WHEELS=${CARRIED:?}/.whl NVEX=$CARRIED/.nvex/examples CUDALUA=$cudalua BENCH_OPTS=${EXAMPLE_OPTS:-} \
    sh "$src/bench/nvbench_examples.sh" "$out/examples" > "$out/examples.txt" 2>&1
  echo "nvbench_examples: rc=$?"; tail -16 "$out/examples.txt"
  say "nvbench04 done"
}

# make check and memcheck of the GPU tests side by side, then memcheck of cudalua
# bench on the bundled example (issue 38).
stage_check04() {
  run_checks_in_parallel
  say "compute-sanitizer memcheck: cudalua bench scripts/bench_example.lua"
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 --print-limit 20 \
    "$cudalua" "$src/scripts/bench.lua" "$src/scripts/bench_example.lua" --devices 0 \
    --stopping-criterion sample-count --target-samples 20 --batch-target-time 0.01 > "$out/memcheck-bench.log" 2>&1
  echo "memcheck bench_example: rc=$?; $(grep -h 'ERROR SUMMARY' "$out/memcheck-bench.log" | sort | uniq -c | tr -s ' ')"
  say "check04 done"
}

case $stage in
  nvbench04) stage_nvbench04 ;;
  check04) stage_check04 ;;
  check) stage_check ;;
  bench) stage_bench; stage_bench_rest ;;
  all) FUZZ_BESIDE=1 run_checks_in_parallel; stage_bench; stage_bench_rest; say "all done" ;;
  release) FUZZ_BESIDE=1 run_checks_in_parallel; stage_nvbench; stage_figures; say "all done" ;;
  gate) FUZZ_BESIDE=1 run_checks_in_parallel; stage_figures; say "all done" ;;
  fuzz) say "the real-GPU fuzzer"; run_fuzzer | tee "$out/fuzz.txt"; say "all done" ;;
  *) echo "gpu_job.sh: no stage '$stage' (check, bench, all, release, gate, fuzz, nvbench04, check04)" >&2; exit 2 ;;
esac
