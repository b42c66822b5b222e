"""End to end: config -> grids -> results.json -> fits -> figures and report.md."""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from experiments.configs import smoke
from inverse_depth import analysis, checks, config as config_lib, evaluation, experiment, models, records
from inverse_depth.workdir import SCHEMA_VERSION
from inverse_depth.report import run_report
from tests import REPO, tiny

RUN_KEYS = {"model", "task", "k", "a", "b", "depth", "seed", "eval_loss", "A", "C", "diverged",
            "steps"}
FIT_KEYS = {"L0", "L0_se", "c", "c_se", "alpha", "alpha_se", "r2", "depths", "losses"}


MODELS = tiny.MODELS


def _mtimes(paths):
  return {p: os.stat(p).st_mtime_ns for p in paths}


@pytest.fixture(scope="module")
def experiment_run(tiny_run):
  return tiny_run


def test_workdir_contents(experiment_run):
  workdir, config = experiment_run["workdir"], experiment_run["config"]
  for name in ("config.json", "metrics.jsonl", "results.json", "report.md"):
    assert os.path.isfile(os.path.join(workdir, name)), name
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f) == json.loads(json.dumps(config.to_dict()))
  figures = glob.glob(os.path.join(workdir, "figures", "*.png"))
  assert {os.path.basename(p) for p in figures} >= {"depth_scaling.png", "decomposition.png"}
  for path in figures:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  names = sorted(spec.name for spec in config_lib.grid_specs(config))
  grids = sorted(os.path.basename(p) for p in glob.glob(os.path.join(workdir, "grids", "*.json")))
  assert grids == [name + ".json" for name in names]
  # The newest checkpoints_to_keep (2) of the three checkpoints, the final one included.
  for name in names:
    steps = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints", name)))
    assert steps == [40, 60]


def test_metrics_are_json_lines(experiment_run):
  workdir, config = experiment_run["workdir"], experiment_run["config"]
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    lines = [json.loads(line) for line in f if line.strip()]
  assert lines
  num_models = len(config.grid.depths)
  for record in lines:
    assert record["model"] in MODELS
    assert record["step"] % config.train.eval_every == 0
    assert 0 < record["step"] <= config.train.max_steps
    val = np.asarray(record["val_loss"])
    assert val.shape == (config.grid.num_seeds, num_models)
    assert np.all(np.isfinite(val))
  for model in MODELS:
    steps = [r["step"] for r in lines if r["model"] == model]
    assert steps == sorted(steps) and steps[0] == config.train.eval_every


def test_results_records(experiment_run):
  workdir, config = experiment_run["workdir"], experiment_run["config"]
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  runs = results["runs"]
  assert len(runs) == (len(MODELS) * len(config.grid.depths) * config.grid.num_seeds
                       * len(config.problem.spectra))
  for r in runs:
    assert RUN_KEYS <= set(r), RUN_KEYS - set(r)
    assert r["task"] == config.problem.task and r["k"] == config.problem.k
    assert r["depth"] in config.grid.depths and r["seed"] in range(config.grid.num_seeds)
    assert r["eval_loss"] > 0 and np.isfinite(r["eval_loss"])
    assert 0 < r["steps"] <= config.train.max_steps and r["steps"] % config.train.eval_every == 0
    assert r["diverged"] is False
    assert abs(r["identity_residual"]) <= 1e-9 * r["eval_loss"]
    if r["depth"] == 1:
      assert r["C"] is None or np.isnan(r["C"])
      np.testing.assert_allclose(r["A"], r["eval_loss"], rtol=1e-12)
    else:
      assert r["A"] >= r["C"]
      np.testing.assert_allclose(r["eval_loss"], r["C"] + (r["A"] - r["C"]) / r["depth"],
                                 rtol=1e-9)
  assert {(r["model"], r["depth"], r["seed"]) for r in runs} == {
      (m, L, s) for m in MODELS for L in config.grid.depths
      for s in range(config.grid.num_seeds)}
  # Each model's own token-by-token forward pass (modules.py) against C + (A - C)/L from
  # the trainer's packed layer predictors: two code paths, so this identity can fail.
  identity = checks.identity_from_forward(runs)
  assert identity.passed, identity.text

  fits = results["fits"]
  assert len(fits) == len(MODELS) * len(config.problem.spectra)
  for fit in fits:
    assert FIT_KEYS <= set(fit), FIT_KEYS - set(fit)
    assert fit["depths"] == list(config.grid.depths)
    mine = [r for r in runs if r["model"] == fit["model"]]
    for depth, loss in zip(fit["depths"], fit["losses"]):
      np.testing.assert_allclose(
          loss, np.mean([r["eval_loss"] for r in mine if r["depth"] == depth]), rtol=1e-12)
    for name in ("L0", "c", "alpha"):
      assert np.isfinite(fit[name])
    assert fit["c"] > 0 and fit["alpha"] > 0 and fit["L0"] >= 0
  # What run() returns is what it wrote.
  assert json.loads(json.dumps(experiment_run["results"]))["runs"] == runs


