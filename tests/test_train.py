"""The grid trainer: a model trained in a grid equals the model trained alone,
divergence is isolated per model, and the identity holds on trained predictions.

Sizes are tiny (d = 4, P = 8, N = 8, batch 16) and the convergence rule is made
impatient (patience 1, rel_tol 5%, one lr decay) so that learning-rate decay and
convergence fire for some models within a few evaluation chunks.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optax.tree_utils import tree_get

from bench import before
from inverse_depth import analysis
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.models import LAYER_PREDICTIONS, MODELS
from inverse_depth.modules import PackedModels
from inverse_depth.per_model import finite_per_model
from inverse_depth.train import (CPU_CONTEXTS_PER_BLOCK, SCALE_FREE_INPUT_MODELS, GridTrainer,
                                 Problem, TrainSettings, block_size, blocked_grid_gradient,
                                 grid_losses)

PROBLEM = Problem(task="topk", k=2, d=4, P=8, spectra=((0.0, 0.0),))
SETTINGS = TrainSettings(batch_size=16, learning_rate=1e-2, warmup_steps=2, max_steps=40,
                         eval_every=5, rel_tol=0.05, patience=1, lr_decay_factor=0.5,
                         max_lr_decays=1, divergence_loss=1e6)
N = 8
GRID_DEPTHS, GRID_SEEDS = (1, 2, 3), (0, 1)
ALONE_DEPTHS, ALONE_SEEDS = (2,), (1,)
VAL_SIZE, CHUNK = 64, 64
BOOKKEEPING = ("lr_scale_SM", "best_val_loss_SM", "evals_since_best_SM", "num_lr_decays_SM",
               "converged_SM", "diverged_SM", "diverged_at_step_SM", "steps_trained_SM")


@functools.lru_cache(maxsize=None)
def _trainer(model, depths, seeds, settings=SETTINGS):
  """Cached, so tests sharing a grid also share its compiled functions."""
  return GridTrainer(model, PROBLEM, depths, seeds, settings, N=N, init_scales=InitScales(),
                     init_key=jax.random.key(10), data_key=jax.random.key(11))


@pytest.fixture(scope="module")
def val_set():
  return (jax.jit(lambda key: PROBLEM.sample(key, VAL_SIZE, 0.0, 0.0))(jax.random.key(12)),)


def _copy(tree):
  return jax.tree.map(lambda x: np.array(x, copy=True), tree)


def _fit(trainer, val_set):
  state = trainer.init_state()
  history = []
  for state, progress in trainer.fit(state, val_set, CHUNK):
    history.append(progress)
  return state, history


def _model_params(params, layout, s, m):
  model = {k: np.asarray(v[s, m]) for k, v in params["model"].items()}
  layers = {k: np.asarray(v[s, layout.layer_slice(m)]) for k, v in params["layer"].items()}
  return model, layers


@pytest.fixture(scope="module", params=["softmax", "linear"])
def grid_and_alone(request, val_set):
  model = request.param
  grid = _trainer(model, GRID_DEPTHS, GRID_SEEDS)
  alone = _trainer(model, ALONE_DEPTHS, ALONE_SEEDS)
  grid_state, grid_history = _fit(grid, val_set)
  alone_state, alone_history = _fit(alone, val_set)
  return dict(model=model, grid=grid, alone=alone, grid_state=grid_state,
              grid_history=grid_history, alone_state=alone_state, alone_history=alone_history)


def test_grid_model_equals_model_trained_alone(grid_and_alone):
  g, a = grid_and_alone["grid_state"], grid_and_alone["alone_state"]
  grid, alone = grid_and_alone["grid"], grid_and_alone["alone"]
  s, m = GRID_SEEDS.index(1), GRID_DEPTHS.index(2)
  grid_model, grid_layers = _model_params(g.params, grid.layout, s, m)
  alone_model, alone_layers = _model_params(a.params, alone.layout, 0, 0)
  for name in grid_model:
    np.testing.assert_allclose(grid_model[name], alone_model[name], rtol=1e-5, atol=1e-6,
                               err_msg=name)
  for name in grid_layers:
    np.testing.assert_allclose(grid_layers[name], alone_layers[name], rtol=1e-5, atol=1e-6,
                               err_msg=name)
  for field in BOOKKEEPING:
    np.testing.assert_allclose(np.asarray(getattr(g, field))[s, m],
                               np.asarray(getattr(a, field))[0, 0], rtol=1e-5, err_msg=field)
  # The validation-loss history agrees for as long as both ran.
  for grid_progress, alone_progress in zip(grid_and_alone["grid_history"],
                                           grid_and_alone["alone_history"]):
    assert grid_progress["step"] == alone_progress["step"]
    np.testing.assert_allclose(grid_progress["val_loss"][s][m], alone_progress["val_loss"][0][0],
                               rtol=1e-5)
    np.testing.assert_allclose(grid_progress["lr_scale"][s][m], alone_progress["lr_scale"][0][0])


def test_progress_records_the_identity_and_the_parameter_summary(grid_and_alone):
  """Every evaluation records A and C beside R (R = C + (A - C)/L; A = R at L = 1) and the
  parameter summary of inverse_depth.trajectory, per model."""
  for progress in grid_and_alone["grid_history"]:
    R, A, C = (np.asarray(progress[k]) for k in ("val_loss", "val_A", "val_C"))
    depths = np.asarray(GRID_DEPTHS, float)
    deep = depths > 1
    np.testing.assert_allclose(R[:, deep], C[:, deep] + (A[:, deep] - C[:, deep]) / depths[deep],
                               rtol=1e-9)
    np.testing.assert_allclose(A[:, ~deep], R[:, ~deep], rtol=1e-9)
    assert np.all(np.isnan(C[:, ~deep]))
    assert np.asarray(progress["norm_W_x"]).shape == R.shape
    assert "temperature" in progress and "norm_W_q" in progress


def test_convergence_bookkeeping_was_exercised(grid_and_alone):
  """The settings make lr decay and convergence fire, at different times per model."""
  g = grid_and_alone["grid_state"]
  s, m = GRID_SEEDS.index(1), GRID_DEPTHS.index(2)
  assert int(g.num_lr_decays_SM[s, m]) >= 1
  assert float(g.lr_scale_SM[s, m]) < 1.0
  assert bool(g.converged_SM[s, m])
  assert not bool(np.asarray(g.diverged_SM).any())
  steps = np.asarray(g.steps_trained_SM)
  assert len(set(steps.ravel().tolist())) > 1, steps  # models froze at different steps
  # Frozen models stop at a chunk boundary; the grid ran until none was active or max_steps.
  assert np.all(steps % SETTINGS.eval_every == 0)
  assert int(g.step) == steps.max()
  assert int(g.step) == SETTINGS.max_steps or bool(np.asarray(g.converged_SM).all())
  # The model trained alone stopped as soon as it converged.
  a = grid_and_alone["alone_state"]
  assert int(a.step) == int(a.steps_trained_SM[0, 0])
  # The per-model convergence rule: lr_scale is decay^(number of decays).
  np.testing.assert_allclose(np.asarray(g.lr_scale_SM),
                             SETTINGS.lr_decay_factor ** np.asarray(g.num_lr_decays_SM))
  assert np.all(np.asarray(g.num_lr_decays_SM) <= SETTINGS.max_lr_decays)


def test_converged_models_are_frozen(grid_and_alone, val_set):
  """A converged model's params do not change when the grid trains on."""
  grid = grid_and_alone["grid"]
  state = grid.init_state()
  frozen_at = {}
  for state, _ in grid.fit(state, val_set, CHUNK):
    converged = np.asarray(state.converged_SM)
    params = _copy(state.params)
    for s, m in zip(*np.nonzero(converged)):
      if (s, m) not in frozen_at:
        frozen_at[(s, m)] = _model_params(params, grid.layout, s, m)
      else:
        now = _model_params(params, grid.layout, s, m)
        for before_leaf, now_leaf in zip(jax.tree.leaves(frozen_at[(s, m)]),
                                         jax.tree.leaves(now)):
          np.testing.assert_array_equal(before_leaf, now_leaf)
  assert frozen_at


