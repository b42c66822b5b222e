"""The paper's claims as checks with named tolerances: the one place where a number becomes a
pass or a miss (docs/analysis.md "Checks").

Every check returns a `Check`: the claim it tests (one of CLAIMS), whether it passed, and a
sentence that states the measured value, the paper's value and the tolerance. Reports count
misses by claim; FINDINGS.md is built from the same checks.
"""

import dataclasses
import math

import numpy as np

from inverse_depth import analysis, paper

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
# A depth-L optimum of cosine layers within this fraction of the loss of the full mixture
# (or within EXPONENT_STANDARD_ERRORS paired errors) has reached it
# (report.run_report.write_cosine_mixture_report).
SATURATION_FRACTION = 1e-3

CLAIMS = ("depth law", "depth trend", "no depth trend", "Table 1 softmax floor", "Table 1 linear floor",
          "softmax below linear", "linear flat in depth", "Table 2 exponent band", "Table 3 linear theory",
          "Table 4 exponent", "Table 5 gap exponent", "C_L levels off", "A_L - C_L levels off",
          "easy task", "one layer near its bound", "loss monotone in depth", "identity exact",
          "models converged", "models stationary", "off the uniform plateau", "clean run")


@dataclasses.dataclass(frozen=True)
class Check:
  claim: str   # one of CLAIMS
  passed: bool
  text: str    # measured value, reference and tolerance in one sentence

  def __post_init__(self):
    if self.claim not in CLAIMS:
      raise ValueError(f"Check.claim {self.claim!r}: allowed {', '.join(CLAIMS)}")


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


def depth_law(fit: dict) -> Check:
  """R_L = L0 + c L^-alpha with alpha in LAW_ALPHA_RANGE and R^2 >= LAW_MIN_R2."""
  return _exponent_in_range(fit, "depth law", LAW_ALPHA_RANGE, LAW_MIN_R2, "the law")


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


def softmax_floor(fit: dict) -> Check | None:
  """The fitted L0 against the paper's Table 1 floor (None where Table 1 has no entry)."""
  target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
  if target is None:
    return None
  if not fit["resolved"] or not np.isfinite(fit["L0"]):
    return Check("Table 1 softmax floor", False, f"{_label(fit)}: no floor L0 fitted to compare "
                 f"with the paper's {target:g}.")
  off = relative(fit["L0"], target)
  return Check("Table 1 softmax floor", bool(abs(off) <= SOFTMAX_FLOOR_TOLERANCE),
               f"{_label(fit)}: fitted L0 {fit['L0']:.4g} +- {fit['L0_se']:.2g} is {off:+.1%} "
               f"from the paper's {target:g} (needs within {SOFTMAX_FLOOR_TOLERANCE:.0%}).")


def table4_exponent(fit: dict) -> Check | None:
  """The fitted alpha within EXPONENT_STANDARD_ERRORS of the paper's Table 4 value (None where
  Table 4 has no entry)."""
  target = paper.TABLE4_ALPHA.get((fit["k"], fit["a"], fit["b"]))
  if target is None or fit["model"] != "softmax":
    return None
  if not fit["resolved"]:
    return Check("Table 4 exponent", False, f"{_label(fit)}: no exponent resolved against the "
                 f"paper's {target:g}.")
  distance = (fit["alpha"] - target) / fit["alpha_se"]
  return Check("Table 4 exponent", bool(abs(distance) <= EXPONENT_STANDARD_ERRORS),
               f"{_label(fit)}: alpha {fit['alpha']:.2f} +- {fit['alpha_se']:.2g} against the "
               f"paper's {target:g} ({distance:+.1f} se; needs within "
               f"{EXPONENT_STANDARD_ERRORS:g} se), R^2 {fit['r2']:.4f}.")


def table5_gap_exponent(fit: dict, gap: dict | None) -> Check:
  """A gap fit's alpha within EXPONENT_STANDARD_ERRORS (its error includes L0's) of the
  paper's Table 5 range."""
  low, high = paper.TABLE5_ALPHA_RANGE
  if gap is None or not np.isfinite(gap["alpha"]) or not np.isfinite(gap["alpha_se"]):
    return Check("Table 5 gap exponent", False, f"{_label(fit)}: no gap exponent with an error "
                 f"to compare with the paper's {low}-{high}.")
  distance = (gap["alpha"] - np.clip(gap["alpha"], low, high)) / gap["alpha_se"]
  return Check("Table 5 gap exponent", bool(abs(distance) <= EXPONENT_STANDARD_ERRORS),
               f"{_label(fit)}: gap alpha {gap['alpha']:.2f} +- {gap['alpha_se']:.2g} against "
               f"the paper's {low}-{high} ({distance:+.1f} se; needs within "
               f"{EXPONENT_STANDARD_ERRORS:g} se).")


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


def softmax_law_checks(fit: dict) -> list[Check]:
  """Every check a softmax depth-fit record can take: the law, the floor, the Table 4
  exponent, the gap exponent where the fit resolves a floor, and the two level-off claims."""
  found = [depth_law(fit), softmax_floor(fit), table4_exponent(fit),
           levels_off(fit, "shared_error"), levels_off(fit, "disagreement")]
  if paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"]) is not None:
    found.append(table5_gap_exponent(fit, analysis.gap_fit_of(fit)))
  return [check for check in found if check is not None]


def misses_by_claim(found: list[Check]) -> dict[str, tuple[int, int]]:
  """{claim: (misses, checks)} in CLAIMS order, for claims with at least one check."""
  counts = {}
  for claim in CLAIMS:
    of_claim = [check for check in found if check.claim == claim]
    if of_claim:
      counts[claim] = (sum(not check.passed for check in of_claim), len(of_claim))
  return counts


def header_line(found: list[Check]) -> str:
  """'Checks: 3 of 12 miss (depth law 1/2, ...)' for a report's first lines."""
  counts = misses_by_claim(found)
  misses = sum(miss for miss, _ in counts.values())
  per_claim = ", ".join(f"{claim} {miss}/{total}" for claim, (miss, total) in counts.items())
  return (f"Checks: {misses} of {len(found)} miss (misses/checks by claim: {per_claim})."
          if found else "Checks: none apply.")