def test_report_has_depth_table(experiment_run):
  text = experiment_run["first_report"]
  config = experiment_run["config"]
  assert text.startswith("# inverse-depth report")
  assert "| depth | R_L" in text
  for model in MODELS:
    assert f"## {model}, top-{config.problem.k}" in text
  depth_tables = text.split("## Selection error")[0]  # its rows are percentiles, not depths
  table_rows = [line for line in depth_tables.splitlines() if line.startswith("| ")]
  scored = [model for model in MODELS if model in models.FIXED_INPUT_SCORING]
  for depth in config.grid.depths:
    # One row per depth in each grid's table, and in its scoring-geometry table.
    assert sum(line.startswith(f"| {depth} | ") for line in table_rows) == (len(MODELS)
                                                                           + len(scored))
  assert ("How the layers score" in text) == bool(scored)
  assert "figures/depth_scaling.png" in text and "figures/decomposition.png" in text


def test_report_sets_trained_losses_beside_the_cosine_layer_optima(experiment_run):
  """The softmax bound carries the best controlled model of L cosine-scoring layers
  (L = 1 is the single layer); the report tables each beside the trained R_L of that depth,
  a dash where the grid has none."""
  results = experiment_run["results"]
  section = experiment_run["first_report"].split(
      "## Against the best L cosine-scoring layers (theory)")[1].split("\n## ")[0]
  rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| softmax")]
  for fit in results["fits"]:
    optima = fit["bound"]["average_by_layers"]
    assert optima[0]["loss"] == pytest.approx(fit["bound"]["single"])
    trained = dict(zip(fit["depths"], fit["losses"]))
    mine = [row for row in rows if row[0] == f"| {records.grid_label(fit)}"]
    assert [int(row[1]) for row in mine] == list(range(1, len(optima) + 1))
    for row, entry in zip(mine, optima):
      assert float(row[2]) == pytest.approx(entry["loss"], rel=1e-3)
      L = int(row[1])
      assert row[3].rstrip(" |") == (f"{trained[L]:.4g}" if L in trained else "-")


def test_rerun_resumes_without_retraining_and_report_regenerates(experiment_run, monkeypatch):
  def no_training(*args, **kwargs):
    raise AssertionError("a finished run must not build a trainer")

  monkeypatch.setattr(experiment, "GridTrainer", no_training)
  workdir = experiment_run["workdir"]
  grids = glob.glob(os.path.join(workdir, "grids", "*.json"))
  before = _mtimes(grids)
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  with open(metrics_path) as f:
    metrics_before = f.read()

  results = experiment.run(experiment_run["config"], workdir)

  assert _mtimes(grids) == before
  with open(metrics_path) as f:
    assert f.read() == metrics_before  # no training step logged
  assert results["runs"] == json.loads(json.dumps(experiment_run["results"]))["runs"]

  # The report is a function of results.json alone: delete it and the
  # figures, regenerate, and get the same text.
  with open(os.path.join(workdir, "report.md")) as f:
    report_text = f.read()
  os.remove(os.path.join(workdir, "report.md"))
  shutil.rmtree(os.path.join(workdir, "figures"))
  path = run_report.write_report(workdir)
  assert path == os.path.join(workdir, "report.md")
  with open(path) as f:
    assert f.read() == report_text
  assert os.path.isfile(os.path.join(workdir, "figures", "depth_scaling.png"))
  assert os.path.isfile(os.path.join(workdir, "figures", "decomposition.png"))


