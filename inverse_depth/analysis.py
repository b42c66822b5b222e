"""The shared/disagreement identity, the depth-scaling fits (docs/analysis.md) and the fit
record of a grid built from its run records (`fit_grid`).

Identity, exact for any L > 1, with e_l = f_l - y*:
    A_L = (1/L) sum_l E[e_l^2]                      (mean single-layer error)
    C_L = 1/(L(L-1)) sum_{l != m} E[e_l e_m]        (shared error)
    R_L = E[(mean_l e_l)^2] = C_L + (A_L - C_L)/L
and A_L - C_L = 1/(2L(L-1)) sum_{l != m} E[(e_l - e_m)^2] >= 0 (disagreement).
"""

import copy
import functools

import numpy as np
import scipy.optimize
import scipy.stats

# A model whose loss exceeds this fraction of the best uniform-attention predictor's loss
# (`evaluation.uniform_attention_loss`) is on that plateau (run record `on_plateau`).
UNIFORM_PLATEAU_FRACTION = 0.9

ENSEMBLE_SUFFIX = "-ensemble"  # the label of a grid's ensemble control: "softmax-ensemble"


def is_ensemble(label: str) -> bool:
  return label.endswith(ENSEMBLE_SUFFIX)


def model_kind(label: str) -> str:
  """The model kind a record's label names ("softmax" for "softmax-ensemble")."""
  return label.removesuffix(ENSEMBLE_SUFFIX)


def decompose(layer_preds, target) -> dict:
  """R, A, C (and the identity residual) from per-layer predictions.

  Args:
    layer_preds: [L, E] predictions f_l of one model on E evaluation contexts.
    target: [E] targets y*.
  Returns:
    dict with R (loss of the mean prediction), A, C (NaN when L = 1),
    disagreement A - C, and identity_residual R - (C + (A - C)/L).
  """
  errors_LE = np.asarray(layer_preds, np.float64) - np.asarray(target, np.float64)[None]
  depth = errors_LE.shape[0]
  R = float(np.mean(errors_LE.mean(axis=0) ** 2))
  A = float(np.mean(errors_LE ** 2))
  if depth == 1:
    return dict(R=R, A=A, C=float("nan"), disagreement=float("nan"), identity_residual=0.0)
  sum_all_pairs = np.mean(errors_LE.sum(axis=0) ** 2)  # sum_{l,m} E[e_l e_m]
  C = float((sum_all_pairs - depth * A) / (depth * (depth - 1)))
  return dict(R=R, A=A, C=C, disagreement=A - C, identity_residual=R - (C + (A - C) / depth))


def stationarity(values, z: float) -> dict:
  """Time average of a series of evaluations (one model's held-out loss over the averaging
  window, in step order) and a test that the series is stationary.

  The noise of one evaluation is the spread of the residuals about a straight line through
  the series (n - 2 degrees of freedom). Consecutive evaluations of a constant-rate iterate
  are correlated, so it is inflated by sqrt((1 + r) / (1 - r)), r the lag-1
  autocorrelation of those residuals (clipped to [0, 0.9]). The series is stationary when the means of its two halves differ by less than `z` combined standard
  errors (`half_z`) and its least-squares slope is less than `z` of its standard error away
  from zero (`slope_z`). Returns mean, se (of the mean), the half means, half_z, slope (per
  evaluation), slope_z, r, evals and `stationary`.
  """
  values = np.asarray(values, np.float64)
  n = values.size
  if n < 4:
    raise ValueError(f"stationarity needs >= 4 evaluations; got {n}")
  steps = np.arange(n, dtype=np.float64) - (n - 1) / 2
  slope = float(np.sum(steps * (values - values.mean())) / np.sum(steps ** 2))
  residuals = values - values.mean() - slope * steps
  lag1 = (float(np.sum(residuals[1:] * residuals[:-1]) / np.sum(residuals ** 2))
          if np.any(residuals) else 0.0)
  r = min(max(lag1, 0.0), 0.9)
  inflation = np.sqrt((1 + r) / (1 - r))
  noise = inflation * np.sqrt(np.sum(residuals ** 2) / (n - 2))  # per evaluation
  half = n // 2
  first, second = values[:half], values[n - half:]
  combined = noise * np.sqrt(2 / half)
  half_difference = float(second.mean() - first.mean())
  slope_se = noise / np.sqrt(np.sum(steps ** 2))

  def in_se(x, se):
    return abs(x) / se if se > 0 else (0.0 if x == 0 else float("inf"))

  half_z, slope_z = in_se(half_difference, combined), in_se(slope, slope_se)
  return dict(mean=float(values.mean()), se=float(inflation * values.std(ddof=1) / np.sqrt(n)),
              first_half=float(first.mean()), second_half=float(second.mean()),
              half_z=float(half_z), slope=slope, slope_z=float(slope_z), r=float(r), evals=n,
              stationary=bool(half_z < z and slope_z < z))


