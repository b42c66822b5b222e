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

with z_l = W_o h_l (c_{l-1,j} = 0 for j >= l, so j runs over 0..l-1). Layer l costs
O(P^2 (d + l)) per context, whatever N. Layer predictors of a cascaded model:
f_l = z_0 + L (z_l - z_{l-1}) with z_0 = 0, i.e. f_l = sum_j g_{j+1} p_l . c_{l-1,j};
their mean over l is y_hat = z_L. At m = 0 only c_{l,0} = y survives and f_l = g_1 p_l . y,
the controlled model's predictor.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.models import linear, softmax
from inverse_depth.tasks import Batch


def _scaled_inputs(model, batch: Batch) -> tuple[jax.Array, ...]:
  """Centred W_x, the context tokens' layer-norm scales r (softmax.inverse_scales), and the
  inputs times their scale, so that every score is a plain bilinear form x'^T B_l x''."""
  centred_W_x_ND = model["W_x"] - model["W_x"].mean(axis=0, keepdims=True)
  scale_BP = softmax.inverse_scales(centred_W_x_ND, batch.x_context_BPD)
  test_BD = softmax.inverse_scales(centred_W_x_ND, batch.x_test_BD)[:, None] * batch.x_test_BD
  return centred_W_x_ND, scale_BP, scale_BP[..., None] * batch.x_context_BPD, test_BD


@jax.custom_vjp
def _context_scores(scale_BP, form_DD, x_BPD) -> jax.Array:
  """s_ij = r_i r_j x_i^T B_l x_j, the context-to-context scores of one layer: [B, P, P].

  Its backward needs one B x P x P x d contraction, not two: with G = dL/ds,
  dL/dB = sum_ij G_ij r_i x_i (r_j x_j)^T and dL/dr_i = sum_j (G_ij s_ij + G_ji s_ji) / r_i.
  (x is data: its cotangent is zero.)"""
  return _context_scores_forward(scale_BP, form_DD, x_BPD)[0]


def _context_scores_forward(scale_BP, form_DD, x_BPD):
  context_BPD = scale_BP[..., None] * x_BPD
  scores_BPP = jnp.einsum("bid,bjd->bij", context_BPD, context_BPD @ form_DD.T)
  return scores_BPP, (scale_BP, context_BPD, scores_BPP, x_BPD)


def _context_scores_backward(residuals, grad_BPP):
  scale_BP, context_BPD, scores_BPP, x_BPD = residuals
  weighted_BPP = grad_BPP * scores_BPP
  grad_scale_BP = (weighted_BPP.sum(-1) + weighted_BPP.sum(-2)) / scale_BP
  grad_form_DD = jnp.einsum("bid,bie->de", context_BPD,
                            jnp.einsum("bij,bje->bie", grad_BPP, context_BPD))
  return grad_scale_BP, grad_form_DD, jnp.zeros_like(x_BPD)


_context_scores.defvjp(_context_scores_forward, _context_scores_backward)


def _form(qk, centred_W_x_ND) -> jax.Array:
  """B_l = (W_q^l Wc)^T (W_k^l Wc): [d, d]."""
  return (qk["W_q"] @ centred_W_x_ND).T @ (qk["W_k"] @ centred_W_x_ND)


def _attend_context(scale_BP, form_DD, x_BPD, coeffs_BPJ) -> jax.Array:
  """S_l c for every Krylov column c of `coeffs_BPJ`: [B, P, J].

  With E = exp(s - max_j s) (the shift changes nothing, so no gradient flows through it),
  S_l c = (E c) / (E 1): one contraction against [c, 1] gives both, and the P x P softmax is
  never normalised on its own."""
  scores_BPP = _context_scores(scale_BP, form_DD, x_BPD)
  weights_BPP = jnp.exp(scores_BPP - jax.lax.stop_gradient(scores_BPP.max(-1, keepdims=True)))
  ones_BP1 = jnp.ones_like(coeffs_BPJ[..., :1])
  summed_BPJ = jnp.einsum("bij,bjk->bik", weights_BPP,
                          jnp.concatenate([coeffs_BPJ, ones_BP1], axis=-1))
  return summed_BPJ[..., :-1] / summed_BPJ[..., -1:]


def _context_attention(scale_BP, form_DD, x_BPD) -> jax.Array:
  """The context-to-context softmax S_l of one layer: [B, P, P]."""
  return jax.nn.softmax(_context_scores(scale_BP, form_DD, x_BPD), axis=-1)


def _model_layer_predictions(model, layers, batch: Batch, depth: int) -> jax.Array:
  """f_l for one model whose `depth` layers are stacked in `layers`: [depth, B].

  The layers are unrolled so that each carries only the Krylov columns that can be non-zero
  (c_{l-1,j} = 0 for j >= l: layer l pushes l columns, not L - 1), and the last layer, whose
  pushed coefficients nothing reads, skips its context attention. Nothing is rematerialised:
  the trainer runs this on blocks of a few dozen contexts (train.py), and recomputing the
  P x P attention cost more than storing it (bench/README.md).
  """
  centred_W_x_ND, scale_BP, context_BPD, test_BD = _scaled_inputs(model, batch)
  gains_J = linear.krylov_gains(model, depth)  # g_1 .. g_L
  coeffs_BPJ = batch.y_context_BP[..., None]  # c_{0,0} = y
  context_step = model["m"] / depth
  predictions = []
  for l in range(depth):  # coeffs_BPJ holds c_{l,0} .. c_{l,l} (0-based layer l)
    form_DD = _form(jax.tree.map(lambda w: w[l], layers), centred_W_x_ND)
    query_row_BP = jax.nn.softmax(jnp.einsum("bd,de,bpe->bp", test_BD, form_DD, context_BPD),
                                  axis=-1)
    predictions.append(jnp.einsum("bpj,j,bp->b", coeffs_BPJ, gains_J[:l + 1], query_row_BP))
    if l + 1 < depth:
      pushed_BPJ = _attend_context(scale_BP, form_DD, batch.x_context_BPD, coeffs_BPJ)
      no_column = jnp.zeros_like(coeffs_BPJ[..., :1])
      coeffs_BPJ = (jnp.concatenate([coeffs_BPJ, no_column], axis=-1)
                    + context_step * jnp.concatenate([no_column, pushed_BPJ], axis=-1))
  return jnp.stack(predictions)


def first_layer_context_attention(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """S_1 (the first layer's context-to-context softmax) of every model of one seed:
  [M, B, P, P]."""

  def one_model(m: int) -> jax.Array:
    model = jax.tree.map(lambda x: x[m], params["model"])
    qk = jax.tree.map(lambda x: x[layout.layer_slice(m).start], params["layer"])
    centred_W_x_ND = model["W_x"] - model["W_x"].mean(axis=0, keepdims=True)
    return _context_attention(softmax.inverse_scales(centred_W_x_ND, batch.x_context_BPD),
                              _form(qk, centred_W_x_ND), batch.x_context_BPD)

  return jnp.stack([one_model(m) for m in range(len(layout.depths))])


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l for every packed layer of every model of one seed: [T, B]."""
  return jnp.concatenate([
      _model_layer_predictions(*layout.model_params(params, m), batch, depth)
      for m, depth in enumerate(layout.depths)])
