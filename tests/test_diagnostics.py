"""Diagnostics (inverse_depth/diagnostics.py) against direct computations."""

import jax
import numpy as np
import pytest
import scipy.linalg

from inverse_depth import diagnostics, evaluation, tasks
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.models import LAYER_PREDICTIONS, softmax

D, P, N, B = 4, 16, 8, 32
LAYOUT = GridLayout((1, 3))
VIEWS = [LAYOUT.layer_slice(0), LAYOUT.layer_slice(1)]


def _setup(model, task="topk", a=0.5, b=1.0):
  keys = jax.random.split(jax.random.key(3), B)
  batch = tasks.sample_contexts(keys, d=D, P=P, a=a, b=b, task=task, k=2)
  params = jax.tree.map(lambda x: x[0], init_grid(
      jax.random.key(4), LAYOUT, (0,), d=D, N=N,
      scales=InitScales(qk_init="identity", qk_init_noise=0.3)))
  rotations = jax.vmap(lambda k: tasks.context_rotation(k, D))(keys)
  return batch, params, rotations


@pytest.mark.parametrize("model", ["softmax", "linear"])
def test_prediction_weights_reproduce_the_prediction(model):
  """Both models are linear in the labels: y_hat_v = w_v . y exactly."""
  batch, params, _ = _setup(model)
  weights_VT = diagnostics.view_weights(LAYOUT.total_layers, VIEWS)
  w_VBP = diagnostics.prediction_weights(LAYER_PREDICTIONS[model], params, batch, LAYOUT,
                                         weights_VT)
  f_TB = LAYER_PREDICTIONS[model](params, batch, LAYOUT)
  np.testing.assert_allclose(np.einsum("vbp,bp->vb", w_VBP, batch.y_context_BP),
                             LAYOUT.model_mean(f_TB), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["softmax", "linear"])
def test_modewise_losses_sum_to_the_expected_loss_over_beta(model):
  """sum_j of the mode-wise losses = mean over contexts of (v - t)^T Omega (v - t), which
  is E_beta[(y_hat - y*)^2]; checked against Monte Carlo over fresh beta too."""
  batch, params, rotations = _setup(model)
  weights_VT = diagnostics.view_weights(LAYOUT.total_layers, VIEWS)
  w_VBP = diagnostics.prediction_weights(LAYER_PREDICTIONS[model], params, batch, LAYOUT,
                                         weights_VT)
  omega_D = tasks.power_spectrum(D, 1.0)
  losses_VD, zero_D, per_context_VB = diagnostics.modewise_losses(w_VBP, batch, rotations,
                                                                  omega_D)
  O = np.asarray(rotations, np.float64)
  Omega_BDD = np.einsum("bij,j,bkj->bik", O, np.asarray(omega_D, np.float64), O)
  v_VBD = np.einsum("vbp,bpd->vbd", np.asarray(w_VBP, np.float64),
                    np.asarray(batch.x_context_BPD, np.float64))
  residual_VBD = v_VBD - np.asarray(batch.selected_mean_BD, np.float64)
  expected_V = np.einsum("vbi,bij,vbj->vb", residual_VBD, Omega_BDD, residual_VBD).mean(-1)
  np.testing.assert_allclose(np.asarray(losses_VD).sum(-1), expected_V, rtol=1e-4)
  np.testing.assert_allclose(np.asarray(per_context_VB, np.float64),
                             np.einsum("vbi,bij,vbj->vb", residual_VBD, Omega_BDD, residual_VBD),
                             rtol=1e-4)
  t_BD = np.asarray(batch.selected_mean_BD, np.float64)
  np.testing.assert_allclose(np.asarray(zero_D).sum(),
                             np.einsum("bi,bij,bj->b", t_BD, Omega_BDD, t_BD).mean(), rtol=1e-4)
  # Monte Carlo over beta ~ N(0, Omega) with the inputs fixed.
  rng = np.random.default_rng(0)
  beta_RBD = np.einsum("bij,rbj->rbi", O * np.sqrt(np.asarray(omega_D))[None, None],
                       rng.standard_normal((4000, B, D)))
  realised_V = ((np.einsum("rbd,vbd->rvb", beta_RBD, residual_VBD)) ** 2).mean(axis=(0, 2))
  np.testing.assert_allclose(realised_V, expected_V, rtol=0.08)