def is_clean(run: dict) -> bool:
  """A run record that enters means and fits: neither diverged nor flagged."""
  return not (run["diverged"] or run.get("flagged", False))


def clean_runs(runs: list[dict]) -> list[dict]:
  return [r for r in runs if is_clean(r)]


def seed_means(runs: list[dict], field: str) -> tuple[list[int], list[float], list[float]]:
  """Per depth, the mean and standard error over non-diverged seeds of a run-record field.

  Returns (depths ascending, means, standard errors); NaN where undefined.
  """
  depths = sorted({r["depth"] for r in runs})
  means, errors = [], []
  for depth in depths:
    values = [r[field] for r in runs if r["depth"] == depth and not r["diverged"]]
    means.append(float(np.mean(values)) if values else float("nan"))
    errors.append(float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1
                  else float("nan"))
  return depths, means, errors


def beta_averaged_loss(runs: list[dict], depth: int) -> tuple[float, float]:
  """Seed mean of the clean depth-`depth` models' loss averaged exactly over beta
  (`beta_averaged_loss` of the run records: the quantity the linear floor integrates) and its
  standard error over contexts; (nan, nan) where no record has it (kinds not linear in the
  labels, or records made before it was recorded). The seeds share the evaluation contexts,
  so their errors are not independent: the se is the seeds' mean se (exact when they are
  fully correlated, an upper bound otherwise)."""
  found = [r for r in clean_runs(runs) if r["depth"] == depth and "beta_averaged_loss" in r]
  if not found:
    return float("nan"), float("nan")
  return (float(np.mean([r["beta_averaged_loss"] for r in found])),
          float(np.mean([r["beta_averaged_loss_se"] for r in found])))


def plateau_loss(runs: list[dict], fit: dict, depth: int | None) -> tuple[float, float, str]:
  """The loss of a grid's clean depth-`depth` models (`runs`, `fit`: its run and fit records)
  with its standard error and the measure's name: averaged exactly over beta where the
  records have it (`beta_averaged_loss`), else the held-out MSE of the fit (seed mean, se
  nan). nan for a depth with no clean model."""
  averaged, averaged_se = beta_averaged_loss(runs, depth)
  if np.isfinite(averaged):
    return averaged, averaged_se, "averaged over beta"
  held_out = (fit["losses"][fit["depths"].index(depth)] if depth in fit["depths"]
              else float("nan"))
  return held_out, float("nan"), "held-out MSE"


def _standard_errors(result, num_points: int) -> np.ndarray:
  """sqrt(diag(s^2 (J^T J)^-1)) with s^2 = RSS / (n - p).

  NaN without spare degrees of freedom; inf when J^T J is singular (a parameter
  the data do not determine).
  """
  num_params = result.x.size
  dof = num_points - num_params
  if dof <= 0:
    return np.full(num_params, np.nan)
  rss = float(np.sum(result.fun ** 2))
  information = result.jac.T @ result.jac
  if np.linalg.cond(information) > 1e12:  # degenerate fit (e.g. c -> 0 on a flat curve)
    return np.full(num_params, np.inf)
  covariance = np.linalg.inv(information) * rss / dof
  return np.sqrt(np.clip(np.diag(covariance), 0.0, None))