def test_identity_on_trained_grid(grid_and_alone, val_set):
  """On the trained grid's held-out predictions (here the validation set, whose
  evaluation is already compiled), R = C + (A - C)/L to float64 precision."""
  grid, state = grid_and_alone["grid"], grid_and_alone["grid_state"]
  eval_set, = val_set
  preds_STE = grid.predict(state.params, eval_set, 32, 0)  # chunked evaluation
  assert preds_STE.shape == (len(GRID_SEEDS), sum(GRID_DEPTHS), VAL_SIZE)
  np.testing.assert_allclose(preds_STE, grid.predict(state.params, eval_set, CHUNK, 0), rtol=1e-5,
                             atol=1e-6)
  losses_SM = grid.model_losses(state.params, (eval_set,), CHUNK)
  target = np.asarray(eval_set.target_B)
  for s in range(len(GRID_SEEDS)):
    for m, depth in enumerate(GRID_DEPTHS):
      parts = analysis.decompose(preds_STE[s, grid.layout.layer_slice(m)], target)
      assert abs(parts["identity_residual"]) <= 1e-10 * parts["R"]
      np.testing.assert_allclose(parts["R"], losses_SM[s, m], rtol=1e-4)
      if depth > 1:
        assert parts["A"] >= parts["C"]
        np.testing.assert_allclose(parts["R"], parts["C"] + (parts["A"] - parts["C"]) / depth,
                                   rtol=1e-10)


