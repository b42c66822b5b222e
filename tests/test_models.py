"""The fast controlled models against naive token-space references (docs/models.md).

Everything here runs in float64 (scoped with `jax.enable_x64`, so the flag does
not leak into other test modules) and compares to ~1e-9 relative.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import tasks
from inverse_depth.grid import GridLayout, InitScales, init_grid, model_key, init_model
from inverse_depth.models import LAYER_PREDICTIONS, linear, softmax
from tests import reference

DEPTHS = (1, 3, 2)
D, P, N, B = 4, 12, 8, 6
RTOL = 1e-9


def _seed_params(params, s):
  return jax.tree.map(lambda x: x[s], params)


def _np(tree):
  return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


def _model(params_one_seed, layout, m):
  """numpy (model leaves, layer leaves) of model m of one seed."""
  model = {k: np.asarray(v[m], np.float64) for k, v in params_one_seed["model"].items()}
  layers = {k: np.asarray(v[layout.layer_slice(m)], np.float64)
            for k, v in params_one_seed["layer"].items()}
  return model, layers


@functools.partial(jax.jit, static_argnums=(1,))
def _sample(key, task, a, b):
  return tasks.sample_batch(key, B, d=D, P=P, a=a, b=b, task=task, k=2)


def _setup(qk_init_scale, task="topk", a=0.5, b=0.25, seeds=(0, 1)):
  """A float64 grid of depths DEPTHS and a batch whose labels are U^T beta in float64."""
  layout = GridLayout(DEPTHS)
  params = init_grid(jax.random.key(1), layout, seeds, d=D, N=N,
                     scales=InitScales(qk_init_scale=qk_init_scale, positive_gain=False))
  batch = _np(_sample(jax.random.key(2), task, a, b))
  y = np.einsum("bpd,bd->bp", batch.x_context_BPD, batch.beta_BD)
  np.testing.assert_allclose(y, batch.y_context_BP, rtol=1e-4, atol=1e-4)
  batch = batch._replace(y_context_BP=y)
  batch = tasks.Batch(*[jnp.asarray(x) for x in batch])
  return layout, params, batch


def _layer_norm_np(h_NT):
  centred = h_NT - h_NT.mean(axis=0, keepdims=True)
  return centred / np.sqrt((centred ** 2).mean(axis=0, keepdims=True) + 1e-5)


def _attention_row_np(model, layer_qk, x_context_PD, x_test_D):
  """Query row p_l over the context, straight from the definition."""
  X_DT = np.concatenate([x_context_PD, x_test_D[None]], axis=0).T
  hhat_NT = _layer_norm_np(model["W_x"] @ X_DT)
  q = layer_qk[0] @ hhat_NT[:, -1]
  keys_NP = layer_qk[1] @ hhat_NT[:, :-1]
  scores = q @ keys_NP
  e = np.exp(scores - scores.max())
  return e / e.sum()


def test_params_are_float64_in_this_module(x64):
  layout, params, batch = _setup(1.0)
  assert params["model"]["W_x"].dtype == jnp.float64
  assert batch.x_context_BPD.dtype == jnp.float64


def test_grid_init_model_equals_model_initialised_alone(x64):
  """A (seed, depth) model's init does not depend on the rest of the grid."""
  layout = GridLayout(DEPTHS)
  params = init_grid(jax.random.key(3), layout, (0, 1), d=D, N=N, scales=InitScales())
  assert params["model"]["W_x"].shape == (2, 3, N, D)
  assert params["layer"]["W_q"].shape == (2, sum(DEPTHS), N, N)
  alone = init_grid(jax.random.key(3), GridLayout((2,)), (1,), d=D, N=N, scales=InitScales())
  for group in ("model", "layer"):
    for name in params[group]:
      grid_leaf = params[group][name][1]
      alone_leaf = alone[group][name][0]
      if group == "model":
        grid_leaf, alone_leaf = grid_leaf[2], alone_leaf[0]
      else:
        grid_leaf = grid_leaf[layout.layer_slice(2)]
      np.testing.assert_array_equal(np.asarray(grid_leaf), np.asarray(alone_leaf))
  # Different seeds / depths give different models.
  assert not np.allclose(params["model"]["W_x"][0, 0], params["model"]["W_x"][1, 0])
  assert not np.allclose(params["model"]["W_x"][0, 0], params["model"]["W_x"][0, 1])


