#!/bin/sh
# NVBench's ten Python examples under cuda-bench 0.3.0 beside their cudalua ports (bench/nvbench_examples/)
# on the same GPU, then bench/nvbench_examples_compare.lua's report.
#
#   bench/nvbench_examples.sh OUTDIR
#
# Run from the repository root. Needs:
#   WHEELS        a folder of the cuda-bench 0.3.0 and cuda-cccl 1.2.1 wheels (default .whl): installed with pip
#                 --no-index into SITE (default /tmp/site), which goes on PYTHONPATH, with a
#                 sitecustomize.py that makes cuda.core.experimental (which the originals
#                 import) cuda.core where cuda.core 1.x has none. The originals also import
#                 cuda.core, numpy, numba and cupy: a missing one fails that original (env.txt
#                 says which are importable);
#   NVEX          the originals, laid out as NVBench's python/examples/ (default .nvex/examples);
#   CUDALUA       the cudalua binary (default build/src/cudalua, else src/cudalua, else cudalua
#                 on PATH).
# For each example, in turn: the original (python3 NAME.py), then the port twice (cudalua
# bench NAME.lua), each with -d 0 --json --md, stdout in NAME.out, stderr in NAME.log and the
# exit status in NAME.rc, under OUTDIR/nvbench, OUTDIR/cudalua-1 and OUTDIR/cudalua-2 (the two
# whole runs whose blocking-kernel timeouts are counted). EXAMPLES="skip stream" runs just
# those; BENCH_OPTS adds NVBench options to every run, both sides (e.g. "--timeout 2" for a
# quick pass); EXAMPLE_TIMEOUT (default 300 s) bounds each run. The report is OUTDIR/report.md; the
# summary table is printed last. To record cuda-bench's output as the reference of
# t/nvbench_examples.t: cp OUTDIR/nvbench/*.json OUTDIR/nvbench/*.md bench/recorded/nvbench-examples/
# SPDX-License-Identifier: MIT
set -u
out=${1:?usage: bench/nvbench_examples.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
nvex=${NVEX:-$top/.nvex/examples}
wheels=${WHEELS:-$top/.whl}
site=${SITE:-/tmp/site}
limit=${EXAMPLE_TIMEOUT:-300}
names=${EXAMPLES:-axes auto_throughput throughput without_blocking_krn exec_tag_sync exec_tag_timer skip stream cpu_only cpu_activity}
if [ -n "${CUDALUA:-}" ]; then cudalua=$CUDALUA
elif [ -x "$top/build/src/cudalua" ]; then cudalua=$top/build/src/cudalua
elif [ -x "$top/src/cudalua" ]; then cudalua=$top/src/cudalua
else cudalua=cudalua; fi
mkdir -p "$out/nvbench" "$out/cudalua-1" "$out/cudalua-2" "$site"
out=$(cd "$out" && pwd)
say() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

# --- cuda-bench ------------------------------------------------------------------------
say "installing the wheels into $site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
  "$wheels"/*.whl > "$out/pip.log" 2>&1 || say "pip failed: see $out/pip.log"
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
cat > "$site/sitecustomize.py" <<'EOF'
# cuda.core.experimental for NVBench's examples where cuda.core (1.x) has none: a module that
# forwards to cuda.core, found only after every other finder has failed.
import importlib.abc
import importlib.util
import sys


class _ExperimentalAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "cuda.core.experimental" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        import cuda.core as core
        module.__dict__.update({k: v for k, v in vars(core).items() if not k.startswith("__")})
        module.__getattr__ = lambda attr: getattr(core, attr)


sys.meta_path.append(_ExperimentalAlias())
EOF

# --- cudalua ----------------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cudalua: $cudalua ($("$cudalua" -v 2>&1 | head -1)), git $(git -C "$top" rev-parse --short HEAD 2>/dev/null)"
  echo "python: $(python3 --version 2>&1); PYTHONPATH=$PYTHONPATH"
  for m in cuda.bench cuda.cccl.headers cuda.core cuda.core.experimental numpy numba cupy; do
    python3 -c "import $m as x; print('$m', getattr(x, '__version__', ''), 'ok')" 2>&1 | tail -1
  done
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1
} > "$out/env.txt"
cat "$out/env.txt" >&2

port_path() { [ "$1" = without_blocking_krn ] && echo "study/$1" || echo "$1"; }

for name in $names; do
  path=$(port_path "$name")
  say "$name: cuda-bench"
  (cd "$out/nvbench" && timeout "$limit" python3 "$nvex/$path.py" -d 0 ${BENCH_OPTS:-} --json "$name.json" --md "$name.md" \
    > "$name.out" 2> "$name.log"; echo $? > "$name.rc")
  for run in 1 2; do
    say "$name: cudalua, run $run"
    (cd "$out/cudalua-$run" && timeout "$limit" "$cudalua" bench \
      "$top/bench/nvbench_examples/$path.lua" -d 0 ${BENCH_OPTS:-} --json "$name.json" --md "$name.md" \
      > "$name.out" 2> "$name.log"; echo $? > "$name.rc")
  done
done

say "comparing"
# shellcheck disable=SC2086
"$cudalua" "$here/nvbench_examples_compare.lua" --nvbench "$out/nvbench" --cudalua "$out/cudalua-1" \
  --cudalua "$out/cudalua-2" --model "$top/t/nvbench_examples_model.lua" --report "$out/report.md" $names \
  > "$out/summary.md" 2> "$out/compare.log"
echo "compare: exit $? (report: $out/report.md)" >&2
cat "$out/summary.md"