def test_state_types_are_stable_across_a_chunk(val_set):
  """init_state's leaves have the same shapes, dtypes and weak types as the state that
  train_chunk and update_convergence return, so the compiled chunk is reused.

  Fails while init_state builds best_val_loss_SM as jnp.full(shape, jnp.inf)
  (weak float32): the first update_convergence returns a strong float32 and
  the second train_chunk call recompiles the whole step.
  """
  trainer = _trainer("softmax", (1, 2), (0,))
  state = trainer.init_state()
  after_chunk, _ = jax.eval_shape(trainer._train_chunk, state)
  after_update = jax.eval_shape(trainer._update_convergence, after_chunk,
                                jax.ShapeDtypeStruct((1, 2), jnp.float32))

  def avals(tree):
    return [(jax.tree_util.keystr(path), x.shape, x.dtype, x.weak_type)
            for path, x in jax.tree_util.tree_leaves_with_path(tree)]

  def typed(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                       weak_type=getattr(x, "weak_type",
                                                                         False)), tree)

  assert avals(typed(state)) == avals(after_chunk)
  assert avals(typed(state)) == avals(after_update)


# --- divergence isolation ----------------------------------------------------------------------

POISON_SEED, POISON_MODEL = 0, 1


@pytest.fixture(scope="module")
def divergence_runs():
  """One softmax grid; after one clean chunk, W_o of (seed 0, model 1) is scaled by 1e20
  (finite params, loss far above divergence_loss), and a second chunk is run. The same
  second chunk is run from the unpoisoned state for comparison."""
  trainer = _trainer("softmax", GRID_DEPTHS, GRID_SEEDS)
  state, _ = trainer.train_chunk(trainer.init_state())
  clean_start = jax.tree.map(jnp.array, state)
  W_o = state.params["model"]["W_o"]
  poisoned_params = dict(state.params, model=dict(
      state.params["model"], W_o=W_o.at[POISON_SEED, POISON_MODEL].multiply(1e20)))
  poisoned_start = state.replace(params=poisoned_params)
  poisoned_before = _copy(poisoned_start)
  poisoned_after, poisoned_losses = trainer.train_chunk(poisoned_start)
  clean_after, clean_losses = trainer.train_chunk(clean_start)
  return dict(trainer=trainer, before=poisoned_before, poisoned=_copy(poisoned_after),
              clean=_copy(clean_after), poisoned_losses=np.asarray(poisoned_losses),
              clean_losses=np.asarray(clean_losses))


