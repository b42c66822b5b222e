"""Every model kind as a Flax module for one model, written token by token as the paper states
it (docs/models.md): the reference form a user can `init` and `apply` as a pure function.

Training does not use these modules: a grid trains many models at once through the packed
layer layout and the per-kind fast forms of inverse_depth/models/ (`LAYER_PREDICTIONS`),
which never build the (P+1) x (P+1) attention matrix. tests/test_modules.py checks that the
two agree to float tolerance on every kind.

One step of every kind, with tokens as the P + 1 columns of X = [x_1 .. x_P, x_test] and
y_in = (y_1 .. y_P, 0):

    H_y^l = H_y^{l-1} + (1/L) W_v^(l) H_y^{l-1} A_l^T,     H_y^0 = W_y y_in^T,
    z_l = W_o h_y^l (the query's column),   f_l = z_0 + L (z_l - z_{l-1}),

so the prediction z_L is the mean of the layer predictors f_l. A_l by kind:

- softmax, per_layer_values, looped: the query row is softmax_i(s_l,i) over the P context
  tokens, s_l,ij = (W_q^l LN(h_x,i))^T (W_k^l LN(h_x,j)) with H_x = W_x X; every other row
  is zero (mask M(0)). per_layer_values has a W_v^l per layer; looped uses the W_q, W_k of
  the first layer of each group of `loop_group` layers.
- context_updates: as softmax, and each context row is m softmax_j(s_l,ij) over the P
  context tokens (itself included), m one learned scalar (mask M(m)).
- linear: A_l = (1/(P N)) M . (Q^T K), Q = W_q^l H_x, K = W_k^l H_x, no norm and no softmax;
  M is -1 on the context-to-context block, +1 from the query to the context, 0 elsewhere.
- single_stream: one stream H^0 = W_x X + W_y y_in^T replaces H_x and H_y: queries and keys
  read LN(H^{l-1}), values W_v H^{l-1}, mask M(0); z_0 = W_o W_x x_test.

Parameters are the grid's leaves of one model (grid.init_model): {"model": {W_x, W_y, W_v,
W_o[, m]}, "layer": {W_q, W_k[, W_v]} with a leading depth axis}, so a model taken out of a
trained grid (`GridLayout.model_params`) applies as is.
"""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth.grid import InitScales, init_model
from inverse_depth.models import MODELS
from inverse_depth.models.softmax import layer_norm
from inverse_depth.tasks import Batch


