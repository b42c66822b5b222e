"""Stationary evaluation of constant-rate runs: the time average over the last evaluations,
the stationarity test, and resuming inside the averaging window."""

import json
import os

import numpy as np
import pytest

from inverse_depth import analysis, config as config_lib, experiment, workdir as workdir_lib
from inverse_depth.checkpoint import GridCheckpoints
from inverse_depth.config import ConfigError
from inverse_depth.report import noise_report, run_report
from tests import tiny

WINDOW = 4  # evaluations averaged: steps 20, 25, 30, 35 (eval_every 5, max_steps 35)


def window_config():
  """The tiny softmax grid under constant-rate SGD, its last four evaluations averaged."""
  config = tiny.tiny_config()
  config_lib.set_fields(config, dict(
      optimizer="sgd", schedule="constant", learning_rate=0.01, warmup_steps=5, max_steps=35,
      eval_every=5, checkpoint_every=10, checkpoints_to_keep=1, stationary_evals=WINDOW,
      diagnostic_size=0))
  return config


# --- the test itself ------------------------------------------------------------------------

def test_white_noise_passes_at_the_nominal_rate_and_its_mean_has_the_usual_error():
  """z = 3 on 16 independent evaluations: a stationary series fails about 1% of the time
  (two t-tests with 14 degrees of freedom)."""
  rng = np.random.default_rng(0)
  series = 2.0 + 0.01 * rng.standard_normal((1000, 16))
  found = [analysis.stationarity(values, z=3.0) for values in series]
  assert np.mean([not f["stationary"] for f in found]) < 0.03
  values, first = series[0], found[0]
  assert first["mean"] == pytest.approx(values.mean())
  assert first["first_half"] == pytest.approx(values[:8].mean())
  assert np.median([f["se"] for f in found]) == pytest.approx(0.01 / 4, rel=0.15)


def test_a_trend_fails_the_test():
  rng = np.random.default_rng(1)
  values = 2.0 - 0.004 * np.arange(16) + 0.01 * rng.standard_normal(16)  # 6% fall over 16
  found = analysis.stationarity(values, z=3.0)
  assert not found["stationary"]
  assert found["second_half"] < found["first_half"]
  assert found["slope"] < 0 and found["slope_z"] > 3


def test_correlated_noise_widens_the_error():
  rng = np.random.default_rng(2)
  noise = np.zeros(200)
  for t in range(1, 200):  # AR(1) with coefficient 0.7
    noise[t] = 0.7 * noise[t - 1] + rng.standard_normal()
  found = analysis.stationarity(1.0 + 0.01 * noise, z=3.0)
  assert 0.4 < found["r"] < 0.9
  assert found["se"] > 1.5 * 0.01 * noise.std(ddof=1) / np.sqrt(200)


def test_a_constant_series_is_stationary_and_too_short_a_window_is_refused():
  assert analysis.stationarity(np.ones(6), z=3.0)["stationary"]
  with pytest.raises(ValueError, match=">= 4"):
    analysis.stationarity([1.0, 2.0, 3.0], z=3.0)


# --- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    (dict(schedule="cosine"), "stationary_evals=4 is invalid: allowed 1 unless train.schedule"),
    (dict(stationary_evals=3), "stationary_evals=3 is invalid: allowed 1 .* or an integer >= 4"),
    (dict(stationary_evals=7), "stationary_evals=7 is invalid: allowed an integer whose window"),
])
def test_bad_window_settings_are_refused_by_name(changes, message):
  config = window_config()
  config_lib.set_fields(config, changes)
  with pytest.raises(ConfigError, match=message):
    config_lib.validate(config)


# --- end to end -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def window_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("window"))
  return workdir, experiment.run(window_config(), workdir)


def test_reported_losses_are_the_window_averages_and_keep_the_identity(window_run):
  _, results = window_run
  for run in results["runs"]:
    assert len(run["window_eval_losses"]) == WINDOW
    assert run["eval_loss"] == pytest.approx(np.mean(run["window_eval_losses"]), rel=1e-12)
    assert run["final_eval_loss"] == run["window_eval_losses"][-1]
    assert run["stationarity"]["evals"] == WINDOW
    if run["depth"] > 1:
      assert run["eval_loss"] == pytest.approx(
          run["C"] + (run["A"] - run["C"]) / run["depth"], rel=1e-9)
    # 20 steps at a constant rate: the iterate still moves between evaluations
    assert len(set(run["window_eval_losses"])) == WINDOW