def test_diverged_model_is_marked_and_frozen(divergence_runs):
  before, after = divergence_runs["before"], divergence_runs["poisoned"]
  layout = divergence_runs["trainer"].layout
  s, m = POISON_SEED, POISON_MODEL
  diverged = np.asarray(after.diverged_SM)
  assert diverged[s, m]
  assert diverged.sum() == 1
  every = SETTINGS.eval_every
  # It diverged at the first step of the second chunk and was never updated after.
  assert int(after.diverged_at_step_SM[s, m]) == every
  assert np.all(np.delete(np.asarray(after.diverged_at_step_SM).ravel(),
                          s * len(GRID_DEPTHS) + m) == -1)
  assert int(after.steps_trained_SM[s, m]) == every
  assert np.all(np.delete(np.asarray(after.steps_trained_SM).ravel(),
                          s * len(GRID_DEPTHS) + m) == 2 * every)
  assert not bool(np.asarray(after.active_SM)[s, m])
  for leaf_before, leaf_after in zip(jax.tree.leaves(_model_params(before.params, layout, s, m)),
                                     jax.tree.leaves(_model_params(after.params, layout, s, m))):
    np.testing.assert_array_equal(leaf_after, leaf_before)
    assert np.all(np.isfinite(leaf_after))
  # Its Adam moments are frozen too.
  for moments in ("mu", "nu"):
    for leaf_before, leaf_after in zip(
        jax.tree.leaves(_model_params(tree_get(before.opt_state, moments), layout, s, m)),
        jax.tree.leaves(_model_params(tree_get(after.opt_state, moments), layout, s, m))):
      np.testing.assert_array_equal(leaf_after, leaf_before)
  assert not np.all(np.isfinite(divergence_runs["poisoned_losses"][s, m])) or (
      divergence_runs["poisoned_losses"][s, m] > SETTINGS.divergence_loss)


def test_divergence_does_not_touch_other_models(divergence_runs):
  poisoned, clean = divergence_runs["poisoned"], divergence_runs["clean"]
  layout = divergence_runs["trainer"].layout
  for s in range(len(GRID_SEEDS)):
    for m in range(len(GRID_DEPTHS)):
      if (s, m) == (POISON_SEED, POISON_MODEL):
        continue
      for leaf_p, leaf_c in zip(jax.tree.leaves(_model_params(poisoned.params, layout, s, m)),
                                jax.tree.leaves(_model_params(clean.params, layout, s, m))):
        assert np.all(np.isfinite(leaf_p))
        np.testing.assert_allclose(leaf_p, leaf_c, rtol=1e-6, atol=1e-7)
      np.testing.assert_allclose(divergence_runs["poisoned_losses"][s, m],
                                 divergence_runs["clean_losses"][s, m], rtol=1e-6)
  assert not np.asarray(clean.diverged_SM).any()
  # The clean run did update the model the other run froze.
  clean_W_o = clean.params["model"]["W_o"][POISON_SEED, POISON_MODEL]
  before_W_o = divergence_runs["before"].params["model"]["W_o"][POISON_SEED, POISON_MODEL]
  assert not np.allclose(clean_W_o * 1e20, before_W_o)


def test_nan_parameters_at_start_diverge_at_step_zero():
  """A model whose W_o is NaN from the start is marked diverged at step 0, never
  updated, and leaves every other model exactly as in a clean run."""
  trainer = _trainer("softmax", GRID_DEPTHS, GRID_SEEDS)  # compiled by the tests above
  s, m = 1, 2
  clean_after, _ = trainer.train_chunk(trainer.init_state())
  clean_after = _copy(clean_after)
  state = trainer.init_state()
  state = state.replace(params=dict(state.params, model=dict(
      state.params["model"], W_o=state.params["model"]["W_o"].at[s, m].set(jnp.nan))))
  before = _copy(state)
  after, losses = trainer.train_chunk(state)
  after = _copy(after)
  assert not np.isfinite(np.asarray(losses)[s, m])
  assert after.diverged_SM[s, m] and after.diverged_SM.sum() == 1
  assert after.diverged_at_step_SM[s, m] == 0 and after.steps_trained_SM[s, m] == 0
  layout = trainer.layout
  np.testing.assert_array_equal(after.params["layer"]["W_q"][s, layout.layer_slice(m)],
                                before.params["layer"]["W_q"][s, layout.layer_slice(m)])
  np.testing.assert_array_equal(after.params["model"]["W_x"][s, m],
                                before.params["model"]["W_x"][s, m])
  for s2 in range(len(GRID_SEEDS)):
    for m2 in range(len(GRID_DEPTHS)):
      if (s2, m2) == (s, m):
        continue
      for leaf_a, leaf_c in zip(jax.tree.leaves(_model_params(after.params, layout, s2, m2)),
                                jax.tree.leaves(_model_params(clean_after.params, layout, s2,
                                                              m2))):
        np.testing.assert_allclose(leaf_a, leaf_c, rtol=1e-6, atol=1e-7)


