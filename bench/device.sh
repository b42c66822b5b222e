#!/usr/bin/env bash
# Benchmark on one accelerator (meant for an NVIDIA H200), under 5 minutes:
# matmul peaks (float32 and bfloat16), grid versus loop, padding, utilisation,
# scaling, compile time at GPU sizes, and the paper-sized softmax grid
# (depths 1, 2, 4, ..., 256; d = 64, P = 128, N = 128, batch 256).
#
#   bench/device.sh             # on the accelerator machine, from the repository root or anywhere
#   bench/device.sh --dry-run   # tiny sizes: checks on CPU that the script runs end to end
#
# No network is assumed: the script uses the first Python that imports jax
# ($PYTHON, then .venv/bin/python, then python3) and puts the repository on
# PYTHONPATH instead of installing it. It says so if jax has no GPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

size=gpu
out=bench/results_device.json
if [[ "${1:-}" == "--dry-run" ]]; then
  size=quick
  out=/tmp/inverse_depth_bench_dry_run.json
fi

py=""
for candidate in "${PYTHON:-}" .venv/bin/python python3; do
  if [[ -n "$candidate" ]] && "$candidate" -c "import jax" 2>/dev/null; then
    py="$candidate"
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "no python with jax found (tried \$PYTHON, .venv/bin/python, python3)" >&2
  exit 1
fi
missing=$("$py" -c "
import importlib.util
print(' '.join(m for m in ('flax', 'optax', 'ml_collections', 'absl', 'numpy')
               if importlib.util.find_spec(m) is None))")
if [[ -n "$missing" ]]; then
  echo "python $py lacks: $missing (PyPI is not assumed reachable; install them first)" >&2
  exit 1
fi
backend=$("$py" -c "import jax; print(jax.default_backend())" 2>/dev/null | tail -1)
echo "python: $py   jax backend: $backend   size: $size"
if [[ "$backend" != "gpu" && "$size" == "gpu" ]]; then
  echo "jax has no GPU backend here (jax[cuda] missing?): running the GPU sizes on $backend" >&2
fi

figures=peak,paper,utilisation,padding,compile,grid_vs_loop,scaling
if [[ "$size" == quick ]]; then
  figures=peak,paper,padding
fi
# Results are written after each figure; past the limit the table shows those finished.
if ! timeout 290 "$py" -m bench.run --size="$size" --figures="$figures" --out="$out"; then
  echo "stopped (time limit or error); figures finished so far:"
  "$py" -m bench.run --table="$out"
fi
