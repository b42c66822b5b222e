"""The paper's claims as checks with named tolerances: the one place where a number becomes a
pass or a miss (docs/analysis.md "Checks").

Every check returns a `Check`: the claim it tests (one of CLAIMS), whether it passed, and a
sentence that states the measured value, the paper's value and the tolerance. Reports count
misses by claim; FINDINGS.md is built from the same checks.
"""

import dataclasses
import math

import numpy as np

from inverse_depth import analysis, config as config_lib, paper, records, theory

# The depth law R_L = L0 + c L^-alpha: the paper's exponents are near one (0.79-0.97 in
# Table 4, 0.98-0.99 in Table 5) with R^2 >= 0.998; a fit "shows the law" with alpha in
# this range and R^2 at least this.
LAW_ALPHA_RANGE = (0.8, 1.25)
LAW_MIN_R2 = 0.99
# A fitted exponent agrees with the paper's when it lies within this many of its standard
# errors (Tables 4 and 5).
EXPONENT_STANDARD_ERRORS = 2.0
# A fitted softmax floor L0 agrees with Table 1 within this relative distance. The floor is
# always a fitted L0: a loss at the deepest depth is shown, never counted.
SOFTMAX_FLOOR_TOLERANCE = 0.03
# "Level off" (the paper's Table 5 reading): the change over the last doubling of depth of the
# shared error C_L, and of the disagreement A_L - C_L, within these relative tolerances.
SHARED_LEVEL_TOLERANCE = 0.02
DISAGREEMENT_LEVEL_TOLERANCE = 0.10
# Linear attention: the plateau loss (its deepest clean loss; there is no depth term to fit)
# within this of Table 1's linear floor, and flat after two layers within LINEAR_FLAT_TOLERANCE.
LINEAR_FLOOR_TOLERANCE = 0.10
LINEAR_FLAT_TOLERANCE = 0.02
# Table 3: the trained linear floor within this of theory.linear_floor.
LINEAR_THEORY_TOLERANCE = 0.05
# The easy task: one softmax layer's loss below this fraction of E[y*^2].
EASY_TASK_FRACTION = 0.01
# A one-layer softmax model within this of the best single cosine layer (theory.softmax_bound).
SINGLE_LAYER_TOLERANCE = 0.10
# On one problem the deepest softmax loss below this multiple of the deepest linear loss.
SOFTMAX_LINEAR_RATIO = 0.5
# The identity R = C + (A - C)/L, float64 analysis of float32 predictions: relative residual.
IDENTITY_TOLERANCE = 1e-6
# The generalised models' looser "inverse-depth trend" (the paper's "similar scaling
# signals", report.generalized_report): a resolved fit with alpha in this range and R^2 at
# least this; a grid whose mean validation loss still fell by more than UNDER_TRAINED_FALL
# over its last evaluation interval reads "cannot say: under-trained".
TREND_ALPHA_RANGE = (0.5, 1.5)
TREND_MIN_R2 = 0.95
UNDER_TRAINED_FALL = 0.01
# The law's fits are weighted by each depth's standard error (`depth_standard_errors`) and made
# over L >= 1 and over L >= 2; both must show the law, unless L = 1 is left out for a measured
# reason (its own window drift beyond DRIFT_FRACTION of R_1 - L0), never because its models
# were flagged.
# Drift: before any law verdict, the seed-mean change of R_L across the averaging window
# (mean of the second half of its evaluations minus the first half's) must be below this
# fraction of R_L - L0 (the fitted depth term c L^-alpha) at every depth L >= 2; otherwise the
# verdict reads "not stationary"; runs that record no per-evaluation window losses read "not
# testable".
DRIFT_FRACTION = 0.3
# Table 5: the gap exponent with L0 held at its fit; an exponent whose standard error (of the
# slope of log(L0 - C_L) on log L) exceeds this cap reads "unresolved". The gap is a power
# law when every local slope between consecutive depths is positive and within
# GAP_LOCAL_SLOPE_TOLERANCE of the fitted exponent.
GAP_ALPHA_SE_CAP = 0.25
GAP_LOCAL_SLOPE_TOLERANCE = 0.5
# The identity that can fail: R from the model's own forward output (run record
# `forward_eval_loss`) against C + (A - C)/L from the layer outputs, float32 forward pass
# against a float64 analysis: relative residual.
FORWARD_IDENTITY_TOLERANCE = 1e-4
# A depth-L optimum of cosine layers within this fraction of the loss of the full mixture
# (or within EXPONENT_STANDARD_ERRORS paired errors) has reached it
# (settled_depth).
SATURATION_FRACTION = 1e-3

CLAIMS = ("depth law", "depth trend", "no depth trend", "Table 1 softmax floor", "Table 1 linear floor",
          "softmax below linear", "linear flat in depth", "Table 2 exponent band", "Table 3 linear theory",
          "Table 4 exponent", "Table 5 gap exponent", "C_L levels off", "A_L - C_L levels off",
          "easy task", "one layer near its bound", "loss monotone in depth", "identity exact",
          "models converged", "models stationary", "no drift in the window",
          "off the uniform plateau", "clean run")
# Check.status beyond a plain pass or miss: the check could not give a verdict.
STATUSES = ("", "not stationary", "not testable", "unresolved")


@dataclasses.dataclass(frozen=True)
class Check:
  claim: str   # one of CLAIMS
  passed: bool
  text: str    # measured value, reference and tolerance in one sentence
  status: str = ""  # one of STATUSES: "" for a plain pass or miss

  def __post_init__(self):
    if self.claim not in CLAIMS:
      raise ValueError(f"Check.claim {self.claim!r}: allowed {', '.join(CLAIMS)}")
    if self.status not in STATUSES or (self.status and self.passed):
      raise ValueError(f"Check.status {self.status!r} (passed={self.passed}): allowed "
                       f"{STATUSES}, and only on a check that did not pass")

  @property
  def verdict(self) -> str:
    """PASS, MISS, or MISS with what kept the check from a verdict: "MISS (not stationary)"."""
    return "PASS" if self.passed else (f"MISS ({self.status})" if self.status else "MISS")


def relative(ours: float, theirs: float) -> float:
  return ours / theirs - 1


