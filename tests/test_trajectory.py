"""What a run records per model at every evaluation (inverse_depth.trajectory): the identity's
R, A, C from layer predictors, and the parameter summary (norms, gain, score temperature)."""

import jax
import numpy as np

from inverse_depth import analysis, trajectory
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.models import softmax


def test_identity_terms_equal_decompose_model_by_model():
  layout = GridLayout((1, 2, 5))
  rng = np.random.default_rng(0)
  layer_preds_STE = rng.normal(size=(2, layout.total_layers, 50))
  target_E = rng.normal(size=50)
  terms = trajectory.identity_terms(layer_preds_STE, target_E, layout)
  for s in range(2):
    for m in range(layout.num_models):
      expected = analysis.decompose(layer_preds_STE[s, layout.layer_slice(m)], target_E)
      np.testing.assert_allclose(terms["R"][s, m], expected["R"], rtol=1e-12)
      np.testing.assert_allclose(terms["A"][s, m], expected["A"], rtol=1e-12)
      if layout.depths[m] == 1:
        assert np.isnan(terms["C"][s, m])
      else:
        np.testing.assert_allclose(terms["C"][s, m], expected["C"], rtol=1e-12)


def test_parameter_summary_reads_the_identity_start():
  """W_q = W_k = s I (+ 0.01 noise) gives temperature s^2 N with a small spread across layers,
  |W_q| = s sqrt(N) per layer, and the gain is softmax.value_gain."""
  layout, N, scale = GridLayout((1, 3)), 16, 0.73
  params = init_grid(jax.random.key(0), layout, (0, 1), d=8, N=N,
                     scales=InitScales(qk_init="identity", qk_init_scale=scale))
  summary = trajectory.parameter_summary(params, layout)
  assert set(summary) >= {"norm_W_x", "norm_W_y", "norm_W_v", "norm_W_o", "norm_W_q",
                          "norm_W_k", "gain", "temperature", "temperature_spread"}
  np.testing.assert_allclose(summary["temperature"], scale ** 2 * N, rtol=0.02)
  assert np.all(summary["temperature_spread"] < 0.02)
  np.testing.assert_allclose(summary["norm_W_q"], scale * np.sqrt(N), rtol=0.02)
  gains = np.stack([softmax.value_gain(jax.tree.map(lambda x: x[s], params)) for s in (0, 1)])
  np.testing.assert_allclose(summary["gain"], gains, rtol=1e-6)
  np.testing.assert_allclose(summary["norm_W_x"][0, 0],
                             np.linalg.norm(np.asarray(params["model"]["W_x"][0, 0])), rtol=1e-6)


def test_relaxation_time_recovers_an_exponential_approach_and_refuses_a_straight_line():
  steps = np.arange(250, 20001, 250.0)
  noise = 0.01 * np.random.default_rng(1).normal(size=steps.size)
  fit = trajectory.relaxation_time(steps, 2.0 + 0.5 * np.exp(-steps / 3000) + noise)
  assert fit["resolved"] and abs(fit["tau"] / 3000 - 1) < 0.2 and abs(fit["y_inf"] - 2) < 0.01
  assert not trajectory.relaxation_time(steps, 2.0 - 1e-5 * steps + noise)["resolved"]


def test_late_slope_finds_a_drift_and_not_white_noise():
  steps = np.arange(250, 20001, 250.0)
  rng = np.random.default_rng(2)
  drift = trajectory.late_slope(steps, 2.0 - 0.005 * steps / 1000 + 0.01 * rng.normal(
      size=steps.size), 10000)
  assert drift["z"] < -5 and abs(drift["slope"] + 0.005) < 3 * drift["se"]
  flat = [trajectory.late_slope(steps, 2.0 + 0.01 * rng.normal(size=steps.size), 10000)["z"]
          for _ in range(200)]
  assert np.mean(np.abs(flat) > 3) < 0.03


def test_remaining_change_recovers_the_gap_left_by_an_exponential_approach():
  """y = 2 + 0.3 exp(-t / 4000) seen to t = 16000 with a window over the last 4000 steps: the
  series still has to fall by 0.3 (e^-3 - mean over the window) to its limit."""
  steps = np.arange(0, 16001, 250.0)
  rng = np.random.default_rng(0)
  clean = 2.0 + 0.3 * np.exp(-steps / 4000.0)
  values = clean[None] + 1e-4 * rng.standard_normal((3, steps.size))
  window = steps >= 12000
  expected = 2.0 - clean[window].mean()
  found = trajectory.remaining_change(steps, values, 12000, 0.0)
  assert found["resolved"] and abs(found["tau"] / 4000 - 1) < 0.1
  # within the resolution of the fitted tau (a log grid, 4.7% a step)
  assert abs(found["change"] - expected) < 0.05 * abs(expected)
  given = trajectory.remaining_change(steps, values, 12000, 0.0, tau=4000.0)
  assert abs(given["change"] - expected) < 0.02 * abs(expected)
  flat = trajectory.remaining_change(steps, 2.0 + 1e-3 * rng.standard_normal((3, steps.size)),
                                     12000, 0.0)
  assert abs(flat["change"]) < 5e-3