def test_positive_gain_flips_readout_sign(x64):
  for seed in range(6):
    key = model_key(jax.random.key(0), seed, 2)
    plain, _ = init_model(key, 2, d=D, N=N, scales=InitScales(positive_gain=False))
    fixed, _ = init_model(key, 2, d=D, N=N, scales=InitScales(positive_gain=True))
    g_plain = float(plain["W_o"] @ plain["W_v"] @ plain["W_y"])
    g_fixed = float(fixed["W_o"] @ fixed["W_v"] @ fixed["W_y"])
    assert g_fixed > 0
    np.testing.assert_allclose(g_fixed, abs(g_plain), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(fixed["W_x"]), np.asarray(plain["W_x"]))


@pytest.mark.parametrize("task", ["topk", "top1"])
def test_softmax_model_equals_token_space_reference(x64, task):
  layout, params, batch = _setup(qk_init_scale=3.0, task=task)
  nb = _np(batch)
  for s in range(2):
    p = _seed_params(params, s)
    f_TB = np.asarray(softmax.layer_predictions(p, batch, layout))
    assert f_TB.shape == (sum(DEPTHS), B)
    for m in range(layout.num_models):
      model, layers = _model(p, layout, m)
      y_hat = f_TB[layout.layer_slice(m)].mean(axis=0)
      want = [reference.softmax_two_stream(model, layers, nb.x_context_BPD[c],
                                           nb.y_context_BP[c], nb.x_test_BD[c])
              for c in range(B)]
      np.testing.assert_allclose(y_hat, want, rtol=RTOL, atol=1e-12)


def test_softmax_parallel_representation(x64):
  """y_hat_L = (1/L) sum_l g p_l . y, g = W_o W_v W_y, p_l the query row of layer l.

  p_l from `test_attention` is checked against a softmax written from the
  definition, and the parallel form against the token-space residual model.
  """
  layout, params, batch = _setup(qk_init_scale=3.0)
  nb = _np(batch)
  p = _seed_params(params, 1)
  attention_TBP = np.asarray(softmax.test_attention(p, batch, layout))
  np.testing.assert_allclose(attention_TBP.sum(axis=-1), 1.0, rtol=1e-12)
  # Attention is far from uniform with this init (so the check below has teeth).
  assert attention_TBP.max() > 3.0 / P
  f_TB = np.asarray(softmax.layer_predictions(p, batch, layout))
  for m in range(layout.num_models):
    model, layers = _model(p, layout, m)
    g = model["W_o"] @ model["W_v"] @ model["W_y"]
    np.testing.assert_allclose(float(softmax.value_gain(p)[m]), g, rtol=1e-12)
    rows = attention_TBP[layout.layer_slice(m)]  # [L, B, P]
    for c in range(B):
      for l in range(layout.depths[m]):
        want_row = _attention_row_np(model, (layers["W_q"][l], layers["W_k"][l]),
                                     nb.x_context_BPD[c], nb.x_test_BD[c])
        np.testing.assert_allclose(rows[l, c], want_row, rtol=1e-9, atol=1e-14)
    parallel_B = g * np.einsum("lbp,bp->lb", rows, nb.y_context_BP)  # f_l
    np.testing.assert_allclose(f_TB[layout.layer_slice(m)], parallel_B, rtol=RTOL, atol=1e-12)
    want = [reference.softmax_two_stream(model, layers, nb.x_context_BPD[c], nb.y_context_BP[c],
                                         nb.x_test_BD[c]) for c in range(B)]
    np.testing.assert_allclose(parallel_B.mean(axis=0), want, rtol=RTOL, atol=1e-12)


def test_softmax_layers_differ(x64):
  """Layer predictors of a deep model are not all equal (else the identity is trivial)."""
  layout, params, batch = _setup(qk_init_scale=3.0)
  f_TB = np.asarray(softmax.layer_predictions(_seed_params(params, 0), batch, layout))
  deep = f_TB[layout.layer_slice(1)]
  assert np.abs(deep[0] - deep[1]).max() > 1e-3


def test_linear_model_equals_token_space_reference(x64):
  """Final readout z_L and each layer predictor f_l = L (z_l - z_{l-1}) (z_0 = 0)."""
  layout, params, batch = _setup(qk_init_scale=2.0)
  nb = _np(batch)
  for s in range(2):
    p = _seed_params(params, s)
    f_TB = np.asarray(linear.layer_predictions(p, batch, layout))
    assert f_TB.shape == (sum(DEPTHS), B)
    for m, depth in enumerate(layout.depths):
      model, layers = _model(p, layout, m)
      readouts_BL = np.stack([reference.linear_two_stream(model, layers, nb.x_context_BPD[c],
                                                          nb.y_context_BP[c], nb.x_test_BD[c])
                              for c in range(B)])  # [B, L + 1]
      np.testing.assert_allclose(readouts_BL[:, 0], 0.0, atol=1e-14)
      f = f_TB[layout.layer_slice(m)]
      scale = np.abs(readouts_BL).max()
      np.testing.assert_allclose(f.mean(axis=0), readouts_BL[:, -1], rtol=RTOL,
                                 atol=1e-12 * scale)
      np.testing.assert_allclose(f.T, depth * np.diff(readouts_BL, axis=1), rtol=RTOL,
                                 atol=1e-11 * scale)


