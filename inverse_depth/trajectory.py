"""What a run records about every model at every evaluation, to find which mode still drifts.

Per model, on the fixed validation contexts of the convergence rule:

- R, A and C of the identity R = C + (A - C)/L (analysis.decompose), from the layer
  predictors f_l: A = (1/L) sum_l E[e_l^2], C = (L R - A)/(L - 1) with R = E[(mean_l e_l)^2];
- the Frobenius norm |W| of every per-model parameter (W_x, W_y, W_v, W_o, ...) and the
  root mean square over the model's layers of every per-layer one (W_q, W_k, ...);
- for the kinds with one value matrix, the gain g = W_o W_v W_y;
- for the kinds with query and key matrices, the score temperature tau_l = tr(W_q^l^T W_k^l)
  (the logit of a query-key pair at cosine 1 when the form is isotropic: W_q = W_k = s I gives
  tau = s^2 N), as its mean over the model's layers and its spread (standard deviation over
  the layers divided by the mean).

And per model, on NOISE_CONTEXTS fixed contexts per spectrum drawn from
fold_in(key(root_seed), NOISE_STREAM) (`noise_contexts`, the contexts sgd_noise.one_layer_noise
draws with as many), the gradient-noise traces tr Cov_i[grad l_i], l_i = (y_hat_i - y*_i)^2,
over the per-layer leaves (`noise_layer`: W_q, W_k, ... of every layer) and over the shared
ones (`noise_model`: W_x, W_y, W_v, W_o, ...) (`gradient_noise`; the quantities of
diagnostics.gradient_noise, for every model of the grid in one compiled call). They depend
only on the state at the evaluation, so resuming replays them. On the law's grid they add
1.7-4.8% (median about 2.5%) to a run's wall time on 2 shared cores (bench/noise_cost.py).

W_x sits behind the layer norm, so nothing in the loss fixes its scale: its norm is the first
suspect of a slow drift (docs/notes/stationary.md). The value product g = W_o W_v W_y can
rebalance its factors at fixed g, which the three norms show.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth.grid import GridLayout, Params
from inverse_depth.tasks import Batch

NOISE_STREAM = 6  # fold_in index of the root key for the noise contexts (5: theory bounds)
NOISE_CONTEXTS = 256  # contexts per spectrum the gradient-noise traces are measured on
NOISE_CHUNK = 8  # contexts per vmapped per-context gradient (fastest on 2 CPU cores)


def identity_terms(layer_preds_STE: np.ndarray, target_E: np.ndarray,
                   layout: GridLayout) -> dict[str, np.ndarray]:
  """R, A and C of every model of one group's seeds: arrays [S, M] (C is NaN at L = 1)."""
  errors_STE = np.asarray(layer_preds_STE, np.float64) - np.asarray(target_E, np.float64)
  depths_M = np.asarray(layout.depths, np.float64)
  A, R = [], []
  for m in range(layout.num_models):
    errors_SLE = errors_STE[:, layout.layer_slice(m)]
    A.append(np.mean(errors_SLE ** 2, axis=(1, 2)))
    R.append(np.mean(errors_SLE.mean(axis=1) ** 2, axis=1))
  A, R = np.stack(A, axis=1), np.stack(R, axis=1)
  with np.errstate(invalid="ignore", divide="ignore"):
    C = np.where(depths_M > 1, (depths_M * R - A) / (depths_M - 1), np.nan)
  return dict(R=R, A=A, C=C)


def parameter_summary(params: Params, layout: GridLayout) -> dict[str, np.ndarray]:
  """Norms, gain and score temperature of every model: arrays [S, M] (module docstring)."""
  out = {}
  for name, leaf in params["model"].items():
    leaf = np.asarray(leaf, np.float64)
    out[f"norm_{name}"] = np.sqrt((leaf ** 2).reshape(leaf.shape[:2] + (-1,)).sum(-1))
  for name, leaf in params["layer"].items():
    leaf = np.asarray(leaf, np.float64)
    square_ST = (leaf ** 2).reshape(leaf.shape[:2] + (-1,)).sum(-1)
    out[f"norm_{name}"] = np.sqrt(_per_model_mean(square_ST, layout))
  model = params["model"]
  if {"W_o", "W_v", "W_y"} <= set(model) and np.ndim(model["W_v"]) == 4:
    out["gain"] = np.asarray(jnp.einsum("smi,smij,smj->sm", model["W_o"], model["W_v"],
                                        model["W_y"]), np.float64)
  if {"W_q", "W_k"} <= set(params["layer"]):
    temperature_ST = np.einsum("stij,stij->st", np.asarray(params["layer"]["W_q"], np.float64),
                               np.asarray(params["layer"]["W_k"], np.float64))
    mean_SM = _per_model_mean(temperature_ST, layout)
    square_SM = _per_model_mean(temperature_ST ** 2, layout)
    out["temperature"] = mean_SM
    with np.errstate(invalid="ignore", divide="ignore"):
      out["temperature_spread"] = np.sqrt(np.maximum(square_SM - mean_SM ** 2, 0.0)) / mean_SM
  return out