def _r_squared(log_losses: np.ndarray, residuals: np.ndarray,
               weights: np.ndarray | None = None) -> float:
  """1 - RSS / TSS in log space; with `weights` (1 / the error of each log loss) both sums
  are weighted and the mean is the weighted mean (`residuals` are then the weighted ones)."""
  if weights is None:
    total = float(np.sum((log_losses - log_losses.mean()) ** 2))
  else:
    w2 = weights ** 2
    total = float(np.sum(w2 * (log_losses - np.sum(w2 * log_losses) / np.sum(w2)) ** 2))
  return 1.0 - float(np.sum(residuals ** 2)) / total if total > 0 else float("nan")


def fit_depth_scaling(depths, losses, fit_floor: bool = True,
                      alpha: float | None = None, standard_errors=None) -> dict:
  """Least squares of log R_L - log(L0 + c L^-alpha); see `_fit_depth_scaling`. The reports
  fit the same grid several times over (every check of a grid refits its law), so fits are
  cached on their inputs; each call returns its own copy."""
  key = (tuple(np.ravel(np.asarray(depths, np.float64))),
         tuple(np.ravel(np.asarray(losses, np.float64))), bool(fit_floor), alpha,
         None if standard_errors is None
         else tuple(np.ravel(np.asarray(standard_errors, np.float64))))
  return copy.deepcopy(_cached_fit(key))


@functools.lru_cache(maxsize=4096)
def _cached_fit(key: tuple) -> dict:
  depths, losses, fit_floor, alpha, standard_errors = key
  return _fit_depth_scaling(depths, losses, fit_floor, alpha, standard_errors)


