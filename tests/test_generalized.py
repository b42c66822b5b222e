"""The generalised softmax models (docs/models.md: C.1 single_stream, C.2 per_layer_values,
C.3 context_updates, and looped) against naive token-space references and against the
controlled model they reduce to.

Model checks run in float64 (scoped with `jax.enable_x64`) and compare to ~1e-9 relative;
the gradient and training checks run in float32, as training does.
"""

import functools
import importlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import smoke
from inverse_depth import analysis, checks, claims, diagnostics, experiment, records, tasks
from inverse_depth.report import generalized_report
from inverse_depth import config as config_lib
from inverse_depth.grid import GridLayout, InitScales, init_grid, init_model, model_key
from inverse_depth.models import (CONTEXT_ATTENTION, LAYER_PREDICTIONS, TEST_ATTENTION,
                                  parameter_count)
from inverse_depth.train import GridTrainer, Problem, TrainSettings, grid_losses
from tests import reference, tiny

GENERALIZED = ("single_stream", "per_layer_values", "context_updates", "looped")
DEPTHS = (1, 3, 2)
D, P, N, B = 4, 10, 8, 5
RTOL = 1e-9


@functools.partial(jax.jit, static_argnums=(1,))
def _sample(key, task):
  return tasks.sample_batch(key, B, d=D, P=P, a=0.5, b=0.25, task=task, k=2)


def _batch(task="topk") -> tasks.Batch:
  """A float64 batch whose labels are U^T beta in float64."""
  batch = _sample(jax.random.key(2), task)
  return batch._replace(y_context_BP=jnp.einsum("bpd,bd->bp", batch.x_context_BPD,
                                                batch.beta_BD))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _predict(model, params, batch, layout):
  """f_l of every packed layer of kind `model`, jitted: [T, B]."""
  return LAYER_PREDICTIONS[model](params, batch, layout)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _attention(model, params, batch, layout):
  """Query rows p_l of every packed layer of kind `model`, jitted: [T, B, P]."""
  return TEST_ATTENTION[model](params, batch, layout)


def _params(model, layout, seed=0, **scales):
  """One seed's params of `model` (random query/key start, logits well away from uniform)."""
  scales = dict(dict(qk_init_scale=3.0, positive_gain=False), **scales)
  params = init_grid(jax.random.key(1), layout, (seed,), d=D, N=N, scales=InitScales(**scales),
                     model=model)
  return jax.tree.map(lambda x: x[0], params)


def _model(params, layout, m):
  """numpy (model leaves, layer leaves) of model m of one seed."""
  model = {k: np.asarray(v[m], np.float64) for k, v in params["model"].items()}
  layers = {k: np.asarray(v[layout.layer_slice(m)], np.float64)
            for k, v in params["layer"].items()}
  return model, layers


def _reference_readouts(readouts_fn, params, layout, batch) -> list[np.ndarray]:
  """Per model, the reference readouts z_0..z_L of every context: [B, L + 1]."""
  nb = jax.tree.map(np.asarray, batch)
  out = []
  for m in range(layout.num_models):
    model, layers = _model(params, layout, m)
    out.append(np.stack([readouts_fn(model, layers, nb.x_context_BPD[c], nb.y_context_BP[c],
                                     nb.x_test_BD[c]) for c in range(B)]))
  return out


def _assert_cascaded_layer_predictors(f_TB, layout, readouts_MBL, target_B):
  """f_l = z_0 + L (z_l - z_{l-1}), mean_l f_l = z_L (the model's output), and on these f_l
  analysis.decompose gives R = the loss of z_L with R = C + (A - C)/L."""
  f_TB, target_B = np.asarray(f_TB), np.asarray(target_B)
  for m, depth in enumerate(layout.depths):
    readouts_BL = readouts_MBL[m]
    f_LB = f_TB[layout.layer_slice(m)]
    scale = np.abs(readouts_BL).max()
    np.testing.assert_allclose(f_LB.T, readouts_BL[:, :1] + depth * np.diff(readouts_BL, axis=1),
                               rtol=RTOL, atol=1e-11 * scale)
    np.testing.assert_allclose(f_LB.mean(axis=0), readouts_BL[:, -1], rtol=RTOL,
                               atol=1e-12 * scale)
    parts = analysis.decompose(f_LB, target_B)
    assert parts["R"] == pytest.approx(np.mean((readouts_BL[:, -1] - target_B) ** 2), rel=1e-9)
    if depth > 1:
      assert abs(parts["identity_residual"]) <= 1e-12 * parts["A"]
      assert parts["disagreement"] > 1e-6 * parts["A"]  # the layers really differ