def test_report_needs_no_training_artefacts(experiment_run, tmp_path):
  """A directory holding only results.json yields the same report."""
  for name in ("results.json",):
    shutil.copy(os.path.join(experiment_run["workdir"], name), tmp_path / name)
  run_report.write_report(str(tmp_path))
  with open(os.path.join(experiment_run["workdir"], "report.md")) as f:
    want = f.read()
  assert (tmp_path / "report.md").read_text() == want
  assert (tmp_path / "figures" / "depth_scaling.png").is_file()


def _synthetic_runs(depths, seeds=(0, 1)):
  """Run records shaped like experiment.train_grid's, with made-up numbers."""
  runs = []
  for model, floor in (("softmax", 0.5), ("linear", 2.0)):
    for depth in depths:
      for seed in seeds:
        R = floor + 1.0 / depth + 0.01 * seed
        C = R - 0.1 if depth > 1 else float("nan")
        A = C + 0.1 * depth if depth > 1 else R
        runs.append(dict(
            model=model, task="topk", k=2, a=0.0, b=0.0, learning_rate=1e-3, depth=depth,
            seed=seed, eval_loss=R,
            A=A, C=C, disagreement=A - C, identity_residual=0.0, diverged=False,
            diverged_at_step=-1, converged=True, steps=100, final_lr_scale=1.0,
            uniform_attention_loss=5.0, on_plateau=False, target_second_moment=6.0))
  return runs


@pytest.mark.parametrize("depths", [(1, 2, 4, 8, 16), (1, 2, 4, 8), (1,)],
                         ids=["five-depths", "four-depths", "one-depth"])
def test_report_from_synthetic_results(tmp_path, depths):
  """write_report works for any valid config, including a single depth
  (config.validate accepts depths=(1,))."""
  config = smoke.get_config()
  config.grid.depths = depths
  runs = _synthetic_runs(depths)
  fits = [analysis.fit_grid([r for r in runs if r["model"] == m]) for m in ("softmax", "linear")]
  results = dict(schema_version=SCHEMA_VERSION, runs=runs, fits=fits, config=config.to_dict(), wall_time_s=1.0, backend="cpu",
                 num_devices=1)
  (tmp_path / "results.json").write_text(json.dumps(results))
  run_report.write_report(str(tmp_path))
  text = (tmp_path / "report.md").read_text()
  for depth in depths:
    assert sum(line.startswith(f"| {depth} | ") for line in text.splitlines()) == 2
  if len(depths) > 1:
    softmax_fit = fits[0]
    assert softmax_fit["L0"] == pytest.approx(0.5, rel=0.05)
    assert softmax_fit["alpha"] == pytest.approx(1.0, rel=0.05)
  # Window fits appear for grids with more than four depths: two windows per model here,
  # each with alpha free and held at 1 (the synthetic curve is that law: R^2 = 1 either way).
  window_rows = [line for line in text.splitlines() if line.startswith("| softmax, top-2")
                 and ("| 1..16 |" in line or "| 2..16 |" in line)]
  assert len(window_rows) == (4 if len(depths) == 5 else 0)
  assert sum("| 1 (held) | 1.0000 |" in row for row in window_rows) == len(window_rows) / 2
  if len(depths) == 1:  # nothing to pair: no monotonicity verdict either way
    assert "loss monotone" not in text
  # The theory table prints a floor only where the fit resolves one.
  against_theory = text.split("## Against theory")[1]
  floor_text = f"{fits[0]['L0']:.4g}" if len(depths) > 1 else "not resolved"
  assert f"| softmax, top-2, (a,b)=(0,0), lr 0.001 | {floor_text} |" in against_theory