def _fit_depth_scaling(depths, losses, fit_floor: bool = True,
                       alpha: float | None = None, standard_errors=None) -> dict:
  """Least squares of log R_L - log(L0 + c L^-alpha) over (L0 >= 0, c > 0, alpha > 0).

  With fit_floor=False, L0 = 0 (a pure power law); with `alpha` given, the exponent is held
  there (alpha=1 tests the paper's law R_L = L0 + c/L directly). A held parameter has
  standard error 0. Several starting points are tried and the best fit kept. Returns L0, c,
  alpha with standard errors (from the Jacobian at the optimum), r2 in log space, and the
  data. `resolved` is False when the fit does not determine a depth dependence (a singular
  Jacobian, or c within two standard errors of 0); `verdict` says so in words.

  With `standard_errors` (one per depth, of the loss itself), each log residual is divided
  by the error of log R_L, se_L / R_L (weighted least squares; R^2 weighted alike; the
  parameter errors are still scaled by the residual variance). The returned fields are the same.
  """
  depths = np.asarray(depths, np.float64)
  losses = np.asarray(losses, np.float64)
  if depths.shape != losses.shape or depths.size < 2:
    raise ValueError(f"depths and losses need the same shape with >= 2 points; got "
                     f"{depths.shape} and {losses.shape}")
  if np.any(losses <= 0) or np.any(depths <= 0):
    raise ValueError("fit_depth_scaling needs positive depths and losses")
  if alpha is not None and not alpha > 0:
    raise ValueError(f"fit_depth_scaling: a held alpha must be > 0; got {alpha}")
  log_losses = np.log(losses)
  log_depths = np.log(depths)
  held_alpha = alpha
  weights = None
  if standard_errors is not None:
    standard_errors = np.asarray(standard_errors, np.float64)
    if standard_errors.shape != losses.shape or not np.all(np.isfinite(standard_errors)) or \
        np.any(standard_errors <= 0):
      raise ValueError("fit_depth_scaling: standard_errors need one finite positive value per "
                       f"depth; got {standard_errors}")
    weights = losses / standard_errors  # 1 / the error of log R_L

  def unpack(theta):
    """theta = ([L0], log_c, [alpha]): the free parameters in that order."""
    theta = list(theta)
    L0 = theta.pop(0) if fit_floor else 0.0
    log_c = theta.pop(0)
    return L0, log_c, (theta.pop(0) if held_alpha is None else held_alpha)

  def residuals(theta):
    L0, log_c, exponent = unpack(theta)
    residual = log_losses - np.log(L0 + np.exp(log_c - exponent * log_depths))
    return residual if weights is None else weights * residual

  def jacobian(theta):
    """d residual / d theta: with p = c L^-alpha and m = L0 + p, -1/m (L0), -p/m (log c) and
    p log L / m (alpha), weighted as the residuals are."""
    L0, log_c, exponent = unpack(theta)
    term = np.exp(log_c - exponent * log_depths)
    model = L0 + term
    columns = (([-1.0 / model] if fit_floor else []) + [-term / model]
               + ([term * log_depths / model] if held_alpha is None else []))
    jac = np.stack(columns, axis=1)
    return jac if weights is None else weights[:, None] * jac

  best = None
  for alpha0 in ((0.25, 0.5, 1.0, 2.0) if held_alpha is None else (held_alpha,)):
    for floor_fraction in ((0.0, 0.5, 0.9) if fit_floor else (0.0,)):
      L0_start = floor_fraction * losses.min()
      theta0 = ([L0_start] if fit_floor else []) + [
          np.log(max(losses.max() - L0_start, 1e-12))] + ([alpha0] if held_alpha is None else [])
      lower = ([0.0] if fit_floor else []) + [-np.inf] + ([1e-6] if held_alpha is None else [])
      result = scipy.optimize.least_squares(residuals, theta0, jac=jacobian,
                                            bounds=(lower, np.inf), method="trf", x_scale="jac")
      if best is None or result.cost < best.cost:
        best = result
  L0, log_c, alpha = unpack(best.x)
  L0_se, log_c_se, alpha_se = unpack(_standard_errors(best, depths.size))
  L0_se = L0_se if fit_floor else 0.0
  alpha_se = alpha_se if held_alpha is None else 0.0
  c = float(np.exp(log_c))
  c_se = float(c * log_c_se)
  se = [L0_se, c_se, alpha_se]
  resolved = bool(np.all(np.isfinite(se)) and c > 2 * c_se)
  if resolved:
    verdict = f"R_L = {L0:.4g} + {c:.3g} L^-{alpha:.3g}"
  elif np.all(np.isfinite(se)):
    verdict = (f"no depth dependence resolved: the depth term c = {c:.2g} is within two "
               f"standard errors ({c_se:.2g}) of zero")
  else:
    free = [name for name, is_free in (("L0", fit_floor), ("c", True),
                                       ("alpha", held_alpha is None)) if is_free]
    free = " and ".join([", ".join(free[:-1]), free[-1]] if len(free) > 1 else free)
    verdict = (f"no depth dependence resolved: the losses do not determine {free} "
               "(flat or too few depths), so its L0, c and alpha are not estimates")
  return dict(L0=float(L0), L0_se=float(L0_se), c=c, c_se=c_se,
              alpha=float(alpha), alpha_se=float(alpha_se),
              r2=_r_squared(log_losses, best.fun, weights), fit_floor=bool(fit_floor),
              alpha_held=held_alpha is not None, resolved=resolved, verdict=verdict,
              depths=depths.tolist(), losses=losses.tolist())


