"""What a run records per model at every evaluation (inverse_depth.trajectory): the identity's
R, A, C from layer predictors, the parameter summary (norms, gain, score temperature), and the
gradient-noise traces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import analysis, diagnostics, models, trajectory
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.models import softmax
from inverse_depth.train import Problem


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


@pytest.mark.parametrize("kind", models.MODELS)
def test_gradient_noise_of_the_grid_is_each_models_own(kind):
  """One compiled call on the packed grid gives, per replicate and model, what
  diagnostics.gradient_noise gives for that model alone on its replicate's contexts (two
  spectra, two replicates; looped models tied in pairs; four chunks of contexts)."""
  layout = GridLayout((1, 3), loop_group=2)
  d = 8 if kind == "linear" else 4
  params = init_grid(jax.random.key(0), layout, (0, 1), d=d, N=8, scales=InitScales(),
                     model=kind)
  problem = Problem("topk", 2, d, 16, ((0.0, 0.0), (1.0, 0.5)))
  contexts = trajectory.noise_contexts(problem, root_seed=3, num_contexts=32)
  contexts_S = jax.tree.map(lambda *xs: jnp.stack(xs), *contexts)  # replicate s: spectrum s
  layer_predictions = models.LAYER_PREDICTIONS[kind]
  found = jax.jit(lambda p, x: trajectory.gradient_noise(
      lambda q, batch: layer_predictions(q, batch, layout), p, x, layout, 8))(params, contexts_S)
  for m, depth in enumerate(layout.depths):
    alone = GridLayout((depth,), loop_group=2)
    noise = jax.jit(lambda model, layers, batch, alone=alone: diagnostics.gradient_noise(
        lambda p, b, _: layer_predictions(p, b, alone), model, layers, batch))
    for s in range(2):
      expected = noise(*layout.model_params(jax.tree.map(lambda x: x[s], params), m),
                       contexts[s])
      for group in ("layer", "model"):
        np.testing.assert_allclose(found[group][s, m], expected[group], rtol=2e-5)
  with pytest.raises(ValueError, match="chunks of 12"):
    trajectory.gradient_noise(layer_predictions, params, contexts_S, layout, 12)


def test_read_metrics_fills_a_quantity_missing_from_earlier_lines_with_nan():
  """A run resumed by newer code records a quantity from some step on: the earlier
  evaluations read as NaN, not an error."""
  lines = [dict(model="softmax", step=10, val_loss=[[1.0, 2.0]]),
           dict(model="softmax", step=20, val_loss=[[0.5, 1.5]], noise_layer=[[3.0, 4.0]]),
           dict(model="linear", step=10, val_loss=[[9.0]])]
  found = trajectory.read_metrics(lines, "softmax")
  np.testing.assert_array_equal(found["step"], [10, 20])
  assert found["noise_layer"].shape == (2, 1, 2)
  assert np.isnan(found["noise_layer"][0]).all()
  np.testing.assert_array_equal(found["noise_layer"][1], [[3.0, 4.0]])
