"""Runs an experiment: python -m experiments.run --config=experiments/configs/NAME.py --workdir=DIR.

The workdir receives config.json, metrics.jsonl, results.json, figures/ and
report.md. Rerunning the same command resumes: finished grids are not retrained.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from inverse_depth import experiment

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/quick.py",
                                          "Experiment config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.", required=True)


def main(argv):
  del argv
  logging.set_verbosity(logging.INFO)
  experiment.run(_CONFIG.value, _WORKDIR.value)
  print(f"Report: {_WORKDIR.value}/report.md")


if __name__ == "__main__":
  app.run(main)