def fit_depth_windows(depths, losses, min_depths: int = 4, alpha: float | None = None
                      ) -> list[dict]:
  """`fit_depth_scaling` over L >= L_min for every L_min that leaves >= min_depths depths
  (with the exponent held at `alpha` if given).

  A law R_L = L0 + c L^-alpha that holds at every depth gives the same L0 and alpha on
  every window; depths before the law sets in pull the full-range fit away, and the
  windows show by how much. Each record is a fit record with `smallest_depth` added.
  """
  depths = np.asarray(depths, np.float64)
  losses = np.asarray(losses, np.float64)
  order = np.argsort(depths)
  depths, losses = depths[order], losses[order]
  return [dict(fit_depth_scaling(depths[start:], losses[start:], alpha=alpha),
               smallest_depth=float(depths[start]))
          for start in range(depths.size - min_depths + 1)]


def _log_gap_regression(depths: np.ndarray, gaps: np.ndarray) -> dict:
  """Ordinary least squares of log gap = log c - alpha log L over the positive gaps."""
  keep = np.isfinite(gaps) & (gaps > 0)
  result = dict(depths=depths[keep].tolist(), gaps=gaps[keep].tolist(),
                dropped_depths=depths[~keep].tolist())
  if keep.sum() < 2:
    nan = float("nan")
    return dict(result, c=nan, log_c_se=nan, alpha=nan, alpha_se=nan, r2=nan)
  design = np.stack([np.ones(keep.sum()), -np.log(depths[keep])], axis=1)
  log_gaps = np.log(gaps[keep])
  coef, *_ = np.linalg.lstsq(design, log_gaps, rcond=None)
  residuals = log_gaps - design @ coef
  dof = keep.sum() - 2
  if dof > 0:
    covariance = np.linalg.inv(design.T @ design) * float(residuals @ residuals) / dof
    log_c_se, alpha_se = np.sqrt(np.diag(covariance))
  else:
    log_c_se = alpha_se = float("nan")
  return dict(result, c=float(np.exp(coef[0])), log_c_se=float(log_c_se),
              alpha=float(coef[1]), alpha_se=float(alpha_se), r2=_r_squared(log_gaps, residuals))


def fit_gap(depths, shared_errors, L0: float, L0_se: float = 0.0) -> dict:
  """Gap fit log(L0 - C_L) = log c - alpha log L (ordinary least squares, Table 5;
  docs/analysis.md).

  Depths where L0 - C_L <= 0 or C_L is undefined (L = 1) are dropped and listed in
  `dropped_depths`. The regression's errors take L0 as exact (`alpha_se_given_L0`); but
  the deep gaps are small, so alpha leans on L0. The fit is repeated at L0 -+ L0_se
  (`alpha_at_L0_minus_plus_se`), and the largest shift of alpha (and of log c) is added
  in quadrature: `alpha_se`, `c_se`. Where the refit at L0 - L0_se leaves fewer than two
  positive gaps, the exponent is not determined at that L0 and `alpha_se` is infinite; it is
  NaN where the regression has no spare degree of freedom (two positive gaps) or L0_se is NaN.
  """
  depths = np.asarray(depths, np.float64)
  shared = np.asarray(shared_errors, np.float64)
  central = _log_gap_regression(depths, L0 - shared)
  shifted = [_log_gap_regression(depths, L0 + sign * L0_se - shared) for sign in (-1, 1)]
  if L0_se == 0:
    alpha_shift = log_c_shift = 0.0
  elif np.isnan(L0_se):  # L0's error unknown: so is alpha's
    alpha_shift = log_c_shift = float("nan")
  elif any(np.isnan(refit["alpha"]) for refit in shifted):
    alpha_shift = log_c_shift = float("inf")
  else:
    alpha_shift = max(abs(refit["alpha"] - central["alpha"]) for refit in shifted)
    log_c_shift = max(abs(np.log(refit["c"] / central["c"])) for refit in shifted)
  c = central["c"]
  return dict(L0=float(L0), L0_se=float(L0_se), depths=central["depths"],
              gaps=central["gaps"], dropped_depths=central["dropped_depths"],
              c=c, c_se=float(c * np.hypot(central["log_c_se"], log_c_shift)),
              alpha=central["alpha"], alpha_se=float(np.hypot(central["alpha_se"], alpha_shift)),
              alpha_se_given_L0=central["alpha_se"],
              alpha_at_L0_minus_plus_se=[refit["alpha"] for refit in shifted],
              r2=central["r2"])