def test_a_non_finite_validation_loss_marks_only_that_model_diverged():
  """Finite weights can still overflow on held-out contexts: such a model stops as diverged
  at that step (not 'converged' on a loss that is no loss), and no other model is touched."""
  trainer = _trainer("softmax", GRID_DEPTHS, GRID_SEEDS)  # compiled by the tests above
  state = trainer.init_state()
  val_loss_SM = np.ones(state.diverged_SM.shape, np.float32)
  val_loss_SM[1, 2] = np.inf
  after = trainer.update_convergence(state, jnp.asarray(val_loss_SM))
  assert after.diverged_SM[1, 2] and after.diverged_SM.sum() == 1
  assert after.diverged_at_step_SM[1, 2] == 0 and not after.converged_SM.any()
  assert after.best_val_loss_SM[0, 0] == 1.0 and not np.isfinite(after.best_val_loss_SM[1, 2])


@pytest.mark.parametrize("which", ["first", "last"])
def test_finite_per_model_attributes_each_layer_to_its_model(which):
  """A NaN in the first or last packed layer of model m (and nowhere else) makes exactly
  (s, m) non-finite: the layer -> model reduction alone, without any loss in between."""
  layout = GridLayout(GRID_DEPTHS)
  params = init_grid(jax.random.key(0), layout, GRID_SEEDS, d=4, N=N, scales=InitScales())
  for s in range(len(GRID_SEEDS)):
    for m in range(len(GRID_DEPTHS)):
      layers = layout.layer_slice(m)
      t = layers.start if which == "first" else layers.stop - 1
      poisoned = dict(params, layer=dict(params["layer"],
                                         W_k=params["layer"]["W_k"].at[s, t, 0, 0].set(jnp.inf)))
      expected = np.ones((len(GRID_SEEDS), len(GRID_DEPTHS)), bool)
      expected[s, m] = False
      np.testing.assert_array_equal(np.asarray(finite_per_model(poisoned, layout)), expected)


def _one_step_layer_change(settings, depths=(1, 3)):
  """Summed |change of W_q| per packed layer after one step (seed 0, identity init)."""
  trainer = GridTrainer("softmax", PROBLEM, depths, (0,), settings, N=N,
                        init_scales=InitScales(qk_init="identity"),
                        init_key=jax.random.key(10), data_key=jax.random.key(11))
  before = trainer.init_state()
  W_q_before = np.asarray(before.params["layer"]["W_q"])
  after, _ = trainer.train_chunk(before)
  change_T = np.abs(np.asarray(after.params["layer"]["W_q"]) - W_q_before)[0].sum(axis=(1, 2))
  return trainer.layout, change_T


def test_depth_scaled_layer_lr_multiplies_layer_updates_by_depth():
  """With SGD the first step's update of a depth-L model's W_q is L x the unscaled one."""
  plain = dataclasses.replace(SETTINGS, optimizer="sgd", momentum=0.0, warmup_steps=0,
                              eval_every=1, learning_rate=1e-3)
  scaled = dataclasses.replace(plain, depth_scaled_layer_lr=True)
  layout, change_plain = _one_step_layer_change(plain)
  _, change_scaled = _one_step_layer_change(scaled)
  depth_T = np.repeat(layout.depths, layout.depths)
  assert np.all(change_plain > 0)  # the first step trains (no warm-up from a zero rate)
  np.testing.assert_allclose(change_scaled, depth_T * change_plain, rtol=1e-3)


def test_identity_init_starts_every_layer_near_the_identity():
  params = init_grid(jax.random.key(0), GridLayout((1, 3)), (0,), d=4, N=N,
                     scales=InitScales(qk_init="identity", qk_init_scale=0.7, qk_init_noise=0.01))
  W_q = np.asarray(params["layer"]["W_q"])[0]
  assert W_q.shape == (4, N, N)
  np.testing.assert_allclose(W_q, 0.7 * np.eye(N)[None].repeat(4, 0), atol=0.06)
  assert np.std(W_q - 0.7 * np.eye(N)) == pytest.approx(0.01, rel=0.3)


