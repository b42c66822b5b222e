"""Reproduces the paper's tables, or its generalised models.

    python -m experiments.reproduce [--suite=tables|generalized] [--tier=cpu|paper]
                                    [--workdir=DIR] [--only=RUN,...]

Runs every config of the suite (`inverse_depth.report.combined_report.RUNS` at the tier,
or `inverse_depth.report.generalized_report.RUNS`, cpu scale only) into DIR/<run>/ (each an ordinary
experiment workdir: rerunning resumes, finished grids are not retrained), printing a
progress line with the time left, then writes DIR/report.md (our numbers beside the
paper's) and DIR/figures/.
"""

import importlib.util
import sys
import time

from absl import app, flags, logging

from experiments.configs import tables
from inverse_depth import checkpoint, config as config_lib, experiment
from inverse_depth.report import combined_report, generalized_report, run_report

SUITES = ("tables", "generalized")
_SUITE = flags.DEFINE_enum("suite", "tables", list(SUITES), "Which set of runs.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Root of the run workdirs (default "
                               "runs/reproduce for tables, runs/generalized for generalized).")
_TIER = flags.DEFINE_enum("tier", "cpu", list(tables.TIERS), "Scale tier of every config "
                          "(tables only; the generalized suite has the cpu scale).")
_ONLY = flags.DEFINE_list("only", [], "Run only these runs (names in the suite's RUNS); the "
                          "report still includes every finished run.")

# Minutes each run took at the cpu tier on 2 CPU cores (README "Reproducing the paper"):
# the first estimate of the time left; later runs rescale it by the measured pace.
CPU_MINUTES = dict(table1=41, table4=11, table4_top16=15, table3=5, table3_top2=6, easy=2,
                   table2=18, generalized=63, single_stream=15, generalized_top16=43,
                   m_start_top16=88, m_start=103, depth_law_top16=78, looped=13)


def _load_config(path: str, argument: str | None):
  spec = importlib.util.spec_from_file_location("run_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if argument is None else module.get_config(argument)


def _suite_runs() -> tuple[list[tuple[str, str, str | None]], str, object]:
  """(name, config path, get_config argument) per run, the default root, the report writer."""
  if _SUITE.value == "generalized":
    if _TIER.value != "cpu":
      print(f"error: --tier={_TIER.value}: the generalized suite has the cpu scale only",
            file=sys.stderr)
      sys.exit(2)
    return (list(generalized_report.RUNS), "runs/generalized",
            generalized_report.write_generalized_report)
  return ([(name, path, _TIER.value) for name, path in combined_report.RUNS], "runs/reproduce",
          combined_report.write_combined_report)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  suite_runs, default_root, write_report = _suite_runs()
  root = _WORKDIR.value or default_root
  unknown = sorted(set(_ONLY.value) - {name for name, _, _ in suite_runs})
  if unknown:
    print(f"error: --only={','.join(unknown)}: allowed "
          + ", ".join(name for name, _, _ in suite_runs), file=sys.stderr)
    sys.exit(2)
  runs = [run for run in suite_runs if not _ONLY.value or run[0] in _ONLY.value]
  configs = []
  for name, path, argument in runs:  # every config is checked before anything trains
    try:
      config = _load_config(path, argument)
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
      experiment.run(config, f"{root}/{name}")
      run_report.write_report(f"{root}/{name}")
    except (experiment.WorkdirConflict, experiment.Interrupted,
            checkpoint.CheckpointMismatch) as error:
      print(f"{name}: {error}", file=sys.stderr)
      sys.exit(getattr(error, "exit_code", 2))
    expected_done += CPU_MINUTES[name]
    if time.time() - run_start > 60:  # a run that trained (not one regenerated from results)
      pace = ((time.time() - start) / 60) / expected_done
  print(f"Report: {write_report(root)} "
        f"({(time.time() - start) / 60:.0f} min)")


if __name__ == "__main__":
  app.run(main)