def gap_fit_of(fit: dict) -> dict | None:
  """The gap fit of a depth-fit record from its own fields (L0 and L0_se of the depth fit,
  C_L per depth), or None where the depth fit resolved no floor L0 > 0."""
  if not (fit["resolved"] and fit["L0"] > 0):
    return None
  if len(fit["depths"]) != len(fit["shared_error"]):
    raise ValueError(f"fit record: {len(fit['depths'])} depths but "
                     f"{len(fit['shared_error'])} shared errors")
  return fit_gap(fit["depths"], fit["shared_error"], fit["L0"], fit["L0_se"])


def non_monotone_depths(paired: list[dict], num_se: float = 2.0) -> list[int]:
  """Depths whose loss rises above the previous depth's by more than `num_se` paired
  standard errors (docs/regimes.md: a converged parallel model has R_2L <= R_L)."""
  return [p["depth"] for p in paired
          if np.isfinite(p["difference"]) and p["difference"] > num_se * p["se"]]


def fit_grid(runs: list[dict], paired_differences: list[dict] | None = None,
             bound: dict | None = None) -> dict:
  """The fit record of one grid (model, task, spectrum) from its run records.

  Diverged and flagged models are left out of the means and the fit.
  """
  first = runs[0]
  clean = clean_runs(runs)
  depths, losses, loss_se = seed_means(clean, "eval_loss")
  _, shared, _ = seed_means(clean, "C")
  _, disagreement, _ = seed_means(clean, "disagreement")
  keep = [i for i, loss in enumerate(losses) if np.isfinite(loss)]
  paired = paired_differences or []
  fit = dict(model=first["model"], task=first["task"], k=first["k"], a=first["a"],
             b=first["b"], loss_se=loss_se, shared_error=shared, disagreement=disagreement,
             excluded_diverged=[dict(depth=r["depth"], seed=r["seed"],
                                     step=r["diverged_at_step"]) for r in runs if r["diverged"]],
             flagged=[dict(depth=r["depth"], seed=r["seed"], eval_loss=r["eval_loss"],
                           reason=r["flag_reason"]) for r in runs if r.get("flagged")],
             paired_differences=paired, non_monotone_depths=non_monotone_depths(paired),
             bound=bound,
             all_converged=all(r["converged"] for r in runs if not r["diverged"]))
  fit["learning_rate"] = first["learning_rate"]  # a rate sweep's grids differ in it
  fit["clean"] = not fit["flagged"] and not fit["excluded_diverged"]
  if len(keep) >= 2:
    fit.update(fit_depth_scaling([depths[i] for i in keep], [losses[i] for i in keep],
                                 fit_floor=first["task"] == "topk"))
    fit["gap_fit"] = gap_fit_of(fit)
  else:
    nan = float("nan")
    fit.update(L0=nan, L0_se=nan, c=nan, c_se=nan, alpha=nan, alpha_se=nan, r2=nan,
               depths=depths, losses=losses, gap_fit=None, resolved=False,
               verdict="fewer than two depths with a clean model: nothing to fit")
  return fit


# One grid: the runs behind one fit record.
GRID_FIELDS = ("model", "task", "k", "a", "b", "learning_rate")
PAIRING_FIELDS = GRID_FIELDS + ("depth", "seed")  # one trained model


def _by_model(runs: list[dict], name: str) -> dict[tuple, dict]:
  """The clean records of one run keyed by PAIRING_FIELDS; a model twice is an error."""
  keyed = {}
  for run in clean_runs(runs):
    key = tuple(run.get(field) for field in PAIRING_FIELDS)
    if key in keyed:
      raise ValueError(f"{name} holds model {dict(zip(PAIRING_FIELDS, key))} twice")
    keyed[key] = run
  return keyed


