"""Controlled softmax (nonlinear) attention model, packed layer layout.

Input stream H_x = W_x X is fixed across layers and pre-normalised
(Hhat_x = LayerNorm over the hidden axis, no affine part). Layer l scores the
query against the context with s_l,i = (W_q^l hhat_test)^T (W_k^l hhat_i) (no
1/sqrt(N)), the query attends to the P context tokens only (mask M(0)), and
context label states never change. Hence, with the shared value matrix,

    y_hat_L = (1/L) sum_l f_l,   f_l = g p_l . y,   g = W_o W_v W_y,

where p_l = softmax_i(s_l,i) is the query row of layer l.

Everything that depends only on the context is computed once per model. The
layer norm is linear up to a per-token scale: hhat = Wc x / sigma(x) with
Wc = W_x minus its mean over the hidden axis and sigma(x)^2 = |Wc x|^2/N + eps.
So s_l,i = r_test r_i x_test^T B_l x_i with r = 1/sigma(x) (one scalar per model
and token) and the d x d form B_l = (W_q^l Wc)^T (W_k^l Wc), built once per
layer per step: a layer then costs O(d^2 + P d) per context, independent of
the width N. The scales r enter after the contractions, so every layer of
every model runs in one batched contraction against the shared raw inputs
(no per-model slices, no per-model copy of the context).

The parameters enter only through `features` (the forms B_l, each model's
G = Wc^T Wc / N, which gives sigma(x)^2 = x^T G x + eps, and the gains), which do
not depend on the contexts; `predict` maps features and a batch to the predictors.
The trainer computes the features once per step and runs `predict` over blocks of
contexts (train.py).
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.tasks import Batch

LAYER_NORM_EPS = 1e-5


def layer_norm(h_BN: jax.Array) -> jax.Array:
  """(h - mean(h)) / sqrt(var(h) + eps) over the last (hidden) axis."""
  centred = h_BN - h_BN.mean(axis=-1, keepdims=True)
  return centred * jax.lax.rsqrt((centred ** 2).mean(axis=-1, keepdims=True) + LAYER_NORM_EPS)


def inverse_scales(centred_W_x_ND: jax.Array, x_BD: jax.Array) -> jax.Array:
  """r = 1/sigma(x), so that layer_norm(W_x x) = r Wc x (any leading axes on x)."""
  return inverse_scales_from_gram(centred_W_x_ND.T @ centred_W_x_ND / centred_W_x_ND.shape[0],
                                  x_BD)


def inverse_scales_from_gram(gram_DD: jax.Array, x_BD: jax.Array) -> jax.Array:
  """r = 1/sigma(x) = (x^T G x + eps)^(-1/2) with G = Wc^T Wc / N (any leading axes on x)."""
  return inverse_scales_from_grams(gram_DD[None], x_BD)[..., 0]


def inverse_scales_from_grams(gram_MDD: jax.Array, x_BD: jax.Array) -> jax.Array:
  """r = (x^T G_m x + eps)^(-1/2) for every model m: (..., D) -> (..., M), as x G_m (one
  matrix product against every G), then its dot with x: faster than one einsum per model
  (bench/README.md; the gradient still transposes the (..., M, D) product once)."""
  x_times_gram_BME = jnp.einsum("...d,mde->...me", x_BD, gram_MDD)
  mean_square_BM = jnp.einsum("...me,...e->...m", x_times_gram_BME, x_BD)
  return jax.lax.rsqrt(mean_square_BM + LAYER_NORM_EPS)


def scoring_features(params, layout: GridLayout) -> dict[str, jax.Array]:
  """What the scores need from the parameters, computed once per step: every layer's form
  B_l = (W_q^l Wc)^T (W_k^l Wc) ([T, d, d]) and every model's G = Wc^T Wc / N ([M, d, d])."""
  model, layer = params["model"], params["layer"]
  centred_W_x_MND = model["W_x"] - model["W_x"].mean(axis=1, keepdims=True)
  gram_MDD = jnp.einsum("mnd,mne->mde", centred_W_x_MND, centred_W_x_MND) / (
      centred_W_x_MND.shape[1])
  centred_W_x_TND = layout.expand_to_layers(centred_W_x_MND)
  query_map_TND = jnp.einsum("tij,tjd->tid", layer["W_q"], centred_W_x_TND)
  key_map_TND = jnp.einsum("tij,tjd->tid", layer["W_k"], centred_W_x_TND)
  return dict(form_TDD=jnp.einsum("tnd,tne->tde", query_map_TND, key_map_TND), gram_MDD=gram_MDD)


def attention_from_features(features, batch: Batch, layout: GridLayout) -> jax.Array:
  """Query rows p_l of every packed layer from `scoring_features`, contexts first: [B, T, P].
  In this order the batch is the leading axis of every contraction, so none needs a transpose
  of the [B, T, P] scores (bench/README.md: the training step's layout)."""
  scale_context_BMP = jnp.swapaxes(inverse_scales_from_grams(features["gram_MDD"],
                                                             batch.x_context_BPD), 1, 2)
  scale_test_BM = inverse_scales_from_grams(features["gram_MDD"], batch.x_test_BD)
  probe_BTE = (jnp.einsum("tde,bd->bte", features["form_TDD"], batch.x_test_BD)
               * layout.expand_to_layers(scale_test_BM, axis=1)[:, :, None])
  raw_scores_BTP = jnp.einsum("bte,bpe->btp", probe_BTE, batch.x_context_BPD)
  scores_BTP = raw_scores_BTP * layout.expand_to_layers(scale_context_BMP, axis=1)
  return jax.nn.softmax(scores_BTP, axis=-1)


def test_attention(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """Query rows p_l of every packed layer: [T, B, P], each row sums to 1."""
  return jnp.swapaxes(attention_from_features(scoring_features(params, layout), batch, layout),
                      0, 1)


def value_gain(params) -> jax.Array:
  """g = W_o W_v W_y per model: [M]."""
  model = params["model"]
  return jnp.einsum("mi,mij,mj->m", model["W_o"], model["W_v"], model["W_y"])


def features(params, layout: GridLayout) -> dict[str, jax.Array]:
  """Everything the predictors need from the parameters (`scoring_features` and every
  layer's gain g, [T]): the part of the model that does not depend on the contexts."""
  return dict(scoring_features(params, layout),
              gain_T=layout.expand_to_layers(value_gain(params)))


def predict(features, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l = g_l p_l . y for every packed layer from `features`: [T, B]."""
  attention_BTP = attention_from_features(features, batch, layout)
  return (features["gain_T"] * jnp.einsum("btp,bp->bt", attention_BTP, batch.y_context_BP)).T


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l = g p_l . y for every packed layer: [T, B]."""
  return predict(features(params, layout), batch, layout)