def test_window_losses_are_the_final_losses_of_runs_stopped_at_those_steps(window_run,
                                                                          tmp_path):
  """The window reads back the states training saved at its steps: its loss at step 25 is
  the final-iterate loss of the same run stopped there (same stream, same evaluation set;
  the rate is constant, so max_steps changes nothing before it)."""
  workdir, results = window_run
  spec = config_lib.grid_specs(window_config())[0]
  assert spec.stationary_steps == (20, 25, 30, 35)
  steps = sorted(map(int, os.listdir(os.path.join(workdir, "checkpoints", spec.name))))
  assert set(spec.stationary_steps) <= set(steps)
  stopped = window_config()
  config_lib.set_fields(stopped, dict(max_steps=25, stationary_evals=1))
  stopped_runs = experiment.run(stopped, str(tmp_path / "stopped"))["runs"]
  for run, at_25 in zip(results["runs"], stopped_runs):
    assert (run["depth"], run["seed"]) == (at_25["depth"], at_25["seed"])
    assert "window_eval_losses" not in at_25
    assert run["window_eval_losses"][1] == pytest.approx(at_25["eval_loss"], rel=1e-6)


def test_a_run_stopped_inside_the_window_resumes_to_the_same_numbers(window_run, tmp_path):
  _, reference = window_run
  workdir = str(tmp_path / "stopped")
  save = GridCheckpoints.save

  class Crash(Exception):
    pass

  def save_then_die(self, state, *, train_time_s):
    save(self, state, train_time_s=train_time_s)
    if int(state.step) == 25:  # inside the window, not a checkpoint_every step
      raise Crash

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(GridCheckpoints, "save", save_then_die)
    with pytest.raises(Crash):
      experiment.run(window_config(), workdir)
  results = experiment.run(window_config(), workdir)
  assert json.dumps(results["runs"], sort_keys=True) == json.dumps(reference["runs"],
                                                                   sort_keys=True)


def test_a_model_that_still_moves_is_flagged_and_left_out_of_the_fit():
  from inverse_depth import evaluation
  runs = [dict(depth=L, seed=0, eval_loss=1.0, diverged=False, target_second_moment=10.0,
               stationarity=analysis.stationarity(series, z=3.0))
          for L, series in ((1, [1.0, 1.01, 0.99, 1.0, 1.005, 0.995]),
                            (2, [1.2, 1.15, 1.1, 1.05, 1.0, 0.95]))]
  evaluation.flag_outliers(runs, {}, factor=1.2)
  assert not runs[0]["flagged"]
  assert runs[1]["flagged"] and "not stationary over its last 6 evaluations" in (
      runs[1]["flag_reason"])


def test_the_noise_prediction_reads_the_window_of_a_finished_run(window_run):
  """experiments.sgd_noise end to end on the tiny run: one trace per window step and seed,
  turned into excesses by theory.sgd_stationary_excess and written next to the fit."""
  from inverse_depth import sgd_noise, theory
  workdir, results = window_run
  found = sgd_noise.one_layer_noise(workdir, num_contexts=64, chunk_size=32)
  assert found["layer"].shape == found["model"].shape == (1, WINDOW, 2)  # one rate, 2 seeds
  assert np.all(found["layer"] > 0) and np.all(found["model"] > 0)
  assert len(set(found["layer"][0, :, 0])) == WINDOW  # each step its own state
  path = noise_report.write_report(workdir, num_contexts=64)
  with open(os.path.join(workdir, sgd_noise.NOISE_FILE)) as f:
    written, = json.load(f)["rates"]
  config = window_config()
  assert written["predicted_c"] == pytest.approx(theory.sgd_stationary_excess(
      written["trace_layer"], learning_rate=config.train.learning_rate,
      momentum=config.train.momentum,
      batch_size=config.train.batch_size))
  assert written["fitted_c"] == results["fits"][0]["c"]
  assert "| c (depth term) |" in open(path).read()


def test_the_noise_traces_of_every_evaluation_are_the_one_layer_noise_of_its_state(window_run):
  """metrics.jsonl's per-evaluation traces of the one-layer models, at the window's steps,
  equal sgd_noise.one_layer_noise on the same contexts, computed after the run from the
  checkpoints there (one model alone, one chunk); every evaluation records both traces of
  every model."""
  from inverse_depth import sgd_noise, trajectory
  workdir, _ = window_run
  spec = config_lib.grid_specs(window_config())[0]
  found = trajectory.read_metrics(workdir_lib.read_metrics(workdir), spec.label)
  assert found["noise_layer"].shape == found["noise_model"].shape == found["val_loss"].shape
  assert np.all(found["noise_layer"] > 0) and np.all(found["noise_model"] > 0)
  after = sgd_noise.one_layer_noise(workdir, num_contexts=trajectory.NOISE_CONTEXTS,
                                    chunk_size=trajectory.NOISE_CONTEXTS)
  window_E = [list(found["step"]).index(step) for step in spec.stationary_steps]
  member = spec.depths.index(1)
  for group in ("layer", "model"):
    recorded_WS = found[f"noise_{group}"][window_E, :, member]
    np.testing.assert_allclose(recorded_WS, after[group][0], rtol=1e-5)


