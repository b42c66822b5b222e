"""Runs an experiment: python -m experiments.run --config=experiments/configs/NAME.py --workdir=DIR.

The workdir receives config.json, metrics.jsonl, checkpoints/, grids/,
results.json, figures/ and report.md. Rerunning the same command resumes from
the newest checkpoint (finished grids are not retrained); SIGTERM or Ctrl-C
saves a checkpoint and stops. A workdir holding another config is refused
unless --start_over is given (the old one is moved aside, not deleted).

Several hosts: start the same command on every host with --distributed (and, outside
SLURM and TPU pods, --coordinator_address, --num_processes and --process_id); README
"Several devices and hosts".
"""

import logging as std_logging
import os
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from experiments.configs import arguments, regimes
from inverse_depth import checkpoint, config as config_lib, experiment, hosts
from inverse_depth.report import run_report

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/quick.py",
                                          "Experiment config file, optionally FILE:ARGUMENT with ARGUMENT key=value pairs "
                                          "(experiments/configs/arguments.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.", required=True)
_START_OVER = flags.DEFINE_bool(
    "start_over", False, "Move an existing --workdir aside (to DIR.replaced-<time>) and start "
    "from scratch instead of resuming.")
_XLA_CACHE = flags.DEFINE_string(
    "xla_cache_dir", "~/.cache/inverse_depth/xla", "Persistent XLA compilation cache (reruns "
    "and resumes reuse compiled steps); empty to disable.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Run as one of several processes (jax.distributed.initialize): "
    "every process runs the same command; process 0 writes the workdir.")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "With --distributed: host:port of process 0 (leave unset on "
    "SLURM and TPU pods, where JAX finds it).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None,
                                      "With --distributed: how many processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None,
                                   "With --distributed: this process's index, 0 .. n - 1.")


class _OrbaxWarningsOnly(std_logging.Filter):
  """Orbax logs every file it renames at INFO; keep only its warnings and errors."""

  def filter(self, record):
    return record.levelno >= std_logging.WARNING or "orbax" not in record.pathname


def main(argv):
  del argv
  logging.set_verbosity(logging.INFO)
  logging.get_absl_handler().addFilter(_OrbaxWarningsOnly())
  if _XLA_CACHE.value and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(_XLA_CACHE.value))
  if _DISTRIBUTED.value:
    hosts.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  elif _COORDINATOR.value or _NUM_PROCESSES.value is not None or _PROCESS_ID.value is not None:
    print("error: --coordinator_address, --num_processes and --process_id need --distributed",
          file=sys.stderr)
    sys.exit(2)
  try:
    regimes.check(_CONFIG.value)
    experiment.run(_CONFIG.value, _WORKDIR.value, start_over=_START_OVER.value)
    if not hosts.is_writer():
      return
    run_report.write_report(_WORKDIR.value)
  except (config_lib.ConfigError, experiment.WorkdirConflict,
          checkpoint.CheckpointMismatch) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)
  except experiment.Interrupted as stopped:
    print(str(stopped), file=sys.stderr)
    sys.exit(stopped.exit_code)
  print(f"Report: {_WORKDIR.value}/report.md")


if __name__ == "__main__":
  app.run(main, flags_parser=arguments.parse_flags)
