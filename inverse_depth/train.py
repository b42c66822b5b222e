"""Training a whole grid of (seed, depth) models in one jit-compiled step.

What trains is the Flax module of the model kind, `modules.PackedModels`: its variables are
one replicate's packed depth grid, made by `module.init` (`init_replicate`), and the step
vmaps its pure `apply` over the replicates S. State is one pytree (`TrainState`);
`train_chunk` runs `eval_every` pure train steps inside one compiled call with the state
donated. Every model's optimisation is independent: the loss summed over the grid has
per-model gradients equal to each model's own, Adam is element-wise, and the per-model
learning-rate scale and freezing are optax transformations in the chain
(`make_grid_optimizer`, inverse_depth/per_model.py) that only touch that model's leaves.

Randomness: the training batch of seed s at step t is sampled on device from
fold_in(fold_in(data_key, s), t), so a resumed run replays the same stream
and a model sees the same data inside a grid or alone.

Optimiser (`optimizer`): Adam, or SGD with heavy-ball `momentum`, after a
linear warm-up. Schedule (`schedule`):
  - "stall_decay": constant rate; per model, on a fixed validation set
    evaluated every `eval_every` steps, an evaluation *improves* when the
    validation loss falls below (1 - rel_tol) x the best so far. After
    `patience` evaluations without improvement the model's learning rate is
    multiplied by `lr_decay_factor`; once that has happened `max_lr_decays`
    times, the next `patience` evaluations without improvement mark the model
    converged, and it is frozen;
  - "constant" and "cosine" (cosine decay to zero at `max_steps`): every model
    trains `max_steps` steps; it is marked converged when its validation loss
    did not improve (same test) over its last `patience` evaluations.
With `depth_scaled_layer_lr` the updates of a depth-L model's per-layer
weights (W_q, W_k, and W_v^l for per_layer_values) are multiplied by L: each
layer's gradient carries the 1/L of the residual update, so under SGD this gives
every layer of every depth the step of a one-layer model. Adam's steps do not
see the 1/L, so under Adam it makes a depth-L model's layer steps L x larger.
With `fixed_input_norm` every step rescales each model's W_x back to the
Frobenius norm it had before the step, so |W_x| keeps its initial value. The
layer norm in front of the scores makes the loss of the kinds in
SCALE_FREE_INPUT_MODELS independent of |W_x|, so no prediction changes; what
changes is that SGD noise can no longer grow |W_x| and with it lower W_x's
effective rate eta / |W_x|^2 as training goes on (docs/notes/stationary.md).
A model whose loss or parameters become non-finite, or whose loss exceeds
`divergence_loss`, is frozen at its last finite state and marked diverged.
Training stops when no model is active or at `max_steps`.

Devices: the grid's packed layer axis T (where nearly all parameters and work
are) is sharded over a one-axis `jax.sharding.Mesh` ("layers") of all devices
with `NamedSharding`; per-model leaves and the bookkeeping are replicated, and
XLA's SPMD partitioner inserts the collectives. When T is not a multiple of
the device count, a frozen padding model of the missing depth is appended to
the layout: it is never updated, never reported, and changes no other model.
On one device nothing is padded. Results on 1 and 8 devices agree to float
tolerance at first (summation order differs), not bit for bit; the padding
model makes a checkpoint specific to its device count. Under several processes
(`inverse_depth.hosts`) the mesh spans every process's devices, and the
functions whose results a host reads (predictions, attention mass, the training
loss) return replicated arrays.
"""

import dataclasses
import time
from typing import Callable, Iterator

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from inverse_depth import hosts, per_model, tasks, trajectory
from inverse_depth.grid import GridLayout, InitScales, Params
from inverse_depth.models import TEST_ATTENTION
from inverse_depth.modules import PackedModels