@pytest.mark.parametrize("qk_init", ["identity", "random"])
def test_depth_scaled_start_scales_each_layers_form_by_depth(qk_init):
  """qk_depth_exponent = 1: the depth-L model's W_q, W_k are sqrt(L) times those of the
  unscaled start (same draws), so every layer's W_q^T W_k is L times larger."""
  layout = GridLayout((1, 2, 4))
  plain, scaled = (init_grid(jax.random.key(0), layout, (0,), d=4, N=N, scales=InitScales(
      qk_init=qk_init, qk_init_scale=0.7, qk_init_noise=0.0, qk_init_depth_exponent=exponent))
                   for exponent in (0.0, 1.0))
  depth_T = np.repeat(layout.depths, layout.depths)
  for leaf in ("W_q", "W_k"):
    np.testing.assert_allclose(np.asarray(scaled["layer"][leaf])[0],
                               np.sqrt(depth_T)[:, None, None]
                               * np.asarray(plain["layer"][leaf])[0], rtol=1e-6)
  np.testing.assert_array_equal(scaled["model"]["W_x"], plain["model"]["W_x"])


def test_cosine_schedule_trains_to_max_steps_and_ends_at_zero():
  """Non-stall schedules never freeze a model early; the cosine rate reaches 0."""
  from inverse_depth.train import learning_rate_schedule
  settings = dataclasses.replace(SETTINGS, schedule="cosine", max_steps=20, eval_every=5)
  schedule = learning_rate_schedule(settings)
  assert float(schedule(settings.max_steps)) == pytest.approx(0.0, abs=1e-9)
  assert float(schedule(settings.warmup_steps)) == pytest.approx(settings.learning_rate)
  for name in ("cosine", "constant"):  # without warm-up the first step has the full rate
    no_warmup = dataclasses.replace(settings, schedule=name, warmup_steps=0)
    assert float(learning_rate_schedule(no_warmup)(0)) == pytest.approx(settings.learning_rate)
  trainer = GridTrainer("softmax", PROBLEM, (1, 2), (0,), settings, N=N,
                        init_scales=InitScales(), init_key=jax.random.key(10),
                        data_key=jax.random.key(11))
  val = (PROBLEM.sample(jax.random.key(5), 64, 0.0, 0.0),)
  converged_before_end = []
  for state, progress in trainer.fit(trainer.init_state(), val, 64):
    if progress["step"] < settings.max_steps:  # states are donated: read them as they come
      converged_before_end.append(np.asarray(state.converged_SM).any())
  assert int(state.step) == settings.max_steps
  assert np.all(np.asarray(state.steps_trained_SM) == settings.max_steps)
  assert converged_before_end and not any(converged_before_end)  # nothing frozen early


def test_orthogonal_input_map_has_the_gaussian_mean_gram_without_spread():
  gaussian = init_grid(jax.random.key(0), GridLayout((1,)), (0,), d=4, N=N, scales=InitScales())
  orthogonal = init_grid(jax.random.key(0), GridLayout((1,)), (0,), d=4, N=N,
                         scales=InitScales(W_x_init="orthogonal"))
  W_x = np.asarray(orthogonal["model"]["W_x"])[0, 0]
  np.testing.assert_allclose(W_x.T @ W_x, (N / 4) * np.eye(4), atol=1e-5)
  spread = np.linalg.eigvalsh(np.asarray(gaussian["model"]["W_x"])[0, 0].T
                              @ np.asarray(gaussian["model"]["W_x"])[0, 0])
  assert spread.max() / spread.min() > 1.5  # what the orthogonal start removes


