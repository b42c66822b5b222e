"""Controlled linear attention model (Bordelon et al. mask), sequential layout.

No norm, no softmax: A^l = (1/(P N)) M . (Q^T K) with Q = W_q^l H_x,
K = W_k^l H_x, H_x = W_x X fixed; the mask is -1 on the context-to-context
block, +1 from the query to the context, 0 elsewhere. Context label states
Z (N x P) are updated every layer, so layers are cascaded. With
c = 1/(L P N) and q_i . k_j = x_i^T K_l^T x_j:

    Z_l = Z_{l-1} - c W_v Z_{l-1} U^T K_l U,   h_l = h_{l-1} + c W_v Z_{l-1} U^T K_l q,

where K_l = W_x^T W_k^l^T W_q^l W_x (d x d), U = [x_1..x_P], Z_0 = W_y y^T,
h_0 = 0, y_hat = W_o h_L.

Fast exact form. Both updates see Z only through Y = Z U^T (N x d), which
obeys Y_l = Y_{l-1} - c W_v Y_{l-1} K_l S with S = U U^T. Starting from
Y_0 = W_y (U y)^T, Y_l stays in the Krylov space of W_v: Y_l = sum_j
v_j a_{l,j}^T with v_j = W_v^j W_y and per-context coefficients a_{l,j} in R^d:

    a_{l,j} = a_{l-1,j} - c S K_l^T a_{l-1,j-1},     a_{0,0} = U y,
    z_l - z_{l-1} = c sum_j g_{j+1} a_{l-1,j}^T K_l q,  g_j = W_o W_v^j W_y.

A layer then costs O(L d^2) per context, whatever N and P. The layer
predictors of a cascaded model are f_l = z_0 + L (z_l - z_{l-1}) with
z_l = W_o h_l and z_0 = 0; their mean over l is y_hat.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.tasks import Batch


def krylov_gains(model, depth: int) -> jax.Array:
  """g_j = W_o W_v^j W_y for j = 1..depth: [depth]."""

  def power(v, _):
    v = model["W_v"] @ v
    return v, model["W_o"] @ v

  return jax.lax.scan(power, model["W_y"], length=depth)[1]


def context_moments(batch: Batch) -> tuple[jax.Array, jax.Array]:
  """S = U U^T and U y per context ([B, d, d], [B, d]): shared by every model of a seed."""
  second_moment_BDD = jnp.einsum("bpd,bpe->bde", batch.x_context_BPD, batch.x_context_BPD)
  label_moment_BD = jnp.einsum("bp,bpd->bd", batch.y_context_BP, batch.x_context_BPD)
  return second_moment_BDD, label_moment_BD


def _model_layer_predictions(model, layers, batch: Batch, moments, depth: int) -> jax.Array:
  """f_l for one model whose `depth` layers are stacked in `layers`: [depth, B]."""
  second_moment_BDD, label_moment_BD = moments
  num_context = batch.x_context_BPD.shape[1]
  hidden = model["W_x"].shape[0]
  step = 1.0 / (depth * num_context * hidden)
  coeffs_JBD = jnp.zeros((depth,) + label_moment_BD.shape).at[0].set(label_moment_BD)
  gains_J = krylov_gains(model, depth)

  def layer(coeffs_JBD, qk):
    form_DD = (qk["W_k"] @ model["W_x"]).T @ (qk["W_q"] @ model["W_x"])  # K_l
    probe_BD = batch.x_test_BD @ form_DD.T  # K_l q
    increment_B = step * jnp.einsum("j,jbd,bd->b", gains_J, coeffs_JBD, probe_BD)
    pushed_JBD = jnp.einsum("jbd,de,bef->jbf", coeffs_JBD[:-1], form_DD, second_moment_BDD)
    coeffs_JBD = coeffs_JBD.at[1:].add(-step * pushed_JBD)
    return coeffs_JBD, depth * increment_B  # f_l = L (z_l - z_{l-1})

  return jax.lax.scan(layer, coeffs_JBD, layers)[1]


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l for every packed layer of every model of one seed: [T, B]."""
  moments = context_moments(batch)
  return jnp.concatenate([
      _model_layer_predictions(*layout.model_params(params, m), batch, moments, depth)
      for m, depth in enumerate(layout.depths)])
