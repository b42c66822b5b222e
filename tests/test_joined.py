"""Joining runs of one regime: the union of a run split by depth is the run itself."""

import json
import os
import subprocess
import sys

import pytest

from inverse_depth import config as config_lib, joined
from tests import REPO

# What a fit record holds that does not depend on pairing across the split.
FIT_FIELDS = ("L0", "L0_se", "c", "c_se", "alpha", "alpha_se", "r2", "depths", "losses",
              "shared_error", "disagreement", "resolved")


def _with(config: dict, **fields) -> dict:
  """A saved config with `fields` (by name) changed."""
  return config_lib.nested(dict(config_lib.flat(config), **fields))


def _split_by_depth(results: dict, shallow_depths: tuple) -> dict[str, dict]:
  """The tiny run as two runs: one that trained `shallow_depths`, one the rest (each with
  its config's depths and its own grids' paired differences, as two real runs would be)."""
  parts = {}
  for name, keep in (("shallow", lambda d: d in shallow_depths),
                     ("deep", lambda d: d not in shallow_depths)):
    depths = [d for d in config_lib.flat(results["config"])["depths"] if keep(d)]
    fits = [dict(fit, paired_differences=[
        p for p in fit["paired_differences"] if keep(p["depth"]) and keep(p["previous"])])
            for fit in results["fits"]]
    parts[name] = dict(results, config=_with(results["config"], depths=depths), fits=fits,
                       runs=[r for r in results["runs"] if keep(r["depth"])])
  return parts


@pytest.fixture(scope="module")
def tiny_results(tiny_run):
  with open(os.path.join(tiny_run["workdir"], "results.json")) as f:
    return json.load(f)


def test_joining_a_run_split_by_depth_gives_back_its_fits(tiny_results):
  parts = _split_by_depth(tiny_results, (1, 2))
  union = joined.join_results(parts)
  assert union["config"]["grid"]["depths"] == tiny_results["config"]["grid"]["depths"]
  assert len(union["runs"]) == len(tiny_results["runs"])
  assert {r["source"] for r in union["runs"] if r["depth"] == 4} == {"deep"}
  assert [s["source"] for s in union["joined_from"]] == ["shallow", "deep"]
  assert len(union["fits"]) == len(tiny_results["fits"])
  for fit, reference in zip(union["fits"], tiny_results["fits"]):
    for field in FIT_FIELDS:
      assert fit[field] == pytest.approx(reference[field], nan_ok=True), field
    assert fit["bound"] == reference["bound"]
    # 1 -> 2 was paired inside "shallow"; 2 -> 4 crossed the split and has no paired se.
    assert [(p["previous"], p["depth"]) for p in fit["paired_differences"]] == [(1, 2)]


def test_join_refuses_a_regime_change_and_a_model_twice(tiny_results):
  parts = _split_by_depth(tiny_results, (1, 2))
  parts["deep"]["config"] = _with(parts["deep"]["config"], learning_rate=1.0)
  with pytest.raises(ValueError, match="learning_rate"):
    joined.join_results(parts)
  with pytest.raises(ValueError, match="in both"):
    joined.join_results({"first": tiny_results, "again": tiny_results})
  with pytest.raises(ValueError, match="at least two"):
    joined.join_results({"alone": tiny_results})


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_per_depth_step_budgets_join_only_at_a_constant_rate(tiny_results, schedule):
  """Deep models trained longer in their own run join where the rate at step t does not
  depend on max_steps; under a decaying schedule a longer run is another regime."""
  parts = _split_by_depth(tiny_results, (1, 2))
  for part in parts.values():
    part["config"] = _with(part["config"], schedule=schedule)
  deep = parts["deep"]["config"]["train"]
  parts["deep"]["config"] = _with(parts["deep"]["config"], max_steps=2 * deep["max_steps"])
  if schedule == "cosine":
    with pytest.raises(ValueError, match="max_steps"):
      joined.join_results(parts)
    return
  union = joined.join_results(parts)
  assert union["config"]["train"]["max_steps"] == 2 * deep["max_steps"]
  assert [s["max_steps"] for s in union["joined_from"]] == [deep["max_steps"],
                                                           2 * deep["max_steps"]]


def _write_sources(tiny_results, tmp_path) -> list[str]:
  workdirs = []
  for name, part in _split_by_depth(tiny_results, (1,)).items():
    workdir = tmp_path / name
    workdir.mkdir()
    (workdir / "results.json").write_text(json.dumps(part))
    workdirs.append(str(workdir))
  return workdirs


def test_join_runs_entrypoint_writes_the_joined_report(tiny_results, tmp_path):
  workdirs = _write_sources(tiny_results, tmp_path)
  out = tmp_path / "joined"
  subprocess.run([sys.executable, "-m", "experiments.join_runs", f"--out={out}",
                  f"--workdirs={','.join(workdirs)}"], cwd=REPO, check=True,
                 capture_output=True, text=True)
  with open(out / "results.json") as f:
    union = json.load(f)
  assert [s["source"] for s in union["joined_from"]] == workdirs
  report_text = (out / "report.md").read_text()
  assert "Joined from 2 runs" in report_text
  assert (out / "figures" / "depth_scaling.png").is_file()
  joined.write_joined(workdirs, str(out))  # rewriting a join is allowed


def test_write_joined_refuses_before_writing(tiny_results, tiny_run, tmp_path):
  workdirs = _write_sources(tiny_results, tmp_path)
  with pytest.raises(ValueError, match="one of the joined workdirs"):
    joined.write_joined(workdirs, workdirs[0])
  with pytest.raises(ValueError, match="not of a join"):
    joined.write_joined(workdirs, tiny_run["workdir"])
  (tmp_path / "notes").mkdir()
  (tmp_path / "notes" / "draft.md").write_text("mine")
  with pytest.raises(ValueError, match="not an empty directory"):
    joined.write_joined(workdirs, str(tmp_path / "notes"))
  assert os.listdir(tmp_path / "notes") == ["draft.md"]
  missing = str(tmp_path / "missing")
  with pytest.raises(ValueError, match="no results.json"):
    joined.write_joined(workdirs + [missing], str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "out")


