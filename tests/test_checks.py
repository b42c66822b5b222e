"""The checks module: each claim's check passes or misses on its named tolerance, a floor is
only ever a fitted L0, and a header's counts agree with its checks."""

import numpy as np
import pytest

from inverse_depth import analysis, checks

DEPTHS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def _fit(losses, a=0.0, b=0.0, k=2, shared=None, disagreement=None):
  fit = dict(analysis.fit_depth_scaling(DEPTHS, losses), model="softmax", task="topk", k=k,
             a=a, b=b)
  fit["shared_error"] = shared if shared is not None else [np.nan] + [1.0] * 5
  fit["disagreement"] = disagreement if disagreement is not None else [np.nan] + [1.0] * 5
  return fit


def _window_runs(losses, a=0.0, b=0.0, k=2):
  """One stationary model per depth: a flat 16-evaluation window at each loss."""
  return [dict(model="softmax", task="topk", k=k, a=a, b=b, depth=int(L), seed=0,
               eval_loss=loss, eval_loss_se=1e-4 * loss, window_eval_losses=[loss] * 16,
               diverged=False, flagged=False) for L, loss in zip(DEPTHS, losses)]


def test_the_law_and_the_floor_pass_on_an_inverse_depth_curve_at_the_papers_floor():
  losses = [2.007 + 0.8 / L for L in DEPTHS]
  fit, runs = _fit(losses), _window_runs(losses)
  assert checks.depth_law(fit, runs).passed
  floor = checks.softmax_floor(fit, runs)
  assert floor.passed and floor.claim == "Table 1 softmax floor" and "+0.0%" in floor.text
  # without run records the drift is not testable: no law verdict, no floor counted
  assert checks.depth_law(fit).status == checks.softmax_floor(fit).status == "not testable"


def test_a_steep_exponent_misses_the_law():
  fit = _fit([2.0 + 0.8 / L ** 2 for L in DEPTHS])
  assert fit["resolved"] and fit["alpha"] == pytest.approx(2.0, abs=1e-3)
  assert not checks.depth_law(fit).passed
  assert not checks.depth_trend(fit).passed
  assert not checks.depth_trend_lost(fit).passed  # still a fall with depth


def test_a_trend_is_lost_on_a_flat_curve_or_a_shallow_fall_only():
  assert checks.depth_trend_lost(_fit([2.05, 2.04, 2.05, 2.04, 2.05, 2.04])).passed
  assert checks.depth_trend_lost(_fit([2.0 + 0.8 / L ** 0.3 for L in DEPTHS])).passed
  assert not checks.depth_trend_lost(_fit([2.0 + 0.8 / L for L in DEPTHS])).passed


def test_the_looser_trend_takes_exponents_the_law_does_not():
  """alpha = 1.4: outside the law's [0.8, 1.25], inside the generalised models' trend."""
  fit = _fit([2.0 + 0.8 / L ** 1.4 for L in DEPTHS])
  assert not checks.depth_law(fit).passed
  assert checks.depth_trend(fit).passed


def test_a_floor_off_by_more_than_the_tolerance_misses_and_a_flat_curve_has_no_floor():
  off = 1 + 2 * checks.SOFTMAX_FLOOR_TOLERANCE
  assert not checks.softmax_floor(_fit([2.007 * off + 0.8 / L for L in DEPTHS])).passed
  flat = _fit([2.007] * 6)  # the deepest loss equals the paper's floor, but nothing is fitted
  assert not flat["resolved"]
  check = checks.softmax_floor(flat)
  assert not check.passed and "no floor L0 fitted" in check.text
  assert checks.softmax_floor(_fit([2.0] * 6, a=0.3)) is None  # no Table 1 entry


def test_table4_exponent_is_measured_in_its_own_standard_errors():
  rng = np.random.default_rng(0)
  losses = [(0.5 + 0.2 / L ** 0.97) * (1 + 1e-3 * rng.standard_normal()) for L in DEPTHS]
  fit = _fit(losses, a=0.25, b=0.25)
  check = checks.table4_exponent(fit, _window_runs(losses, a=0.25, b=0.25))
  distance = (fit["alpha"] - 0.97) / fit["alpha_se"]  # one model per depth: unweighted
  assert check.passed == (abs(distance) <= checks.EXPONENT_STANDARD_ERRORS)
  assert f"{distance:+.1f} se" in check.text
  assert checks.table4_exponent(_fit(losses, a=0.0, b=0.0)) is None


def test_level_off_uses_the_last_doubling_and_each_fields_tolerance():
  just_in = 1 + 0.9 * checks.SHARED_LEVEL_TOLERANCE
  just_out = 1 + 1.1 * checks.SHARED_LEVEL_TOLERANCE
  fit = _fit([2.0 + 0.5 / L for L in DEPTHS], shared=[np.nan, 1, 1.5, 1.8, 1.9, 1.9 * just_in],
             disagreement=[np.nan, 1, 1, 1, 1, 1 + 1.1 * checks.DISAGREEMENT_LEVEL_TOLERANCE])
  assert checks.levels_off(fit, "shared_error").passed
  assert not checks.levels_off(fit, "disagreement").passed
  fit["shared_error"][-1] = 1.9 * just_out
  assert not checks.levels_off(fit, "shared_error").passed
  fit["shared_error"] = [np.nan, 1.0]
  assert checks.levels_off(fit, "shared_error") is None


def test_header_counts_misses_by_claim():
  found = [checks.Check("depth law", True, "a"), checks.Check("depth law", False, "b"),
           checks.Check("clean run", False, "c")]
  assert checks.misses_by_claim(found) == {"depth law": (1, 2), "clean run": (1, 1)}
  assert checks.header_line(found).startswith("Checks: 2 of 3 miss")
  with pytest.raises(ValueError, match="allowed"):
    checks.Check("a claim nobody makes", True, "")


def test_clean_run_names_every_flagged_model():
  runs = [dict(model="softmax", depth=1, seed=0, flagged=True, flag_reason="stuck",
               diverged=False), dict(model="softmax", depth=2, seed=0, diverged=False)]
  check = checks.clean_run(runs)
  assert not check.passed and "L=1 seed 0 (stuck)" in check.text
  assert checks.clean_run(runs[1:]).passed