# --- C.2 per-layer values ------------------------------------------------------------------


def test_per_layer_values_equals_token_space_reference(x64):
  layout, batch = GridLayout(DEPTHS), _batch()
  params = _params("per_layer_values", layout)
  assert params["layer"]["W_v"].shape == (sum(DEPTHS), N, N) and "W_v" not in params["model"]
  f_TB = _predict("per_layer_values", params, batch, layout)
  readouts = _reference_readouts(reference.softmax_two_stream_readouts, params, layout, batch)
  _assert_cascaded_layer_predictors(f_TB, layout, readouts, batch.target_B)


def test_per_layer_values_with_equal_values_is_the_controlled_model(x64):
  layout, batch = GridLayout(DEPTHS), _batch()
  controlled = _params("softmax", layout)
  shared_values = dict(model={k: v for k, v in controlled["model"].items() if k != "W_v"},
                       layer=dict(controlled["layer"],
                                  W_v=layout.expand_to_layers(controlled["model"]["W_v"])))
  want_TB = np.asarray(_predict("softmax", controlled, batch, layout))
  np.testing.assert_allclose(_predict("per_layer_values", shared_values, batch, layout),
                             want_TB, rtol=1e-12, atol=1e-14)
  # With the W_v^l it is initialised with, the model is a different one.
  drawn = dict(shared_values, layer=dict(
      shared_values["layer"], W_v=_params("per_layer_values", layout)["layer"]["W_v"]))
  assert np.abs(_predict("per_layer_values", drawn, batch, layout) - want_TB).max() > 1e-3


def test_per_layer_values_positive_gain_flips_each_value_matrix():
  for seed in range(4):
    key = model_key(jax.random.key(0), seed, 5)
    plain_model, plain_layers = init_model(key, 5, d=D, N=N, model="per_layer_values",
                                           scales=InitScales(positive_gain=False))
    fixed_model, fixed_layers = init_model(key, 5, d=D, N=N, model="per_layer_values",
                                           scales=InitScales(positive_gain=True))

    def gains(model, layers):
      return np.einsum("i,lij,j->l", model["W_o"], layers["W_v"], model["W_y"])

    assert np.all(gains(fixed_model, fixed_layers) > 0)
    np.testing.assert_allclose(gains(fixed_model, fixed_layers),
                               np.abs(gains(plain_model, plain_layers)), rtol=1e-6)
    np.testing.assert_array_equal(fixed_model["W_o"], plain_model["W_o"])


# --- C.3 context updates -------------------------------------------------------------------