@dataclasses.dataclass(frozen=True)
class Problem:
  """What one grid learns: task, sizes and the spectra (a, b) it is trained on."""
  task: str
  k: int
  d: int
  P: int
  spectra: tuple[tuple[float, float], ...]

  @property
  def num_selected(self) -> int:
    """Context tokens that make the target: k on the top-k task, the copied one on top-1."""
    return self.k if self.task == "topk" else 1

  def sample(self, key: jax.Array, batch_size: int, a, b) -> tasks.Batch:
    """`batch_size` contexts of spectrum (a, b); a and b may be traced."""
    return tasks.sample_batch(key, batch_size, d=self.d, P=self.P, a=a, b=b, task=self.task,
                              k=self.k)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """Optimiser and convergence-rule settings (see the module docstring)."""
  batch_size: int
  learning_rate: float
  warmup_steps: int
  max_steps: int
  eval_every: int
  rel_tol: float
  patience: int
  lr_decay_factor: float
  max_lr_decays: int
  divergence_loss: float
  optimizer: str = "adam"  # one of OPTIMIZERS
  momentum: float = 0.9  # SGD only
  schedule: str = "stall_decay"  # one of SCHEDULES
  depth_scaled_layer_lr: bool = False
  fixed_input_norm: bool = False  # rescale W_x to its norm before each step (docstring)
  # Contexts per block of the gradient (`block_size`; 0: automatic). It changes only the
  # summation order, so two settings that differ in it compare equal.
  microbatch_size: int = dataclasses.field(default=0, compare=False)


OPTIMIZERS = ("adam", "sgd")
# Kinds whose loss does not depend on |W_x| (W_x X enters only through a layer norm), where
# `fixed_input_norm` changes no prediction.
SCALE_FREE_INPUT_MODELS = ("softmax", "per_layer_values", "looped", "context_updates")
SCHEDULES = ("stall_decay", "constant", "cosine")


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # scalar int32: steps taken by the grid
  params: Params  # model leaves [S, M, ...], layer leaves [S, T, ...]
  opt_state: per_model.FreezeState  # make_grid_optimizer's: rate scale and frozen models
  best_val_loss_SM: jax.Array
  evals_since_best_SM: jax.Array
  num_lr_decays_SM: jax.Array
  converged_SM: jax.Array
  diverged_SM: jax.Array
  diverged_at_step_SM: jax.Array  # -1 unless diverged
  steps_trained_SM: jax.Array  # steps in which the model was updated

  @property
  def active_SM(self) -> jax.Array:
    return ~(self.converged_SM | self.diverged_SM)

  @property
  def lr_scale_SM(self) -> jax.Array:
    """The per-model multiplier of the learning rate (per_model.scale_by_model_rate)."""
    return optax.tree_utils.tree_get(self.opt_state, "rate_scale_SM")


def learning_rate_schedule(settings: TrainSettings) -> optax.Schedule:
  """Linear warm-up from 0 to `learning_rate` over `warmup_steps`, then constant, or cosine
  decay to 0 at max_steps. With warmup_steps = 0 the first step trains at the full rate."""
  lr, warmup = settings.learning_rate, settings.warmup_steps
  if settings.schedule == "cosine":
    if warmup == 0:
      return optax.cosine_decay_schedule(lr, max(settings.max_steps, 1), alpha=0.0)
    return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(settings.max_steps, warmup + 1),
                                              end_value=0.0)
  return optax.constant_schedule(lr) if warmup == 0 else optax.linear_schedule(0.0, lr, warmup)


def make_optimizer(settings: TrainSettings) -> optax.GradientTransformation:
  """Adam or SGD with momentum, following `learning_rate_schedule`."""
  if settings.optimizer not in OPTIMIZERS or settings.schedule not in SCHEDULES:
    raise ValueError(f"optimizer {settings.optimizer!r} / schedule {settings.schedule!r}: "
                     f"allowed {OPTIMIZERS} / {SCHEDULES}")
  schedule = learning_rate_schedule(settings)
  if settings.optimizer == "sgd":
    return optax.sgd(schedule, momentum=settings.momentum)
  return optax.adam(schedule)


def make_grid_optimizer(settings: TrainSettings, layout: GridLayout,
                        initial_rate_scale_SM: np.ndarray,
                        initial_frozen_SM: np.ndarray) -> optax.GradientTransformationExtraArgs:
  """`make_optimizer`, then each model's rate scale (per_model.scale_by_model_rate), the
  depth scaling of layer updates and the fixed |W_x| when the settings ask for them, all
  inside per_model.freeze_models: frozen and diverging models get no update."""
  chain = [make_optimizer(settings), per_model.scale_by_model_rate(layout, initial_rate_scale_SM)]
  if settings.depth_scaled_layer_lr:
    chain.append(per_model.scale_layers_by_depth(layout))
  if settings.fixed_input_norm:
    chain.append(per_model.keep_input_norm())
  return per_model.freeze_models(optax.chain(*chain), layout, initial_frozen_SM,
                                 settings.divergence_loss)