@pytest.mark.slow
def test_smoke_config_through_the_entrypoint(tmp_path):
  """`make smoke`: the shipped smoke config, unmodified, via the absl entrypoint."""
  workdir = str(tmp_path / "smoke")
  command = [sys.executable, "-m", "experiments.run", "--config=experiments/configs/smoke.py",
             f"--workdir={workdir}"]
  proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f"Report: {workdir}/report.md" in proc.stdout
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  config = smoke.get_config()
  assert len(results["runs"]) == 2 * len(config.grid.depths) * config.grid.num_seeds
  assert {r["model"] for r in results["runs"]} == {"softmax", "linear"}
  assert all(abs(r["identity_residual"]) <= 1e-9 * r["eval_loss"] for r in results["runs"])
  with open(os.path.join(workdir, "report.md")) as f:
    text = f.read()
  assert "## softmax, top-2" in text and "## linear, top-2" in text
  grids = glob.glob(os.path.join(workdir, "grids", "*.json"))
  before = _mtimes(grids)
  proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "already done" in proc.stderr
  assert _mtimes(grids) == before


def test_workdir_guard_refuses_a_different_config(tmp_path):
  """A workdir holding another config's results is refused, naming the differing fields;
  the same config passes (that is how a rerun resumes)."""
  config = smoke.get_config()
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  experiment.check_workdir(config.to_dict(), str(tmp_path))
  changed = smoke.get_config()
  changed.grid.sizes.softmax.P = 16
  changed.train.learning_rate = 0.01
  with pytest.raises(experiment.WorkdirConflict,
                     match=r"fields train.learning_rate, grid.sizes: train.learning_rate saved"):
    experiment.check_workdir(changed.to_dict(), str(tmp_path))


def test_a_stuck_model_is_flagged_by_name_and_kept_out_of_the_fit(tmp_path):
  """One seed stuck on a plateau is named in the report and does not enter the means, the
  fit or the paired monotonicity check (whose errors come from the shared evaluation set,
  not from the seed spread the stuck seed would inflate)."""
  depths = (1, 2, 4, 8)
  runs = [r for r in _synthetic_runs(depths, seeds=(0, 1, 2)) if r["model"] == "softmax"]
  stuck = next(r for r in runs if r["depth"] == 4 and r["seed"] == 1)
  stuck["eval_loss"] = 6.5
  evaluation.flag_outliers(runs, {L: 1.5 for L in depths}, factor=1.2)
  assert [(r["depth"], r["seed"]) for r in runs if r["flagged"]] == [(4, 1)]
  rng = np.random.default_rng(0)
  squared_errors_SVE = rng.exponential(1.0, size=(3, len(depths), 5000))
  squared_errors_SVE[1, 2] += 10.0  # the stuck model's errors
  clean_SV = np.array([[not r["flagged"] for r in runs if r["seed"] == s] for s in range(3)])
  paired = evaluation.paired_differences(list(depths), squared_errors_SVE, clean_SV)
  assert [p["seeds"] for p in paired] == [3, 2, 2]
  assert all(abs(p["difference"]) < 5 * p["se"] for p in paired)
  fit = analysis.fit_grid(runs, paired)
  assert not fit["clean"] and fit["flagged"][0]["seed"] == 1
  assert fit["losses"][2] == pytest.approx(0.5 + 1 / 4 + 0.01)  # mean of seeds 0 and 2
  config = smoke.get_config()
  results = dict(schema_version=SCHEMA_VERSION, runs=runs, fits=[fit], config=config.to_dict(), wall_time_s=1.0,
                 backend="cpu", num_devices=1)
  (tmp_path / "results.json").write_text(json.dumps(results))
  text = open(run_report.write_report(str(tmp_path))).read()
  assert "MISS (clean run): 1 of 12 models diverged or flagged" in text
  assert "softmax L=4 seed 1" in text