def _per_model_mean(values_ST: np.ndarray, layout: GridLayout) -> np.ndarray:
  """Mean over each model's own layers: [S, T] -> [S, M]."""
  return np.stack([values_ST[:, layout.layer_slice(m)].mean(axis=1)
                   for m in range(layout.num_models)], axis=1)


def noise_contexts(problem, root_seed: int, num_contexts: int = NOISE_CONTEXTS) -> list[Batch]:
  """The contexts the gradient noise is measured on, one batch per spectrum of `problem`
  (train.Problem), all from fold_in(key(root_seed), NOISE_STREAM)."""
  key = jax.random.fold_in(jax.random.key(root_seed), NOISE_STREAM)
  return [problem.sample(key, num_contexts, a, b) for a, b in problem.spectra]


def gradient_noise(layer_predictions: Callable, params: Params, contexts_S: Batch,
                   layout: GridLayout, chunk_size: int = NOISE_CHUNK) -> dict[str, jax.Array]:
  """tr Cov_i[grad l_i] of every model over the E contexts of its replicate ([S, E, ...]),
  l_i = (y_hat_i - y*_i)^2, split as diagnostics.gradient_noise into `layer` (the per-layer
  leaves) and `model` (the shared ones): arrays [S, M]. `layer_predictions(params of one
  replicate, batch)` gives f_l [T, B].

  Each model owns its slices of the packed parameters, so the gradient of sum_m l_i,m holds
  every model's own grad l_i. Two passes over chunks of `chunk_size` contexts: the mean
  gradient gbar (the chunks' batch gradients summed), then sum_i |grad l_i - gbar|^2 per
  entry from the per-context gradients of one chunk at a time; tr Cov is its sum over a
  model's entries, divided by E. (One pass summing both the gradients and their squares ran
  4x slower on 2 CPU cores.)"""
  num_contexts = contexts_S.target_B.shape[1]
  if num_contexts % chunk_size:
    raise ValueError(f"{num_contexts} contexts do not split into chunks of {chunk_size}")
  chunks = jax.tree.map(  # [num_chunks, S, chunk_size, ...]
      lambda x: jnp.swapaxes(x.reshape((x.shape[0], -1, chunk_size) + x.shape[2:]), 0, 1),
      contexts_S)

  def total_loss(params_one, batch):
    """sum over the batch's contexts and the models of l."""
    predictions_MB = layout.model_mean(layer_predictions(params_one, batch))
    return jnp.sum((predictions_MB - batch.target_B[None]) ** 2)

  def context_loss(params_one, context):  # leaves without the context axis
    return total_loss(params_one, jax.tree.map(lambda x: x[None], context))

  def add_gradient(sums, chunk_S):
    return jax.tree.map(jnp.add, sums, jax.vmap(jax.grad(total_loss))(params, chunk_S)), None

  zeros = jax.tree.map(jnp.zeros_like, params)
  sums, _ = jax.lax.scan(add_gradient, zeros, chunks)
  mean = jax.tree.map(lambda total: total / num_contexts, sums)
  per_context = jax.vmap(jax.vmap(jax.grad(context_loss), (None, 0)))  # [S, chunk_size, ...]

  def add_squares(squares, chunk_S):
    return jax.tree.map(lambda total, g, m: total + jnp.sum((g - m[:, None]) ** 2, axis=1),
                        squares, per_context(params, chunk_S), mean), None

  squares, _ = jax.lax.scan(add_squares, zeros, chunks)

  def entry_sums(leaf):  # [S, X, ...] -> [S, X]
    return (leaf / num_contexts).reshape(leaf.shape[:2] + (-1,)).sum(-1)

  layer_ST = sum(entry_sums(leaf) for leaf in jax.tree.leaves(squares["layer"]))
  return dict(layer=jax.vmap(layout.model_sum)(layer_ST),
              model=sum(entry_sums(leaf) for leaf in jax.tree.leaves(squares["model"])))


