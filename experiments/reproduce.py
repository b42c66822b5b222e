"""Reproduces the paper's tables.

    python -m experiments.reproduce [--tier=cpu|paper] [--workdir=DIR] [--only=RUN,...]

Runs every config of `inverse_depth.reproduction.RUNS` at the tier into DIR/<run>/ (each
an ordinary experiment workdir: rerunning resumes, finished grids are not retrained),
printing a progress line with the time left, then writes DIR/report.md with our numbers
beside the paper's and DIR/figures/.
"""

import importlib.util
import sys
import time

from absl import app, flags, logging

from experiments.configs import tables
from inverse_depth import config as config_lib, experiment, reproduction

_WORKDIR = flags.DEFINE_string("workdir", "runs/reproduce", "Root of the table workdirs.")
_TIER = flags.DEFINE_enum("tier", "cpu", list(tables.TIERS), "Scale tier of every config.")
_ONLY = flags.DEFINE_list("only", [], "Run only these runs (names in reproduction.RUNS); the "
                          "report still includes every finished run.")

# Minutes each run took at the cpu tier on 2 CPU cores (README "Reproducing the paper"):
# the first estimate of the time left; later runs rescale it by the measured pace.
CPU_MINUTES = dict(table1=50, table4=11, table4_top16=15, table3=6, easy=3, table2=16)


def _load_config(path: str, tier: str):
  spec = importlib.util.spec_from_file_location("table_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(tier)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  unknown = sorted(set(_ONLY.value) - {name for name, _ in reproduction.RUNS})
  if unknown:
    print(f"error: --only={','.join(unknown)}: allowed "
          + ", ".join(name for name, _ in reproduction.RUNS), file=sys.stderr)
    sys.exit(2)
  runs = [(n, p) for n, p in reproduction.RUNS if not _ONLY.value or n in _ONLY.value]
  configs = []
  for name, path in runs:  # every config is checked before anything trains
    try:
      config = _load_config(path, _TIER.value)
      config_lib.validate(config)
    except config_lib.ConfigError as error:
      print(f"error: {path}: {error}", file=sys.stderr)
      sys.exit(2)
    configs.append((name, config))
  start, expected_done, pace = time.time(), 0.0, 1.0
  expected_total = sum(CPU_MINUTES[name] for name, _ in configs)
  for i, (name, config) in enumerate(configs):
    elapsed = (time.time() - start) / 60
    left = pace * (expected_total - expected_done)
    print(f"[{i + 1}/{len(configs)}] {name}: {elapsed:.0f} min elapsed, about {left:.0f} min "
          f"left{'' if _TIER.value == 'cpu' else ' (cpu-tier estimate)'}", flush=True)
    run_start = time.time()
    try:
      experiment.run(config, f"{_WORKDIR.value}/{name}")
    except (experiment.WorkdirConflict, experiment.Interrupted) as error:
      print(f"{name}: {error}", file=sys.stderr)
      sys.exit(getattr(error, "exit_code", 2))
    expected_done += CPU_MINUTES[name]
    if time.time() - run_start > 60:  # a run that trained (not one regenerated from results)
      pace = ((time.time() - start) / 60) / expected_done
  print(f"Report: {reproduction.write_combined_report(_WORKDIR.value)} "
        f"({(time.time() - start) / 60:.0f} min)")


if __name__ == "__main__":
  app.run(main)
