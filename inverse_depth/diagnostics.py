"""Diagnostics of trained models on held-out contexts (docs/analysis.md, "Diagnostics").

Mode-wise loss. Both controlled models are linear in the context labels: the
prediction is y_hat = w . y with w = d y_hat / d y (per context, computed by one
backward pass). With y = U beta (U the P x d context inputs), y_hat = beta^T v,
v = U^T w, and y* = beta^T t (t the mean of the selected inputs), so over
beta ~ N(0, Omega), Omega = O diag(omega) O^T,

    E_beta[(y_hat - y*)^2] = sum_j omega_j (o_j . (v - t))^2,

where o_j = O e_j is the j-th eigen-direction of Sigma. The j-th term averaged
over contexts is the loss along mode j; the modes sum to the loss (in
expectation over beta). It is normalised by the loss of predicting 0 along the
same mode, omega_j E[(o_j . t)^2].

Selection error (softmax). pbar_L = (1/L) sum_l p_l is the model's mean
attention row and p* puts 1/k on each of the k tokens that make the target:
E_L = |pbar_L - p*|^2 = |pbar_L|^2 - (2/k) sum_{i in S_k} pbar_L,i + 1/k.

First-layer context attention (context_updates). The context-to-context softmax S_1
(P x P, rows summing to 1) is fitted as rho I + (1 - rho) 11^T/P by least squares over
contexts. With <S, I> = tr S, <S, 11^T/P> = 1 and |rho I + (1 - rho) 11^T/P|_F^2 =
rho^2 (P - 1) + 1, only tr S and |S|_F^2 per context are needed:

    rho = mean(tr S - 1) / (P - 1),
    residual = mean |S|_F^2 - 2 (rho mean tr S + 1 - rho) + rho^2 (P - 1) + 1,
    R^2 = 1 - residual / mean(|S|_F^2 - 1)   (the total about the rho = 0 fit 11^T/P).
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth.grid import GridLayout
from inverse_depth.tasks import Batch


def view_weights(num_layers: int, views: list[slice]) -> jax.Array:
  """W[v, t] = 1/|view v| on the packed layers t of view v: a model's prediction is
  sum_t W[v, t] f_t (a view is a model, or the first L one-layer models of an ensemble)."""
  weights_VT = jnp.zeros((len(views), num_layers))
  for v, layers in enumerate(views):
    weights_VT = weights_VT.at[v, layers].set(1.0 / len(range(num_layers)[layers]))
  return weights_VT


def prediction_weights(layer_predictions: Callable, params, batch: Batch, layout: GridLayout,
                       view_weights_VT: jax.Array) -> jax.Array:
  """w = d y_hat_v / d y for every view v of one seed's models and every context: [V, B, P]
  (one backward pass per view)."""

  def layer_predictions_TB(y_context_BP):
    return layer_predictions(params, batch._replace(y_context_BP=y_context_BP), layout)

  predictions_TB, pullback = jax.vjp(layer_predictions_TB, batch.y_context_BP)
  return jax.vmap(lambda w_T: pullback(jnp.broadcast_to(w_T[:, None], predictions_TB.shape))[0])(
      view_weights_VT)


def modewise_losses(weights_VBP: jax.Array, batch: Batch, rotations_BDD: jax.Array,
                    omega_D: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Per-mode loss of every view, omega_j mean_contexts (o_j . (v - t))^2 ([V, D]); of
  predicting 0, omega_j mean (o_j . t)^2 ([D]); and every view's loss per context, averaged
  exactly over beta, sum_j omega_j (o_j . (v - t))^2 = E_beta[(y_hat - y*)^2 | X] ([V, B]);
  o_j is column j of the context's O."""
  v_VBD = jnp.einsum("vbp,bpd->vbd", weights_VBP, batch.x_context_BPD)
  target_modes_BD = jnp.einsum("bdj,bd->bj", rotations_BDD, batch.selected_mean_BD)
  error_modes_VBD = jnp.einsum("bdj,vbd->vbj", rotations_BDD, v_VBD) - target_modes_BD
  weighted_VBD = omega_D * error_modes_VBD ** 2
  return (jnp.mean(weighted_VBD, axis=1), omega_D * jnp.mean(target_modes_BD ** 2, axis=0),
          jnp.sum(weighted_VBD, axis=-1))


