"""The Flax modules of every model kind (inverse_depth.modules): the token-by-token form of one
model (AttentionModel) against the packed grid that training uses (PackedModels, through the
fast forms of inverse_depth.models): the same parameters give the same layer predictors, for
every model of a grid of several depths (float64, the `x64` fixture; 1e-9 relative); and the
packed module's init and apply."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import modules, tasks
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.models import LAYER_PREDICTIONS, MODELS

DEPTHS = (1, 3, 2, 4)
D, P, N, B = 4, 10, 8, 5


@functools.cache
def _batch_float32() -> tasks.Batch:
  """One batch of contexts as float32 numpy arrays (x64 or not where it is first drawn)."""
  batch = jax.jit(lambda key: tasks.sample_batch(key, B, d=D, P=P, a=0.5, b=0.25, task="topk",
                                                 k=2))(jax.random.key(2))
  return tasks.Batch(*[np.asarray(x, np.float32) for x in batch])


def _batch():
  return tasks.Batch(*[jnp.asarray(x, jnp.float64) for x in _batch_float32()])


@pytest.mark.parametrize("kind", MODELS)
def test_module_of_each_model_matches_its_slice_of_the_packed_grid(x64, kind):
  loop_group = 2 if kind == "looped" else 0
  layout = GridLayout(DEPTHS, loop_group=loop_group)
  # qk_scale 2: sharp attention; m_init -0.7: the context rows of context_updates move.
  scales = InitScales(qk_init_scale=2.0, context_update_m_init=-0.7, positive_gain=False)
  params = jax.tree.map(lambda x: x[0].astype(jnp.float64),  # m is drawn as float32
                        init_grid(jax.random.key(1), layout, (0,), d=D, N=N, scales=scales,
                                  model=kind))
  batch = _batch()
  packed_TB = LAYER_PREDICTIONS[kind](params, batch, layout)
  for m, depth in enumerate(DEPTHS):
    module = modules.AttentionModel(kind=kind, depth=depth, d=D, N=N, loop_group=loop_group)
    f_LB = module.apply(modules.variables(*layout.model_params(params, m)), batch)
    chex.assert_shape(f_LB, (depth, B))
    chex.assert_trees_all_close(f_LB, packed_TB[layout.layer_slice(m)], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", MODELS)
def test_packed_module_init_draws_the_grids_replicate_and_applies_as_a_pure_function(kind):
  """`init_replicate` (module.init) draws what grid.init_grid draws for that seed, and apply
  is pure and gives the kind's packed layer predictors."""
  layout = GridLayout(DEPTHS, loop_group=2 if kind == "looped" else 0)
  scales = InitScales(qk_init="identity", qk_init_scale=0.7, context_update_m_init=-0.5)
  module = modules.PackedModels(kind, layout, d=D, N=N, scales=scales)
  variables = module.init_replicate(jax.random.fold_in(jax.random.key(5), 3))
  grid = init_grid(jax.random.key(5), layout, (0, 3), d=D, N=N, scales=scales, model=kind)
  chex.assert_trees_all_equal(variables["params"], jax.tree.map(lambda x: x[1], grid))
  batch = _batch_float32()
  first, again = module.apply(variables, batch), module.apply(variables, batch)
  chex.assert_trees_all_equal(first, again)
  chex.assert_trees_all_equal(first, LAYER_PREDICTIONS[kind](variables["params"], batch, layout))


def test_attention_model_applies_the_variables_of_the_one_depth_packed_module():
  """One model is the packed module at one depth; the token-by-token form has no initialiser
  of its own and applies that module's variables."""
  one_model = modules.PackedModels("softmax", GridLayout((3,)), d=D, N=N)
  variables = one_model.init_replicate(jax.random.key(7))
  reference = modules.AttentionModel(kind="softmax", depth=3, d=D, N=N)
  f_LB = reference.apply(modules.variables(*GridLayout((3,)).model_params(
      variables["params"], 0)), _batch_float32())
  chex.assert_trees_all_close(f_LB, one_model.apply(variables, _batch_float32()), rtol=1e-4,
                              atol=1e-5)
  with pytest.raises(ValueError, match="no initialiser"):
    reference.init(jax.random.key(0), _batch_float32())


def test_unknown_kind_is_refused_naming_the_allowed_ones():
  module = modules.AttentionModel(kind="mamba", depth=1, d=D, N=N)
  with pytest.raises(ValueError, match="allowed softmax, linear"):
    module.init(jax.random.key(0), _batch_float32())
