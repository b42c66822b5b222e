"""How long the slow modes of constant-rate SGD take to relax, predicted from curvature.

Heavy-ball SGD at rate eta with momentum beta moves a direction of curvature lambda (an
eigenvalue of the loss's Hessian) towards its minimum as exp(-t / tau), with

    tau = (1 - beta) / (eta lambda)          (overdamped: eta lambda << (1 - beta)^2;
                                              `relaxation_time` solves it exactly).

For a direction v that is not an eigenvector the Rayleigh quotient q(v) = v^T H v / |v|^2
stands in for lambda.

Under the 1/L residual, y_hat = (1/L) sum_l f_l(theta_l), the Hessian of the loss
R = E[(y_hat - y)^2] in the per-layer parameters is

    H_lm = (2/L^2) E[J_l^T J_m] + delta_lm (2/L) E[(y_hat - y) d^2 f_l / d theta_l^2],

J_l = d f_l / d theta_l. Two kinds of direction follow (docs/notes/stationary.md):

- the common mode, every layer moved alike (v_l = u): at equal layers the first term gives
  (2/L) E[J^T J] and the second (2/L) E[(y_hat - y) d^2 f]: q = q_1 / L, q_1 the one-layer
  model's quotient along u, so tau_common = L tau_1;
- a disagreement mode, sum_l v_l = 0: the first term cancels and only the residual-weighted
  one is left, itself 1/L: tau_disagreement = L (1 - beta) / (eta k), k the residual-weighted
  curvature of one layer's f_l along v_l.

Both grow like L: a single layer's own direction is not 1/L^2 flat, because away from
interpolation (y_hat != y; here R ~ 2) the residual term carries only 1/L.

A stiff mode whose optimum moves with a slower one follows it: on the quadratic
R = q_s s^2 / 2 + q_f (f - c s)^2 / 2 with q_f >> q_s, f's gap closes at the slower rate
(`driven_time`), not at its own. The layers' disagreement is such a mode: its direction is
stiff at the end of training, but where the layers should part depends on their common
temperature, so A - C is predicted to relax in the common mode's time.

The directions measured on a trained model (`directions`): `temperature`, every layer's
(W_q^l, W_k^l) scaled up alike, which raises every layer's score temperature tr(W_q^T W_k)
together; `disagreement`, each layer's (W_q^l, W_k^l) minus the mean over the model's layers,
the direction in which the layers have moved apart since their identical start.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth import experiment, models, trajectory
from inverse_depth.grid import GridLayout
from inverse_depth.tasks import Batch

QUERY_KEY = ("W_q", "W_k")
CURVATURE_STREAM = 7  # fold_in(key(root_seed), 7): the contexts curvatures are measured on


def curvature_batch(spec, num_contexts: int) -> Batch:
  """The fixed contexts curvatures of the grid `spec` are measured on: `num_contexts` of its
  first spectrum from fold_in(key(root_seed), CURVATURE_STREAM)."""
  key = jax.random.fold_in(jax.random.key(spec.root_seed), CURVATURE_STREAM)
  return spec.problem.sample(key, num_contexts, *spec.problem.spectra[0])


def model_loss(kind: str, depth: int, batch: Batch):
  """R(params) = mean over `batch` of (y_hat - y)^2 for one model of kind `kind` whose
  parameters are {"model": leaves, "layer": leaves [depth, ...]} (GridLayout.model_params)."""
  layout = GridLayout((depth,))

  def loss(params):
    grid_params = dict(model=jax.tree.map(lambda x: x[None], params["model"]),
                       layer=params["layer"])
    prediction_B = layout.model_mean(models.LAYER_PREDICTIONS[kind](grid_params, batch,
                                                                    layout))[0]
    return jnp.mean((prediction_B - batch.target_B) ** 2)

  return loss


def rayleigh_quotient(loss, params, direction) -> float:
  """q(v) = v^T H v / v^T v, H the Hessian of `loss` at `params` (one Hessian-vector product:
  forward-over-reverse)."""
  _, hessian_v = jax.jvp(jax.grad(loss), (params,), (direction,))
  dot = lambda a, b: sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  return float(dot(direction, hessian_v) / dot(direction, direction))


def directions(params) -> dict:
  """The `temperature` and `disagreement` directions of one model (module docstring), as
  trees shaped like `params`, zero outside W_q and W_k."""
  zeros = jax.tree.map(jnp.zeros_like, params)

  def along(layer_change):
    return dict(zeros, layer=dict(zeros["layer"], **layer_change))

  layer = params["layer"]
  out = dict(temperature=along({name: layer[name] for name in QUERY_KEY}))
  if jax.tree.leaves(layer)[0].shape[0] > 1:
    out["disagreement"] = along({name: layer[name] - layer[name].mean(axis=0, keepdims=True)
                                 for name in QUERY_KEY})
  return out


def relaxation_time(curvature: float, learning_rate: float, momentum: float) -> float:
  """Steps for the distance along a direction of curvature q to fall by e under heavy-ball SGD
  (v <- beta v + q x, x <- x - eta v): -1 / log r with r the slower root of
  r^2 - (1 + beta - eta q) r + beta = 0, which is (1 - beta) / (eta q) to first order in
  eta q / (1 - beta)^2; -2 / log beta once the roots are complex (underdamped); inf where
  q <= 0 (no restoring force)."""
  if not curvature > 0:
    return float("inf")
  trace = 1.0 + momentum - learning_rate * curvature
  discriminant = trace ** 2 - 4.0 * momentum
  if discriminant < 0:
    return -2.0 / np.log(momentum)
  slower_root = (trace + np.sqrt(discriminant)) / 2.0
  return float(-1.0 / np.log(slower_root))


def predicted_times(kind: str, depth: int, params, batch: Batch, *, learning_rate: float,
                    momentum: float) -> dict:
  """Per direction of `directions`: the curvature q and the predicted relaxation time."""
  loss = model_loss(kind, depth, batch)
  out = {}
  for name, direction in directions(params).items():
    q = rayleigh_quotient(loss, params, direction)
    out[name] = dict(curvature=q, tau=relaxation_time(q, learning_rate, momentum))
  return out


def driven_time(own_tau: float, driver_tau: float) -> float:
  """The relaxation time of a mode whose optimum moves with a driver relaxing in
  `driver_tau`: the slower of the two (the gap is a sum of both exponentials, and the slower
  one is left)."""
  return float(max(own_tau, driver_tau))


def steps_to_settle(tau_per_depth: float, depth: int, e_folds: float = 3.0) -> float:
  """Steps for a mode with tau = tau_per_depth x L to close all but exp(-e_folds) of its gap
  (3 e-folds: 5%)."""
  return float(e_folds * tau_per_depth * depth)


def per_depth_constant(depths, taus) -> tuple[float, float]:
  """tau / L as one constant over depths (the geometric mean of tau_L / L) and the largest
  factor by which one depth departs from it; NaN with fewer than two depths (one depth does
  not show a time proportional to L)."""
  if len(depths) < 2:
    return float("nan"), float("nan")
  ratios = np.asarray(taus, float) / np.asarray(depths, float)
  constant = float(np.exp(np.mean(np.log(ratios))))
  return constant, float(np.max(np.maximum(ratios / constant, constant / ratios)))


def approach_with_groups_preset(spec, source_layout: GridLayout, final_params, m: int,
                                preset: list[str], steps: int) -> dict:
  """Model m of the grid `spec` trained alone from its own initial state (the same seeds and
  data stream) for `steps` steps, with the parameter groups `preset` set to their values in
  `final_params` (the grid's trained parameters, laid out by `source_layout`, its trainer's
  layout) before the first step: its score
  temperature [evaluations, seeds] every eval_every steps, the fitted relaxation time of the
  seed mean (trajectory.relaxation_time) and each seed's. A group that drives the temperature
  removes the slow part of its approach when preset (experiments.relaxation_probe)."""
  alone = dataclasses.replace(spec, depths=(spec.depths[m],))
  trainer = experiment.grid_trainer(alone)
  state = trainer.init_state()
  params = jax.tree.map(np.array, state.params)
  for group in preset:
    if group in params["model"]:
      params["model"][group][:, 0] = np.asarray(final_params["model"][group])[:, m]
    elif group in params["layer"]:
      params["layer"][group][:, trainer.layout.layer_slice(0)] = np.asarray(
          final_params["layer"][group])[:, source_layout.layer_slice(m)]
    else:
      raise ValueError(f"preset: unknown group {group!r}; allowed "
                       f"{', '.join([*params['model'], *params['layer']])}")
  state = state.replace(params=jax.tree.map(
      lambda x, like: jax.device_put(x, like.sharding), params, state.params))
  readings = []
  for _ in range(steps // spec.train.eval_every):
    state, _ = trainer.train_chunk(state)
    readings.append(trajectory.parameter_summary(jax.tree.map(np.asarray, state.params),
                                                 trainer.layout)["temperature"][:, 0])
  temperature_ES = np.asarray(readings)
  t = spec.train.eval_every * np.arange(len(readings), dtype=float)
  return dict(temperature_ES=temperature_ES,
              tau=trajectory.relaxation_time(t, temperature_ES.mean(axis=1))["tau"],
              seed_taus=[trajectory.relaxation_time(t, series)["tau"]
                         for series in temperature_ES.T])


def temperature_times_along_the_run(spec, workdir: str, m: int, batch: Batch) -> list:
  """(step, [predicted time of the temperature direction per seed]) at the start and at
  every kept checkpoint of the finished grid `spec` in `workdir`, for model m: whether the
  curvature changes on the way."""
  trainer = experiment.grid_trainer(spec)
  like = trainer.init_state()
  every = spec.checkpoint.checkpoint_every
  steps = list(range(every, spec.train.max_steps + 1, every))
  out = []
  for step, params in zip([0] + steps, [like.params] + experiment.read_window(
      spec, trainer, like, workdir, tuple(steps))):
    taus = []
    for s in range(len(spec.seeds)):
      model, layers = trainer.layout.model_params(jax.tree.map(lambda x: np.asarray(x[s]),
                                                               params), m)
      taus.append(predicted_times(
          spec.model, spec.depths[m], dict(model=model, layer=layers), batch,
          learning_rate=spec.train.learning_rate,
          momentum=spec.train.momentum)["temperature"]["tau"])
    out.append((step, taus))
  return out