def grid_losses(layer_predictions: Callable, params: Params, batch_S: tasks.Batch,
                layout: GridLayout) -> jax.Array:
  """Mean squared error of every model: [S, M]."""

  def seed_losses(params_one_seed, batch):
    predictions_MB = layout.model_mean(layer_predictions(params_one_seed, batch, layout))
    return jnp.mean((predictions_MB - batch.target_B[None]) ** 2, axis=-1)

  return jax.vmap(seed_losses)(params, batch_S)


# Contexts per block of the training gradient on a CPU when microbatch_size is 0 (automatic),
# measured on 2 cores (bench/README.md "Blocks"): the packed kinds' [block, T, P] scores stay
# in cache at 8 contexts, context updates' [block, P, P] attention per layer at a few dozen. The other kinds, and every kind on an accelerator, take the whole batch at once.
CPU_CONTEXTS_PER_BLOCK = {"softmax": 8, "per_layer_values": 8, "looped": 8,
                          "context_updates": 32}


def block_size(batch_size: int, microbatch_size: int, model: str,
               backend: str | None = None) -> int:
  """Contexts per block of the gradient: the largest divisor of `batch_size` that is at most
  `microbatch_size`, or for 0 at most the kind's CPU_CONTEXTS_PER_BLOCK on a CPU (the whole
  batch elsewhere)."""
  if microbatch_size == 0:
    on_cpu = (backend or jax.default_backend()) == "cpu"
    microbatch_size = CPU_CONTEXTS_PER_BLOCK.get(model, batch_size) if on_cpu else batch_size
  return max(n for n in range(1, min(microbatch_size, batch_size) + 1) if batch_size % n == 0)


def blocked_grid_gradient(module: PackedModels, params: Params, batch_S: tasks.Batch,
                          contexts_per_block: int) -> tuple[Params, jax.Array]:
  """Gradient of the grid loss sum_{s,m} R_sm, and the losses R [S, M], block by block.

  R_sm = (1/B) sum_b (y_hat_b - y*_b)^2 is a sum over blocks of contexts, so its gradient is
  the sum of the blocks' gradients (the whole batch's up to summation order). The module's
  `features` (the part of the model that does not depend on the contexts) are computed once
  per replicate, each block's gradient of its `predict` is taken with respect to them inside
  a `lax.scan` that accumulates it, and the sum is pulled back to the parameters once. A
  block's [block, T, P] intermediates are small enough to stay in cache, where the whole
  batch's went to main memory (bench/README.md: block size and speed-up measured).
  """
  layout = module.layout
  batch_size = batch_S.target_B.shape[1]
  num_blocks = batch_size // contexts_per_block
  features_S, pull_back = jax.vjp(
      jax.vmap(lambda p: module.apply({"params": p}, method=PackedModels.features)), params)
  blocks = jax.tree.map(  # [num_blocks, S, contexts_per_block, ...]
      lambda x: jnp.swapaxes(x.reshape((x.shape[0], num_blocks, contexts_per_block)
                                       + x.shape[2:]), 0, 1), batch_S)

  def block_losses(features_S, block_S):
    """Each model's share of its loss from one block: [S, M]."""
    def one_seed(features, block):
      predictions_TB = module.apply({}, features, block, method=PackedModels.predict)
      predictions_MB = layout.model_mean(predictions_TB)
      return jnp.sum((predictions_MB - block.target_B[None]) ** 2, axis=-1) / batch_size
    losses_SM = jax.vmap(one_seed)(features_S, block_S)
    return losses_SM.sum(), losses_SM

  def accumulate(totals, block_S):
    feature_grads, losses_SM = jax.grad(block_losses, has_aux=True)(features_S, block_S)
    return jax.tree.map(jnp.add, totals, (feature_grads, losses_SM)), None

  zeros = jax.tree.map(jnp.zeros_like, features_S), jnp.zeros(
      batch_S.target_B.shape[:1] + (layout.num_models,), batch_S.target_B.dtype)
  (feature_grads, losses_SM), _ = jax.lax.scan(accumulate, zeros, blocks)
  return pull_back(feature_grads)[0], losses_SM


LAYER_AXIS = "layers"