@pytest.mark.slow  # 10-35 s: kept out of `make test` for its 15-minute budget
def test_spectrum_axis_equals_each_spectrum_trained_alone():
  """One grid over two spectra (replicates spectrum-major) trains every (spectrum, seed,
  depth) model exactly as a grid of that spectrum alone: same init, same stream."""
  settings = dataclasses.replace(SETTINGS, max_steps=10)
  spectra = ((0.0, 0.0), (0.5, 1.0))
  both = GridTrainer("softmax", dataclasses.replace(PROBLEM, spectra=spectra), (1, 2), (0, 1),
                     settings, N=N, init_scales=InitScales(), init_key=jax.random.key(10),
                     data_key=jax.random.key(11))
  sample = jax.jit(PROBLEM.sample, static_argnums=1)
  vals = tuple(sample(jax.random.key(12), VAL_SIZE, a, b) for a, b in spectra)
  state_both, _ = _fit(both, vals)
  for j, (a, b) in enumerate(spectra):
    alone = GridTrainer("softmax", dataclasses.replace(PROBLEM, spectra=((a, b),)), (1, 2),
                        (0, 1), settings, N=N, init_scales=InitScales(),
                        init_key=jax.random.key(10), data_key=jax.random.key(11))
    state_alone, history = _fit(alone, (vals[j],))
    rows = slice(2 * j, 2 * j + 2)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x)[rows], np.asarray(y),
                                                         rtol=1e-5, atol=1e-6),
                 state_both.params, state_alone.params)
    assert "selected_mass" in history[-1]
    assert np.all(np.asarray(history[-1]["selected_mass"]) > 0)
  # The two spectra really differ (else the test above proves nothing).
  assert not np.allclose(np.asarray(state_both.params["layer"]["W_q"])[0],
                         np.asarray(state_both.params["layer"]["W_q"])[2])


# --- the blocked gradient (issue 44) -----------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_blocked_gradient_equals_the_whole_batch_gradient(model, x64):
  """For every kind, the gradient and losses accumulated over blocks of contexts (through
  the kind's features) equal plain autodiff of the whole batch's grid loss (float64, so only
  the summation order differs)."""
  layout = GridLayout((1, 2, 3))
  params = init_grid(jax.random.key(3), layout, (0, 1), d=PROBLEM.d, N=N,
                     scales=InitScales(qk_init="identity", context_update_m_init=-1.0), model=model)
  params = jax.tree.map(lambda x: x.astype(jnp.float64), params)
  batch_S = jax.tree.map(
      lambda *xs: jnp.stack(xs).astype(jnp.float64),
      *[PROBLEM.sample(jax.random.key(s), 12, 0.0, 0.0) for s in (4, 5)])

  def total_loss(params):
    losses_SM = grid_losses(LAYER_PREDICTIONS[model], params, batch_S, layout)
    return losses_SM.sum(), losses_SM

  expected_grads, expected_losses = jax.jit(jax.grad(total_loss, has_aux=True))(params)
  module = PackedModels(model, layout, d=PROBLEM.d, N=N)
  grads, losses = jax.jit(blocked_grid_gradient, static_argnums=(0, 3))(module, params, batch_S, 4)
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-12)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_context_updates_gradient_equals_the_step_before_issue_44(x64):
  """The context-updates model as it trains now (layers unrolled over their non-zero Krylov
  columns, a custom backward of the context scores, S c without a normalised S) gives the
  gradient of the scanned, rematerialised model that bench/before.py keeps."""
  layout = GridLayout((1, 2, 4))
  params = init_grid(jax.random.key(3), layout, (0,), d=PROBLEM.d, N=N,
                     scales=InitScales(qk_init="identity", context_update_m_init=-1.0),
                     model="context_updates")
  params = jax.tree.map(lambda x: x[0].astype(jnp.float64), params)
  batch = jax.tree.map(lambda x: x.astype(jnp.float64),
                       PROBLEM.sample(jax.random.key(4), 12, 0.0, 0.0))

  def loss(predictions):
    return lambda p: jnp.sum(layout.model_mean(predictions(p, batch, layout)) ** 2)

  now, then = (LAYER_PREDICTIONS["context_updates"],
               before.context_updates_layer_predictions)
  np.testing.assert_allclose(now(params, batch, layout), then(params, batch, layout),
                             rtol=1e-10)
  for got, want in zip(jax.tree.leaves(jax.grad(loss(now))(params)),
                       jax.tree.leaves(jax.grad(loss(then))(params))):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_block_size_is_the_largest_divisor_of_the_batch_not_above_the_setting():
  assert block_size(256, 4, "softmax") == 4
  assert block_size(100, 8, "softmax") == 5
  assert block_size(7, 4, "softmax") == 1
  assert block_size(16, 100, "softmax") == 16
  # 0: the kind's measured CPU block, the whole batch on an accelerator or for other kinds.
  assert block_size(256, 0, "softmax", "cpu") == CPU_CONTEXTS_PER_BLOCK["softmax"]
  assert block_size(256, 0, "context_updates", "cpu") == CPU_CONTEXTS_PER_BLOCK[
      "context_updates"]
  assert block_size(256, 0, "linear", "cpu") == 256
  assert block_size(256, 0, "softmax", "gpu") == 256