def test_linear_models_are_judged_against_the_floor_of_their_own_depth():
  """The depth-L linear floor T - h_:L^T G_:L,:L^+ h_:L falls with L: a depth-1 model at
  its own floor is not an outlier against the deeper floor (results/reproduce/table1 had
  flagged linear L = 1 at 2.544 against the depth-4 floor 2.12; its own floor is ~2.43)."""
  rng = np.random.default_rng(0)
  features_NR = rng.normal(size=(4000, 4)) @ rng.normal(size=(4, 4))
  target_N = features_NR @ np.array([1.0, 0.5, 0.25, 0.1]) + rng.normal(size=4000)
  G_RR, h_R = features_NR.T @ features_NR / 4000, features_NR.T @ target_N / 4000
  T = float(target_N @ target_N / 4000)
  bound = dict(kind="linear_floor", reference=float(T - h_R @ np.linalg.solve(G_RR, h_R)),
               T=T, h=h_R.tolist(), G=G_RR.tolist())
  references = evaluation.depth_references(bound, (1, 2, 4))
  for L in (1, 2):  # least squares on the first L features, directly
    weights = np.linalg.lstsq(features_NR[:, :L], target_N, rcond=None)[0]
    assert references[L] == pytest.approx(np.mean((target_N - features_NR[:, :L] @ weights) ** 2))
  assert references[4] == pytest.approx(bound["reference"])
  assert references[1] > 1.2 * references[4]
  runs = [dict(depth=L, seed=0, eval_loss=1.05 * references[L], diverged=False,
               target_second_moment=T) for L in (1, 2, 4)]
  evaluation.flag_outliers(runs, references, factor=1.2)
  assert not any(r["flagged"] for r in runs)
  softmax = evaluation.depth_references(dict(kind="softmax_bound", reference=2.0), (1, 8))
  assert softmax == {1: 2.0, 8: 2.0}


def test_peer_rule_compares_with_the_other_seeds_and_ignores_solved_models():
  """With two seeds, 1.3 x the other seed is flagged at factor 1.2 (a median that included
  the model itself would need 1.5 x); one seed has no peers; losses below 1e-3 E[y*^2] are
  solved, whatever their ratio; a non-finite loss is flagged and is nobody's peer."""
  def records(losses, depth=2):
    return [dict(depth=depth, seed=s, eval_loss=x, diverged=False, target_second_moment=16.0)
            for s, x in enumerate(losses)]
  two = records([1.3, 1.0])
  evaluation.flag_outliers(two, {}, factor=1.2)
  assert [r["flagged"] for r in two] == [True, False]
  assert "other seeds" in two[0]["flag_reason"]
  alone = records([5.0])
  evaluation.flag_outliers(alone, {}, factor=1.2)
  assert not alone[0]["flagged"]
  solved = records([2.2e-5, 4e-6, 5e-6])
  evaluation.flag_outliers(solved, {}, factor=1.2)
  assert not any(r["flagged"] for r in solved)
  overflowed = records([float("nan"), 1.0, 1.3])  # NaN must neither pass nor hide the 1.3
  evaluation.flag_outliers(overflowed, {}, factor=1.2)
  assert [r["flagged"] for r in overflowed] == [True, False, True]
  assert "held-out loss is nan" in overflowed[0]["flag_reason"]