def _covariance_polynomial_recursion(model, layers, x_context_PD, beta_D, x_test_D):
  """docs/models.md in x-space: returns the readouts W_o h_l for l = 0..L."""
  U = x_context_PD.T  # d x P
  q = x_test_D
  num_context = U.shape[1]
  hidden = model["W_x"].shape[0]
  depth = layers["W_q"].shape[0]
  Z = np.outer(model["W_y"], beta_D @ U)  # N x P
  h = np.zeros(hidden)
  readouts = [model["W_o"] @ h]
  for l in range(depth):
    B_l = model["W_x"].T @ layers["W_k"][l].T @ layers["W_q"][l] @ model["W_x"] / hidden
    Z_prev = Z
    Z = Z_prev - model["W_v"] @ Z_prev @ U.T @ B_l @ U / (depth * num_context)
    h = h + model["W_v"] @ Z_prev @ U.T @ B_l @ q / (depth * num_context)
    readouts.append(model["W_o"] @ h)
  return np.array(readouts)


def test_linear_model_equals_covariance_polynomial_recursion(x64):
  layout, params, batch = _setup(qk_init_scale=2.0, a=1.0, b=0.5)
  nb = _np(batch)
  p = _seed_params(params, 0)
  f_TB = np.asarray(linear.layer_predictions(p, batch, layout))
  for m, depth in enumerate(layout.depths):
    model, layers = _model(p, layout, m)
    readouts_BL = np.stack([
        _covariance_polynomial_recursion(model, layers, nb.x_context_BPD[c], nb.beta_BD[c],
                                         nb.x_test_BD[c]) for c in range(B)])
    scale = np.abs(readouts_BL).max()
    np.testing.assert_allclose(f_TB[layout.layer_slice(m)].mean(axis=0), readouts_BL[:, -1],
                               rtol=RTOL, atol=1e-12 * scale)
    np.testing.assert_allclose(f_TB[layout.layer_slice(m)].T,
                               depth * np.diff(readouts_BL, axis=1), rtol=RTOL,
                               atol=1e-11 * scale)


def test_linear_gradient_descent_start_is_repeated_gradient_descent(x64):
  """value_init="identity", an exact identity query/key start of scale s and orthogonal W_x
  make the depth-L model L steps of gradient descent on the context's least squares:
  w_l = w_{l-1} + eta S_hat (beta - w_{l-1}), w_0 = 0, S_hat = U U^T / P, y_hat = q . w_L,
  with eta = s^2 L^exponent / (d L) (docs/models.md; the repeated-update construction)."""
  qk_scale, exponent = 1.7, 1.0
  layout = GridLayout(DEPTHS)
  params = init_grid(jax.random.key(1), layout, (0,), d=D, N=N, model="linear",
                     scales=InitScales(qk_init_scale=qk_scale, qk_init_depth_exponent=exponent,
                                       qk_init="identity", qk_init_noise=0.0,
                                       W_x_init="orthogonal", value_init="identity"))
  _, _, batch = _setup(qk_init_scale=1.0, a=1.0, b=0.5)
  nb = _np(batch)
  f_TB = np.asarray(linear.layer_predictions(_seed_params(params, 0), batch, layout))
  for m, depth in enumerate(layout.depths):
    eta = qk_scale ** 2 * depth ** exponent / (D * depth)
    expected = []
    for c in range(B):
      U = nb.x_context_BPD[c].T
      second_moment = U @ U.T / P
      w = np.zeros(D)
      for _ in range(depth):
        w = w + eta * second_moment @ (nb.beta_BD[c] - w)
      expected.append(nb.x_test_BD[c] @ w)
    np.testing.assert_allclose(f_TB[layout.layer_slice(m)].mean(axis=0), expected, rtol=1e-9)


