"""Every model kind as a Flax module: `PackedModels`, the module that initialises and trains,
and `AttentionModel`, the paper's token-by-token form of one model that checks it.

`PackedModels(kind, layout, d, N, scales)` holds one replicate's grid: the models of depths
`layout.depths`, per-model leaves stacked along M and per-layer leaves packed along T
(inverse_depth/grid.py), so one process trains a whole depth grid. `init_replicate(key)` is
`module.init` and draws exactly what grid.init_replicate draws; `apply` is a pure function
of those variables to the layer predictors f_l [T, B] through the per-kind fast forms of
inverse_depth/models/. The trainer (train.py) vmaps `apply` over replicates (the (spectrum,
rate, seed) axis S), so this module is what trains. One model is the same module at one
depth: `PackedModels(kind, GridLayout((L,)), d, N)`.

`AttentionModel` is kept beside it as an independent derivation: it builds the (P+1) x
(P+1) attention of every layer token by token as the paper states it (docs/models.md), and
tests/test_modules.py and the final evaluation (`evaluation.py`: z_L of the forward pass)
compare the fast forms against it; making it a view of the packed module would make that
comparison circular. It has no initialiser of its own: its variables are one model's
leaves of a PackedModels (`variables`).

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

AttentionModel's parameters are the grid's leaves of one model: {"model": {W_x, W_y, W_v,
W_o[, m]}, "layer": {W_q, W_k[, W_v]} with a leading depth axis}, so a model taken out of a
trained grid (`GridLayout.model_params`) applies as is.
"""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth import models
from inverse_depth.grid import GridLayout, InitScales, Params, init_replicate
from inverse_depth.models.softmax import layer_norm
from inverse_depth.tasks import Batch


def _check_kind(kind: str) -> None:
  if kind not in models.MODELS:
    raise ValueError(f"kind={kind!r}; allowed {', '.join(models.MODELS)}")


def _check_batch(batch: Batch) -> None:
  chex.assert_rank([batch.x_context_BPD, batch.y_context_BP, batch.x_test_BD], [3, 2, 2])
  chex.assert_equal_shape_prefix([batch.x_context_BPD, batch.y_context_BP, batch.x_test_BD], 1)


class PackedModels(nn.Module):
  """One replicate's models of kind `kind` at depths `layout.depths`, layers packed along T.

  Variables {"params": {"model": {leaf: [M, ...]}, "layer": {leaf: [T, ...]}}}. `__call__`
  gives the layer predictors f_l [T, B] (a model's prediction is the mean of its own f_l,
  `layout.model_mean`); `features` and `predict` split it into the part that does not depend
  on the contexts and the rest (models.SPLIT_PREDICTIONS; the trainer runs `predict` block by
  block); `test_attention` gives every layer's query row p_l [T, B, P] and
  `context_attention` the first layer's context softmax S_1 [M, B, P, P], for the kinds that
  have them (models.TEST_ATTENTION, models.CONTEXT_ATTENTION).
  """
  kind: str
  layout: GridLayout
  d: int
  N: int
  scales: InitScales = InitScales()

  @nn.compact
  def parameters(self, replicate_key: jax.Array | None = None) -> Params:
    """The parameters; at `init`, drawn from `replicate_key` = fold_in(root_key, seed) as
    grid.init_replicate draws them. The key is an argument and not Flax's rng stream because
    a model's start depends only on (root key, seed, depth, member) (grid.model_key), which
    keys derived by Flax could not reproduce."""
    _check_kind(self.kind)
    drawn = {}

    def draw(part):
      if not drawn:
        drawn.update(init_replicate(replicate_key, self.layout, d=self.d, N=self.N,
                                    scales=self.scales, model=self.kind))
      return drawn[part]

    params = {part: self.variable("params", part, draw, part).value
              for part in ("model", "layer")}
    chex.assert_tree_shape_prefix(params["model"], (self.layout.num_models,))
    chex.assert_tree_shape_prefix(params["layer"], (self.layout.total_layers,))
    return params

  def init_replicate(self, replicate_key: jax.Array) -> dict:
    """`init`: the variables of the replicate whose key is `replicate_key`."""
    return self.init({}, replicate_key, method=PackedModels.parameters)

  def __call__(self, batch: Batch) -> jax.Array:
    """f_l of every packed layer: [T, B]."""
    _check_batch(batch)
    predictions_TB = models.LAYER_PREDICTIONS[self.kind](self.parameters(), batch, self.layout)
    chex.assert_shape(predictions_TB, (self.layout.total_layers, batch.x_test_BD.shape[0]))
    return predictions_TB

  def features(self):
    """What the predictors need from the parameters alone (models.SPLIT_PREDICTIONS)."""
    return models.SPLIT_PREDICTIONS[self.kind][0](self.parameters(), self.layout)

  def predict(self, features, batch: Batch) -> jax.Array:
    """f_l of every packed layer from `features`: [T, B]; reads no variables."""
    _check_batch(batch)
    predictions_TB = models.SPLIT_PREDICTIONS[self.kind][1](features, batch, self.layout)
    chex.assert_shape(predictions_TB, (self.layout.total_layers, batch.x_test_BD.shape[0]))
    return predictions_TB

  def test_attention(self, batch: Batch) -> jax.Array:
    """Query rows p_l of every packed layer: [T, B, P]."""
    _check_batch(batch)
    return models.TEST_ATTENTION[self.kind](self.parameters(), batch, self.layout)

  def context_attention(self, batch: Batch) -> jax.Array:
    """The first layer's context-to-context softmax S_1 of every model: [M, B, P, P]."""
    _check_batch(batch)
    return models.CONTEXT_ATTENTION[self.kind](self.parameters(), batch, self.layout)


class AttentionModel(nn.Module):
  """One model of kind `kind` with `depth` layers, token by token. `__call__(batch)` returns
  the layer predictors f_l, [depth, B], whose mean over layers is the model's prediction;
  `__call__(batch, readout=True)` returns that prediction as the forward pass makes it, the
  query's readout z_L of the last stream, [B]. Apply only: the variables are one model's
  leaves of a `PackedModels` (`variables`)."""
  kind: str
  depth: int
  d: int
  N: int
  loop_group: int = 0  # looped only: layers per group of tied W_q, W_k (0: all layers)

  def __call__(self, batch: Batch, readout: bool = False) -> jax.Array:
    _check_kind(self.kind)
    model, layer = (self.get_variable("params", part) for part in ("model", "layer"))
    if model is None:
      raise ValueError("AttentionModel has no initialiser: apply it to `variables(...)` of a "
                       "PackedModels model (PackedModels.init_replicate)")
    _check_batch(batch)
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
