"""The experiment workdir: refusing the wrong one, moving an old one aside, and the
training-curve file metrics.jsonl.

A workdir holds config.json (the resolved config), metrics.jsonl, checkpoints/,
grids/, bounds/, results.json, figures/ and report.md. A rerun on the same
workdir resumes; a workdir holding another config is refused, naming the fields
that differ.
"""

import datetime
import json
import os
import subprocess
import sys

from absl import logging

from inverse_depth import config as config_lib
from inverse_depth.files import write_text_atomic

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.json"
# results.json layout, by version (files without `schema_version` are 1):
#   2 added `schema_version` and `provenance` (null where the run predates it);
#   3: the config names its regime (`regime`), every run and fit record carries its
#      learning_rate, every theory bound holds every field theory_bound gives today, and
#      joins carry a version too;
#   4: the config records every field (version 3 left out fields added to the code after the
#      run, which hashed as absent at the value that reproduces the run), and the config
#      hashes, the run's and each joined source's, are of every field;
#   5: the config's fields sit in their groups (config.GROUPS: problem, grid, init, train,
#      eval, checkpoint; the hash, of the fields by name, is unchanged).
# A results.json of an earlier version is brought to this one by
# `python -m experiments.upgrade_results` (inverse_depth/upgrade.py), and only there.
SCHEMA_VERSION = 5


class SchemaError(ValueError):
  """A results.json written by an earlier version of this code."""


def read_results(directory: str) -> dict:
  """directory/results.json; raises SchemaError, naming the command that upgrades it, for
  one of an earlier schema version."""
  path = os.path.join(directory, RESULTS_FILE)
  with open(path) as f:
    results = json.load(f)
  version = results.get("schema_version", 1)
  if version != SCHEMA_VERSION:
    raise SchemaError(f"{path} has schema version {version}, this code reads "
                      f"{SCHEMA_VERSION}: run python -m experiments.upgrade_results "
                      f"--results={directory}")
  return results


def provenance() -> dict:
  """Where a results.json comes from: the git commit of this code (None outside a git
  checkout) and whether tracked files differed from it, the command line, and the time."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

  def git(*args) -> str | None:
    try:
      return subprocess.run(("git", *args), cwd=root, capture_output=True, text=True,
                            check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
      return None

  commit = git("rev-parse", "HEAD")
  changes = git("status", "--porcelain", "--untracked-files=no") if commit else None
  return dict(commit=commit, uncommitted_changes=bool(changes) if commit else None,
              command=" ".join([os.path.basename(sys.executable)] + sys.argv),
              time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


class WorkdirConflict(RuntimeError):
  """The workdir holds results of a different config, or is not an experiment workdir."""


def _refuse_foreign_directory(workdir: str, advice: str) -> None:
  """Raises WorkdirConflict for a path that is not a directory, or a non-empty directory
  without config.json."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirConflict(f"--workdir {workdir} exists and is not a directory. {advice}")
  if (os.path.isdir(workdir) and os.listdir(workdir)
      and not os.path.exists(os.path.join(workdir, CONFIG_FILE))):
    raise WorkdirConflict(f"{workdir} is not empty and holds no config.json: not an "
                          f"experiment workdir. {advice}")


def check_workdir(config_dict: dict, workdir: str) -> None:
  """Refuses a workdir whose saved config differs from `config_dict` (naming the fields),
  or a non-empty directory that is not an experiment workdir. Fields in
  config.RUNTIME_FIELDS and config.LABEL_FIELDS may differ."""
  _refuse_foreign_directory(workdir, "Choose a new --workdir.")
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  current = config_lib.without_labels(config_lib.flat(json.loads(json.dumps(config_dict))))
  saved = config_lib.without_labels(config_lib.flat(saved))
  differing = sorted(k for k in set(saved) | set(current)
                     if saved.get(k) != current.get(k) and k not in config_lib.RUNTIME_FIELDS)
  if differing:
    raise WorkdirConflict(
        f"{workdir} holds results of a different config (fields "
        f"{', '.join(map(config_lib.path, differing))}: "
        + "; ".join(f"{config_lib.path(k)} saved {saved.get(k)!r} vs now {current.get(k)!r}"
                    for k in differing)
        + "). Choose a new --workdir, or pass --start_over to move the old one aside and "
        "start again.")


def move_aside(workdir: str) -> str | None:
  """Renames an existing experiment workdir to <workdir>.replaced-<time> (nothing is
  deleted); refuses any other non-empty directory."""
  if not os.path.exists(workdir):
    return None
  _refuse_foreign_directory(workdir, "--start_over will not move it.")
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
  destination = f"{os.path.normpath(workdir)}.replaced-{stamp}"
  os.rename(workdir, destination)
  logging.warning("Starting over: moved the previous %s to %s", workdir, destination)
  return destination


class MetricsLog:
  """metrics.jsonl: one JSON line per (grid, spectrum, evaluation step), its values as
  [seeds, models] lists."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, METRICS_FILE)

  def drop_after(self, model: str, spectra, step: int) -> None:
    """Removes the lines of `model` on `spectra` beyond `step` (left by an interrupted
    run), and any line a killed process left half written."""
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      lines = f.readlines()
    grid_spectra = {(float(a), float(b)) for a, b in spectra}

    def keep(line):
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        logging.warning("Dropping a half-written line of %s: %r", self.path, line[:80])
        return False
      return (record["model"] != model or (record["a"], record["b"]) not in grid_spectra
              or record["step"] <= step)

    kept = [line.rstrip("\n") + "\n" for line in lines if line.strip() and keep(line)]
    if kept != lines:
      write_text_atomic(self.path, "".join(kept))

  def append(self, records: list[dict]) -> None:
    with open(self.path, "a") as f:
      f.writelines(json.dumps(record) + "\n" for record in records)
      f.flush()


def read_metrics(workdir: str) -> list[dict]:
  """Every line of workdir/metrics.jsonl (a missing file gives [])."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