def test_W_y_scale_scales_the_label_embedding_only():
  """W_y_scale multiplies W_y and leaves every other weight as drawn (same key)."""
  plain = init_model(jax.random.key(0), 2, d=D, N=N, model="single_stream", scales=InitScales())
  scaled = init_model(jax.random.key(0), 2, d=D, N=N, model="single_stream",
                      scales=InitScales(W_y_init_scale=0.25))
  np.testing.assert_allclose(scaled[0]["W_y"], 0.25 * plain[0]["W_y"], rtol=1e-6)
  for name in ("W_x", "W_v"):
    np.testing.assert_array_equal(scaled[0][name], plain[0][name])
  np.testing.assert_array_equal(np.abs(scaled[0]["W_o"]), np.abs(plain[0]["W_o"]))
  jax.tree.map(np.testing.assert_array_equal, scaled[1], plain[1])


def test_value_init_identity_sets_every_gain_to_one():
  model, layers = init_model(jax.random.key(0), 3, d=D, N=N, model="per_layer_values",
                             scales=InitScales(value_init="identity"))
  gains = [model["W_o"] @ layers["W_v"][l] @ model["W_y"] for l in range(3)]
  np.testing.assert_allclose(gains, 1.0, rtol=1e-6)
  model, _ = init_model(jax.random.key(0), 3, d=D, N=N, model="linear",
                        scales=InitScales(value_init="identity"))
  np.testing.assert_allclose(linear.krylov_gains(model, 3), 1.0, rtol=1e-5)
  with pytest.raises(ValueError, match="value_init"):
    init_model(jax.random.key(0), 1, d=D, N=N, scales=InitScales(value_init="orthogonal"))


def test_linear_context_updates_matter(x64):
  """The depth-3 model is not the sum of independent first-order layer terms.

  Replacing the context updates by Z_l = Z_0 changes the prediction, so the
  comparisons above exercise the Krylov (W_v^j) terms of the fast form.
  """
  layout, params, batch = _setup(qk_init_scale=2.0)
  nb = _np(batch)
  p = _seed_params(params, 0)
  model, layers = _model(p, layout, 1)  # depth 3
  f = np.asarray(linear.layer_predictions(p, batch, layout))[layout.layer_slice(1)]
  frozen = []
  for c in range(B):
    U, q = nb.x_context_BPD[c].T, nb.x_test_BD[c]
    Z0 = np.outer(model["W_y"], nb.y_context_BP[c])
    h = sum(model["W_v"] @ Z0 @ U.T @ (model["W_x"].T @ layers["W_k"][l].T @ layers["W_q"][l]
                                       @ model["W_x"] / N) @ q / (3 * P) for l in range(3))
    frozen.append(model["W_o"] @ h)
  assert np.abs(f.mean(axis=0) - np.array(frozen)).max() > 1e-4 * np.abs(frozen).max()


@pytest.mark.parametrize("name", ["softmax", "linear"])
def test_models_jit_vmap_over_seeds_and_layout_order(x64, name):
  """Jitted + vmapped over seeds equals per-seed eager; reordering depths permutes models."""
  fn = LAYER_PREDICTIONS[name]
  layout, params, batch = _setup(qk_init_scale=2.0)
  batched = jax.jit(jax.vmap(lambda pp: fn(pp, batch, layout)))(params)
  for s in range(2):
    np.testing.assert_allclose(np.asarray(batched[s]),
                               np.asarray(fn(_seed_params(params, s), batch, layout)),
                               rtol=1e-10, atol=1e-12)
  # The same models packed in another order give the same per-model predictions.
  other = GridLayout((2, 1, 3))
  other_params = init_grid(jax.random.key(1), other, (0, 1), d=D, N=N,
                           scales=InitScales(qk_init_scale=2.0, positive_gain=False))
  f_other = np.asarray(fn(_seed_params(other_params, 0), batch, other))
  f_grid = np.asarray(fn(_seed_params(params, 0), batch, layout))
  for m_grid, m_other in ((0, 1), (1, 2), (2, 0)):
    np.testing.assert_allclose(f_other[other.layer_slice(m_other)],
                               f_grid[layout.layer_slice(m_grid)], rtol=1e-10, atol=1e-12)


def test_layout_helpers():
  layout = GridLayout(DEPTHS)
  assert layout.total_layers == 6
  assert layout.offsets == (0, 1, 4)
  assert layout.layer_slice(2) == slice(4, 6)
  np.testing.assert_array_equal(layout.layer_model_index, [0, 1, 1, 1, 2, 2])
  values = jnp.arange(6.0)
  np.testing.assert_allclose(np.asarray(layout.model_mean(values)), [0.0, 2.0, 4.5])
  np.testing.assert_allclose(np.asarray(layout.expand_to_layers(jnp.array([7.0, 8.0, 9.0]))),
                             [7, 8, 8, 8, 9, 9])
