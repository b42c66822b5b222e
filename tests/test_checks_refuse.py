"""Each verdict of inverse_depth.checks refuses a synthetic wrong curve and accepts a right one
(issue 43): an exponential in L, L^-0.6 and L^-1.6 fail the law; a drifting window reads "not
stationary"; a window that is not recorded reads "not testable"; a gap exponent with a large
error reads "unresolved"; Table 4 needs the law's R^2; a floor counts only on a lawful curve;
the identity from the forward output can fail."""

import numpy as np
import pytest

from inverse_depth import analysis, checks

DEPTHS = [1, 2, 4, 8, 16, 32, 64]
L0 = 2.007


def _runs(curve, seeds=3, evals=16, noise=2e-4, drift=None, flagged_depths=(), rng_seed=0,
          shared=None):
  """Run records of a constant-rate grid whose window evaluations scatter about `curve(L)`
  (relative noise `noise`); `drift(L)`: the second half of each window lower by this much."""
  rng = np.random.default_rng(rng_seed)
  runs = []
  for depth in DEPTHS:
    for seed in range(seeds):
      level = curve(depth) * (1 + noise * rng.standard_normal())
      window = level * (1 + noise * rng.standard_normal(evals))
      if drift is not None:
        window[evals // 2:] -= drift(depth)
        window[:evals // 2] += 0 * drift(depth)
      C = shared(depth) if shared else level - 0.1
      runs.append(dict(model="softmax", task="topk", k=2, a=0.0, b=0.0, depth=depth, seed=seed,
                       eval_loss=float(window.mean()), eval_loss_se=0.02 * level,
                       window_eval_losses=window.tolist(),
                       stationarity=analysis.stationarity(window, 3.0),
                       A=C + depth * (level - C) if depth > 1 else level,
                       C=C if depth > 1 else float("nan"), identity_residual=0.0,
                       diverged=False, flagged=depth in flagged_depths,
                       flag_reason="flagged" if depth in flagged_depths else ""))
  return runs


def _fit(runs, a=0.0, b=0.0, k=2):
  """The fit record of `runs` as analysis.fit_grid builds it (clean models only)."""
  clean = analysis.clean_runs(runs)
  depths, losses, loss_se = analysis.seed_means(clean, "eval_loss")
  _, shared, _ = analysis.seed_means(clean, "C")
  fit = dict(analysis.fit_depth_scaling(depths, losses), model="softmax", task="topk", k=k,
             a=a, b=b, loss_se=loss_se, shared_error=shared)
  for r in runs:
    r.update(a=a, b=b, k=k)
  return fit


def _right(L):
  return L0 + 0.7 / L


def test_a_right_curve_passes_the_drift_the_law_the_floor_and_table5():
  runs = _runs(_right, shared=lambda L: L0 - 0.5 * L ** -0.985)
  fit = _fit(runs)
  assert checks.window_drift(fit, runs).passed
  law = checks.depth_law(fit, runs)
  assert law.passed, law.text
  assert "L >= 1" in law.text and "L >= 2" in law.text
  assert checks.softmax_floor(fit, runs).passed
  gap = checks.table5_gap_exponent(fit, None, runs)
  assert gap.passed and gap.status == "", gap.text


@pytest.mark.parametrize("curve", [lambda L: L0 + 0.7 * np.exp(-L / 3),
                                   lambda L: L0 + 0.7 * L ** -0.6,
                                   lambda L: L0 + 0.7 * L ** -1.6],
                         ids=["exponential", "L^-0.6", "L^-1.6"])
def test_wrong_curves_fail_the_law_and_their_floor_is_not_counted(curve):
  runs = _runs(curve)
  fit = _fit(runs)
  law = checks.depth_law(fit, runs)
  assert not law.passed and law.status == "", law.text
  floor = checks.softmax_floor(fit, runs)
  assert not floor.passed


def test_a_wrong_l1_fails_the_law_even_when_its_models_are_flagged():
  """Right from L = 2 on; L = 1 far above the law. Flagging L = 1 is no reason to drop it."""
  curve = lambda L: _right(L) + (1.5 if L == 1 else 0.0)
  runs = _runs(curve, flagged_depths=(1,))
  fit = _fit(runs)
  law = checks.depth_law(fit, runs)
  assert not law.passed and "flagged" in law.text, law.text
  # a measured reason: L = 1's own window drifts by more than DRIFT_FRACTION of R_1 - L0
  drifting = _runs(curve, flagged_depths=(1,), drift=lambda L: 1.0 if L == 1 else 0.0)
  fit = _fit(drifting)
  fits = checks.law_fits(fit, drifting)
  assert checks.l1_drifts(fits, fits["from_2"])[0]
  assert checks.depth_law(fit, drifting).passed  # (its time error also down-weights L = 1)


def test_a_drifting_window_reads_not_stationary():
  """The deep depths' window halves differ by more than 0.3 of R_L - L0."""
  runs = _runs(_right, drift=lambda L: 0.5 * 0.7 / L if L >= 32 else 0.0)
  fit = _fit(runs)
  drift = checks.window_drift(fit, runs)
  assert not drift.passed and drift.status == "not stationary" and "L = 32, 64" in drift.text
  for check in (checks.depth_law(fit, runs), checks.softmax_floor(fit, runs),
                checks.table5_gap_exponent(fit, None, runs)):
    assert not check.passed and check.status == "not stationary", check.text
  # just under the tolerance it is stationary
  still = _runs(_right, drift=lambda L: 0.2 * 0.7 / L if L >= 32 else 0.0)
  assert checks.window_drift(_fit(still), still).passed


def test_runs_without_window_losses_are_not_testable_and_never_pass():
  runs = _runs(_right)
  for r in runs:
    del r["window_eval_losses"]
  fit = _fit(runs)
  drift = checks.window_drift(fit, runs)
  assert not drift.passed and drift.status == "not testable" and "L=64 seed 2" in drift.text
  law = checks.depth_law(fit, runs)
  assert not law.passed and law.status == "not testable"
  assert checks.depth_law(fit).status == "not testable"  # no run records at all


def test_a_gap_exponent_with_a_large_error_is_unresolved():
  noisy = {L: L0 - 0.5 * L ** -0.985 * np.exp(1.0 * (-1) ** i) for i, L in enumerate(DEPTHS)}
  runs = _runs(_right, shared=lambda L: noisy[L])
  fit = _fit(runs)
  gap = checks.gap_fit(fit, runs)
  assert gap["alpha_se"] > checks.GAP_ALPHA_SE_CAP
  check = checks.table5_gap_exponent(fit, None, runs)
  assert not check.passed and check.status == "unresolved", check.text


def test_a_gap_that_is_no_power_law_misses():
  """A broken power law: slope 0.5 to L = 8, then 1.7 (fitted 1.25 +- 0.15, under the cap)."""
  runs = _runs(_right, shared=lambda L: L0 - (0.5 * L ** -0.5 if L <= 8
                                              else 0.5 * 8 ** -0.5 * (8 / L) ** 1.7))
  fit = _fit(runs)
  check = checks.table5_gap_exponent(fit, None, runs)
  assert not checks.gap_fit(fit, runs)["power_law"]
  assert not check.passed and "not a power law" in check.text, check.text


def test_table4_needs_the_laws_r2_floor():
  """alpha within 2 se of the paper's 0.97, but R^2 below LAW_MIN_R2: refused."""
  wobble = {L: 1 + 0.025 * (-1) ** i for i, L in enumerate(DEPTHS)}
  runs = _runs(lambda L: (0.5 + 0.2 * L ** -0.97) * wobble[L])
  fit = _fit(runs, a=0.25, b=0.25)
  primary = checks.law_fits(fit, runs)["primary"]
  assert primary["r2"] < checks.LAW_MIN_R2
  assert abs(primary["alpha"] - 0.97) <= checks.EXPONENT_STANDARD_ERRORS * primary["alpha_se"]
  assert not checks.table4_exponent(fit, runs).passed
  clean = _runs(lambda L: 0.5 + 0.2 * L ** -0.97)
  assert checks.table4_exponent(_fit(clean, a=0.25, b=0.25), clean).passed


def test_the_identity_from_the_forward_output_can_fail():
  runs = _runs(_right)
  check = checks.identity_from_forward(runs)
  assert not check.passed and check.status == "not testable"
  for r in runs:
    r["forward_identity"] = dict(contexts=512, A=r["A"], C=r["C"])
    r["forward_eval_loss"] = (r["A"] if r["depth"] == 1
                              else r["C"] + (r["A"] - r["C"]) / r["depth"])
  assert checks.identity_from_forward(runs).passed
  runs[5]["forward_eval_loss"] *= 1 + 10 * checks.FORWARD_IDENTITY_TOLERANCE
  assert not checks.identity_from_forward(runs).passed


def test_weights_follow_the_standard_errors():
  """A point with a huge error barely moves the weighted fit; the unweighted one it moves."""
  depths = np.array(DEPTHS, float)
  losses = L0 + 0.7 / depths
  losses[-1] *= 1.02
  errors = np.full(depths.size, 1e-3)
  errors[-1] = 10.0
  weighted = analysis.fit_depth_scaling(depths, losses, standard_errors=errors)
  plain = analysis.fit_depth_scaling(depths, losses)
  assert abs(weighted["alpha"] - 1) < 0.02 < abs(plain["alpha"] - 1)
  assert set(weighted) == set(plain)


@pytest.mark.parametrize("curve,lawful", [
    (_right, True), (lambda L: L0 + 0.7 * L ** -0.6, False), (lambda L: L0 + 0.7 * L ** -1.6, False),
    (lambda L: L0 + 0.7 * np.exp(-L / 4), False)])
def test_the_law_at_infinity_refuses_a_wrong_curve(curve, lawful):
  """checks.extrapolated_law on extrapolated losses with 0.1% errors, on both depth sets."""
  fits = {}
  for first in (1, 2):
    depths = [L for L in DEPTHS if L >= first]
    losses = [curve(L) for L in depths]
    fits[first] = analysis.fit_depth_scaling(depths, losses,
                                             standard_errors=[1e-3 * x for x in losses])
  assert checks.extrapolated_law(fits[1], fits[2], "softmax").passed is lawful