def test_scoring_geometry_of_cosine_and_distorted_layers():
  """W_q = W_k = sqrt(tau / N) I scores tau cos_G: temperature tau, anisotropy 0. Two layers
  distorted by +E and -E have alignment -1. The form reproduces the model's own logits
  LN(W_x x_test)^T W_q^T W_k LN(W_x x_i)."""
  rng = np.random.default_rng(0)
  W_x = rng.normal(size=(N, D)) / np.sqrt(D)
  cosine = np.sqrt(17.0 / N) * np.eye(N)
  found = diagnostics.scoring_geometry([(W_x, cosine, cosine)])
  np.testing.assert_allclose(found["layer_temperature"], [17.0], rtol=1e-10)
  assert found["layer_anisotropy"][0] < 1e-10 and np.isnan(found["deviation_alignment"])
  E = 0.3 * rng.normal(size=(N, N))
  distorted = diagnostics.scoring_geometry([(W_x, cosine, cosine + E),
                                            (W_x, cosine, cosine - E)])
  assert min(distorted["layer_anisotropy"]) > 0.01
  np.testing.assert_allclose(distorted["deviation_alignment"], -1.0, rtol=1e-6)
  # The form B and metric G give the model's logits: s_i = x_t^T B x_i / sqrt(x^T G x x_i^T G x_i).
  W_q, W_k = rng.normal(size=(2, N, N)) / np.sqrt(N)
  x = rng.normal(size=(5, D))
  normed = np.asarray(softmax.layer_norm(jax.numpy.asarray(x @ W_x.T)), np.float64)
  logits = (normed[0] @ W_q.T) @ (W_k @ normed[1:].T)
  centred = W_x - W_x.mean(axis=0)
  form, metric = (W_q @ centred).T @ (W_k @ centred), centred.T @ centred / N
  norms = np.sqrt(np.einsum("bd,de,be->b", x, metric, x))
  np.testing.assert_allclose(logits, x[0] @ form @ x[1:].T / (norms[0] * norms[1:]), rtol=1e-4)
  # In whitened inputs z = G^(1/2) x the logit is z_t^T M z_i / (|z_t| |z_i|).
  root = scipy.linalg.sqrtm(metric).real
  whitened = np.linalg.inv(root) @ form @ np.linalg.inv(root)
  z = x @ root
  np.testing.assert_allclose(logits, z[0] @ whitened @ z[1:].T
                             / (np.linalg.norm(z[0]) * np.linalg.norm(z[1:], axis=1)), rtol=1e-4)
  found = diagnostics.scoring_geometry([(W_x, W_q, W_k)])
  tau = np.trace(whitened) / D
  np.testing.assert_allclose(found["layer_temperature"][0], tau, rtol=1e-8)
  np.testing.assert_allclose(found["layer_anisotropy"][0],
                             np.linalg.norm(whitened - tau * np.eye(D)) / (abs(tau) * np.sqrt(D)),
                             rtol=1e-8)
  # N <= d leaves the metric singular after centring: nan, not a number from a bad solve.
  narrow = diagnostics.scoring_geometry([(rng.normal(size=(D, D)), cosine[:D, :D],
                                          cosine[:D, :D])])
  assert np.isnan(narrow["layer_temperature"][0]) and np.isnan(narrow["layer_anisotropy"][0])


def test_selection_error_matches_brute_force():
  batch, params, _ = _setup("softmax")
  weights_VT = diagnostics.view_weights(LAYOUT.total_layers, VIEWS)
  attention_TBP = softmax.test_attention(params, batch, LAYOUT)
  selected_BK = tasks.selected_indices(batch, 2)
  errors_VB = np.asarray(diagnostics.selection_errors(attention_TBP, selected_BK, weights_VT))
  attention = np.asarray(attention_TBP, np.float64)
  x, q = np.asarray(batch.x_context_BPD), np.asarray(batch.x_test_BD)
  for v, layers in enumerate(VIEWS):
    for i in range(B):
      cosine = x[i] @ q[i] / (np.linalg.norm(x[i], axis=1) * np.linalg.norm(q[i]))
      target = np.zeros(P)
      target[np.argsort(-cosine)[:2]] = 0.5
      expected = np.sum((attention[layers, i].mean(axis=0) - target) ** 2)
      assert errors_VB[v, i] == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_selected_indices_on_the_copy_task_find_the_copied_input():
  keys = jax.random.split(jax.random.key(8), B)
  batch = tasks.sample_contexts(keys, d=D, P=P, a=0.0, b=0.0, task="top1", k=1)
  index_B = np.asarray(tasks.selected_indices(batch, 1))[:, 0]
  np.testing.assert_array_equal(np.asarray(batch.x_context_BPD)[np.arange(B), index_B],
                                np.asarray(batch.x_test_BD))


