"""Brings a results.json written by an earlier version of this code to the current schema
(inverse_depth/upgrade.py; no training):

    python -m experiments.upgrade_results --results=DIR \
        [--config=experiments/configs/NAME.py[:ARGUMENT] [--config.GROUP.FIELD=VALUE ...]]

--config is the config that made the run, needed only where its config names no regime; it
must hash as the run's config. DIR/results.json (and DIR/config.json, where present) are
rewritten; rerun `python -m experiments.run` (nothing is retrained) or the report commands of
results/README.md to regenerate the reports.
"""

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from experiments.configs import arguments
from inverse_depth import upgrade
from inverse_depth.files import write_json_atomic
from inverse_depth.workdir import CONFIG_FILE, RESULTS_FILE

_RESULTS = flags.DEFINE_string("results", None, "Folder of the results.json to upgrade.",
                               required=True)
_CONFIG = config_flags.DEFINE_config_file("config", None, "The config file that made the run "
                                          "(optionally FILE:ARGUMENT).")


def main(argv):
  del argv
  path = os.path.join(_RESULTS.value, RESULTS_FILE)
  with open(path) as f:
    results = json.load(f)
  try:
    results = upgrade.upgrade(results, _CONFIG.value)
  except upgrade.UpgradeError as error:
    print(f"error: {path}: {error}", file=sys.stderr)
    sys.exit(2)
  write_json_atomic(path, results)
  config_path = os.path.join(_RESULTS.value, CONFIG_FILE)
  if os.path.exists(config_path):
    write_json_atomic(config_path, results["config"])
  print(f"{path}: schema version {results['schema_version']}")


if __name__ == "__main__":
  app.run(main, flags_parser=arguments.parse_flags)