def test_an_ensemble_with_an_outlier_member_is_flagged_by_name():
  """An ensemble control's average of L one-layer models can hide a member that never
  trained (its R_L still looks fine): every view holding that member is flagged, and the
  report's clean-run check names it."""
  runs = [dict(r, model="softmax-ensemble", outlier_members=[])
          for r in _synthetic_runs((1, 2, 4, 8)) if r["model"] == "softmax"]
  stuck = dict(member=3, loss=6.6, limit=2.4)
  for r in runs:
    if r["seed"] == 1 and r["depth"] >= 4:
      r["outlier_members"] = [stuck]
  evaluation.flag_outliers(runs, {}, factor=1.2)
  assert {(r["depth"], r["seed"]) for r in runs if r["flagged"]} == {(4, 1), (8, 1)}
  assert all("one-layer member 3 is an outlier (6.6 > 2.4)" in r["flag_reason"]
             for r in runs if r["flagged"])
  clean = next(check for check in checks.run_checks(dict(runs=runs, fits=[]))
               if check.claim == "clean run")
  assert not clean.passed and "softmax-ensemble L=8 seed 1" in clean.text


@pytest.mark.slow  # 10-35 s: kept out of `make test` for its 15-minute budget
def test_ensemble_control_matches_models_trained_alone(tmp_path):
  """The ensemble control's first member of each seed is the grid's one-layer model (same
  key, same stream: a model in a grid equals the model alone), and its depth-L record is
  the average of L one-layer models, for which the identity holds."""
  config = tiny.tiny_config()
  config.grid.ensemble_control = True
  config.eval.outlier_factor = 1.0 + 1e-9  # barely trained members: above the bound, outliers
  results = experiment.run(config, str(tmp_path))
  joint = {(r["depth"], r["seed"]): r for r in results["runs"] if r["model"] == "softmax"}
  ensemble = {(r["depth"], r["seed"]): r for r in results["runs"]
              if r["model"] == "softmax-ensemble"}
  assert set(ensemble) == set(joint)
  for seed in range(config.grid.num_seeds):
    assert ensemble[(1, seed)]["eval_loss"] == pytest.approx(joint[(1, seed)]["eval_loss"],
                                                             rel=1e-6)
  for r in ensemble.values():
    assert abs(r["identity_residual"]) <= 1e-9 * r["eval_loss"]
  # Member m is packed layer m, judged on its own loss: members 0 and 1 have losses A_1 and
  # 2 A_2 - A_1; a view lists exactly the outliers among its first L members.
  deepest = max(config.grid.depths)
  outliers = [(seed, m) for seed in range(config.grid.num_seeds)
              for m in ensemble[(deepest, seed)]["outlier_members"]]
  assert outliers
  checked = 0
  for seed, member in outliers:
    A_1, A_2 = ensemble[(1, seed)]["A"], ensemble[(2, seed)]["A"]
    if member["member"] < 2:
      assert member["loss"] == pytest.approx((A_1, 2 * A_2 - A_1)[member["member"]], rel=1e-9)
      checked += 1
    assert member["loss"] > member["limit"]
    for L in config.grid.depths:
      listed = [m["member"] for m in ensemble[(L, seed)]["outlier_members"]]
      assert (member["member"] in listed) == (member["member"] < L)
      assert ensemble[(L, seed)]["flagged"] == bool(listed)
  assert checked
  assert "softmax-ensemble" in open(run_report.write_report(str(tmp_path))).read()
  with open(tmp_path / "metrics.jsonl") as f:
    widths = {(r["model"], len(r["val_loss"][0])) for r in map(json.loads, f)}
  assert widths == {("softmax", len(config.grid.depths)),
                    ("softmax-ensemble", max(config.grid.depths))}


def test_results_record_their_schema_and_provenance(experiment_run):
  results = experiment_run["results"]
  assert results["schema_version"] == SCHEMA_VERSION
  found = results["provenance"]
  assert set(found) == {"commit", "uncommitted_changes", "command", "time"}
  assert found["commit"] is None or len(found["commit"]) == 40  # None outside a git checkout
  assert found["time"].endswith("+00:00")