def longer_training_changes(short_runs: list[dict], long_runs: list[dict],
                            confidence: float = 0.95) -> list[dict]:
  """How much each depth still gains when the same models train longer.

  `short_runs`, `long_runs`: the run records of two runs of one config that differ in the
  schedule's length, so a model (PAIRING_FIELDS) has the same start, data stream and
  evaluation contexts in both. Pairs where either record is diverged or flagged are left out.
  One record per (model, task, k, a, b, depth): the seeds, the seed-mean losses, the change
  long - short per seed, its mean, the standard error of the mean over seeds, the mean
  relative to the short loss, `num_lower` (seeds whose loss fell), and `resolved`: the
  seeds agree on the change, |mean| > t x se with t the two-sided Student quantile at
  `confidence` on n - 1 degrees of freedom (`t_critical`; never with one seed). A resolved
  change means the short schedule had not converged at that depth.
  """
  short_by_key = _by_model(short_runs, "the short run")
  long_by_key = _by_model(long_runs, "the long run")
  groups: dict[tuple, list] = {}
  for key in sorted(short_by_key.keys() & long_by_key.keys()):
    groups.setdefault(key[:-1], []).append((short_by_key[key], long_by_key[key]))
  records = []
  for group_key, members in groups.items():
    short_losses = np.array([s["eval_loss"] for s, _ in members])
    changes = np.array([l["eval_loss"] - s["eval_loss"] for s, l in members])
    mean = float(changes.mean())
    if changes.size > 1:
      se = float(changes.std(ddof=1) / np.sqrt(changes.size))
      t_critical = float(scipy.stats.t.ppf(0.5 + confidence / 2, changes.size - 1))
    else:
      se = t_critical = float("nan")
    records.append(dict(zip(PAIRING_FIELDS[:-1], group_key),
                        seeds=[s["seed"] for s, _ in members],
                        short_steps=[s["steps"] for s, _ in members],
                        long_steps=[l["steps"] for _, l in members],
                        short_loss=float(short_losses.mean()),
                        long_loss=float(np.mean([l["eval_loss"] for _, l in members])),
                        changes=changes.tolist(), mean_change=mean, mean_change_se=se,
                        relative_change=mean / float(short_losses.mean()),
                        num_lower=int(np.sum(changes < 0)), t_critical=t_critical,
                        resolved=bool(changes.size > 1 and abs(mean) > t_critical * se)))
  return records


def unpaired_models(short_runs: list[dict], long_runs: list[dict]) -> tuple[int, int]:
  """Clean models of the short and of the long run that have no clean partner in the other."""
  short_keys = set(_by_model(short_runs, "the short run"))
  long_keys = set(_by_model(long_runs, "the long run"))
  return len(short_keys - long_keys), len(long_keys - short_keys)


def sign_test(num_lower: int, num_models: int) -> float:
  """Two-sided binomial p-value of `num_lower` falls among `num_models` changes, each as
  likely to rise as to fall if training longer changed nothing."""
  return float(scipy.stats.binomtest(num_lower, num_models).pvalue) if num_models else 1.0


def last_interval_change(metrics: list[dict], fit: dict) -> dict | None:
  """How a grid's validation loss changed over its last evaluation interval: the relative
  change of the mean over its models (`mean`), the largest single-model fall
  (`largest_fall`, the most negative change) and the interval in steps; None with fewer
  than two evaluations."""
  curve = [m for m in metrics if (m["model"], m["a"], m["b"]) == (fit["model"], fit["a"], fit["b"])
           and m.get("val_loss") is not None]
  if len(curve) < 2:
    return None
  before, after = (np.asarray(m["val_loss"], np.float64) for m in curve[-2:])
  return dict(mean=float(after.mean() / before.mean() - 1),
              largest_fall=float(np.nanmin(after / before - 1)),
              steps=curve[-1]["step"] - curve[-2]["step"])
