"""How many models share one training step.

A grid is one model kind trained on every (spectrum, seed, depth) of a config
(`config.GridSpec`). The (spectrum, seed) *replicates* are a vmapped leading
axis S (train.GridTrainer). Depths are laid out without padding: per-model
parameters stack along an axis M (one entry per depth), and the per-layer
parameters of all models are *packed* along one axis T = sum(depths), model m
owning the static slice `layer_slice(m)`. Packed models run all T layers in
one batched contraction; cascaded models (sequential layout) scan each model's
own slice. Either way a step does exactly sum(depths) layers of work per
replicate. (When the layer axis is sharded over devices, the trainer may
append one frozen padding model to the depths: train.py.)

Initialisation of one model depends only on (root key, seed, depth, member;
`model_key`), never on the rest of the grid, so a model trained inside a grid
equals the same model trained alone.

Array names end in the letters of their axes: S replicates, M models,
T packed layers, V reported views (a model, or the first L members of an ensemble),
B contexts of a batch, E evaluation contexts, P context tokens, K the k tokens that
make the target, N hidden width, D input dimension d, R polynomial degree
(e.g. `attention_TBP`: per packed layer, context and token).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, dict[str, jax.Array]]  # {"model": {...leading M}, "layer": {...leading T}}


@dataclasses.dataclass(frozen=True)
class GridLayout:
  """Static layout of one seed's models: depths and their packed layer slices.

  `loop_group` is read by weight-tied (looped) models only: layer l (0-based) of a model
  uses the query/key weights of its layer r floor(l / r), r = loop_group (0: r = depth, one
  group per model); a last group shorter than r is allowed.
  """
  depths: tuple[int, ...]
  loop_group: int = 0

  @property
  def num_models(self) -> int:
    return len(self.depths)

  @property
  def total_layers(self) -> int:
    return int(sum(self.depths))

  @property
  def offsets(self) -> tuple[int, ...]:
    return tuple(int(o) for o in np.cumsum((0,) + self.depths[:-1]))

  def layer_slice(self, m: int) -> slice:
    return slice(self.offsets[m], self.offsets[m] + self.depths[m])

  def model_params(self, params: Params, m: int) -> tuple[dict, dict]:
    """Model m's own parameters from one replicate's: its model leaves and its layers'
    leaves [depth, ...]."""
    return (jax.tree.map(lambda x: x[m], params["model"]),
            jax.tree.map(lambda x: x[self.layer_slice(m)], params["layer"]))

  @property
  def layer_model_index(self) -> np.ndarray:
    """For each packed layer t, the index m of the model that owns it (shape T)."""
    return np.repeat(np.arange(self.num_models), self.depths)

  @property
  def tied_layer_index(self) -> np.ndarray:
    """For each packed layer t, the packed layer whose query/key weights it uses when tied in
    groups of `loop_group` (shape T)."""
    return np.concatenate([
        offset + (np.arange(depth) // (self.loop_group or depth)) * (self.loop_group or depth)
        for offset, depth in zip(self.offsets, self.depths)]).astype(int)

  def model_sum(self, layer_values_T: jax.Array) -> jax.Array:
    """Per-model sum over its own layers: (T, ...) -> (M, ...), one segment sum."""
    return jax.ops.segment_sum(layer_values_T, self.layer_model_index,
                               num_segments=self.num_models, indices_are_sorted=True)

  def model_mean(self, layer_values_T: jax.Array) -> jax.Array:
    """Per-model mean over its own layers: (T, ...) -> (M, ...)."""
    sums_M = self.model_sum(layer_values_T)
    depths_M = np.asarray(self.depths, np.float32).reshape((-1,) + (1,) * (sums_M.ndim - 1))
    return sums_M / depths_M.astype(sums_M.dtype)

  def expand_to_layers(self, model_values_M: jax.Array, axis: int = 0) -> jax.Array:
    """Broadcast a per-model value to each of that model's layers along `axis`:
    (M, ...) -> (T, ...) for axis 0, (B, M, ...) -> (B, T, ...) for axis 1."""
    return jnp.asarray(model_values_M)[(slice(None),) * axis + (self.layer_model_index,)]


@dataclasses.dataclass(frozen=True)
class InitScales:
  """Standard deviations of the Gaussian initialisation (choices the paper leaves open:
  docs/regimes.md).

  W_x ~ N(0, 1/d), W_y ~ N(0, W_y_init_scale^2), W_v and W_o ~ N(0, 1/N). Query and key
  weights (`qk_init`): "random" draws W_q, W_k ~ N(0, qk_init_scale^2 / N);
  "identity" starts every layer near the identity, W_q, W_k = qk_init_scale I +
  qk_init_noise N(0, 1) (the start of the reference code of Bordelon et al.): all
  layers then score by the same cosine of the normalised inputs, with logit
  ~ qk_init_scale^2 N cos. With `positive_gain` the sign of W_o is flipped where the
  value-readout gain g = W_o W_v W_y starts negative (docs/regimes.md: models
  starting with g < 0 stay on the uniform-attention plateau). `W_x_init`
  "orthogonal" draws W_x = sqrt(N/d) x (orthonormal columns), the same mean
  W_x^T W_x = (N/d) I as the Gaussian but with every eigenvalue equal (a
  Gaussian N x d matrix with N = d has W_x^T W_x spread from 0 to 4 N/d).
  `value_init` "identity" sets W_v = I (every W_v^l = I for per_layer_values) and
  W_o = W_y^T / |W_y|^2, so every gain g_j = W_o W_v^j W_y is 1: with an identity
  query/key start and an orthogonal W_x the linear model then starts as L steps of
  gradient descent on the context, of size qk_init_scale^2 L^qk_init_depth_exponent / (d L)
  each (docs/models.md). The config's `init` group holds these fields by the same names.
  """
  qk_init_scale: float = 1.0
  qk_init_depth_exponent: float = 0.0  # depth L starts at qk_init_scale L^(exponent / 2)
  positive_gain: bool = True
  qk_init: str = "random"  # one of QK_INITS
  qk_init_noise: float = 0.01  # "identity" only
  W_x_init: str = "gaussian"  # one of W_X_INITS
  context_update_m_init: float = 0.0  # context_updates only: the starting weight m
  W_y_init_scale: float = 1.0  # the label embedding's scale (single_stream: its key weight)
  value_init: str = "random"  # one of VALUE_INITS


QK_INITS = ("random", "identity")
VALUE_INITS = ("random", "identity")
W_X_INITS = ("gaussian", "orthogonal")


def init_model(key: jax.Array, depth: int, *, d: int, N: int, scales: InitScales,
               model: str = "softmax") -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
  """Parameters of one model of kind `model`: (per-model leaves, per-layer leaves [depth, ...]).

  Every kind draws the controlled model's leaves. "per_layer_values" draws W_v^l ~ N(0, 1/N)
  per layer instead of one W_v (a per-layer leaf), and `positive_gain` flips the sign of each
  W_v^l whose gain g_l = W_o W_v^l W_y starts negative (W_o is left as drawn);
  "context_updates" adds the context-attention weight m = `context_update_m_init` (a
  per-model scalar; 0 starts it as the controlled model, -1 as the mask of Bordelon et al.).
  The query/key scale is qk_init_scale L^(qk_init_depth_exponent/2), so each layer's bilinear form
  W_q^T W_k starts proportional to L^qk_init_depth_exponent.
  """
  k_x, k_y, k_v, k_o, k_q, k_k = jax.random.split(key, 6)
  W_x = jax.random.normal(k_x, (N, d)) / np.sqrt(d)
  if scales.W_x_init == "orthogonal":
    columns, upper = jnp.linalg.qr(W_x)
    W_x = columns * jnp.sign(jnp.diagonal(upper)) * np.sqrt(N / d)
  elif scales.W_x_init != "gaussian":
    raise ValueError(f"W_x_init={scales.W_x_init!r}; allowed {W_X_INITS}")
  W_y = jax.random.normal(k_y, (N,)) * scales.W_y_init_scale
  W_o = jax.random.normal(k_o, (N,)) / np.sqrt(N)
  qk_scale = scales.qk_init_scale * depth ** (scales.qk_init_depth_exponent / 2)
  if scales.qk_init == "identity":
    identity = qk_scale * jnp.eye(N)
    W_q = identity + scales.qk_init_noise * jax.random.normal(k_q, (depth, N, N))
    W_k = identity + scales.qk_init_noise * jax.random.normal(k_k, (depth, N, N))
  elif scales.qk_init == "random":
    qk_std = qk_scale / np.sqrt(N)
    W_q = jax.random.normal(k_q, (depth, N, N)) * qk_std
    W_k = jax.random.normal(k_k, (depth, N, N)) * qk_std
  else:
    raise ValueError(f"qk_init={scales.qk_init!r}; allowed {QK_INITS}")
  model_leaves, layer_leaves = dict(W_x=W_x, W_y=W_y), dict(W_q=W_q, W_k=W_k)
  if scales.value_init == "identity":
    if model == "per_layer_values":
      layer_leaves["W_v"] = jnp.broadcast_to(jnp.eye(N), (depth, N, N))
    else:
      model_leaves["W_v"] = jnp.eye(N)
    W_o = W_y / (W_y @ W_y)
  elif scales.value_init != "random":
    raise ValueError(f"value_init={scales.value_init!r}; allowed {VALUE_INITS}")
  elif model == "per_layer_values":
    W_v_LNN = jax.random.normal(k_v, (depth, N, N)) / np.sqrt(N)
    if scales.positive_gain:
      W_v_LNN = W_v_LNN * jnp.sign(jnp.einsum("i,lij,j->l", W_o, W_v_LNN, W_y))[:, None, None]
    layer_leaves["W_v"] = W_v_LNN
  else:
    W_v = jax.random.normal(k_v, (N, N)) / np.sqrt(N)
    if scales.positive_gain:
      W_o = W_o * jnp.sign(W_o @ W_v @ W_y)
    model_leaves["W_v"] = W_v
  model_leaves["W_o"] = W_o
  if model == "context_updates":
    model_leaves["m"] = jnp.full((), scales.context_update_m_init, jnp.float32)
  return model_leaves, layer_leaves


def model_key(root_key: jax.Array, seed: int, depth: int, member: int = 0) -> jax.Array:
  """The init key of model (seed, depth): independent of the rest of the grid. `member`
  numbers the models of equal depth in one layout (an ensemble of one-layer models); member
  0 is the model a grid with unique depths holds."""
  return member_key(jax.random.fold_in(root_key, seed), depth, member)


def member_key(replicate_key: jax.Array, depth: int, member: int = 0) -> jax.Array:
  """The init key of the model (depth, member) of one replicate, from the replicate's key
  fold_in(root_key, seed) (`model_key`)."""
  key = jax.random.fold_in(replicate_key, depth)
  return jax.random.fold_in(key, member) if member else key


def init_replicate(replicate_key: jax.Array, layout: GridLayout, *, d: int, N: int,
                   scales: InitScales, model: str = "softmax") -> Params:
  """Parameters of one replicate's models of kind `model`: model leaves [M, ...], layer leaves
  [T, ...] (each model drawn from `member_key`)."""
  members = [layout.depths[:m].count(depth) for m, depth in enumerate(layout.depths)]
  models = [init_model(member_key(replicate_key, depth, member), depth, d=d, N=N,
                       scales=scales, model=model)
            for depth, member in zip(layout.depths, members)]
  return {"model": jax.tree.map(lambda *xs: jnp.stack(xs), *[m for m, _ in models]),
          "layer": jax.tree.map(lambda *xs: jnp.concatenate(xs), *[l for _, l in models])}


def init_grid(root_key: jax.Array, layout: GridLayout, seeds: tuple[int, ...], *, d: int,
              N: int, scales: InitScales, model: str = "softmax") -> Params:
  """Parameters of all (seed, depth) models of kind `model`: model leaves [S, M, ...], layer
  leaves [S, T, ...] (`init_replicate` of fold_in(root_key, seed) per seed)."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *[
      init_replicate(jax.random.fold_in(root_key, seed), layout, d=d, N=N, scales=scales,
                     model=model) for seed in seeds])


def per_model_tree(tree: Any, layout: GridLayout, per_model_values_SM: jax.Array) -> Any:
  """A tree shaped like `{"model": ..., "layer": ...}` params filled with a per-model value.

  Model leaves [S, M, ...] get value[s, m]; layer leaves [S, T, ...] get the
  value of the model that owns layer t. Used to scale or mask updates per model.
  """
  per_layer_ST = per_model_values_SM[:, layout.layer_model_index]

  def fill(values, leaf):
    return values.reshape(values.shape + (1,) * (leaf.ndim - values.ndim))

  return {
      "model": jax.tree.map(lambda x: fill(per_model_values_SM, x), tree["model"]),
      "layer": jax.tree.map(lambda x: fill(per_layer_ST, x), tree["layer"]),
  }