def scoring_geometry(layers: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict:
  """How each softmax layer scores tokens, from its (W_x, W_q, W_k) (models/softmax.py):
  s_i = r_test r_i x_test^T B x_i with B = (W_q Wc)^T (W_k Wc), r = 1 / sqrt(x^T G x) and
  G = Wc^T Wc / N (the layer norm's metric). In whitened inputs z = G^(1/2) x the score is
  z_test^T M z_i / (|z_test| |z_i|) with M = G^(-1/2) B G^(-1/2); a cosine scorer has
  M = tau I. Returns per layer the temperature tau = tr(M) / d (the logit of a cosine-1
  pair for a cosine scorer, its mean over directions otherwise) and the anisotropy
  |M - tau I|_F / |tau I|_F (0 for a cosine scorer), and `deviation_alignment`, the mean
  cosine between the layers' departures M - tau I over pairs of layers (1: every layer
  distorts alike; 0: unrelated directions; nan for one layer). All nan when G is singular
  (N <= d: the centring leaves rank N - 1)."""
  temperatures, anisotropies, deviations = [], [], []
  for W_x_ND, W_q_NN, W_k_NN in layers:
    centred_ND = np.asarray(W_x_ND, np.float64) - np.mean(W_x_ND, axis=0, keepdims=True)
    d = centred_ND.shape[1]
    metric_eigenvalues_D, metric_basis_DD = np.linalg.eigh(centred_ND.T @ centred_ND
                                                           / centred_ND.shape[0])
    if metric_eigenvalues_D.min() <= 1e-9 * metric_eigenvalues_D.max():
      nan = float("nan")
      return dict(layer_temperature=[nan] * len(layers), layer_anisotropy=[nan] * len(layers),
                  deviation_alignment=nan)
    whiten_DD = metric_basis_DD / np.sqrt(metric_eigenvalues_D) @ metric_basis_DD.T
    form_DD = (np.asarray(W_q_NN, np.float64) @ centred_ND).T @ (W_k_NN @ centred_ND)
    whitened_DD = whiten_DD @ form_DD @ whiten_DD
    tau = float(np.trace(whitened_DD) / d)
    deviation_DD = whitened_DD - tau * np.eye(d)
    temperatures.append(tau)
    anisotropies.append(float(np.linalg.norm(deviation_DD) / (abs(tau) * np.sqrt(d))))
    deviations.append(deviation_DD.ravel() / max(np.linalg.norm(deviation_DD), 1e-30))
  cosines_LL = np.array(deviations) @ np.array(deviations).T
  pairs = cosines_LL[np.triu_indices(len(layers), 1)]
  return dict(layer_temperature=temperatures, layer_anisotropy=anisotropies,
              deviation_alignment=float(pairs.mean()) if pairs.size else float("nan"))


def selection_errors(attention_TBP: jax.Array, selected_BK: jax.Array,
                     view_weights_VT: jax.Array) -> jax.Array:
  """E = |pbar - p*|^2 per view and context: [V, B] (see the module docstring)."""
  mean_attention_VBP = jnp.einsum("vt,tbp->vbp", view_weights_VT, attention_TBP)
  k = selected_BK.shape[-1]
  on_selected_VB = jnp.take_along_axis(mean_attention_VBP, selected_BK[None], axis=-1).sum(-1)
  return jnp.sum(mean_attention_VBP ** 2, axis=-1) - 2.0 * on_selected_VB / k + 1.0 / k


def attention_moments(attention_BPP: jax.Array) -> tuple[jax.Array, jax.Array]:
  """tr S and |S|_F^2 per context ([B] each): what the rho fit needs."""
  return (jnp.trace(attention_BPP, axis1=-2, axis2=-1),
          jnp.sum(attention_BPP ** 2, axis=(-2, -1)))


def uniform_mixture_fit(trace_B, square_B, P: int) -> dict:
  """Least-squares fit of S_1 = rho I + (1 - rho) 11^T/P over contexts, from their tr S and
  |S|_F^2 (module docstring): rho and R^2."""
  mean_trace, mean_square = float(np.mean(trace_B)), float(np.mean(square_B))
  rho = (mean_trace - 1.0) / (P - 1)
  residual = mean_square - 2.0 * (rho * mean_trace + 1.0 - rho) + rho ** 2 * (P - 1) + 1.0
  total = mean_square - 1.0
  return dict(rho=rho, r2=1.0 - residual / total if total > 0 else float("nan"))


def effective_context_step(model) -> float:
  """m g_2 / g_1 with g_j = W_o W_v^j W_y (C.3): the context update's step in units of the
  query path's gain. m alone is not identifiable: the output depends on m only through
  g_{j+1} m^j, so (W_v, W_o, m) -> (c W_v, W_o / c, m / c) leaves it unchanged for every
  c != 0 (sign and size of m), while this ratio is invariant (for W_v = w I it is m w)."""
  value_y = model["W_v"] @ model["W_y"]
  return float(model["m"] * (model["W_o"] @ model["W_v"] @ value_y) / (model["W_o"] @ value_y))


# C.3: the loss is re-evaluated with m moved by these offsets, every other trained weight
# fixed (run record `m_profile`): is the learned m a minimum along m, and how deep?
M_OFFSETS = (-2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0)


def loss_along_m(predict: Callable, params, target_B, weights_VT) -> np.ndarray:
  """Mean squared error of every view with every model's m moved by each of M_OFFSETS, all
  other weights as trained: [seeds, V, offsets]. `predict(params)` gives the per-layer
  predictions [seeds, T, B] on the contexts whose targets are `target_B`."""
  losses = []
  for offset in M_OFFSETS:
    moved = dict(params, model=dict(params["model"], m=params["model"]["m"] + offset))
    views_SVB = np.einsum("vt,stb->svb", np.asarray(weights_VT), predict(moved))
    losses.append(np.mean((views_SVB - np.asarray(target_B)) ** 2, axis=-1))
  return np.stack(losses, axis=-1)


def gradient_noise(layer_predictions: Callable, model: dict, layers: dict,
                   batch: Batch) -> dict:
  """Per-context gradient noise of one model's loss on `batch`: tr Cov_i[grad l_i] with
  l_i = (y_hat_i - y*_i)^2, the covariance taken over the batch's contexts, split into the
  per-layer leaves (`layer`: W_q, W_k, ... of every layer) and the leaves the layers share
  (`model`: W_x, W_y, W_v, W_o, ...). `model`, `layers`: GridLayout.model_params of one
  model (layer leaves [depth, ...]). theory.sgd_stationary_excess turns a trace into the
  excess loss it costs at a constant rate."""
  depth = jax.tree.leaves(layers)[0].shape[0]
  layout = GridLayout((depth,))
  params = dict(model=jax.tree.map(lambda x: x[None], model), layer=layers)

  def context_loss(p, one_context):
    one = jax.tree.map(lambda x: x[None], one_context)
    prediction = layout.model_mean(layer_predictions(p, one, layout))[0, 0]
    return (prediction - one.target_B[0]) ** 2

  grads = jax.vmap(jax.grad(context_loss), (None, 0))(params, batch)
  return {group: sum(jnp.sum(jnp.var(leaf, axis=0)) for leaf in jax.tree.leaves(grads[group]))
          for group in ("layer", "model")}
