"""The regime comparison reads each run's results.json and nothing else."""

import json
import os

import pytest

from inverse_depth import records
from inverse_depth.report import regime_report
from tests import REPO

RUNS = dict(annealed=os.path.join(REPO, "results", "depth_law"),
            quick=os.path.join(REPO, "results", "quick"))


def test_rows_are_the_fits_seed_means_and_the_report_lists_every_regime(tmp_path):
  path = regime_report.write_comparison(str(tmp_path), RUNS)
  text = open(path).read()
  for name, workdir in RUNS.items():
    with open(os.path.join(workdir, "results.json")) as f:
      results = json.load(f)
    rows = records.regime_rows(results)
    fit = results["fits"][0]
    assert list(rows["eval_loss"]) == fit["depths"]
    assert list(rows["eval_loss"].values()) == pytest.approx(fit["losses"], rel=1e-12)
    assert list(rows["C"].values())[1:] == pytest.approx(fit["shared_error"][1:], rel=1e-12)
    assert f"| {name} | `{workdir}` |" in text
  # the quick run stops at L = 16: its cells at L = 32 and 64 are blank, not shifted
  with open(os.path.join(RUNS["quick"], "results.json")) as f:
    quick = json.load(f)["fits"][0]
  assert ("| quick | " + " | ".join(f"{R:.4g}" for R in quick["losses"]) + " | - | - |") in text
  assert os.path.getsize(os.path.join(tmp_path, "figures", "regimes.png")) > 10_000
