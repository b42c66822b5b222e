"""Controlled softmax model with context updates (docs/models.md, C.3), sequential layout.

As the controlled model (softmax.py), but with mask M(m): the context-to-context block of
A^l is m S_l, where S_l (P x P) is the softmax over the P context tokens of the scores
s_l,ij = (W_q^l hhat_i)^T (W_k^l hhat_j), a context token attending to itself too
(j = i is included, so S_l can be compared with rho I + (1 - rho) 11^T / P); the query
row is p_l as in M(0) (the P context tokens, not itself), and no token attends to the
query. m is one trainable scalar per model, shared by its layers (m = 0 is the controlled
model). The label stream H_y^l = H_y^{l-1} + (1/L) W_v H_y^{l-1} A^l^T now moves the
context label states Z_l (N x P), so layers are cascaded:

    Z_l = Z_{l-1} + (m/L) W_v Z_{l-1} S_l^T,     Z_0 = W_y y^T,
    h_l = h_{l-1} + (1/L) W_v Z_{l-1} p_l,       h_0 = 0 (the query's label is 0).

Fast exact form. Z_l stays in the Krylov space of W_v applied to W_y: Z_l = sum_j v_j
c_{l,j}^T with v_j = W_v^j W_y and per-context coefficients c_{l,j} in R^P:

    c_{l,j} = c_{l-1,j} + (m/L) S_l c_{l-1,j-1},     c_{0,0} = y,  c_{0,j} = 0 (j > 0),
    z_l - z_{l-1} = (1/L) sum_j g_{j+1} p_l . c_{l-1,j},   g_j = W_o W_v^j W_y,

with z_l = W_o h_l (c_{l-1,j} = 0 for j >= l, so j runs over 0..L-1). A layer costs
O(P^2 (d + L)) per context, whatever N. Layer predictors of a cascaded model:
f_l = z_0 + L (z_l - z_{l-1}) with z_0 = 0, i.e. f_l = sum_j g_{j+1} p_l . c_{l-1,j};
their mean over l is y_hat = z_L. At m = 0 only c_{l,0} = y survives and f_l = g_1 p_l . y,
the controlled model's predictor.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.models import linear, softmax
from inverse_depth.tasks import Batch


def _scaled_inputs(model, batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Centred W_x and the inputs times their layer-norm scale r (softmax.inverse_scales), so
  that every score is a plain bilinear form x'^T B_l x''."""
  centred_W_x_ND = model["W_x"] - model["W_x"].mean(axis=0, keepdims=True)
  context_BPD = softmax.inverse_scales(centred_W_x_ND, batch.x_context_BPD)[..., None] * (
      batch.x_context_BPD)
  test_BD = softmax.inverse_scales(centred_W_x_ND, batch.x_test_BD)[:, None] * batch.x_test_BD
  return centred_W_x_ND, context_BPD, test_BD


def _attention(qk, centred_W_x_ND, context_BPD, test_BD) -> tuple[jax.Array, jax.Array]:
  """One layer's query row p_l ([B, P]) and context-to-context softmax S_l ([B, P, P])."""
  form_DD = (qk["W_q"] @ centred_W_x_ND).T @ (qk["W_k"] @ centred_W_x_ND)  # B_l
  keys_BPD = context_BPD @ form_DD.T  # B_l x_j
  query_row_BP = jax.nn.softmax(jnp.einsum("bd,bpd->bp", test_BD, keys_BPD), axis=-1)
  context_attention_BPP = jax.nn.softmax(jnp.einsum("bid,bjd->bij", context_BPD, keys_BPD),
                                         axis=-1)
  return query_row_BP, context_attention_BPP


def _model_layer_predictions(model, layers, batch: Batch, depth: int) -> jax.Array:
  """f_l for one model whose `depth` layers are stacked in `layers`: [depth, B]."""
  centred_W_x_ND, context_BPD, test_BD = _scaled_inputs(model, batch)
  gains_J = linear.krylov_gains(model, depth)  # g_1 .. g_L
  labels_BP = batch.y_context_BP
  coeffs_BPJ = jnp.zeros(labels_BP.shape + (depth,), labels_BP.dtype).at[..., 0].set(labels_BP)
  context_step = model["m"] / depth

  # Rematerialised: the backward pass recomputes S_l instead of storing B x P x P per layer
  # (1.4x faster at P = 128 on CPU, and the memory of a deep model no longer grows with P^2).
  @jax.checkpoint
  def layer(coeffs_BPJ, qk):
    query_row_BP, context_attention_BPP = _attention(qk, centred_W_x_ND, context_BPD, test_BD)
    prediction_B = jnp.einsum("bpj,j,bp->b", coeffs_BPJ, gains_J, query_row_BP)
    pushed_BPJ = jnp.einsum("bij,bjk->bik", context_attention_BPP, coeffs_BPJ[..., :-1])
    return coeffs_BPJ.at[..., 1:].add(context_step * pushed_BPJ), prediction_B

  return jax.lax.scan(layer, coeffs_BPJ, layers)[1]


def first_layer_context_attention(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """S_1 (the first layer's context-to-context softmax) of every model of one seed:
  [M, B, P, P]."""

  def one_model(m: int) -> jax.Array:
    model = jax.tree.map(lambda x: x[m], params["model"])
    qk = jax.tree.map(lambda x: x[layout.layer_slice(m).start], params["layer"])
    return _attention(qk, *_scaled_inputs(model, batch))[1]

  return jnp.stack([one_model(m) for m in range(len(layout.depths))])


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l for every packed layer of every model of one seed: [T, B]."""
  return jnp.concatenate([
      _model_layer_predictions(*layout.model_params(params, m), batch, depth)
      for m, depth in enumerate(layout.depths)])