def default_mesh() -> Mesh:
  """Every device of every process along the layer axis (inverse_depth.hosts)."""
  return Mesh(np.array(jax.devices()), (LAYER_AXIS,))


class GridTrainer:
  """Compiled functions for one grid: a model kind, a problem, depths and seeds.

  The leading axis S of every per-model array runs over *replicates*, the
  (spectrum, rate factor, seed) triples of the grid in that order: replicate r trains on
  spectrum `replicate_spectrum[r]` at learning rate `learning_rate x
  replicate_rate_factor[r]` with seed `replicate_seed[r]`. A *group* is one (spectrum, rate
  factor) pair (`groups`, trained at `group_learning_rates`), its replicates the seeds,
  contiguous. Initialisation and data stream depend on the seed only, so the models of one seed start alike and see the same
  rotations and Gaussian draws under every spectrum and rate (a rate sweep is paired).
  `layout` covers the real models (indices 0 .. num_models - 1) and, when the
  mesh needs it, one padding model at the end (see the module docstring); it carries
  `loop_group`, the query/key tying of looped models (other kinds ignore it).
  """

  def __init__(self, model: str, problem: Problem, depths: tuple[int, ...],
               seeds: tuple[int, ...], settings: TrainSettings, *, N: int,
               init_scales: InitScales, init_key: jax.Array, data_key: jax.Array,
               mesh: Mesh | None = None, loop_group: int = 0,
               rate_factors: tuple[float, ...] = (1.0,)):
    self.model = model
    self.problem = problem
    self.mesh = default_mesh() if mesh is None else mesh
    self.num_models = len(depths)
    padding = -sum(depths) % self.mesh.size
    self.layout = GridLayout(tuple(depths) + ((padding,) if padding else ()),
                             loop_group=loop_group)
    self.seeds = tuple(seeds)
    self.rate_factors = tuple(float(f) for f in rate_factors)
    self.groups = tuple((j, f) for j in range(len(problem.spectra)) for f in self.rate_factors)
    # The peak learning rate of each group: the one place a sweep's rate is computed.
    self.group_learning_rates = tuple(settings.learning_rate * f for _, f in self.groups)
    self.replicate_spectrum = np.repeat([j for j, _ in self.groups], len(self.seeds))
    self.replicate_rate_factor = np.repeat([f for _, f in self.groups], len(self.seeds))
    self.replicate_seed = np.tile(np.asarray(self.seeds), len(self.groups))
    self.settings = settings
    self.N = N
    self.init_scales = init_scales
    self.init_key = init_key
    self.data_key = data_key
    self.module = PackedModels(model, self.layout, d=problem.d, N=N, scales=init_scales)
    shape = (len(self.replicate_seed), self.layout.num_models)
    self.optimizer = make_grid_optimizer(
        settings, self.layout,
        initial_rate_scale_SM=np.broadcast_to(
            np.asarray(self.replicate_rate_factor, np.float32)[:, None], shape),
        # a padding model is frozen from the start
        initial_frozen_SM=np.broadcast_to(np.arange(shape[1]) >= self.num_models, shape))
    self.replicated = NamedSharding(self.mesh, PartitionSpec())
    self.state_shardings = self._shardings(jax.eval_shape(self._unplaced_init_state))
    self.train_chunk = jax.jit(self._train_chunk, donate_argnums=0,
                               in_shardings=(self.state_shardings,),
                               out_shardings=(self.state_shardings, self.replicated))
    # Replicated outputs: every process reads whole predictions (inverse_depth.hosts).
    self.layer_predictions = jax.jit(self._group_layer_predictions,
                                     out_shardings=self.replicated)
    self.selected_mass = (None if model not in TEST_ATTENTION
                          else jax.jit(self._group_selected_mass, out_shardings=self.replicated))
    self.update_convergence = jax.jit(self._update_convergence, donate_argnums=0,
                                      out_shardings=self.state_shardings)
    self.gradient_noise = jax.jit(self._gradient_noise, out_shardings=self.replicated)

  # --- state ---------------------------------------------------------------------------------

  def _shardings(self, tree):
    """Leaves under a "layer" key (parameters and their Adam moments, [S, T, ...]) are
    sharded along T; everything else is replicated."""
    layer = NamedSharding(self.mesh, PartitionSpec(None, LAYER_AXIS))

    def pick(path, _):
      return layer if any(getattr(k, "key", None) == "layer" for k in path) else self.replicated

    return jax.tree_util.tree_map_with_path(pick, tree)

  def _unplaced_init_state(self) -> TrainState:
    """The module's `init` for every replicate (fold_in(init_key, seed)), stacked along S."""
    params = jax.tree.map(lambda *xs: jnp.stack(xs), *[
        self.module.init_replicate(jax.random.fold_in(self.init_key, int(seed)))["params"]
        for seed in self.replicate_seed])
    shape = (len(self.replicate_seed), self.layout.num_models)
    is_padding_SM = jnp.broadcast_to(jnp.arange(shape[1]) >= self.num_models, shape)
    return TrainState(  # explicit dtypes: a weakly typed leaf would recompile the 2nd chunk
        step=jnp.zeros((), jnp.int32), params=params, opt_state=self.optimizer.init(params),
        best_val_loss_SM=jnp.full(shape, jnp.inf, jnp.float32),
        evals_since_best_SM=jnp.zeros(shape, jnp.int32),
        num_lr_decays_SM=jnp.zeros(shape, jnp.int32),
        converged_SM=is_padding_SM,  # a padding model is frozen from the start
        diverged_SM=jnp.zeros(shape, bool), diverged_at_step_SM=jnp.full(shape, -1, jnp.int32),
        steps_trained_SM=jnp.zeros(shape, jnp.int32))

  def init_state(self) -> TrainState:
    """The initial state, placed on the mesh (every process computes the same values)."""
    state = jax.tree.map(np.asarray, self._unplaced_init_state())
    return jax.tree.map(
        lambda x, sharding: jax.make_array_from_callback(x.shape, sharding, lambda i: x[i]),
        state, self.state_shardings)

  # --- training ------------------------------------------------------------------------------

  def training_batch(self, step: jax.Array) -> tasks.Batch:
    """The batch of every replicate at `step`: leaves [S, B, ...]. Replicate (spectrum j,
    seed s) draws from fold_in(fold_in(data_key, s), step) with the exponents of j."""
    keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(self.data_key, int(s)), step)
                      for s in self.replicate_seed])
    spectra = np.asarray(self.problem.spectra, np.float32)[self.replicate_spectrum]
    batch_S = jax.vmap(lambda key, a, b: self.problem.sample(key, self.settings.batch_size, a,
                                                             b))(keys, spectra[:, 0], spectra[:, 1])
    chex.assert_shape(batch_S.x_context_BPD, (len(self.replicate_seed), self.settings.batch_size,
                                              self.problem.P, self.problem.d))
    return batch_S

  def _gradient(self, params: Params, batch_S: tasks.Batch) -> tuple[Params, jax.Array]:
    """Gradient of the grid loss and the losses [S, M], over blocks of `microbatch_size`
    contexts (`blocked_grid_gradient`)."""
    return blocked_grid_gradient(
        self.module, params, batch_S,
        block_size(self.settings.batch_size, self.settings.microbatch_size, self.model))

  def _train_step(self, state: TrainState, _) -> tuple[TrainState, jax.Array]:
    """One step of every model: the optimiser (make_grid_optimizer) freezes a model whose loss
    or updated parameters are not healthy; that model is marked diverged."""
    grads, losses_SM = self._gradient(state.params, self.training_batch(state.step))
    chex.assert_trees_all_equal_shapes_and_dtypes(grads, state.params)
    chex.assert_shape(losses_SM, state.converged_SM.shape)
    updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params,
                                               losses_SM=losses_SM)
    params = optax.apply_updates(state.params, updates)
    apply_SM = ~opt_state.frozen_SM
    newly_diverged_SM = opt_state.frozen_SM & ~state.opt_state.frozen_SM
    state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state,
        diverged_SM=state.diverged_SM | newly_diverged_SM,
        diverged_at_step_SM=jnp.where(newly_diverged_SM, state.step, state.diverged_at_step_SM),
        steps_trained_SM=state.steps_trained_SM + apply_SM)
    return state, losses_SM

  def _train_chunk(self, state: TrainState) -> tuple[TrainState, jax.Array]:
    """`eval_every` train steps; returns the state and the mean training loss [S, M]."""
    state, losses_per_step = jax.lax.scan(self._train_step, state,  # [eval_every, S, M]
                                          length=self.settings.eval_every)
    return state, losses_per_step.mean(axis=0)

  # --- evaluation and convergence ------------------------------------------------------------

  def group_params(self, params: Params, group: jax.Array) -> Params:
    """The replicates of one group (its seeds, in order): leaves [seeds, ...]."""
    num_seeds = len(self.seeds)
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, group * num_seeds,
                                                               num_seeds), params)

  def _group_layer_predictions(self, params: Params, batch: tasks.Batch,
                               group: jax.Array) -> jax.Array:
    """f_l of every layer of every model of one group's seeds on one shared batch of that
    group's spectrum: [seeds, T, B]."""
    return jax.vmap(lambda p: self.module.apply({"params": p}, batch))(
        self.group_params(params, group))

  def _group_selected_mass(self, params: Params, batch: tasks.Batch,
                           group: jax.Array) -> jax.Array:
    """Attention mass on the k tokens that make the target, averaged over a model's layers
    and the batch: [seeds, M] (top-1 attention mass on the easy task)."""
    selected_BK = tasks.selected_indices(batch, self.problem.num_selected)

    def per_seed(p):
      attention_TBP = self.module.apply({"params": p}, batch,
                                        method=PackedModels.test_attention)
      mass_TB = jnp.take_along_axis(attention_TBP, selected_BK[None], axis=-1).sum(-1)
      return self.layout.model_mean(mass_TB).mean(axis=-1)

    return jax.vmap(per_seed)(self.group_params(params, group))

  def _gradient_noise(self, params: Params, contexts_S: tasks.Batch) -> dict[str, jax.Array]:
    """trajectory.gradient_noise of every model, each replicate on its own contexts (leaves
    [S, E, ...]): `layer` and `model` traces [S, M]."""
    return trajectory.gradient_noise(lambda p, batch: self.module.apply({"params": p}, batch),
                                     params, contexts_S, self.layout)

  def _update_convergence(self, state: TrainState, val_loss_SM: jax.Array) -> TrainState:
    """The schedule's rule (module docstring) after one validation: an evaluation improves
    when the loss falls below (1 - rel_tol) x the best so far; `patience` evaluations without
    improvement mark a model converged (at max_steps, or under "stall_decay" once its rate has
    been decayed max_lr_decays times; before that they decay its rate). A model whose
    validation loss is not finite (finite weights can still overflow) is marked diverged.
    The optimiser's frozen models are then the inactive ones, and its rate scales the new
    ones (per_model.freeze_models, per_model.scale_by_model_rate)."""
    settings = self.settings
    overflowed = state.active_SM & ~jnp.isfinite(val_loss_SM)
    state = state.replace(diverged_SM=state.diverged_SM | overflowed,
                          diverged_at_step_SM=jnp.where(overflowed, state.step,
                                                        state.diverged_at_step_SM))
    active = state.active_SM
    improved = active & (val_loss_SM < state.best_val_loss_SM * (1.0 - settings.rel_tol))
    since = jnp.where(improved, 0, state.evals_since_best_SM + active)
    stalled = active & (since >= settings.patience)
    state = state.replace(best_val_loss_SM=jnp.where(improved, val_loss_SM,
                                                     state.best_val_loss_SM))
    if settings.schedule != "stall_decay":  # train to max_steps; converged = flat at the end
      at_end = state.step >= settings.max_steps
      state = state.replace(evals_since_best_SM=since,
                            converged_SM=state.converged_SM | (stalled & at_end))
    else:
      converged = state.converged_SM | (stalled & (state.num_lr_decays_SM
                                                   >= settings.max_lr_decays))
      decay = stalled & ~converged
      rate_scale_SM = jnp.where(decay, state.lr_scale_SM * settings.lr_decay_factor,
                                state.lr_scale_SM)
      state = state.replace(
          evals_since_best_SM=jnp.where(stalled, 0, since),
          opt_state=optax.tree_utils.tree_set(state.opt_state, rate_scale_SM=rate_scale_SM),
          num_lr_decays_SM=state.num_lr_decays_SM + decay,
          converged_SM=converged)
    return state.replace(opt_state=state.opt_state._replace(frozen_SM=~state.active_SM))

  def predict(self, params: Params, eval_set: tasks.Batch, chunk_size: int,
              group: int) -> np.ndarray:
    """Per-layer predictions of one group's seeds on a held-out set of its spectrum, in
    chunks: [seeds, T, E] (float32 numpy), T over `layout` (a padding model's layers last)."""
    size = eval_set.target_B.shape[0]
    chunks = [self.layer_predictions(params, jax.tree.map(lambda x: x[i:i + chunk_size],
                                                          eval_set), group)
              for i in range(0, size, chunk_size)]
    return np.concatenate([np.asarray(c) for c in chunks], axis=-1)

  def model_identity_terms(self, params: Params, eval_sets: tuple[tasks.Batch, ...],
                           chunk_size: int) -> dict[str, np.ndarray]:
    """R, A and C (trajectory.identity_terms) of every model of `layout` (a padding model
    included), each replicate on the held-out set of its spectrum (`eval_sets[j]` for
    spectrum j): arrays [S, M]."""
    terms = []
    for group, (spectrum, _) in enumerate(self.groups):
      eval_set = eval_sets[spectrum]
      terms.append(trajectory.identity_terms(self.predict(params, eval_set, chunk_size, group),
                                             eval_set.target_B, self.layout))
    return {name: np.concatenate([t[name] for t in terms]) for name in ("R", "A", "C")}

  def model_losses(self, params: Params, eval_sets: tuple[tasks.Batch, ...],
                   chunk_size: int) -> np.ndarray:
    """Loss R of every model of `layout` on the held-out set of its spectrum: [S, M]."""
    return self.model_identity_terms(params, eval_sets, chunk_size)["R"]

  def fit(self, state: TrainState, val_sets: tuple[tasks.Batch, ...], chunk_size: int,
          noise_sets: tuple[tasks.Batch, ...] | None = None
          ) -> Iterator[tuple[TrainState, dict]]:
    """Train until no model is active or `max_steps`; yields (state, progress) per evaluation.

    `val_sets[j]` is the validation set of spectrum j. Progress arrays are [S, M] over the
    real models: the training and validation losses, `val_A` and `val_C` (the identity's A
    and C on the validation set), the parameter summary of inverse_depth.trajectory (norms,
    gain, score temperature), the rule's bookkeeping, `selected_mass` (models with
    attention rows only: the mean attention mass on the tokens that make the target, on the
    first validation chunk), and with `noise_sets` (contexts of spectrum j at j) the
    gradient-noise traces `noise_layer` and `noise_model` (trajectory.gradient_noise).
    `elapsed_s` counts from this call (a resumed run starts it again; experiment.py adds the
    earlier attempts' time).
    """
    noise_contexts_S = None if noise_sets is None else jax.tree.map(
        lambda *xs: jnp.stack(xs)[self.replicate_spectrum], *noise_sets)
    start = time.time()
    start_step = int(state.step)
    while int(state.step) < self.settings.max_steps and bool(state.active_SM.any()):
      state, train_loss_SM = self.train_chunk(state)
      val_terms = self.model_identity_terms(state.params, val_sets, chunk_size)
      val_loss_SM = val_terms["R"]
      state = self.update_convergence(state, jnp.asarray(val_loss_SM, jnp.float32))
      step = int(state.step)
      elapsed = time.time() - start
      rate = (step - start_step) / max(elapsed, 1e-9)
      progress = [("train_loss", train_loss_SM), ("val_loss", val_loss_SM),
                  ("lr_scale", state.lr_scale_SM), ("converged", state.converged_SM),
                  ("diverged", state.diverged_SM), ("val_A", val_terms["A"]),
                  ("val_C", val_terms["C"])]
      # Gathered: with several processes the layer axis spans other processes' devices.
      progress += trajectory.parameter_summary(jax.tree.map(hosts.to_host, state.params),
                                               self.layout).items()
      if noise_contexts_S is not None:  # replicated outputs: every process reads them whole
        progress += [(f"noise_{group}", trace_SM) for group, trace_SM in
                     self.gradient_noise(state.params, noise_contexts_S).items()]
      if self.selected_mass is not None:
        progress.append(("selected_mass", np.concatenate([
            np.asarray(self.selected_mass(
                state.params, jax.tree.map(lambda x: x[:chunk_size], val_sets[spectrum]), group))
            for group, (spectrum, _) in enumerate(self.groups)])))
      yield state, dict(step=step, elapsed_s=elapsed,
                        eta_max_s=(self.settings.max_steps - step) / max(rate, 1e-9),
                        **{name: np.asarray(values)[:, :self.num_models].tolist()
                           for name, values in progress})