def _label(fit: dict) -> str:
  return f"{fit['model']} {fit['task']} k={fit['k']} ({fit['a']:g}, {fit['b']:g})"


def _exponent_in_range(fit: dict, claim: str, alpha_range: tuple[float, float], min_r2: float,
                      needs: str) -> Check:
  """R_L = L0 + c L^-alpha resolved with alpha in `alpha_range` and R^2 >= `min_r2`; `needs`
  names what is required in the check's text."""
  low, high = alpha_range
  if not fit["resolved"]:
    return Check(claim, False, f"{_label(fit)}: no depth law resolved "
                 f"({fit.get('verdict', 'no fit')}).")
  passed = bool(low <= fit["alpha"] <= high and fit["r2"] >= min_r2)
  return Check(claim, passed, f"{_label(fit)}: alpha {fit['alpha']:.2f} +- "
               f"{fit['alpha_se']:.2g}, R^2 {fit['r2']:.4f} ({needs} needs alpha in "
               f"[{low:g}, {high:g}] and R^2 >= {min_r2:g}).")


def _half_change(values) -> float:
  """Mean of the second half of a window's evaluations minus the first half's (the halves of
  analysis.stationarity)."""
  values = np.asarray(values, np.float64)
  half = values.size // 2
  return float(values[values.size - half:].mean() - values[:half].mean())


def _models_at(runs: list[dict], depth) -> tuple[list[dict], bool]:
  """The models that stand for one depth: its clean models, or where none is clean its
  flagged (not diverged) ones; and whether they are the flagged ones."""
  at = [r for r in runs if r["depth"] == depth and not r["diverged"]]
  clean = [r for r in at if analysis.is_clean(r)]
  return (clean, False) if clean else (at, bool(at))