def read_metrics(lines: list[dict], label: str) -> dict[str, np.ndarray]:
  """The recorded series of one grid from metrics.jsonl lines: `step` [E] and every [S, M]
  quantity any line holds, stacked over evaluations, [E, S, M] (float; NaN at the
  evaluations that did not record it, e.g. the noise traces before they were recorded)."""
  mine = sorted((line for line in lines if line["model"] == label), key=lambda l: l["step"])
  shapes = {}
  for line in mine:
    for name, value in line.items():
      if isinstance(value, list) and name not in ("converged", "diverged", "lr_scale"):
        shapes.setdefault(name, np.shape(value))
  out = {"step": np.asarray([line["step"] for line in mine], np.float64)}
  for name, shape in shapes.items():
    out[name] = np.stack([np.asarray(line.get(name, np.full(shape, np.nan)), np.float64)
                          for line in mine])
  return out


def late_slope(steps_E: np.ndarray, values_E: np.ndarray, from_step: float) -> dict:
  """Least-squares slope of one series per 1000 steps over steps >= `from_step`, with its
  standard error from the residuals (inflated by sqrt((1 + r)/(1 - r)) for their lag-1
  autocorrelation r, as in analysis.stationarity) and z = slope / se."""
  keep = (steps_E >= from_step) & np.isfinite(values_E)
  t, y = steps_E[keep] / 1000.0, values_E[keep]
  if t.size < 4:
    return dict(slope=np.nan, se=np.nan, z=np.nan)
  design = np.stack([np.ones_like(t), t - t.mean()], axis=1)
  coef, *_ = np.linalg.lstsq(design, y, rcond=None)
  residuals = y - design @ coef
  r = np.clip(np.corrcoef(residuals[:-1], residuals[1:])[0, 1], 0.0, 0.9)
  sigma = np.sqrt(residuals @ residuals / (t.size - 2) * (1 + r) / (1 - r))
  se = sigma / np.sqrt(((t - t.mean()) ** 2).sum())
  return dict(slope=float(coef[1]), se=float(se), z=float(coef[1] / se))


def relaxation_time(steps_E: np.ndarray, values_E: np.ndarray) -> dict:
  """Fit y(t) = y_inf + a exp(-t / tau) to one series by least squares (tau on a log grid
  from 100 to 10^6 steps, y_inf and a linear at each tau): tau, y_inf, the fitted amplitude
  a, and `resolved`: tau above the grid's bottom and below half the span of the series (at
  least two e-folds seen; a straight line fits a long tau as well)."""
  keep = np.isfinite(values_E)
  t, y = steps_E[keep], values_E[keep]
  best = None
  for tau in np.geomspace(100.0, 1e6, 201):
    design = np.stack([np.ones_like(t), np.exp(-t / tau)], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    rss = float(np.sum((y - design @ coef) ** 2))
    if best is None or rss < best[0]:
      best = (rss, tau, coef)
  _, tau, (y_inf, amplitude) = best
  return dict(tau=float(tau), y_inf=float(y_inf), amplitude=float(amplitude),
              resolved=bool(100.0 < tau < (t[-1] - t[0]) / 2))


def remaining_change(steps_E: np.ndarray, values_SE: np.ndarray, window_start: float,
                     from_step: float, tau: float | None = None) -> dict:
  """How far a model's series still has to go: per seed, y(t) = y_inf + a exp(-t / tau) fitted
  over steps >= `from_step` (`relaxation_time`; with `tau` given, only y_inf and a are fitted),
  and y_inf minus the series' mean over steps >= `window_start` (the averaging window). Returns
  the seed mean of that change, its standard error over seeds (nan with one seed), the tau
  used (the seeds' median when fitted) and `resolved` (every seed's tau resolved, or tau
  given)."""
  keep = steps_E >= from_step
  window = steps_E >= window_start
  changes, taus, resolved = [], [], []
  for values_E in values_SE:
    t, y = steps_E[keep], values_E[keep]
    if tau is None:
      fit = relaxation_time(t - t[0], y)
      seed_tau, seed_resolved = fit["tau"], fit["resolved"]
    else:
      seed_tau, seed_resolved = tau, True
    design = np.stack([np.ones_like(t), np.exp(-(t - t[0]) / seed_tau)], axis=1)
    (y_inf, _), *_ = np.linalg.lstsq(design, y, rcond=None)
    changes.append(y_inf - values_E[window].mean())
    taus.append(seed_tau)
    resolved.append(seed_resolved)
  changes = np.asarray(changes)
  se = changes.std(ddof=1) / np.sqrt(changes.size) if changes.size > 1 else float("nan")
  return dict(change=float(changes.mean()), change_se=float(se), tau=float(np.median(taus)),
              resolved=bool(all(resolved)))
