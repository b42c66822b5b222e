"""Single-stream softmax model (docs/models.md, C.1), sequential layout.

One stream H^0 = W_x X + W_y y_in (N x (P+1), y_in = (y_1..y_P, 0)). Layer l reads the
evolving state: Q = W_q^l LN(H^{l-1}), K = W_k^l LN(H^{l-1}), V = W_v H^{l-1} (shared W_v;
LN over the hidden axis as softmax.layer_norm, on queries and keys only), A^l = M(0) .
softmax(Q^T K) (no 1/sqrt(N)), H^l = H^{l-1} + (1/L) V A^l^T. Under M(0) context tokens
attend to nothing, so the context columns stay h_i = W_x x_i + W_y y_i and only the query
column evolves, each layer seeing the previous one's output (cascaded):

    p_l = softmax_i((W_q^l LN(h^{l-1}))^T W_k^l LN(h_i)),
    h^l = h^{l-1} + (1/L) W_v sum_i p_l,i h_i,     h^0 = W_x x_test.

With u_i = (x_i, y_i) in R^(d+1) and E = [W_x W_y] (N x (d+1)), h_i = E u_i and
LN(h_i) = r_i Ec u_i (Ec: E minus its mean over the hidden axis, r_i = 1/sigma(h_i)), so
a layer scores against the raw tokens u_i and pools them before mapping back:
W_v sum_i p_l,i h_i = W_v E (U^T p_l). Layer predictors (cascaded): z_l = W_o h^l,
f_l = z_0 + L (z_l - z_{l-1}) = W_o W_x x_test + W_o W_v E U^T p_l; their mean is z_L.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.models import softmax
from inverse_depth.tasks import Batch


def _model_forward(model, layers, batch: Batch, depth: int) -> tuple[jax.Array, jax.Array]:
  """(f_l [depth, B], query rows p_l [depth, B, P]) of one model with `depth` layers."""
  tokens_BPE = jnp.concatenate([batch.x_context_BPD, batch.y_context_BP[..., None]], axis=-1)
  stream_map_NE = jnp.concatenate([model["W_x"], model["W_y"][:, None]], axis=1)  # E
  centred_stream_map_NE = stream_map_NE - stream_map_NE.mean(axis=0, keepdims=True)
  scale_context_BP = softmax.inverse_scales(centred_stream_map_NE, tokens_BPE)
  value_map_NE = model["W_v"] @ stream_map_NE
  query_state_BN = batch.x_test_BD @ model["W_x"].T  # h^0
  readout_0_B = query_state_BN @ model["W_o"]  # z_0

  def layer(query_state_BN, qk):
    key_map_NE = qk["W_k"] @ centred_stream_map_NE
    probe_BE = (softmax.layer_norm(query_state_BN) @ qk["W_q"].T) @ key_map_NE
    scores_BP = scale_context_BP * jnp.einsum("be,bpe->bp", probe_BE, tokens_BPE)
    query_row_BP = jax.nn.softmax(scores_BP, axis=-1)
    update_BN = jnp.einsum("bp,bpe->be", query_row_BP, tokens_BPE) @ value_map_NE.T
    prediction_B = readout_0_B + update_BN @ model["W_o"]  # z_0 + L (z_l - z_{l-1})
    return query_state_BN + update_BN / depth, (prediction_B, query_row_BP)

  return jax.lax.scan(layer, query_state_BN, layers)[1]


def _per_model(params, batch: Batch, layout: GridLayout) -> list[tuple[jax.Array, jax.Array]]:
  return [_model_forward(*layout.model_params(params, m), batch, depth)
          for m, depth in enumerate(layout.depths)]


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l for every packed layer of every model of one seed: [T, B]."""
  return jnp.concatenate([f for f, _ in _per_model(params, batch, layout)])


def test_attention(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """Query rows p_l of every packed layer: [T, B, P]."""
  return jnp.concatenate([rows for _, rows in _per_model(params, batch, layout)])