def test_uniform_mixture_fit_matches_direct_least_squares():
  """rho and R^2 from tr S and |S|_F^2 equal a least-squares fit on the full matrices, and an
  exact mixture is recovered with R^2 = 1."""
  P, B = 7, 40
  rng = np.random.default_rng(0)
  S_BPP = rng.dirichlet(np.ones(P) * 0.5, size=(B, P)) + 0.3 * np.eye(P)
  S_BPP /= S_BPP.sum(-1, keepdims=True)
  trace_B, square_B = map(np.asarray, diagnostics.attention_moments(S_BPP))
  fit = diagnostics.uniform_mixture_fit(trace_B, square_B, P)
  uniform = np.full((P, P), 1.0 / P)
  design = (np.eye(P) - uniform).ravel()  # S - 11^T/P = rho (I - 11^T/P) + error
  response_BX = (S_BPP - uniform).reshape(B, -1)
  rho = np.sum(response_BX @ design) / (B * design @ design)
  residual = np.sum((response_BX - rho * design) ** 2)
  # attention_moments runs in float32 (as in training)
  assert fit["rho"] == pytest.approx(rho, rel=1e-5)
  assert fit["r2"] == pytest.approx(1.0 - residual / np.sum(response_BX ** 2), rel=1e-5)
  assert 0.0 < fit["r2"] < 1.0
  exact = 0.35 * np.eye(P) + 0.65 * uniform
  fit = diagnostics.uniform_mixture_fit(*map(np.asarray, diagnostics.attention_moments(
      np.stack([exact] * 3))), P)
  assert fit["rho"] == pytest.approx(0.35, rel=1e-5)
  assert fit["r2"] == pytest.approx(1.0, abs=1e-5)


def test_chunked_diagnostics_combine_to_the_whole_set():
  """Means over chunks of unequal size, weighted by their contexts, equal the mean over all
  contexts; per-context values concatenate in order; a picture comes from the first chunk."""
  rng = np.random.default_rng(0)
  per_context = rng.normal(size=(2, 3, 10))  # [seeds, V, contexts]
  sizes = (4, 4, 2)
  bounds = np.cumsum((0,) + sizes)
  per_chunk = [dict(modewise_loss=per_context[..., lo:hi].mean(-1),
                    selection_error=per_context[..., lo:hi],
                    context_attention_heatmap=np.full((2, 2), float(lo)))
               for lo, hi in zip(bounds[:-1], bounds[1:])]
  combined = evaluation.combine_chunks(per_chunk, [float(n) for n in sizes])
  np.testing.assert_allclose(combined["modewise_loss"], per_context.mean(-1), rtol=1e-12)
  np.testing.assert_array_equal(combined["selection_error"], per_context)
  np.testing.assert_array_equal(combined["context_attention_heatmap"], np.zeros((2, 2)))
  assert evaluation.combine_chunks([], []) == {}


def test_each_kind_gets_its_diagnostics():
  assert evaluation.diagnostics_of("linear") == (evaluation.MODEWISE,)
  assert evaluation.diagnostics_of("single_stream") == (evaluation.SELECTION,)
  assert evaluation.diagnostics_of("context_updates") == (
      evaluation.MODEWISE, evaluation.SELECTION, evaluation.CONTEXT_ATTENTION,
      evaluation.M_PROFILE, evaluation.SCORING_GEOMETRY)
  assert evaluation.diagnostics_of("softmax") == (
      evaluation.MODEWISE, evaluation.SELECTION, evaluation.SCORING_GEOMETRY)


def test_gradient_noise_is_the_variance_of_the_trainers_per_context_gradients():
  """Against the training loss itself: train.grid_losses on one context at a time, one grad
  each, the variance over contexts summed per parameter group."""
  from inverse_depth import train
  layout = GridLayout((2,))
  params = jax.tree.map(lambda x: x[0], init_grid(jax.random.key(0), layout, (0,), d=4, N=8,
                                                  scales=InitScales(), model="softmax"))
  batch = tasks.sample_batch(jax.random.key(1), 16, d=4, P=8, a=0.0, b=0.0, task="topk", k=2)
  predictions = LAYER_PREDICTIONS["softmax"]
  found = diagnostics.gradient_noise(predictions, *layout.model_params(params, 0), batch)

  def one_context_grad(i):
    one = jax.tree.map(lambda x: x[i:i + 1][None], batch)  # [S=1, B=1, ...]
    return jax.grad(lambda p: train.grid_losses(predictions, p, one, layout).sum())(
        jax.tree.map(lambda x: x[None], params))

  grads = [one_context_grad(i) for i in range(16)]
  for group in ("layer", "model"):
    stacked = [np.stack([np.asarray(leaf) for leaf in leaves])
               for leaves in zip(*(jax.tree.leaves(g[group]) for g in grads))]
    expected = sum(float(np.sum(np.var(leaf, axis=0))) for leaf in stacked)
    assert float(found[group]) == pytest.approx(expected, rel=1e-4)
    assert expected > 0
