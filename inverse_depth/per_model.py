"""Optax transformations that act on each model of a grid alone (train.make_grid_optimizer).

A grid's parameters are {"model": leaves [S, M, ...], "layer": leaves [S, T, ...]}
(inverse_depth/grid.py); a per-model value c [S, M] reaches a model's leaves through
`grid.per_model_tree`. Nothing here takes a statistic across models, so every model's
optimisation stays its own:

- `scale_by_model_rate`: u <- c_sm u with c in the state (the convergence rule decays it);
- `scale_layers_by_depth`: layer updates of a depth-L model x L (`depth_scaled_layer_lr`);
- `keep_input_norm`: u_Wx <- |W_x| (W_x + u_Wx) / |W_x + u_Wx| - W_x, so each model's W_x
  keeps its Frobenius norm (`fixed_input_norm`);
- `freeze_models`: the mask of frozen models in the state; a frozen model gets a zero update
  and its inner state (Adam's moments) is left as it was. A model whose loss is not finite or
  exceeds `divergence_loss`, or whose updated parameters would not be finite, is frozen
  before its update is applied: it stays at its last finite state.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from inverse_depth.grid import GridLayout, Params, per_model_tree


class RateScaleState(NamedTuple):
  rate_scale_SM: jax.Array  # per-model multiplier of the learning rate


class FreezeState(NamedTuple):
  inner_state: optax.OptState
  frozen_SM: jax.Array  # models that get no update


def scale_by_model_rate(layout: GridLayout,
                        initial_rate_scale_SM: jax.Array) -> optax.GradientTransformation:
  """u <- c_sm u on every leaf of model (s, m), c = `rate_scale_SM` of the state."""

  def init(_):
    return RateScaleState(jnp.asarray(initial_rate_scale_SM, jnp.float32))

  def update(updates, state, params=None):
    del params
    return jax.tree.map(jnp.multiply, updates,
                        per_model_tree(updates, layout, state.rate_scale_SM)), state

  return optax.GradientTransformation(init, update)


def scale_layers_by_depth(layout: GridLayout) -> optax.GradientTransformation:
  """Layer updates of every depth-L model x L."""

  def scale(updates, _):
    num_replicates = jax.tree.leaves(updates["model"])[0].shape[0]
    depths_SM = jnp.broadcast_to(jnp.asarray(layout.depths, jnp.float32),
                                 (num_replicates, layout.num_models))
    return dict(updates, layer=jax.tree.map(
        jnp.multiply, updates["layer"], per_model_tree(updates, layout, depths_SM)["layer"]))

  return optax.stateless(scale)


def _with_norm_of(W_x_SMND: jax.Array, reference_SMND: jax.Array) -> jax.Array:
  """W_x rescaled, per model, to the Frobenius norm of `reference`."""
  norm_SM11 = jnp.sqrt((W_x_SMND ** 2).sum(axis=(-2, -1), keepdims=True))
  reference_SM11 = jnp.sqrt((reference_SMND ** 2).sum(axis=(-2, -1), keepdims=True))
  return W_x_SMND * (reference_SM11 / norm_SM11)


def keep_input_norm() -> optax.GradientTransformation:
  """The update of W_x that lands on W_x + u rescaled to |W_x| (per model)."""

  def project(updates, params):
    W_x = params["model"]["W_x"]
    landed = _with_norm_of(W_x + updates["model"]["W_x"], W_x)
    return dict(updates, model=dict(updates["model"], W_x=landed - W_x))

  return optax.stateless(project)


def finite_per_model(tree: Params, layout: GridLayout) -> jax.Array:
  """True for models all of whose parameters are finite: [S, M]."""
  finite_SM = jnp.ones(jax.tree.leaves(tree["model"])[0].shape[:2], bool)
  for leaf in jax.tree.leaves(tree["model"]):
    finite_SM &= jnp.isfinite(leaf).reshape(leaf.shape[:2] + (-1,)).all(-1)
  for leaf in jax.tree.leaves(tree["layer"]):
    nonfinite_TS = ~jnp.isfinite(leaf).reshape(leaf.shape[:2] + (-1,)).all(-1).T
    nonfinite_layers_MS = jax.ops.segment_sum(
        nonfinite_TS.astype(jnp.int32), layout.layer_model_index,
        num_segments=layout.num_models, indices_are_sorted=True)
    finite_SM &= nonfinite_layers_MS.T == 0
  return finite_SM


def freeze_models(inner: optax.GradientTransformation, layout: GridLayout,
                  initial_frozen_SM: jax.Array,
                  divergence_loss: float) -> optax.GradientTransformationExtraArgs:
  """`inner` applied to the models that are not frozen; `update` takes the step's losses
  [S, M] as the extra argument `losses_SM`. A model is applied when it is not frozen and
  healthy (loss finite and below `divergence_loss`, parameters after the update finite);
  every other model is frozen from then on (`frozen_SM` of the new state)."""
  inner = optax.with_extra_args_support(inner)

  def init(params):
    return FreezeState(inner.init(params), jnp.asarray(initial_frozen_SM, bool))

  def update(updates, state, params, *, losses_SM, **extra_args):
    inner_updates, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
    healthy_SM = (jnp.isfinite(losses_SM) & (losses_SM < divergence_loss)
                  & finite_per_model(optax.apply_updates(params, inner_updates), layout))
    apply_SM = ~state.frozen_SM & healthy_SM
    apply_mask = per_model_tree(params, layout, apply_SM)
    updates = jax.tree.map(lambda apply, u: jnp.where(apply, u, 0.0), apply_mask, inner_updates)
    state_mask = optax.tree_map_params(inner, lambda _, apply: apply, inner_state, apply_mask,
                                       transform_non_params=lambda _: jnp.ones((), bool))
    inner_state = jax.tree.map(jnp.where, state_mask, inner_state, state.inner_state)
    return updates, FreezeState(inner_state, ~apply_SM)

  return optax.GradientTransformationExtraArgs(init, update)