def depth_standard_errors(models_by_depth: list[list[dict]]) -> list[float]:
  """Per depth, the standard error of its seed-mean loss: the larger of the spread over seeds
  (std / sqrt(n), n >= 2) and the models' own error (the error over time of a window average,
  `stationarity.se`, where recorded, else the error over evaluation contexts `eval_loss_se`)
  over sqrt(n); nan where neither is known."""
  errors = []
  for models in models_by_depth:
    losses = np.array([r["eval_loss"] for r in models], np.float64)
    n = losses.size
    seed = float(losses.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    own = [r["stationarity"]["se"] if "stationarity" in r else r.get("eval_loss_se", np.nan)
           for r in models]
    own = float(np.mean(own) / np.sqrt(n)) if n and np.all(np.isfinite(own)) else float("nan")
    finite = [x for x in (seed, own) if np.isfinite(x) and x > 0]
    errors.append(max(finite) if finite else float("nan"))
  return errors


def law_fits(fit: dict, runs: list[dict] | None) -> dict:
  """The law's weighted fits of one grid: `primary` over the fit record's own (clean) depths,
  `from_1` over L >= 1 and `from_2` over L >= 2 (each `analysis.fit_depth_scaling` with
  `depth_standard_errors`; unweighted where an error is unknown), with the models behind each
  depth (`models`), `flagged_depth_1` (L = 1 enters the L >= 1 fit from flagged models: no
  clean one) and `weighted`. Without `runs` the fits are the fit record's own numbers,
  weighted by its `loss_se` where every one is finite."""
  fit_floor = fit.get("fit_floor", fit["task"] == "topk")
  models: dict = {}
  if runs:
    for depth in sorted({r["depth"] for r in runs}):
      found, flagged = _models_at(runs, depth)
      if found and (not flagged or depth == 1):
        models[float(depth)] = (found, flagged)
    depths = sorted(models)
    losses = [float(np.mean([r["eval_loss"] for r in models[L][0]])) for L in depths]
    errors = depth_standard_errors([models[L][0] for L in depths])
  else:
    depths, losses = [float(L) for L in fit["depths"]], list(fit["losses"])
    errors = list(fit.get("loss_se") or [float("nan")] * len(depths))
    errors = errors if len(errors) == len(depths) else [float("nan")] * len(depths)
  weighted = bool(np.all(np.isfinite(errors)) and np.all(np.array(errors) > 0))

  def fit_over(keep):
    chosen = [i for i, L in enumerate(depths) if keep(L)]
    if len(chosen) < 2 or any(losses[i] <= 0 for i in chosen):
      return None
    return analysis.fit_depth_scaling([depths[i] for i in chosen], [losses[i] for i in chosen],
                                      fit_floor=fit_floor,
                                      standard_errors=[errors[i] for i in chosen]
                                      if weighted else None)

  own = {float(L) for L in fit["depths"]}
  return dict(primary=fit_over(lambda L: L in own), from_1=fit_over(lambda L: L >= 1),
              from_2=fit_over(lambda L: L >= 2), models={L: m for L, (m, _) in models.items()},
              flagged_depth_1=bool(models.get(1.0, (None, False))[1]), weighted=weighted,
              depths=depths, losses=losses, errors=errors)


def window_drift(fit: dict, runs: list[dict] | None, fits: dict | None = None) -> Check:
  """The seed-mean change of R_L across the averaging window (second half minus first half of
  `window_eval_losses`) below DRIFT_FRACTION of R_L - L0 (c L^-alpha of the weighted L >= 2
  fit) at every depth L >= 2. "not testable" where a model records no window losses or the
  fit resolves no depth term; "not stationary" where a depth drifts more. Its text also gives
  L = 1's drift against DRIFT_FRACTION of its measured R_1 - L0 (`l1_drifts` uses it)."""
  claim = "no drift in the window"
  fits = fits or law_fits(fit, runs)
  if not runs:
    return Check(claim, False, f"{_label(fit)}: drift not testable (no run records given).",
                 "not testable")
  used = [r for L, models in fits["models"].items() if L >= 2 for r in models]
  lacking = [r for r in used if "window_eval_losses" not in r]
  if lacking:
    return Check(claim, False, f"{_label(fit)}: drift not testable: {len(lacking)} of "
                 f"{len(used)} models record no per-evaluation window losses "
                 "(results.json `window_eval_losses`; the run evaluated one iterate, not a "
                 "window): " + ", ".join(f"L={r['depth']} seed {r['seed']}" for r in lacking)
                 + ".", "not testable")
  deep = next((found for found in (fits["from_2"], fits["primary"], fits["from_1"])
               if found is not None and found["resolved"]), None)
  if deep is None:
    return Check(claim, False, f"{_label(fit)}: drift not testable: no fit resolves a depth "
                 "term R_L - L0 to measure it against.", "not testable")
  source = "L >= 2" if deep is fits["from_2"] else "its own depths' (L >= 2 resolves none)"
  parts, drifting = [], []
  for L, models in sorted(fits["models"].items()):
    change = float(np.mean([_half_change(r["window_eval_losses"]) for r in models]))
    if L >= 2:
      signal = deep["c"] * L ** -deep["alpha"]
    else:
      signal = float(np.mean([r["eval_loss"] for r in models])) - deep["L0"]
    tolerance = DRIFT_FRACTION * signal
    ok = bool(abs(change) < tolerance)
    if L >= 2 and not ok:
      drifting.append(L)
    parts.append(f"L={L:g} {change:+.4f} (tolerance {tolerance:.4f})")
  passed = not drifting
  return Check(claim, passed, f"{_label(fit)}: seed-mean change of R_L from the first to the "
               "second half of the averaging window: " + ", ".join(parts)
               + f" (needs |change| < {DRIFT_FRACTION:g} x (R_L - L0) at every L >= 2, R_L - L0 "
               f"= c L^-alpha of the weighted {source} fit; L = 1 against its measured R_1 - L0)"
               + ("." if passed else f"; drifting at L = {', '.join(f'{L:g}' for L in drifting)}."),
               "" if passed else "not stationary")


def l1_drifts(fits: dict, deep: dict | None) -> tuple[bool, str]:
  """Whether L = 1 is measured to drift across its window by more than DRIFT_FRACTION of its
  R_1 - L0 (L0 of the L >= 2 fit): a measured reason to leave it out of the law's fit."""
  models = fits["models"].get(1.0)
  if not models or deep is None or not deep["resolved"] or not all(
      "window_eval_losses" in r for r in models):
    return False, ""
  change = float(np.mean([_half_change(r["window_eval_losses"]) for r in models]))
  signal = float(np.mean([r["eval_loss"] for r in models])) - deep["L0"]
  if abs(change) >= DRIFT_FRACTION * signal:
    return True, (f"L = 1 left out for a measured reason: its R drifts {change:+.4f} across the "
                  f"window, beyond {DRIFT_FRACTION:g} x (R_1 - L0) = {DRIFT_FRACTION * signal:.4f}")
  return False, ""


def _fit_text(found: dict | None) -> str:
  if found is None:
    return "too few depths"
  if not found["resolved"]:
    return f"no law resolved ({found['verdict']})"
  return (f"alpha {found['alpha']:.2f} +- {found['alpha_se']:.2g}, L0 {found['L0']:.4g}, "
          f"R^2 {found['r2']:.4f}")


def _in_law_range(found: dict | None) -> bool:
  low, high = LAW_ALPHA_RANGE
  return bool(found is not None and found["resolved"] and low <= found["alpha"] <= high
              and found["r2"] >= LAW_MIN_R2)


def depth_law(fit: dict, runs: list[dict] | None = None) -> Check:
  """R_L = L0 + c L^-alpha, weighted by each depth's standard error, with alpha in
  LAW_ALPHA_RANGE and R^2 >= LAW_MIN_R2 on both L >= 1 and L >= 2 (`law_fits`), or on L >= 2
  where L = 1 is left out for a measured reason (`l1_drifts`); given only after the window
  drift check (`window_drift`) passes: "not stationary" or "not testable" otherwise. `runs`:
  the grid's run records (records.runs_of); without them drift is not testable."""
  fits = law_fits(fit, runs)
  drift = window_drift(fit, runs, fits)
  low, high = LAW_ALPHA_RANGE
  needs = (f"the law needs alpha in [{low:g}, {high:g}] and R^2 >= {LAW_MIN_R2:g} on both "
           "depth sets, fits weighted by each depth's standard error"
           + ("" if fits["weighted"] else ", here unweighted: an error is unknown"))
  one, two = fits["from_1"], fits["from_2"]
  flagged_note = (" (L = 1 from its flagged models: none is clean)"
                  if fits["flagged_depth_1"] else "")
  text = f"{_label(fit)}: L >= 1{flagged_note}: {_fit_text(one)}; L >= 2: {_fit_text(two)}"
  lawful = _in_law_range(two) and (_in_law_range(one) or l1_drifts(fits, two)[0])
  if not drift.passed and (drift.status == "not stationary" or lawful):
    why = (drift.text.rsplit("; ", 1)[-1].rstrip(".") if drift.status == "not stationary"
           else drift.text.split(": ", 1)[-1].rstrip("."))
    return Check("depth law", False, f"{text}; no verdict: {drift.status} ({why}; the drift "
                 f"check needs the window's change below {DRIFT_FRACTION:g} x (R_L - L0)) "
                 f"({needs}).", drift.status)
  if not drift.passed:  # not testable, and the fits miss the law either way
    return Check("depth law", False, f"{text}; drift not testable, but the fits miss the law "
                 f"either way ({needs}).")
  passed = _in_law_range(one) and _in_law_range(two)
  reason = ""
  if not passed and _in_law_range(two) and not _in_law_range(one):
    excluded, reason = l1_drifts(fits, two)
    passed = excluded
  return Check("depth law", passed, f"{text}{'; ' + reason if reason else ''} ({needs}; drift "
               f"below {DRIFT_FRACTION:g} x (R_L - L0)).")


def extrapolated_law(from_1: dict | None, from_2: dict | None, label: str) -> Check:
  """The law on losses extrapolated to t -> infinity (experiments.stationary_report): alpha in
  LAW_ALPHA_RANGE and R^2 >= LAW_MIN_R2 on both L >= 1 and L >= 2 (fits weighted by the
  extrapolation's standard errors). No drift check: the extrapolation stands in for it."""
  low, high = LAW_ALPHA_RANGE
  return Check("depth law", _in_law_range(from_1) and _in_law_range(from_2),
               f"{label} at t -> infinity: L >= 1: {_fit_text(from_1)}; L >= 2: "
               f"{_fit_text(from_2)} (the law needs alpha in [{low:g}, {high:g}] and R^2 >= "
               f"{LAW_MIN_R2:g} on both depth sets).")


def depth_trend(fit: dict) -> Check:
  """The generalised models' approximately inverse-depth trend: R_L = L0 + c L^-alpha with
  alpha in TREND_ALPHA_RANGE and R^2 >= TREND_MIN_R2."""
  return _exponent_in_range(fit, "depth trend", TREND_ALPHA_RANGE, TREND_MIN_R2,
                            "an inverse-depth trend")


def depth_trend_lost(fit: dict) -> Check:
  """The paper's top-16 context updates: depth no longer helps. Passes unless the fit resolves
  a fall R_L = L0 + c L^-alpha with alpha >= TREND_ALPHA_RANGE[0] and R^2 >= TREND_MIN_R2; a
  fall steeper than the trend's range still keeps a depth trend (depth_trend fails it too)."""
  falls = _exponent_in_range(fit, "no depth trend", (TREND_ALPHA_RANGE[0], math.inf),
                             TREND_MIN_R2, "a depth trend")
  return dataclasses.replace(falls, passed=not falls.passed)


def softmax_floor(fit: dict, runs: list[dict] | None = None) -> Check | None:
  """The fitted L0 (weighted fit over the fit record's depths, `law_fits` primary) against the
  paper's Table 1 floor (None where Table 1 has no entry); counted only where its curve
  passes the law check (`depth_law`, which includes the drift check)."""
  target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
  if target is None:
    return None
  primary = law_fits(fit, runs)["primary"]
  if primary is None or not primary["resolved"] or not np.isfinite(primary["L0"]):
    return Check("Table 1 softmax floor", False, f"{_label(fit)}: no floor L0 fitted to compare "
                 f"with the paper's {target:g}.")
  off = relative(primary["L0"], target)
  law = depth_law(fit, runs)
  text = (f"{_label(fit)}: fitted L0 {primary['L0']:.4g} +- {primary['L0_se']:.2g} is {off:+.1%} "
          f"from the paper's {target:g} (needs within {SOFTMAX_FLOOR_TOLERANCE:.0%}, on a curve "
          "that passes the law check)")
  if not law.passed:
    return Check("Table 1 softmax floor", False, f"{text}; not counted: the curve fails the law "
                 f"check ({law.status or 'law missed'}).", law.status)
  return Check("Table 1 softmax floor", bool(abs(off) <= SOFTMAX_FLOOR_TOLERANCE), text + ".")


def exponent_distance(found: dict, target: float) -> float:
  """(alpha - the paper's) / alpha_se of a resolved fit: the distance Table 4 checks."""
  return (found["alpha"] - target) / found["alpha_se"]


def table4_exponent(fit: dict, runs: list[dict] | None = None) -> Check | None:
  """The fitted alpha (weighted fit over the fit record's depths) within
  EXPONENT_STANDARD_ERRORS of the paper's Table 4 value with R^2 >= LAW_MIN_R2, after the
  drift check (None where Table 4 has no entry)."""
  target = paper.TABLE4_ALPHA.get((fit["k"], fit["a"], fit["b"]))
  if target is None or fit["model"] != "softmax":
    return None
  fits = law_fits(fit, runs)
  primary = fits["primary"]
  if primary is None or not primary["resolved"]:
    return Check("Table 4 exponent", False, f"{_label(fit)}: no exponent resolved against the "
                 f"paper's {target:g}.")
  distance = exponent_distance(primary, target)
  text = (f"{_label(fit)}: alpha {primary['alpha']:.2f} +- {primary['alpha_se']:.2g} against the "
          f"paper's {target:g} ({distance:+.1f} se; needs within {EXPONENT_STANDARD_ERRORS:g} se "
          f"and R^2 >= {LAW_MIN_R2:g}), R^2 {primary['r2']:.4f}")
  drift = window_drift(fit, runs, fits)
  if not drift.passed:
    return Check("Table 4 exponent", False, f"{text}; no verdict: {drift.status}.", drift.status)
  return Check("Table 4 exponent", bool(abs(distance) <= EXPONENT_STANDARD_ERRORS
                                        and primary["r2"] >= LAW_MIN_R2), text + ".")


def gap_fit(fit: dict, runs: list[dict] | None = None) -> dict | None:
  """Table 5's gap fit log(L0 - C_L) = log c - alpha log L with L0 held at its fit (the weighted
  fit over the fit record's depths): `analysis.fit_gap` with L0_se = 0, so `alpha_se` is the
  standard error of the slope; plus `local_slopes` (-d log gap / d log L between consecutive
  fitted depths) and `power_law` (every local slope positive and within
  GAP_LOCAL_SLOPE_TOLERANCE of alpha). None without a resolved floor L0 > 0."""
  primary = law_fits(fit, runs)["primary"]
  if primary is None or not (primary["resolved"] and primary["L0"] > 0):
    return None
  if len(fit["depths"]) != len(fit["shared_error"]):
    raise ValueError(f"fit record: {len(fit['depths'])} depths but "
                     f"{len(fit['shared_error'])} shared errors")
  gap = analysis.fit_gap(fit["depths"], fit["shared_error"], primary["L0"], 0.0)
  depths, gaps = np.log(gap["depths"]), np.log(gap["gaps"])
  slopes = (-np.diff(gaps) / np.diff(depths)).tolist() if len(depths) > 1 else []
  gap["local_slopes"] = slopes
  gap["power_law"] = bool(slopes and np.isfinite(gap["alpha"]) and all(
      s > 0 and abs(s - gap["alpha"]) <= GAP_LOCAL_SLOPE_TOLERANCE for s in slopes))
  return gap


def gap_exponent_distance(gap: dict) -> float:
  """A gap fit's exponent from the paper's Table 5 range in its own standard errors (0 inside
  the range); agreement is |distance| <= EXPONENT_STANDARD_ERRORS."""
  low, high = paper.TABLE5_ALPHA_RANGE
  return float((gap["alpha"] - np.clip(gap["alpha"], low, high)) / gap["alpha_se"])


def table5_gap_exponent(fit: dict, gap: dict | None = None, runs: list[dict] | None = None
                        ) -> Check:
  """The gap exponent with L0 held at its fit (`gap_fit`; `gap` is recomputed from `fit` when
  None) within EXPONENT_STANDARD_ERRORS of the paper's Table 5 range, after the drift check;
  "unresolved" where its standard error exceeds GAP_ALPHA_SE_CAP; a miss where the gap is not
  a power law (its local slopes)."""
  low, high = paper.TABLE5_ALPHA_RANGE
  claim = "Table 5 gap exponent"
  gap = gap if gap is not None and "local_slopes" in gap else gap_fit(fit, runs)
  if gap is None or not np.isfinite(gap["alpha"]):
    return Check(claim, False, f"{_label(fit)}: no gap exponent to compare with the paper's "
                 f"{low}-{high}.")
  slopes = ", ".join(f"{s:.2f}" for s in gap["local_slopes"])
  text = (f"{_label(fit)}: gap alpha {gap['alpha']:.2f} +- {gap['alpha_se']:.2g} (L0 held at "
          f"{gap['L0']:.4g}; R^2 {gap['r2']:.3f}; local slopes {slopes}) against the paper's "
          f"{low}-{high}")
  drift = window_drift(fit, runs)
  if not drift.passed:
    return Check(claim, False, f"{text}; no verdict: {drift.status}.", drift.status)
  if not (np.isfinite(gap["alpha_se"]) and gap["alpha_se"] <= GAP_ALPHA_SE_CAP):
    return Check(claim, False, f"{text}; unresolved: its se exceeds the cap "
                 f"{GAP_ALPHA_SE_CAP:g}.", "unresolved")
  if not gap["power_law"]:
    return Check(claim, False, f"{text}; the gap is not a power law (needs every local slope "
                 f"> 0 and within {GAP_LOCAL_SLOPE_TOLERANCE:g} of alpha).")
  distance = gap_exponent_distance(gap)
  return Check(claim, bool(abs(distance) <= EXPONENT_STANDARD_ERRORS),
               f"{text} ({distance:+.1f} se; needs within {EXPONENT_STANDARD_ERRORS:g} se, se at "
               f"most {GAP_ALPHA_SE_CAP:g}).")


def identity_from_forward(runs: list[dict]) -> Check:
  """R from the model's own forward output (run record `forward_eval_loss`) against
  C + (A - C)/L from its layer outputs on the same contexts and parameters (record
  `forward_identity`), relative residual below FORWARD_IDENTITY_TOLERANCE on every clean
  model; "not testable" where a record lacks them (the recorded `identity_residual` computes R
  and C from the same layer outputs: it holds by algebra)."""
  clean = [r for r in runs if analysis.is_clean(r)]
  with_forward = [r for r in clean if "forward_eval_loss" in r and "forward_identity" in r]
  algebraic = max((abs(r["identity_residual"]) / max(r["eval_loss"], 1e-30) for r in clean),
                  default=float("nan"))
  if not with_forward or len(with_forward) < len(clean):
    return Check("identity exact", False, f"Not testable on these runs: {len(clean) - len(with_forward)} "
                 f"of {len(clean)} clean models record no loss of the model's own forward output "
                 "(`forward_eval_loss`), and R = C + (A - C)/L from the same layer outputs "
                 f"(largest relative residual {algebraic:.1e}) holds by algebra.", "not testable")
  worst = 0.0
  for r in with_forward:
    parts = r["forward_identity"]
    predicted = (parts["A"] if r["depth"] == 1
                 else parts["C"] + (parts["A"] - parts["C"]) / r["depth"])
    worst = max(worst, abs(r["forward_eval_loss"] - predicted) / max(r["forward_eval_loss"], 1e-30))
  return Check("identity exact", bool(worst < FORWARD_IDENTITY_TOLERANCE),
               f"R from the forward output against C + (A - C)/L from the layer outputs: largest "
               f"relative residual {worst:.1e} over {len(with_forward)} clean models (needs < "
               f"{FORWARD_IDENTITY_TOLERANCE:g}).")


def last_doubling_change(fit: dict, field: str) -> float:
  """Relative change of a per-depth seed mean (`shared_error`, `disagreement`) between the two
  deepest depths where it is finite (nan with fewer than two)."""
  values = [v for v in fit.get(field, []) if np.isfinite(v)]
  return values[-1] / values[-2] - 1 if len(values) >= 2 else float("nan")


def levels_off(fit: dict, field: str) -> Check | None:
  """C_L (`shared_error`) or A_L - C_L (`disagreement`) changes over the last doubling of
  depth by at most its tolerance; None with fewer than two depths where it is defined."""
  claim, tolerance, name = {
      "shared_error": ("C_L levels off", SHARED_LEVEL_TOLERANCE, "C_L"),
      "disagreement": ("A_L - C_L levels off", DISAGREEMENT_LEVEL_TOLERANCE, "A_L - C_L"),
  }[field]
  change = last_doubling_change(fit, field)
  if not np.isfinite(change):
    return None
  return Check(claim, bool(abs(change) <= tolerance), f"{_label(fit)}: {name} changes "
               f"{change:+.1%} over the last doubling of depth (needs within {tolerance:.0%}).")


def clean_run(runs: list[dict]) -> Check:
  """Every model trained, none flagged (stuck, an outlier, or not stationary)."""
  flagged = [r for r in runs if r.get("flagged") or r.get("diverged")]
  if not flagged:
    return Check("clean run", True, f"All {len(runs)} models clean (none diverged or flagged).")
  return Check("clean run", False, f"{len(flagged)} of {len(runs)} models diverged or flagged, "
               "kept out of the means and fits: " + "; ".join(
                   f"{r['model']} L={r['depth']} seed {r['seed']} "
                   f"({r.get('flag_reason') or 'diverged'})" for r in flagged) + ".")


def models_converged(results: dict) -> Check:
  """Every model converged by the trainer's rule (none diverged)."""
  runs = results["runs"]
  live = [r for r in runs if not r["diverged"]]
  converged = sum(r["converged"] for r in live)
  return Check(
      "models converged", converged == len(runs),
      f"{converged}/{len(runs)} models converged by the stated rule "
      f"({len(runs) - len(live)} diverged)."
      + (" Under a decay to zero the rule only sees the loss stop as the rate vanishes, not "
         "convergence: `experiments.longer_training` tests that by training the same models "
         "longer." if config_lib.flat(results.get("config", {})).get("schedule") == "cosine"
         else ""))


def models_stationary(runs: list[dict]) -> Check | None:
  """Every live model stationary over its averaging window (analysis.stationarity); None
  where no record has a window (a decaying schedule evaluates its final iterate)."""
  windows = [r for r in runs if not r["diverged"] and "stationarity" in r]
  if not windows:
    return None
  stationary = sum(r["stationarity"]["stationary"] for r in windows)
  return Check("models stationary", stationary == len(windows),
               f"{stationary}/{len(windows)} models stationary over the averaging window (the "
               f"last {windows[0]['stationarity']['evals']} evaluations; reported R, A and C are "
               "their time averages).")


def off_uniform_plateau(runs: list[dict]) -> Check:
  """No live model ended on the uniform-attention plateau (record `on_plateau`)."""
  stuck = [f"{r['model']} L={r['depth']} seed {r['seed']}" for r in runs
           if not r["diverged"] and r["on_plateau"]]
  return Check("off the uniform plateau", not stuck,
               f"{len(stuck)} models ended on the uniform-attention plateau (loss > "
               f"{analysis.UNIFORM_PLATEAU_FRACTION:g} x the best uniform-attention predictor)"
               + (": " + ", ".join(stuck) if stuck else "."))


def loss_monotone(fit: dict) -> Check | None:
  """No depth's loss rises above the previous depth's by more than 2 paired standard errors
  (fit record `non_monotone_depths`); None for a grid of one depth."""
  if not fit.get("paired_differences"):
    return None
  bad = fit["non_monotone_depths"]
  steps = ", ".join(f"{p['previous']}->{p['depth']}: {p['difference']:+.2g} +- {p['se']:.2g}"
                    for p in fit["paired_differences"])
  return Check("loss monotone in depth", not bad,
               f"{records.grid_label(fit)}: loss monotone in depth within 2 paired standard "
               f"errors (R_L - R_L' on the shared evaluation set: {steps})"
               + (f"; rises at depths {bad} (docs/regimes.md: for parallel models a rise means "
                  "under-training)" if bad else "."))


def one_layer_near_bound(fit: dict) -> Check | None:
  """R_1 within SINGLE_LAYER_TOLERANCE above the best single cosine layer
  (theory.softmax_bound, fit record `bound`); None without a bound or a depth-1 model."""
  bound = fit.get("bound")
  if not bound or not fit["depths"] or fit["depths"][0] != 1:
    return None
  excess = fit["losses"][0] / bound["single"] - 1
  return Check("one layer near its bound", excess < SINGLE_LAYER_TOLERANCE,
               f"{records.grid_label(fit)}: R_1 = {fit['losses'][0]:.4g} is {excess:+.1%} from "
               f"the best single cosine-attention layer {bound['single']:.4g} +- "
               f"{bound['single_se']:.2g} (needs < +{SINGLE_LAYER_TOLERANCE:.0%}).")


def linear_depth_change(fit: dict, runs: list[dict]) -> tuple[float, str]:
  """The relative change of a linear grid's plateau loss (analysis.plateau_loss) from L = 2 to
  its deepest clean depth, and the measure's name; nan without L = 2."""
  if 2 not in fit["depths"]:
    return float("nan"), "no clean model at L=2"
  at_2, _, measure = analysis.plateau_loss(runs, fit, 2)
  at_deepest, _, _ = analysis.plateau_loss(runs, fit, int(fit["depths"][-1]))
  return at_deepest / at_2 - 1, measure


def linear_flat(fit: dict, runs: list[dict]) -> Check | None:
  """Linear attention plateaus after two layers: `linear_depth_change` within
  LINEAR_FLAT_TOLERANCE; None without L = 2 and a deeper clean depth."""
  if 2 not in fit["depths"] or fit["depths"][-1] <= 2:
    return None
  deepest = int(fit["depths"][-1])
  change, measure = linear_depth_change(fit, runs)
  return Check("linear flat in depth", bool(abs(change) <= LINEAR_FLAT_TOLERANCE),
               f"{records.grid_label(fit)}: loss at L={deepest} is {change:+.2%} from L=2 "
               f"({measure}; needs within {LINEAR_FLAT_TOLERANCE:.0%}).")


def table1_linear_floor(fit: dict, runs: list[dict]) -> Check | None:
  """The deepest linear plateau (analysis.plateau_loss) within LINEAR_FLOOR_TOLERANCE of the
  paper's Table 1 floor; None where Table 1 has no entry or no depth is clean."""
  target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
  if target is None or not fit["depths"]:
    return None
  deepest = int(fit["depths"][-1])
  plateau, _, measure = analysis.plateau_loss(runs, fit, deepest)
  off = relative(plateau, target)
  return Check("Table 1 linear floor", bool(abs(off) <= LINEAR_FLOOR_TOLERANCE),
               f"{records.grid_label(fit)}: plateau {plateau:.4g} ({measure}, L={deepest}) is "
               f"{off:+.1%} from the paper's {target:g} (needs within "
               f"{LINEAR_FLOOR_TOLERANCE:.0%}).")


def linear_theory(fit: dict, runs: list[dict]) -> Check | None:
  """Table 3: the deepest linear plateau within LINEAR_THEORY_TOLERANCE of the theory floor
  T - h^T G^+ h (theory.linear_floor, fit record `bound`); the floor at the run's own P is
  stated beside it. None without a bound or a clean depth."""
  bound = fit.get("bound")
  if not bound or not fit["depths"]:
    return None
  deepest = int(fit["depths"][-1])
  plateau, plateau_se, measure = analysis.plateau_loss(runs, fit, deepest)
  if measure == "averaged over beta":
    measure += f", +- {plateau_se:.2g}"
  off = relative(plateau, bound["floor"])
  at_this_P = (f" At this P (the polynomial applied to the context's own covariance S) the "
               f"floor is {bound['context_floor']:.4g} +- {bound['context_floor_se']:.2g}: "
               f"{relative(plateau, bound['context_floor']):+.1%} from it.")
  return Check("Table 3 linear theory", bool(abs(off) <= LINEAR_THEORY_TOLERANCE),
               f"{records.grid_label(fit)}: deepest trained loss {plateau:.4g} ({measure}) is "
               f"{off:+.1%} from the theory floor T - h^T G^+ h = {bound['floor']:.4g} +- "
               f"{bound['floor_se']:.2g} (depth {bound['depth']}; needs within "
               f"{LINEAR_THEORY_TOLERANCE:.0%})." + at_this_P)


def softmax_below_linear(softmax_fit: dict, linear_fit: dict, linear_runs: list[dict]
                         ) -> Check | None:
  """On one problem the deepest clean softmax loss below SOFTMAX_LINEAR_RATIO x the linear
  plateau at its deepest depth; None where either grid has no clean depth."""
  if not softmax_fit["losses"] or not linear_fit["losses"]:
    return None
  plateau, _, measure = analysis.plateau_loss(linear_runs, linear_fit,
                                              int(linear_fit["depths"][-1]))
  ratio = softmax_fit["losses"][-1] / plateau
  return Check("softmax below linear", bool(ratio < SOFTMAX_LINEAR_RATIO),
               f"{records.grid_label(softmax_fit)}: deepest softmax loss "
               f"{softmax_fit['losses'][-1]:.4g} (L={softmax_fit['depths'][-1]:g}) is {ratio:.2g}x "
               f"the linear plateau {plateau:.4g} ({measure}, L={linear_fit['depths'][-1]:g}; "
               f"needs < {SOFTMAX_LINEAR_RATIO:g}x).")


def table2_exponent_band(fit: dict) -> Check:
  """Table 2: the linear easy-task exponent between zeta and 2 zeta (theory.zeta)."""
  zeta = theory.zeta(fit["a"], fit["b"])
  alpha = fit["alpha"] if fit["resolved"] else float("nan")
  inside = bool(zeta <= alpha <= 2 * zeta)
  return Check("Table 2 exponent band", inside,
               f"Table 2 ({fit['a']:g}, {fit['b']:g}): alpha {alpha:.3f} "
               f"{'is' if inside else 'is NOT'} between zeta {zeta:.3g} and 2 zeta "
               f"{2 * zeta:.3g}.")


def easy_task(fit: dict, runs: list[dict]) -> Check | None:
  """The easy task: one softmax layer's loss below EASY_TASK_FRACTION of E[y*^2] (run
  record `target_second_moment`); None for other grids."""
  if fit["model"] != "softmax" or not fit["depths"] or fit["depths"][0] != 1:
    return None
  second = float(np.mean([r["target_second_moment"] for r in runs]))
  R1 = fit["losses"][0]
  return Check("easy task", bool(R1 < EASY_TASK_FRACTION * second),
               f"Easy task: one softmax layer reaches R_1 = {R1:.3g} ({R1 / second:.2g} of "
               f"E[y*^2] = {second:.3g}; needs < {EASY_TASK_FRACTION:g}).")


def run_checks(results: dict) -> list[Check]:
  """Every check one run's results.json can take: the state of its models, then per problem
  the softmax grids' (monotone, one layer near its bound, the law's), the linear grid's (flat,
  Table 1 floor, Table 3 theory) and softmax against linear."""
  runs = results["runs"]
  found = [models_converged(results), models_stationary(runs), clean_run(runs),
           off_uniform_plateau(runs), identity_from_forward(runs)]
  by_problem = {}
  for fit in results["fits"]:
    by_problem.setdefault((fit["task"], fit["k"], fit["a"], fit["b"]), {})[fit["model"]] = fit
  for fits in by_problem.values():
    soft, lin = fits.get("softmax"), fits.get("linear")
    for fit in (soft, fits.get("softmax" + analysis.ENSEMBLE_SUFFIX)):
      if fit is not None:
        fit_runs = records.runs_of(results, fit)
        found += [loss_monotone(fit), one_layer_near_bound(fit)]
        if len(fit["losses"]) >= 2:
          found += softmax_law_checks(fit, fit_runs)
    if lin is not None:
      lin_runs = records.runs_of(results, lin)
      found += [linear_flat(lin, lin_runs), table1_linear_floor(lin, lin_runs),
                linear_theory(lin, lin_runs)]
      if soft is not None:
        found.append(softmax_below_linear(soft, lin, lin_runs))
  return [check for check in found if check is not None]


def softmax_law_checks(fit: dict, runs: list[dict] | None = None) -> list[Check]:
  """Every check a softmax depth-fit record can take with its grid's run records: the window
  drift, the law, the floor, the Table 4 exponent, the gap exponent where Table 1 has the
  spectrum, and the two level-off claims."""
  found = [window_drift(fit, runs), depth_law(fit, runs), softmax_floor(fit, runs),
           table4_exponent(fit, runs), levels_off(fit, "shared_error"),
           levels_off(fit, "disagreement")]
  if paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"]) is not None:
    found.append(table5_gap_exponent(fit, None, runs))
  return [check for check in found if check is not None]


def tolerances_line() -> str:
  """The tolerances of this module a report's checks use, in one line."""
  return (f"Tolerances (inverse_depth/checks.py): the law: alpha in [{LAW_ALPHA_RANGE[0]:g}, "
          f"{LAW_ALPHA_RANGE[1]:g}] and R^2 >= {LAW_MIN_R2:g} on L >= 1 and on L >= 2 (fits "
          "weighted by each depth's standard error); window drift below "
          f"{DRIFT_FRACTION:g} x (R_L - L0); exponents within {EXPONENT_STANDARD_ERRORS:g} "
          f"standard errors (Table 4 also R^2 >= {LAW_MIN_R2:g}); Table 5 gap exponent with L0 "
          f"held, se at most {GAP_ALPHA_SE_CAP:g}, local slopes within "
          f"{GAP_LOCAL_SLOPE_TOLERANCE:g}; softmax floor within {SOFTMAX_FLOOR_TOLERANCE:.0%} "
          "on a curve that passes the law; C_L levels off within "
          f"{SHARED_LEVEL_TOLERANCE:.0%} and A_L - C_L within {DISAGREEMENT_LEVEL_TOLERANCE:.0%} "
          f"over the last doubling; linear floor within {LINEAR_FLOOR_TOLERANCE:.0%}, flat within "
          f"{LINEAR_FLAT_TOLERANCE:.0%}, theory within {LINEAR_THEORY_TOLERANCE:.0%}; one layer "
          f"within {SINGLE_LAYER_TOLERANCE:.0%} of its bound; identity from the forward output "
          f"within {FORWARD_IDENTITY_TOLERANCE:g} (relative).")


def misses_by_claim(found: list[Check]) -> dict[str, tuple[int, int]]:
  """{claim: (misses, checks)} in CLAIMS order, for claims with at least one check."""
  counts = {}
  for claim in CLAIMS:
    of_claim = [check for check in found if check.claim == claim]
    if of_claim:
      counts[claim] = (sum(not check.passed for check in of_claim), len(of_claim))
  return counts


def header_line(found: list[Check]) -> str:
  """'Checks: 3 of 12 miss (depth law 1/2, ...)' for a report's first lines; misses that are
  no verdict (Check.status) are counted by status after it."""
  counts = misses_by_claim(found)
  misses = sum(miss for miss, _ in counts.values())
  per_claim = ", ".join(f"{claim} {miss}/{total}" for claim, (miss, total) in counts.items())
  statuses = [check.status for check in found if check.status]
  no_verdict = "; ".join(f"{statuses.count(status)} of them {status}"
                         for status in STATUSES if status and status in statuses)
  return (f"Checks: {misses} of {len(found)} miss (misses/checks by claim: {per_claim})"
          + (f"; {no_verdict}" if no_verdict else "") + "." if found else "Checks: none apply.")


def verdict_of(found: list[Check]) -> str:
  """A claim's verdict in FINDINGS.md from its checks: reproduced (every check passes), not
  reproduced (every check misses), partly (m of n); checks that gave no verdict
  (Check.status: not stationary, not testable, unresolved) are named instead of counted as
  plain misses: "not stationary" where every check is."""
  if not found:
    return "not run"
  passed = sum(check.passed for check in found)
  if passed == len(found):
    return "**reproduced**"
  statuses = [check.status for check in found if check.status]
  named = "; ".join(f"{statuses.count(status)} {status}" for status in STATUSES
                    if status and status in statuses)
  if len(statuses) == len(found):
    return named if len(set(statuses)) > 1 else statuses[0]
  base = "not reproduced" if passed == 0 else f"partly ({passed} of {len(found)} checks)"
  return base + (f" ({named})" if named else "")


def check_line(check: Check) -> str:
  """A report's line for one check: '- PASS (claim): text' or '- MISS (not stationary)
  (claim): text'."""
  return f"- {check.verdict} ({check.claim}): {check.text}"


def falls_and_rises(fit: dict) -> tuple[int, int]:
  """How many depth doublings fall and how many rise: R_L - R_L/2 on the shared evaluation
  set beyond EXPONENT_STANDARD_ERRORS paired standard errors."""
  paired = fit.get("paired_differences", [])
  return (sum(p["difference"] < -EXPONENT_STANDARD_ERRORS * p["se"] for p in paired),
          sum(p["difference"] > EXPONENT_STANDARD_ERRORS * p["se"] for p in paired))


def settled_depth(by_layers: list[dict], mixture: float) -> int | None:
  """The least L from which every depth-L' >= L optimum of cosine layers (theory.softmax_bound's
  average_by_layers or mixture_by_layers) has reached the full mixture: its excess within
  EXPONENT_STANDARD_ERRORS paired errors or SATURATION_FRACTION of the mixture's loss (an
  average can rise again: 4 layers cannot always copy the weights of 3); None if even the
  deepest is above it."""
  reached = [entry["excess"] <= max(EXPONENT_STANDARD_ERRORS * entry["excess_se"],
                                    SATURATION_FRACTION * mixture) for entry in by_layers]
  return next((L for L in range(1, len(by_layers) + 1) if all(reached[L - 1:])), None)


def observed_trend(fit: dict) -> str:
  """One grid's depth trend: "law" (depth_trend passes), "falls" (no doubling rises and at
  most one fails to fall, falls_and_rises) or "none"."""
  if depth_trend(fit).passed:
    return "law"
  paired = fit.get("paired_differences", [])
  falls, rises = falls_and_rises(fit)
  return "falls" if paired and rises == 0 and falls >= len(paired) - 1 else "none"


def trend_against_paper(fit: dict, last_change: float | None, flagged: int, total: int) -> str:
  """Agrees / partly / disagrees / cannot say: the grid's observed_trend against the paper's
  (paper.appendix_c_trend). "cannot say" when the mean validation loss still fell by more than
  UNDER_TRAINED_FALL over the last evaluation interval (`last_change`), or more than half the
  grid's models are flagged. Depths where every model is flagged are named: the verdict
  covers only the depths that kept a clean model."""
  if (last_change is not None and last_change < -UNDER_TRAINED_FALL) or 2 * flagged > total:
    return "cannot say: under-trained"
  expected, observed = paper.appendix_c_trend(fit["model"], fit["k"]), observed_trend(fit)
  if expected is None:
    return "no claim in the paper"
  if expected == "law":
    text = {"law": "agrees", "falls": "partly: falls with depth, but no inverse-depth law",
            "none": "disagrees: no inverse-depth trend"}[observed]
  else:
    text = {"law": "disagrees: keeps an inverse-depth law", "falls": "disagrees: still falls "
            "with depth", "none": "agrees: no trend"}[observed]
  lost_depths = sorted({f["depth"] for f in fit.get("flagged") or []}
                       - {int(d) for d in fit["depths"]})
  if lost_depths:
    text += (f", judged on depths {', '.join(str(int(d)) for d in fit['depths'])} only: every "
             f"model at depth {', '.join(map(str, lost_depths))} is flagged")
  return text