class AttentionModel(nn.Module):
  """One model of kind `kind` with `depth` layers. `__call__(batch)` returns the layer
  predictors f_l, [depth, B], whose mean over layers is the model's prediction;
  `__call__(batch, readout=True)` returns that prediction as the forward pass makes it, the
  query's readout z_L of the last stream, [B]."""
  kind: str
  depth: int
  d: int
  N: int
  loop_group: int = 0  # looped only: layers per group of tied W_q, W_k (0: all layers)
  scales: InitScales = InitScales()

  def _init_leaves(self) -> tuple[dict, dict] | tuple[None, None]:
    """The grid's initialisation of this model (grid.init_model), drawn once at `init`."""
    if not self.is_initializing():
      return None, None
    return init_model(self.make_rng("params"), self.depth, d=self.d, N=self.N,
                      scales=self.scales, model=self.kind)

  @nn.compact
  def __call__(self, batch: Batch, readout: bool = False) -> jax.Array:
    if self.kind not in MODELS:
      raise ValueError(f"AttentionModel.kind={self.kind!r}; allowed {', '.join(MODELS)}")
    model_init, layer_init = self._init_leaves()
    model = self.param("model", lambda _: model_init)
    layer = self.param("layer", lambda _: layer_init)
    chex.assert_rank([batch.x_context_BPD, batch.y_context_BP, batch.x_test_BD], [3, 2, 2])
    chex.assert_tree_shape_prefix(layer, (self.depth,))
    tokens_BDQ = jnp.concatenate([batch.x_context_BPD, batch.x_test_BD[:, None]],
                                 axis=1).transpose(0, 2, 1)  # Q = P + 1 tokens, query last
    labels_BQ = jnp.concatenate([batch.y_context_BP, jnp.zeros_like(batch.y_context_BP[:, :1])],
                                axis=1)
    if self.kind == "single_stream":
      f_LB, z_L_B = self._single_stream(model, layer, tokens_BDQ, labels_BQ)
    else:
      f_LB, z_L_B = self._label_stream(model, layer, tokens_BDQ, labels_BQ)
    chex.assert_shape(f_LB, (self.depth, batch.x_test_BD.shape[0]))
    return z_L_B if readout else f_LB

  def _query_key(self, layer: dict, index: int) -> tuple[jax.Array, jax.Array]:
    group = self.loop_group or self.depth
    source = (index // group) * group if self.kind == "looped" else index
    return layer["W_q"][source], layer["W_k"][source]

  def _attention(self, W_q, W_k, stream_BNQ, m) -> jax.Array:
    """A_l of one layer, [B, Q, Q] (row: the attending token)."""
    num_tokens = stream_BNQ.shape[-1]
    num_context = num_tokens - 1
    is_context = np.arange(num_tokens) < num_context
    if self.kind == "linear":
      scores_BQQ = jnp.einsum("bnq,bnk->bqk", W_q @ stream_BNQ, W_k @ stream_BNQ)
      mask_QQ = np.zeros((num_tokens, num_tokens))
      mask_QQ[np.ix_(is_context, is_context)] = -1.0
      mask_QQ[num_context, is_context] = 1.0
      return mask_QQ * scores_BQQ / (num_context * self.N)
    normed_BNQ = layer_norm(stream_BNQ.transpose(0, 2, 1)).transpose(0, 2, 1)
    scores_BQQ = jnp.einsum("bnq,bnk->bqk", W_q @ normed_BNQ, W_k @ normed_BNQ)
    over_context_BQQ = jax.nn.softmax(jnp.where(is_context, scores_BQQ, -jnp.inf), axis=-1)
    row_weights_Q = np.where(is_context, 0.0, 1.0)  # M(0): only the query row attends
    if self.kind == "context_updates":
      row_weights_Q = jnp.where(is_context, m, 1.0)  # M(m)
    return row_weights_Q[:, None] * over_context_BQQ

  def _label_stream(self, model, layer, tokens_BDQ, labels_BQ) -> tuple[jax.Array, jax.Array]:
    """Every kind but single_stream: the inputs' stream H_x stays fixed, the label stream
    moves. Returns f_l [depth, B] and the last readout z_L [B]."""
    stream_x_BNQ = jnp.einsum("nd,bdq->bnq", model["W_x"], tokens_BDQ)
    stream_y_BNQ = jnp.einsum("n,bq->bnq", model["W_y"], labels_BQ)
    readout_B = stream_y_BNQ[:, :, -1] @ model["W_o"]  # z_0 = 0: the query's label is 0
    layer_predictions = []
    for index in range(self.depth):
      W_q, W_k = self._query_key(layer, index)
      attention_BQQ = self._attention(W_q, W_k, stream_x_BNQ, model.get("m"))
      W_v = layer["W_v"][index] if self.kind == "per_layer_values" else model["W_v"]
      update_BNQ = jnp.einsum("nm,bmk,bqk->bnq", W_v, stream_y_BNQ, attention_BQQ) / self.depth
      stream_y_BNQ = stream_y_BNQ + update_BNQ
      next_readout_B = stream_y_BNQ[:, :, -1] @ model["W_o"]
      layer_predictions.append(self.depth * (next_readout_B - readout_B))
      readout_B = next_readout_B
    return jnp.stack(layer_predictions), readout_B

  def _single_stream(self, model, layer, tokens_BDQ, labels_BQ) -> tuple[jax.Array, jax.Array]:
    """One stream carries inputs and labels; f_l = z_0 + L (z_l - z_{l-1}). Returns f_l
    [depth, B] and the last readout z_L [B]."""
    stream_BNQ = (jnp.einsum("nd,bdq->bnq", model["W_x"], tokens_BDQ)
                  + jnp.einsum("n,bq->bnq", model["W_y"], labels_BQ))
    start_B = readout_B = stream_BNQ[:, :, -1] @ model["W_o"]  # z_0 = W_o W_x x_test
    layer_predictions = []
    for index in range(self.depth):
      attention_BQQ = self._attention(layer["W_q"][index], layer["W_k"][index], stream_BNQ, None)
      stream_BNQ = stream_BNQ + jnp.einsum("nm,bmk,bqk->bnq", model["W_v"], stream_BNQ,
                                           attention_BQQ) / self.depth
      next_readout_B = stream_BNQ[:, :, -1] @ model["W_o"]
      layer_predictions.append(start_B + self.depth * (next_readout_B - readout_B))
      readout_B = next_readout_B
    return jnp.stack(layer_predictions), readout_B


def variables(model_leaves: dict, layer_leaves: dict) -> dict:
  """Flax variables of one model from the grid's leaves (`GridLayout.model_params`)."""
  return {"params": {"model": model_leaves, "layer": layer_leaves}}