def test_a_grid_trains_the_same_in_blocks_and_whole(val_set):
  """Two chunks of training with the gradient in blocks of 4 contexts and in one block end
  at the same losses and parameters to float32 tolerance."""
  blocked = _trainer("softmax", GRID_DEPTHS, GRID_SEEDS,
                     dataclasses.replace(SETTINGS, microbatch_size=4))
  whole = GridTrainer("softmax", PROBLEM, GRID_DEPTHS, GRID_SEEDS,
                      dataclasses.replace(SETTINGS, microbatch_size=SETTINGS.batch_size), N=N,
                      init_scales=InitScales(), init_key=jax.random.key(10),
                      data_key=jax.random.key(11))
  states = []
  for trainer in (blocked, whole):
    state = trainer.init_state()
    for _ in range(2):
      state, losses_SM = trainer.train_chunk(state)
    states.append((np.asarray(losses_SM), _copy(state.params)))
  np.testing.assert_allclose(states[0][0], states[1][0], rtol=1e-5)
  for got, want in zip(jax.tree.leaves(states[0][1]), jax.tree.leaves(states[1][1])):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("model", ["softmax", "per_layer_values", "looped", "context_updates"])
def test_layer_predictions_do_not_depend_on_the_norm_of_W_x(model):
  """The layer norm divides |W_x| out of every kind that may fix it (SCALE_FREE_INPUT_MODELS)."""
  assert model in SCALE_FREE_INPUT_MODELS
  layout = GridLayout((1, 2))
  params = jax.tree.map(lambda x: x[0], init_grid(jax.random.key(0), layout, (0,), d=4, N=N,
                                                  scales=InitScales(), model=model))
  batch = PROBLEM.sample(jax.random.key(1), 16, 0.0, 0.0)
  scaled = dict(params, model=dict(params["model"], W_x=3.0 * params["model"]["W_x"]))
  np.testing.assert_allclose(LAYER_PREDICTIONS[model](scaled, batch, layout),
                             LAYER_PREDICTIONS[model](params, batch, layout), rtol=1e-4, atol=1e-5)


def test_fixed_input_norm_keeps_W_x_at_its_initial_norm_and_changes_no_prediction():
  """One SGD step with and without `fixed_input_norm` predicts the same (the loss is blind to
  |W_x|), but only the free step grows |W_x|; the fixed one holds every model's norm."""
  settings = dataclasses.replace(SETTINGS, optimizer="sgd", momentum=0.9, warmup_steps=0,
                                 eval_every=1, learning_rate=0.5)
  batch = PROBLEM.sample(jax.random.key(3), 32, 0.0, 0.0)
  stepped = {}
  for fixed in (False, True):
    trainer = GridTrainer("softmax", PROBLEM, GRID_DEPTHS, GRID_SEEDS,
                          dataclasses.replace(settings, fixed_input_norm=fixed), N=N,
                          init_scales=InitScales(qk_init="identity"),
                          init_key=jax.random.key(10), data_key=jax.random.key(11))
    start = trainer.init_state()
    norm_before_SM = np.linalg.norm(np.asarray(start.params["model"]["W_x"]), axis=(-2, -1))
    after, _ = trainer.train_chunk(start)
    norm_after_SM = np.linalg.norm(np.asarray(after.params["model"]["W_x"]), axis=(-2, -1))
    stepped[fixed] = (norm_before_SM, norm_after_SM,
                      np.asarray(trainer.layer_predictions(after.params, batch, 0)))
  before_SM, free_SM, free_predictions = stepped[False]
  _, fixed_SM, fixed_predictions = stepped[True]
  np.testing.assert_allclose(fixed_SM, before_SM, rtol=1e-6)
  assert np.all(free_SM > before_SM * (1 + 1e-4))  # noise orthogonal to W_x grows its norm
  np.testing.assert_allclose(fixed_predictions, free_predictions, rtol=1e-4, atol=1e-5)