# --- rate sweeps ----------------------------------------------------------------------------

def test_a_rate_of_a_sweep_matches_the_same_rate_trained_alone(tmp_path):
  """rate_factors trains every model at each rate on one sampler; the models of one rate are
  the models a run at that rate alone trains (to float rounding: f x (lr x update) against
  (f lr) x update), and records and fits carry their learning_rate."""
  sweep = window_config()
  config_lib.set_fields(sweep, dict(rate_factors=(0.5, 2.0), stationary_evals=1, max_steps=20))
  swept = experiment.run(sweep, str(tmp_path / "sweep"))
  alone = window_config()
  config_lib.set_fields(alone, dict(learning_rate=0.02, stationary_evals=1, max_steps=20))
  single = experiment.run(alone, str(tmp_path / "alone"))
  assert sorted({r["learning_rate"] for r in swept["runs"]}) == [0.005, 0.02]
  assert sorted(f["learning_rate"] for f in swept["fits"]) == [0.005, 0.02]
  fast = [r for r in swept["runs"] if r["learning_rate"] == 0.02]
  assert [(r["depth"], r["seed"]) for r in fast] == [(r["depth"], r["seed"])
                                                    for r in single["runs"]]
  for in_sweep, by_itself in zip(fast, single["runs"]):
    assert in_sweep["eval_loss"] == pytest.approx(by_itself["eval_loss"], rel=1e-4)
  slow = [r for r in swept["runs"] if r["learning_rate"] == 0.005]
  assert all(s["eval_loss"] != f["eval_loss"] for s, f in zip(slow, fast))
  with open(run_report.write_report(os.path.join(tmp_path, "sweep"))) as f:
    assert "(a,b)=(0,0), lr 0.005" in f.read()
  # the noise prediction and the sweep table take each rate's own one-layer models and fit
  from inverse_depth import sgd_noise
  predicted = sgd_noise.predict(str(tmp_path / "sweep"), num_contexts=64)["rates"]
  assert [e["learning_rate"] for e in predicted] == [0.005, 0.02]
  assert [e["fitted_c"] for e in predicted] == [
      next(f["c"] for f in swept["fits"] if f["learning_rate"] == e["learning_rate"])
      for e in predicted]
  assert predicted[0]["trace_layer"] != predicted[1]["trace_layer"]
  rows = sgd_noise.sweep_rows([str(tmp_path / "sweep"), str(tmp_path / "alone")])
  assert [(r["batch_size"], r["learning_rate"]) for r in rows] == [(32, 0.005), (32, 0.02),
                                                                   (32, 0.02)]
  assert np.isnan(rows[2]["predicted_c"]) != np.isnan(rows[1]["predicted_c"])  # alone: none
  noise_report.write_sweep_report(str(tmp_path / "table"), [str(tmp_path / "sweep")])
  assert "| 32 | 0.005 |" in open(tmp_path / "table" / "sweep.md").read()



def test_the_relaxation_probe_replays_the_run_and_presets_groups(window_run):
  """relaxation.approach_with_groups_preset (experiments.relaxation_probe) with nothing preset
  trains one depth alone through the run's own stream: its temperature readings are the run's
  recorded ones (a model trained inside the grid matches it alone); with W_q and W_k preset,
  the first reading starts from the final one."""
  from inverse_depth import relaxation, trajectory
  workdir, _ = window_run
  spec = config_lib.grid_specs(window_config())[0]
  trainer = experiment.grid_trainer(spec)
  final = experiment.read_window(spec, trainer, trainer.init_state(), workdir,
                                 (spec.train.max_steps,))[0]
  recorded = trajectory.read_metrics(workdir_lib.read_metrics(workdir), spec.label)
  m = spec.depths.index(2)
  replay = relaxation.approach_with_groups_preset(spec, trainer.layout, final, m, [],
                                                  spec.train.max_steps)
  np.testing.assert_allclose(replay["temperature_ES"], recorded["temperature"][:, :, m],
                             rtol=1e-4)
  preset = relaxation.approach_with_groups_preset(spec, trainer.layout, final, m,
                                                  ["W_q", "W_k"], 5)
  first_change = np.abs(preset["temperature_ES"][0] - recorded["temperature"][-1, :, m])
  assert np.all(first_change < np.abs(recorded["temperature"][0, :, m]
                                      - recorded["temperature"][-1, :, m]))
  with pytest.raises(ValueError, match="unknown group 'W_z'"):
    relaxation.approach_with_groups_preset(spec, trainer.layout, final, m, ["W_z"], 5)
