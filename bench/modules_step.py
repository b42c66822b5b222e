"""The grid step of an earlier commit's trainer against today's, interleaved in one process.

    .venv/bin/python -m bench.modules_step [--commit=0f47020] [--grids=law,c3_short16]
                                           [--repeats=9]

Issue 45 moved the trainer onto the Flax module (modules.PackedModels) and the per-model rate
scale and freezing into the optax chain (per_model.py). This loads inverse_depth/train.py as
it was at `--commit` (the plain functions over dicts, masks by hand after optax's update) next
to today's package, builds both trainers on the science grids of bench.run (2 steps per
call), checks that both give the same parameters after the warm-up call, and times the two
compiled chunks alternately (old first on even rounds), median of `repeats` calls each.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from bench import harness
from bench.run import science_spec
from inverse_depth import experiment
from inverse_depth import train as train_now

STEPS_PER_CALL = 2


def train_module_at(commit: str):
  """inverse_depth/train.py of `commit`, imported as a module beside today's package."""
  source = subprocess.run(["git", "show", f"{commit}:inverse_depth/train.py"], check=True,
                          capture_output=True, text=True).stdout
  path = os.path.join(tempfile.mkdtemp(), "train_then.py")
  with open(path, "w") as f:
    f.write(source)
  spec = importlib.util.spec_from_file_location("train_then", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def trainer(train_module, spec):
  keys = experiment._root_keys(spec.root_seed)
  return train_module.GridTrainer(
      spec.model, spec.problem, spec.trained_depths, spec.seeds, spec.train, N=spec.N,
      init_scales=spec.init, init_key=keys["init"], data_key=keys["data"],
      loop_group=spec.loop_group, rate_factors=spec.rate_factors)


def compare(name: str, train_then, repeats: int) -> dict:
  """Milliseconds per step then and now on one science grid, and their ratio now / then."""
  spec = science_spec(name, STEPS_PER_CALL)
  timers = dict(then=harness.ChunkTimer(trainer(train_then, spec)),
                now=harness.ChunkTimer(trainer(train_now, spec)))
  param_difference = max(
      float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
      zip(jax.tree.leaves(timers["then"].state.params), jax.tree.leaves(timers["now"].state.params)))
  seconds = dict(then=[], now=[])
  for round_ in range(repeats):
    for version in ("then", "now") if round_ % 2 == 0 else ("now", "then"):
      start = time.perf_counter()
      timers[version]._call()
      seconds[version].append((time.perf_counter() - start) / STEPS_PER_CALL)
  then_ms, now_ms = (1e3 * statistics.median(seconds[v]) for v in ("then", "now"))
  return dict(grid=name, then_ms=then_ms, now_ms=now_ms, now_over_then=now_ms / then_ms,
              max_param_difference_after_warmup=param_difference,
              load_average=os.getloadavg())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--commit", default="0f47020")
  parser.add_argument("--grids", default="law,c3_short16")
  parser.add_argument("--repeats", type=int, default=9)
  args = parser.parse_args()
  train_then = train_module_at(args.commit)
  print(harness.machine())
  for name in args.grids.split(","):
    r = compare(name, train_then, args.repeats)
    print(f"{name}: {args.commit} {r['then_ms']:.0f} ms/step, now {r['now_ms']:.0f} ms/step, "
          f"now / then {r['now_over_then']:.3f}; max |param difference| after the warm-up "
          f"{r['max_param_difference_after_warmup']:.1e}; load average {r['load_average']}",
          flush=True)


if __name__ == "__main__":
  sys.exit(main())