def test_context_updates_at_initial_m_zero_is_the_controlled_model(x64):
  layout, batch = GridLayout(DEPTHS), _batch()
  params = _params("context_updates", layout)
  np.testing.assert_array_equal(params["model"]["m"], np.zeros(len(DEPTHS)))
  controlled = _params("softmax", layout)  # the same draws, without m
  np.testing.assert_allclose(_predict("context_updates", params, batch, layout),
                             _predict("softmax", controlled, batch, layout),
                             rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("task", ["topk", "top1"])
def test_context_updates_equals_token_space_reference(x64, task):
  """m != 0 (one value per model, both signs): the cascaded context label states."""
  layout, batch = GridLayout(DEPTHS), _batch(task)
  params = _params("context_updates", layout)
  params["model"]["m"] = jnp.array([0.7, -0.9, 1.6])
  f_TB = _predict("context_updates", params, batch, layout)

  def readouts_fn(model, layers, *context):
    return reference.softmax_two_stream_readouts(model, layers, *context,
                                                 context_weight=model["m"])

  readouts = _reference_readouts(readouts_fn, params, layout, batch)
  _assert_cascaded_layer_predictors(f_TB, layout, readouts, batch.target_B)
  # The context updates change the deeper models (so the Krylov terms are exercised).
  at_zero = dict(params, model=dict(params["model"], m=jnp.zeros(3)))
  change_TB = np.abs(np.asarray(f_TB - _predict("context_updates", at_zero, batch, layout)))
  assert change_TB[layout.layer_slice(0)].max() == 0.0  # one layer: m never enters
  assert change_TB[layout.layer_slice(1)].max() > 1e-2 * np.abs(np.asarray(f_TB)).max()


@pytest.mark.parametrize("scale", [-1.0, 2.5])
def test_context_updates_output_and_effective_step_ignore_the_size_of_m(x64, scale):
  """(W_v, W_o, m) -> (c W_v, W_o / c, m / c) keeps every layer predictor and m g_2 / g_1,
  so m alone (its sign or its size) means nothing; the ratio scales with m when only m
  moves."""
  layout, batch = GridLayout(DEPTHS), _batch()
  params = _params("context_updates", layout)
  params["model"]["m"] = jnp.array([0.7, -0.9, 1.6])
  moved = dict(params, model=dict(params["model"], W_v=scale * params["model"]["W_v"],
                                  W_o=params["model"]["W_o"] / scale,
                                  m=params["model"]["m"] / scale))
  np.testing.assert_allclose(_predict("context_updates", moved, batch, layout),
                             _predict("context_updates", params, batch, layout), rtol=RTOL)
  for m in range(1, layout.num_models):
    model, _ = _model(params, layout, m)
    moved_model, _ = _model(moved, layout, m)
    step = diagnostics.effective_context_step(model)
    assert step == pytest.approx(diagnostics.effective_context_step(moved_model), rel=1e-12)
    assert diagnostics.effective_context_step(dict(model, m=2 * model["m"])) == pytest.approx(
        2 * step)
    gains = [model["W_o"] @ np.linalg.matrix_power(model["W_v"], j) @ model["W_y"]
             for j in (1, 2)]
    assert step == pytest.approx(float(model["m"]) * gains[1] / gains[0], rel=1e-12)


# --- C.1 single stream ---------------------------------------------------------------------


def test_single_stream_equals_token_space_reference(x64):
  layout, batch = GridLayout(DEPTHS), _batch()
  params = _params("single_stream", layout)
  f_TB = np.asarray(_predict("single_stream", params, batch, layout))
  readouts = _reference_readouts(reference.single_stream_readouts, params, layout, batch)
  assert np.abs(readouts[0][:, 0]).min() > 0  # z_0 = W_o W_x x_test enters every f_l
  _assert_cascaded_layer_predictors(f_TB, layout, readouts, batch.target_B)
  # Its query rows give f_l = z_0 + W_o W_v (W_x U + W_y y^T) p_l.
  attention_TBP = np.asarray(_attention("single_stream", params, batch, layout))
  np.testing.assert_allclose(attention_TBP.sum(axis=-1), 1.0, rtol=1e-12)
  nb = jax.tree.map(np.asarray, batch)
  for m in range(layout.num_models):
    model, _ = _model(params, layout, m)
    context_states_BNP = (np.einsum("nd,bpd->bnp", model["W_x"], nb.x_context_BPD)
                          + model["W_y"][None, :, None] * nb.y_context_BP[:, None])
    pooled_LBN = np.einsum("bnp,lbp->lbn", context_states_BNP,
                           attention_TBP[layout.layer_slice(m)])
    z_0_B = nb.x_test_BD @ model["W_x"].T @ model["W_o"]
    np.testing.assert_allclose(z_0_B + pooled_LBN @ model["W_v"].T @ model["W_o"],
                               f_TB[layout.layer_slice(m)], rtol=RTOL, atol=1e-12)


# --- looped --------------------------------------------------------------------------------


def test_first_layer_context_attention_is_the_reference_s1(x64):
  """S_1 of context_updates is the first layer's context-to-context softmax of the
  token-space reference, for every model of the grid."""
  layout, batch = GridLayout(DEPTHS), _batch()
  params = _params("context_updates", layout)
  got_MBPP = np.asarray(CONTEXT_ATTENTION["context_updates"](params, batch, layout))
  x_context_BPD = np.asarray(batch.x_context_BPD, np.float64)
  for m in range(layout.num_models):
    model, layers = _model(params, layout, m)
    for c in range(B):
      np.testing.assert_allclose(
          got_MBPP[m, c], reference.first_layer_context_attention(model, layers,
                                                                  x_context_BPD[c]),
          rtol=RTOL, atol=1e-12)


def test_looped_equals_token_space_reference_with_tied_layers(x64):
  layout, batch = GridLayout((1, 3, 5), loop_group=2), _batch()
  np.testing.assert_array_equal(layout.tied_layer_index, [0, 1, 1, 3, 4, 4, 6, 6, 8])
  params = _params("looped", layout)
  f_TB = _predict("looped", params, batch, layout)

  def readouts_fn(model, layers, *context):
    tied = {k: v[(np.arange(len(v)) // 2) * 2] for k, v in layers.items()}
    return reference.softmax_two_stream_readouts(model, tied, *context)

  readouts = _reference_readouts(readouts_fn, params, layout, batch)
  _assert_cascaded_layer_predictors(f_TB, layout, readouts, batch.target_B)


@pytest.mark.parametrize("loop_group", [1, 2, 3, 0])
def test_looped_model_is_the_untied_model_of_depth_over_group(x64, loop_group):
  """Depth 6 in groups of r = 1, 2, 3, 6 (0: one group) predicts exactly what the untied
  depth-6/r model with the groups' query/key weights predicts, each f repeated r times: r = 1
  is the untied model itself, one group the depth-1 model."""
  depth, batch = 6, _batch()
  group = loop_group or depth
  layout = GridLayout((depth,), loop_group=loop_group)
  params = _params("looped", layout)
  untied_layout = GridLayout((depth // group,))
  untied = dict(params, layer=jax.tree.map(lambda w: w[::group], params["layer"]))
  untied_f_TB = np.asarray(_predict("softmax", untied, batch, untied_layout))
  f_TB = np.asarray(_predict("looped", params, batch, layout))
  np.testing.assert_allclose(f_TB, np.repeat(untied_f_TB, group, axis=0), rtol=1e-12,
                             atol=1e-14)
  np.testing.assert_allclose(layout.model_mean(f_TB), untied_layout.model_mean(untied_f_TB),
                             rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(_attention("looped", params, batch, layout),
                             np.repeat(_attention("softmax", untied, batch, untied_layout),
                                       group, axis=0), rtol=1e-12, atol=1e-15)


def test_looped_unused_copies_get_zero_gradient(x64):
  layout, batch = GridLayout((1, 3, 5), loop_group=2), _batch()
  params = _params("looped", layout)
  grads = jax.grad(lambda p: jnp.sum(_predict("looped", p, batch, layout) ** 2))(params)
  used_T = np.isin(np.arange(layout.total_layers), layout.tied_layer_index)
  for name in ("W_q", "W_k"):
    norms_T = np.abs(np.asarray(grads["layer"][name])).sum(axis=(1, 2))
    assert np.all(norms_T[~used_T] == 0.0) and np.all(norms_T[used_T] > 0.0), name


def test_parameter_count_counts_the_trained_leaves():
  """Untied kinds: every element of a model's leaves; looped: the group heads' W_q, W_k."""
  for model in LAYER_PREDICTIONS:
    for depth in (1, 4, 7):
      model_leaves, layer_leaves = init_model(jax.random.key(0), depth, d=D, N=N, model=model,
                                              scales=InitScales())
      stored = sum(x.size for x in jax.tree.leaves((model_leaves, layer_leaves)))
      if model != "looped":
        assert parameter_count(model, depth, d=D, N=N) == stored, (model, depth)
        continue
      for loop_group, groups in ((0, 1), (1, depth), (3, -(-depth // 3))):
        assert parameter_count(model, depth, d=D, N=N, loop_group=loop_group) == (
            stored - 2 * N * N * (depth - groups)), (depth, loop_group)
  assert (parameter_count("looped", 64, d=16, N=32)
          == parameter_count("looped", 1, d=16, N=32) == parameter_count("softmax", 1, d=16, N=32))
  with pytest.raises(ValueError, match="allowed"):
    parameter_count("transformer", 1, d=D, N=N)


# --- every generalised kind ----------------------------------------------------------------


@pytest.mark.parametrize("model", GENERALIZED)
def test_models_jit_vmap_over_seeds_and_layout_order(x64, model):
  """Jitted and vmapped over seeds equals per-seed eager; reordering depths permutes models;
  a model initialised in a grid equals the model initialised alone."""
  fn, batch = LAYER_PREDICTIONS[model], _batch()
  layout = GridLayout(DEPTHS, loop_group=2)
  scales = InitScales(qk_init_scale=2.0)
  params = init_grid(jax.random.key(1), layout, (0, 1), d=D, N=N, scales=scales, model=model)
  batched = jax.jit(jax.vmap(lambda p: fn(p, batch, layout)))(params)
  for s in range(2):
    np.testing.assert_allclose(batched[s], fn(jax.tree.map(lambda x: x[s], params), batch,
                                              layout), rtol=1e-10, atol=1e-12)
  other = GridLayout((2, 1, 3), loop_group=2)
  other_params = init_grid(jax.random.key(1), other, (1,), d=D, N=N, scales=scales, model=model)
  for group in ("model", "layer"):  # depth 2, seed 1: model 2 of the grid, model 0 of other
    for name, leaf in params[group].items():
      other_leaf = other_params[group][name]
      if group == "model":
        np.testing.assert_array_equal(leaf[1, 2], other_leaf[0, 0], err_msg=name)
      else:
        np.testing.assert_array_equal(leaf[1, layout.layer_slice(2)],
                                      other_leaf[0, other.layer_slice(0)], err_msg=name)
  f_other = np.asarray(fn(jax.tree.map(lambda x: x[0], other_params), batch, other))
  for m_grid, m_other in ((0, 1), (1, 2), (2, 0)):
    np.testing.assert_allclose(f_other[other.layer_slice(m_other)],
                               batched[1][layout.layer_slice(m_grid)], rtol=1e-10, atol=1e-12)


PROBLEM = Problem(task="topk", k=2, d=4, P=8, spectra=((0.0, 0.0),))
SETTINGS = TrainSettings(batch_size=16, learning_rate=1e-2, warmup_steps=1, max_steps=4,
                         eval_every=2, rel_tol=0.05, patience=1, lr_decay_factor=0.5,
                         max_lr_decays=1, divergence_loss=1e6)
GRADIENT_DEPTHS = (1, 3, 8)


@functools.lru_cache(maxsize=None)
def _training_batches() -> tasks.Batch:
  """Two seeds' float32 batches of 64 contexts: leaves [2, 64, ...]."""
  return jax.jit(jax.vmap(lambda key: PROBLEM.sample(key, 64, 0.0, 0.0)))(
      jax.random.split(jax.random.key(6), 2))


@pytest.mark.parametrize("model", GENERALIZED)
@pytest.mark.parametrize("qk_init", ["identity", "random"])
def test_gradients_are_finite_at_initialisation(model, qk_init):
  """Float32 (as trained), both query/key starts, every model of the grid (1, 3, 8)."""
  layout = GridLayout(GRADIENT_DEPTHS, loop_group=2)
  params = init_grid(jax.random.key(5), layout, (0, 1), d=PROBLEM.d, N=N, model=model,
                     scales=InitScales(qk_init=qk_init))
  batch_S = _training_batches()

  def total_loss(params):
    losses_SM = grid_losses(LAYER_PREDICTIONS[model], params, batch_S, layout)
    return losses_SM.sum(), losses_SM

  grads, losses_SM = jax.jit(jax.grad(total_loss, has_aux=True))(params)
  assert np.all(np.isfinite(losses_SM))
  for path, leaf in jax.tree_util.tree_leaves_with_path(grads):
    assert np.all(np.isfinite(leaf)), path
  deepest = layout.layer_slice(len(GRADIENT_DEPTHS) - 1)
  assert np.abs(np.asarray(grads["layer"]["W_q"])[:, deepest]).max() > 0
  if model == "context_updates":  # m can leave 0 wherever there is a second layer
    grad_m_SM = np.abs(np.asarray(grads["model"]["m"]))
    assert np.all(grad_m_SM[:, 0] == 0) and np.all(grad_m_SM[:, 1:] > 0)


@pytest.mark.parametrize("model", GENERALIZED)
def test_grid_trainer_trains_a_chunk(model):
  """One compiled chunk of training steps on a depth-3 model (float32, identity start)."""
  trainer = GridTrainer(model, PROBLEM, (3,), (0,), SETTINGS, N=N,
                        init_scales=InitScales(qk_init="identity"), init_key=jax.random.key(10),
                        data_key=jax.random.key(11), loop_group=2)
  assert trainer.layout.loop_group == 2
  state = trainer.init_state()
  before = jax.tree.map(lambda x: np.array(x, copy=True), state.params)
  state, train_loss_SM = trainer.train_chunk(state)
  assert np.asarray(train_loss_SM).shape == (1, 1) and np.all(np.isfinite(train_loss_SM))
  assert int(state.step) == SETTINGS.eval_every
  change_T = np.abs(np.asarray(state.params["layer"]["W_q"]) - before["layer"]["W_q"])[0].sum(
      axis=(1, 2))
  # Looped: layer 2 starts the second group, layer 1 uses layer 0's copy and keeps its own.
  np.testing.assert_array_equal(change_T > 0, [True, model != "looped", True])
  if model == "context_updates":
    assert float(state.params["model"]["m"][0, 0]) != 0.0


# --- config --------------------------------------------------------------------------------


def test_config_sizes_needed_for_listed_kinds_only_and_loop_group_reaches_the_grid():
  config = smoke.get_config()
  config.grid.model = "softmax,looped"
  config.grid.loop_group = 4
  config.grid.sizes.looped.update(d=4, P=8, N=8)
  config_lib.validate(config)
  specs = {spec.model: spec for spec in config_lib.grid_specs(config)}
  assert specs["looped"].loop_group == 4 and specs["looped"].problem.P == 8
  with config.grid.sizes.unlocked():
    del config.grid.sizes["looped"]
  with pytest.raises(config_lib.ConfigError, match=r"config.grid.sizes=.*'looped'"):
    config_lib.validate(config)
  config.grid.model = "softmax"  # entries for unlisted kinds (linear here) are allowed
  config_lib.validate(config)
  with config.grid.sizes.unlocked():
    config.grid.sizes.sofmax = dict(d=4, P=8, N=8)  # but not for kinds that do not exist
  with pytest.raises(config_lib.ConfigError, match="config.grid.sizes="):
    config_lib.validate(config)
  with config.grid.sizes.unlocked():
    del config.grid.sizes["sofmax"]
  config.grid.loop_group = -1
  with pytest.raises(config_lib.ConfigError, match="config.grid.loop_group=-1"):
    config_lib.validate(config)


@pytest.fixture(scope="module")
def generalized_root(tmp_path_factory):
  """Every run of generalized_report.RUNS (the configs of issue 10), shrunk to toy sizes."""
  root = str(tmp_path_factory.mktemp("generalized"))
  for name, path, argument in generalized_report.RUNS:
    module = importlib.import_module("experiments.configs." + os.path.basename(path)[:-3])
    config = tiny.shrunk(module.get_config() if argument is None else module.get_config(argument))
    experiment.run(config, os.path.join(root, name))
  return root


@pytest.mark.slow  # a shrunk run of every config (~1.5-2 min): `make test-all`
def test_generalized_configs_run_end_to_end(generalized_root):
  """The configs of issue 10 validate and run at toy sizes: every variant gets a fit, the
  context-updates records carry the learned m and the S_1 fit, all their parameter count."""
  found = records.load_results(generalized_root,
                                    [name for name, _, _ in generalized_report.RUNS])
  assert list(found) == [name for name, _, _ in generalized_report.RUNS]
  for results in found.values():
    config = results["config"]
    assert {f["model"] for f in results["fits"]} == set(config["grid"]["model"].split(","))
    for record in results["runs"]:
      assert ("m" in record) == (record["model"] == "context_updates")
      assert ("m_effective" in record) == (record["model"] == "context_updates")
      assert ("first_layer_rho" in record) == (record["model"] == "context_updates")
      assert record["parameters"] > 0
      if record["model"] == "context_updates":
        assert 0.0 <= record["first_layer_rho"] <= 1.0
        heatmap = np.array(record["first_layer_attention"])
        assert heatmap.shape == (min(config["grid"]["sizes"]["context_updates"]["P"], 32),) * 2
        assert np.all(heatmap >= 0.0)
        profile = np.array(record["m_profile"]["loss"])
        assert profile.shape == (len(diagnostics.M_OFFSETS),)
        if record["depth"] == 1:  # one layer: m never enters
          np.testing.assert_array_equal(profile, profile[0])
        else:
          assert np.ptp(profile) > 1e-6 * profile.min()


def test_context_updates_without_diagnostic_contexts(tmp_path):
  """With diagnostic_size = 0 the records keep the learned m (it needs no contexts) and
  carry no diagnostic computed on contexts."""
  module = importlib.import_module("experiments.configs.generalized")
  config = tiny.shrunk(module.get_config("m_start"))
  config.grid.model = "context_updates"
  config.model_overrides.context_updates.eval.diagnostic_size = 0
  results = experiment.run(config, str(tmp_path / "run"))
  for record in results["runs"]:
    assert np.isfinite(record["m"]) and np.isfinite(record["m_effective"])
    assert record["diagnostic_contexts"] == 0
    assert not {"m_profile", "first_layer_rho", "modewise_loss",
                "selection_error_mean"} & set(record)


@pytest.mark.slow  # a shrunk run of every config (~1.5-2 min): `make test-all`
def test_generalized_report(generalized_root):
  """The combined report has a row per variant beside the paper's words, the learned m per
  task, the looped table, and every figure."""
  with open(generalized_report.write_generalized_report(generalized_root)) as f:
    text = f.read()
  for model in ("single_stream", "per_layer_values", "context_updates", "looped"):
    assert f"| {model} |" in text, model
  assert "(not run)" not in text
  assert "| the paper | verdict |" in text
  looped_row = next(line for line in text.splitlines() if line.startswith("| looped | looped |"))
  assert looped_row.split("|")[-2].strip() in ("no claim in the paper",
                                               "cannot say: under-trained")  # toy training
  assert "- generalized_top16 (top-16, m starts at 0): m = " in text
  assert "- m_start (top-2, m starts at -1): m = " in text
  assert "; m g_2/g_1 = " in text
  assert "| m_start_top16 | 2 | " in text  # the loss-along-m table
  assert "| flat (m never enters) |" in text
  assert ("| depth | untied: R_L | parameters | looped, all tied: R_L | parameters |"
          in text)
  assert "## Appendix C claims in both regimes" in text
  assert "| claim | the paper | annealed Adam | constant-step SGD | holds in |" in text
  for figure in ("context_updates", "looped", "generalized_depth", "generalized_decomposition",
                 "training_generalized_top16", "looped_depth"):
    assert os.path.isfile(os.path.join(generalized_root, "figures", figure + ".png")), figure


def _grid_fit(model, k, losses, se=1e-3):
  """A fit record as the experiment writes it, from seed-mean losses at depths 1, 2, 4, ..."""
  depths = [2 ** i for i in range(len(losses))]
  fit = dict(analysis.fit_depth_scaling(depths, losses), model=model, task="topk", k=k, a=0.0,
             b=0.0)
  fit["paired_differences"] = [dict(depth=d, previous=d // 2, difference=b - a, se=se)
                               for d, a, b in zip(depths[1:], losses, losses[1:])]
  # Run records with stationary windows (16 evaluations scattering 1e-5 about the loss), so
  # that the law check of a controlled model can reach a verdict.
  rng = np.random.default_rng(0)
  fit["runs"] = []
  for depth, loss in zip(depths, losses):
    window = loss * (1 + 1e-5 * rng.standard_normal(16))
    fit["runs"].append(dict(model=model, task="topk", k=k, a=0.0, b=0.0, depth=depth, seed=0,
                            eval_loss=float(window.mean()), eval_loss_se=1e-4 * loss,
                            window_eval_losses=window.tolist(),
                            stationarity=analysis.stationarity(window, 3.0), diverged=False,
                            flagged=False, flag_reason=""))
  return fit


@pytest.mark.parametrize("model,k,losses,last_change,flagged,expected", [
    ("softmax", 2, [2 + 1 / 2 ** i for i in range(6)], -0.001, 0, "agrees"),
    ("per_layer_values", 2, [2.1, 2.09, 2.08, 2.07, 2.06, 2.05], -0.001, 0, "partly"),
    ("single_stream", 2, [2.07, 1.86, 1.86, 1.85, 1.90, 1.90], -0.001, 0, "disagrees"),
    ("context_updates", 16, [0.34, 0.35, 0.35, 0.36, 0.45, 0.50], -0.001, 0, "agrees"),
    ("context_updates", 16, [2 + 1 / 2 ** i for i in range(6)], -0.001, 0, "disagrees"),
    ("context_updates", 2, [2 + 1 / 2 ** i for i in range(6)], -0.05, 0, "cannot say"),
    ("softmax", 2, [2 + 1 / 2 ** i for i in range(6)], -0.001, 10, "cannot say"),
    ("looped", 2, [2.05] * 6, -0.001, 0, "no claim"),
])
def test_verdict_against_the_paper(model, k, losses, last_change, flagged, expected):
  """The report's verdict: a clean 1/L curve agrees with "inverse depth" and disagrees with
  "saturates"; a steady fall without a floor agrees only partly; still-falling training or
  mostly flagged grids cannot be judged; looped layers have no claim to meet."""
  fit = _grid_fit(model, k, losses)
  assert checks.trend_against_paper(fit, last_change, flagged, 18).startswith(expected)


def test_verdict_names_depths_lost_to_flags():
  """A grid whose deepest depths are all flagged is judged on the clean depths, and the
  verdict says which depths it could not see."""
  fit = _grid_fit("context_updates", 16, [0.34, 0.32, 0.33])
  fit["flagged"] = [dict(depth=depth, seed=seed) for depth in (8, 16) for seed in range(3)]
  text = checks.trend_against_paper(fit, -0.001, 6, 15)
  assert text.startswith("agrees: no trend, judged on depths 1, 2, 4 only")
  assert text.endswith("every model at depth 8, 16 is flagged")


def test_last_interval_change_is_per_grid_and_names_the_largest_fall():
  """Metrics hold one line per spectrum per evaluation: the change compares a grid with
  itself, and one model still falling shows beside the mean of the flat ones."""
  def line(step, a, val_loss):
    return dict(model="softmax", a=a, b=0.0, step=step, val_loss=val_loss)
  metrics = [line(250, 0.0, [[1.0, 1.0, 1.0, 1.0]]), line(250, 0.5, [[9.0, 9.0, 9.0, 9.0]]),
             line(500, 0.0, [[1.0, 1.0, 1.0, 0.9]]), line(500, 0.5, [[9.0, 9.0, 9.0, 9.0]])]
  change = analysis.last_interval_change(metrics, dict(model="softmax", a=0.0, b=0.0))
  assert change["steps"] == 250
  assert change["mean"] == pytest.approx(-0.025)
  assert change["largest_fall"] == pytest.approx(-0.1)
  flat = analysis.last_interval_change(metrics, dict(model="softmax", a=0.5, b=0.0))
  assert flat == dict(mean=0.0, largest_fall=0.0, steps=250)


def test_generalized_suite_refuses_the_paper_tier(capsys):
  from absl import flags, logging
  from experiments import reproduce
  flags.FLAGS(["reproduce", "--suite=generalized", "--tier=paper"])
  level = logging.get_absl_logger().level  # main() lowers it; later tests read INFO logs
  try:
    with pytest.raises(SystemExit) as exit_info:
      reproduce.main([])
  finally:
    flags.FLAGS.unparse_flags()
    logging.get_absl_logger().setLevel(level)
  assert exit_info.value.code == 2
  assert "--tier=paper: the generalized suite has the cpu scale only" in capsys.readouterr().err


LAW = [2 + 1 / 2 ** i for i in range(6)]
FLAT = [2.05, 2.04, 2.05, 2.04, 2.05, 2.04]
STEEP = [2 + 1 / 4 ** i for i in range(6)]  # alpha = 2


@pytest.mark.parametrize("variant,control,paper_finds_law,expected", [
    (LAW, LAW, True, "holds"),
    (FLAT, LAW, True, "fails"),
    (FLAT, LAW, False, "holds"),  # the top-16 claim: the trend goes
    (LAW, LAW, False, "fails"),
    (STEEP, LAW, True, "fails"),  # falls faster than any inverse-depth trend ...
    (STEEP, LAW, False, "fails"),  # ... and so has not lost the trend either
    (LAW, FLAT, True, "not testable"),  # the controlled model has no law to keep
    (LAW, None, True, "not testable"),
    (None, LAW, True, "not run"),
    (FLAT, LAW, None, "no claim"),  # looped layers
])
def test_claim_status_needs_the_controlled_models_law(variant, control, paper_finds_law,
                                                      expected):
  status, found = claims.appendix_status(
      variant and _grid_fit("single_stream", 2, variant),
      control and _grid_fit("softmax", 2, control), paper_finds_law)
  assert status == expected
  assert len(found) == (1 if expected in ("holds", "fails") else 0)
  assert all(check.passed == (status == "holds") for check in found)


def test_every_sgd_regime_variant_validates_and_trains_its_kinds():
  """The configs behind generalized_report.SGD_RUNS: SGD at a constant rate, the kinds each
  claim reads (CLAIM_RUNS), and the looped grids' tying."""
  module = importlib.import_module("experiments.configs.sgd_generalized")
  kinds = {}
  for name, _, argument in generalized_report.SGD_RUNS:
    config = module.get_config(argument)
    config_lib.validate(config)
    assert (config.train.optimizer, config.train.schedule) == ("sgd", "constant")
    kinds[name] = {spec.model: spec for spec in config_lib.grid_specs(config)}
  for key, _, model, _ in claims.APPENDIX_C:
    run, control = claims.APPENDIX_C_RUNS[claims.SGD_GENERALIZED][key]
    assert model in kinds[run] and "softmax" in kinds[control], key
  assert kinds["looped"]["looped"].loop_group == 0 and kinds["looped4"]["looped"].loop_group == 4
  assert kinds["context_updates_top16"]["context_updates"].problem.k == 16
  with pytest.raises(config_lib.ConfigError, match="variant 'top3' does not exist"):
    module.get_config("top3,short")
  with pytest.raises(config_lib.ConfigError, match="tier 'long' does not exist.*short16"):
    module.get_config("top2,long")
  # short16 is the short tier at half the depth and half the steps: both average the last
  # half of the run.
  for tier in ("short", "short16"):
    config = module.get_config(f"context_updates,{tier}")
    assert config.eval.stationary_evals * config.train.eval_every == config.train.max_steps // 2
  assert module.get_config("context_updates,short16").grid.depths[-1] == 16
