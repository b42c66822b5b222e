"""The committed law at t -> infinity recomputes from results.json and the sources' curves."""

import json
import os

import pytest

from inverse_depth import stationary as stationary_report
from tests import REPO

FOLDER = os.path.join(REPO, "results", "sgd_law_stationary")


def test_committed_extrapolation_recomputes_exactly():
  if not os.path.exists(os.path.join(FOLDER, "stationary.json")):
    pytest.skip("results/sgd_law_stationary is not committed")
  with open(os.path.join(FOLDER, "results.json")) as f:
    results = json.load(f)
  with open(os.path.join(FOLDER, "stationary.json")) as f:
    committed = json.load(f)
  metrics = [os.path.join(FOLDER, "sources", name, "metrics.jsonl")
             for name in ("stationary", "stationary_deep")]
  series = stationary_report.series_by_depth(metrics, results["fits"][0]["model"])
  rows = stationary_report.extrapolate(results, series, committed["from_step"],
                                       committed["tau_per_depth"])
  assert [r["depth"] for r in rows] == [r["depth"] for r in committed["depths"]]
  for row, saved in zip(rows, committed["depths"]):
    for field in ("R", "remaining", "R_inf", "R_inf_se"):
      assert row[field] == pytest.approx(saved[field], rel=1e-9), (row["depth"], field)
  fits = stationary_report.law_at_infinity(rows)
  for name, saved in committed["fits"].items():
    for field in ("L0", "c", "alpha", "r2"):
      assert fits[name][field] == pytest.approx(saved[field], rel=1e-6), (name, field)
