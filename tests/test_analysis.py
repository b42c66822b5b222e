"""The shared/disagreement identity and the depth-scaling fits (docs/analysis.md)."""

import itertools

import numpy as np
import pytest

from inverse_depth import analysis


def _random_layer_predictions(rng, depth, size=500):
  """Correlated layer predictors: a shared part plus layer-specific noise and bias."""
  target = rng.normal(size=size) * 2.0
  shared = target + rng.normal(size=size) * 0.7
  preds = shared[None] + rng.normal(size=(depth, size)) * rng.uniform(0.2, 1.5, (depth, 1))
  preds += rng.normal(size=(depth, 1)) * 0.3
  return preds, target


@pytest.mark.parametrize("depth", [2, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identity_and_brute_force_terms(depth, seed):
  rng = np.random.default_rng(seed)
  preds, target = _random_layer_predictions(rng, depth)
  parts = analysis.decompose(preds, target)
  errors = preds - target[None]
  L = depth
  # Each term from its definition.
  R = np.mean(errors.mean(axis=0) ** 2)
  A = np.mean([np.mean(errors[l] ** 2) for l in range(L)])
  C = sum(np.mean(errors[l] * errors[m]) for l, m in itertools.permutations(range(L), 2)) / (
      L * (L - 1))
  disagreement = sum(np.mean((errors[l] - errors[m]) ** 2)
                     for l, m in itertools.permutations(range(L), 2)) / (2 * L * (L - 1))
  np.testing.assert_allclose(parts["R"], R, rtol=1e-12)
  np.testing.assert_allclose(parts["A"], A, rtol=1e-12)
  np.testing.assert_allclose(parts["C"], C, rtol=1e-12)
  # The identity R = C + (A - C)/L and A - C = the pairwise disagreement.
  np.testing.assert_allclose(parts["R"], parts["C"] + (parts["A"] - parts["C"]) / L, rtol=1e-12)
  assert abs(parts["identity_residual"]) <= 1e-12 * parts["R"]
  np.testing.assert_allclose(parts["disagreement"], parts["A"] - parts["C"], rtol=1e-12)
  np.testing.assert_allclose(parts["A"] - parts["C"], disagreement, rtol=1e-10)
  assert parts["A"] >= parts["C"]
  assert parts["disagreement"] > 0  # layers differ here


def test_identity_on_float32_inputs_is_computed_in_float64():
  rng = np.random.default_rng(3)
  preds, target = _random_layer_predictions(rng, 4, size=2000)
  parts = analysis.decompose(preds.astype(np.float32), target.astype(np.float32))
  assert abs(parts["identity_residual"]) <= 1e-12 * parts["R"]


def test_identical_layers_have_zero_disagreement():
  rng = np.random.default_rng(4)
  f = rng.normal(size=100)
  target = rng.normal(size=100)
  parts = analysis.decompose(np.stack([f, f, f]), target)
  np.testing.assert_allclose(parts["A"], parts["C"], rtol=1e-12)
  np.testing.assert_allclose(parts["R"], parts["A"], rtol=1e-12)
  assert abs(parts["disagreement"]) < 1e-12


def test_single_layer_has_R_equal_A():
  rng = np.random.default_rng(5)
  preds, target = _random_layer_predictions(rng, 1)
  parts = analysis.decompose(preds, target)
  np.testing.assert_allclose(parts["R"], parts["A"], rtol=1e-14)
  np.testing.assert_allclose(parts["R"], np.mean((preds[0] - target) ** 2), rtol=1e-12)
  assert np.isnan(parts["C"]) and np.isnan(parts["disagreement"])


def test_beta_averaged_loss_means_clean_seeds_and_their_errors():
  """Seed mean over clean models at the depth; se = the seeds' mean se (they share the
  contexts); nan when no record has the field."""
  def record(depth, loss, se, **extra):
    return dict(depth=depth, diverged=False, beta_averaged_loss=loss, beta_averaged_loss_se=se,
                **extra)
  runs = [record(4, 2.0, 0.3), record(4, 2.2, 0.4), record(4, 9.0, 0.1, flagged=True),
          record(2, 5.0, 0.1), dict(depth=8, diverged=False, eval_loss=1.0)]
  mean, se = analysis.beta_averaged_loss(runs, 4)
  assert mean == pytest.approx(2.1) and se == pytest.approx(0.35)
  assert np.isnan(analysis.beta_averaged_loss(runs, 8)[0])
  fit = dict(depths=[2, 4, 8], losses=[5.1, 2.3, 1.0])
  assert analysis.plateau_loss(runs, fit, 4) == (pytest.approx(2.1), pytest.approx(0.35),
                                                 "averaged over beta")
  loss, se, measure = analysis.plateau_loss(runs, fit, 8)  # no beta-averaged record: the fit's
  assert (loss, measure) == (1.0, "held-out MSE") and np.isnan(se)
  assert np.isnan(analysis.plateau_loss(runs, fit, 16)[0])


# --- depth fits ------------------------------------------------------------------------------

DEPTHS = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256], float)


def _curve(L0, c, alpha, depths=DEPTHS):
  return L0 + c * depths ** (-alpha)


@pytest.mark.parametrize("L0,c,alpha", [(0.5, 2.0, 1.0), (2.0, 5.0, 0.8), (0.1, 1.0, 1.5),
                                        (1.0, 0.5, 0.5)])
def test_fit_recovers_noiseless_curve_with_floor(L0, c, alpha):
  fit = analysis.fit_depth_scaling(DEPTHS, _curve(L0, c, alpha), fit_floor=True)
  np.testing.assert_allclose([fit["L0"], fit["c"], fit["alpha"]], [L0, c, alpha], rtol=0.01)
  assert fit["r2"] > 0.9999
  assert fit["fit_floor"] is True
  np.testing.assert_allclose(fit["depths"], DEPTHS)


@pytest.mark.parametrize("c,alpha", [(3.0, 1.2), (1.0, 0.5), (10.0, 2.5)])
def test_fit_recovers_noiseless_power_law_without_floor(c, alpha):
  fit = analysis.fit_depth_scaling(DEPTHS[:10], _curve(0.0, c, alpha, DEPTHS[:10]),
                                   fit_floor=False)
  assert fit["L0"] == 0.0 and fit["L0_se"] == 0.0
  np.testing.assert_allclose([fit["c"], fit["alpha"]], [c, alpha], rtol=0.01)
  assert fit["r2"] > 0.9999


@pytest.mark.parametrize("noise_seed", [0, 1, 2, 3])
@pytest.mark.parametrize("L0,c,alpha,fit_floor", [(0.5, 2.0, 1.0, True), (0.0, 3.0, 1.2, False)])
def test_fit_on_noisy_curves_covers_truth_within_3_se(noise_seed, L0, c, alpha, fit_floor):
  """1% multiplicative lognormal noise on 16 depths; truth within 3 standard errors."""
  rng = np.random.default_rng(noise_seed)
  losses = _curve(L0, c, alpha) * np.exp(0.01 * rng.normal(size=DEPTHS.size))
  fit = analysis.fit_depth_scaling(DEPTHS, losses, fit_floor=fit_floor)
  names = ("L0", "c", "alpha") if fit_floor else ("c", "alpha")
  truth = dict(L0=L0, c=c, alpha=alpha)
  for name in names:
    se = fit[name + "_se"]
    assert np.isfinite(se) and se > 0, (name, se)
    assert abs(fit[name] - truth[name]) <= 3 * se, (name, fit[name], truth[name], se)
  assert fit["r2"] > 0.99


def test_fit_standard_errors_shrink_with_less_noise():
  rng = np.random.default_rng(7)
  z = rng.normal(size=DEPTHS.size)
  loud = analysis.fit_depth_scaling(DEPTHS, _curve(0.5, 2.0, 1.0) * np.exp(0.05 * z))
  quiet = analysis.fit_depth_scaling(DEPTHS, _curve(0.5, 2.0, 1.0) * np.exp(0.005 * z))
  assert quiet["alpha_se"] < loud["alpha_se"] / 3


def test_fit_without_spare_degrees_of_freedom_has_nan_se():
  fit = analysis.fit_depth_scaling([1, 2, 4], _curve(0.5, 2.0, 1.0, np.array([1., 2., 4.])))
  assert np.isnan(fit["alpha_se"])
  np.testing.assert_allclose(fit["alpha"], 1.0, rtol=0.05)


def test_fit_with_alpha_held_recovers_the_paper_law_and_tells_a_different_one_apart():
  """Held at the true exponent the fit recovers L0 and c with alpha_se = 0; held at 1 on a
  curve with alpha = 0.3 it fits worse (lower R^2) than the free fit, and the free fit
  finds 0.3."""
  held = analysis.fit_depth_scaling(DEPTHS, _curve(1.9, 0.1, 1.0), alpha=1.0)
  np.testing.assert_allclose([held["L0"], held["c"], held["alpha"]], [1.9, 0.1, 1.0],
                             rtol=1e-4)
  assert held["alpha_se"] == 0.0 and held["alpha_held"] and held["r2"] > 0.9999
  shallow = _curve(1.85, 0.15, 0.3)
  free = analysis.fit_depth_scaling(DEPTHS, shallow)
  paper_law = analysis.fit_depth_scaling(DEPTHS, shallow, alpha=1.0)
  np.testing.assert_allclose(free["alpha"], 0.3, rtol=0.01)
  assert not free["alpha_held"] and paper_law["r2"] < free["r2"] - 0.05
  power_law = analysis.fit_depth_scaling(DEPTHS, _curve(0.0, 3.0, 1.2), fit_floor=False,
                                         alpha=1.2)
  np.testing.assert_allclose(power_law["c"], 3.0, rtol=1e-4)
  assert power_law["L0"] == 0.0 and power_law["L0_se"] == 0.0
  with pytest.raises(ValueError, match="alpha"):
    analysis.fit_depth_scaling(DEPTHS, shallow, alpha=0.0)


def test_fit_rejects_bad_input():
  with pytest.raises(ValueError):
    analysis.fit_depth_scaling([1, 2, 4], [1.0, 0.0, 0.5])
  with pytest.raises(ValueError):
    analysis.fit_depth_scaling([1, 2], [1.0, 0.5, 0.2])
  with pytest.raises(ValueError):
    analysis.fit_depth_scaling([1], [1.0])


@pytest.mark.parametrize("L0,c,alpha", [(2.0, 1.5, 1.0), (0.8, 0.3, 0.7)])
def test_gap_fit_recovers_alpha(L0, c, alpha):
  depths = np.array([1, 2, 4, 8, 16, 32], float)
  shared = L0 - c * depths ** (-alpha)
  shared[0] = np.nan  # C_1 is undefined
  fit = analysis.fit_gap(depths, shared, L0)
  np.testing.assert_allclose([fit["alpha"], fit["c"]], [alpha, c], rtol=1e-9)
  assert fit["dropped_depths"] == [1.0]
  assert fit["depths"] == [2.0, 4.0, 8.0, 16.0, 32.0]
  np.testing.assert_allclose(fit["r2"], 1.0, atol=1e-12)


def test_gap_fit_with_noise_and_nonpositive_gaps():
  rng = np.random.default_rng(0)
  depths = np.array([2, 3, 4, 6, 8, 12, 16, 24, 32, 64], float)
  gaps = 0.9 * depths ** -1.0 * np.exp(0.02 * rng.normal(size=depths.size))
  shared = 1.0 - gaps
  shared[-1] = 1.1  # C above the floor: dropped
  fit = analysis.fit_gap(depths, shared, 1.0)
  assert fit["dropped_depths"] == [64.0]
  assert abs(fit["alpha"] - 1.0) <= 3 * fit["alpha_se"] and fit["alpha_se"] > 0
  too_few = analysis.fit_gap(np.array([1.0, 2.0]), np.array([np.nan, 0.5]), 1.0)
  assert np.isnan(too_few["alpha"])


def test_gap_fit_error_carries_the_error_of_L0():
  """The deep gaps are small, so alpha leans on L0: with L0 known to +- L0_se the error of
  alpha includes the refits at L0 -+ L0_se; where L0 - L0_se leaves fewer than two
  positive gaps, alpha is not determined (infinite error)."""
  depths = np.array([1, 2, 4, 8, 16, 32], float)
  shared = 2.0 - 0.2 * depths ** -1.0
  shared[0] = np.nan
  exact = analysis.fit_gap(depths, shared, 2.0)
  assert exact["alpha_se"] == pytest.approx(0.0, abs=1e-9)
  uncertain = analysis.fit_gap(depths, shared, 2.0, L0_se=0.002)
  low, high = (analysis.fit_gap(depths, shared, L0)["alpha"] for L0 in (1.998, 2.002))
  assert uncertain["alpha_at_L0_minus_plus_se"] == pytest.approx([low, high])
  assert low > 1.0 > high  # a lower floor makes the last gaps close faster
  assert uncertain["alpha_se"] == pytest.approx(max(low - 1.0, 1.0 - high), rel=1e-6)
  assert uncertain["alpha"] == pytest.approx(1.0) and uncertain["dropped_depths"] == [1.0]
  lost = analysis.fit_gap(depths, shared, 2.0, L0_se=0.07)  # L0 - se = 1.93 < C_4 = 1.95
  assert np.isinf(lost["alpha_se"]) and lost["alpha"] == pytest.approx(1.0)
  assert np.isnan(analysis.fit_gap(depths, shared, 2.0, L0_se=float("nan"))["alpha_se"])


def test_flat_curve_fit_says_so_in_words():
  """A flat depth curve determines no c and alpha: the fit is marked unresolved and its
  verdict says so, instead of infinite standard errors reaching the report."""
  fit = analysis.fit_depth_scaling([1, 2, 4, 8, 16], [2.0, 2.0, 2.0, 2.0, 2.0])
  assert not fit["resolved"]
  assert "no depth dependence resolved" in fit["verdict"]


def test_inverse_depth_curve_fit_is_resolved():
  depths = np.array([1, 2, 4, 8, 16, 32, 64])
  fit = analysis.fit_depth_scaling(depths, 2.0 + 0.3 / depths)
  assert fit["resolved"]
  assert fit["L0"] == pytest.approx(2.0, rel=1e-3) and fit["alpha"] == pytest.approx(1.0, rel=1e-2)


def test_window_fits_recover_a_law_that_sets_in_late():
  """Shallow depths off the law pull the full-range fit away; the windows that start where
  the law holds recover its L0 and alpha."""
  depths = np.array([1, 2, 4, 8, 16, 32, 64, 128], np.float64)
  law = 1.9 + 0.5 * depths ** -0.6
  losses = np.where(depths < 8, 2.0 + 0.002 * np.log2(8 / depths), law)
  windows = analysis.fit_depth_windows(depths[::-1], losses[::-1], min_depths=4)
  assert [w["smallest_depth"] for w in windows] == [1, 2, 4, 8, 16]
  assert [len(w["depths"]) for w in windows] == [8, 7, 6, 5, 4]
  full, late = windows[0], windows[3]
  assert abs(full["L0"] - 1.9) > 0.02
  assert late["L0"] == pytest.approx(1.9, abs=1e-4)
  assert late["alpha"] == pytest.approx(0.6, abs=1e-3)


def _record(depth, seed, eval_loss, **extra):
  return dict(model="softmax", task="topk", k=2, a=0.0, b=0.0, depth=depth, seed=seed,
              eval_loss=eval_loss, steps=extra.pop("steps", 100), diverged=False, **extra)


def test_longer_training_changes_pairs_models_and_resolves_only_agreed_changes():
  """Depth 2 falls by 0.1 on every seed (resolved); depth 4 moves by +-0.05 (not resolved);
  a model diverged in either run, or present in one run only, leaves the pairing."""
  short = [_record(2, s, 2.0 + 0.01 * s) for s in range(3)]
  short += [_record(4, s, 1.9) for s in range(3)] + [_record(8, 0, 1.8)]
  long = [_record(2, s, 1.9 + 0.01 * s + 0.001 * s, steps=200) for s in range(3)]
  long += [_record(4, 0, 1.95, steps=200), _record(4, 1, 1.85, steps=200),
           _record(4, 2, 5.0, steps=200, flagged=True)]
  by_depth = {c["depth"]: c for c in analysis.longer_training_changes(short, long)}
  assert sorted(by_depth) == [2, 4]  # depth 8 has no long partner
  two, four = by_depth[2], by_depth[4]
  assert two["seeds"] == [0, 1, 2] and two["long_steps"] == [200] * 3
  np.testing.assert_allclose(two["changes"], [-0.1, -0.099, -0.098])
  assert two["mean_change"] == pytest.approx(-0.099)
  assert two["relative_change"] == pytest.approx(-0.099 / 2.01)
  assert two["resolved"] and two["num_lower"] == 3
  assert two["t_critical"] == pytest.approx(4.3027, abs=1e-4)  # Student t, 2 dof, 95%
  assert four["seeds"] == [0, 1]  # the flagged seed-2 model is left out
  np.testing.assert_allclose(four["changes"], [0.05, -0.05])
  assert four["mean_change"] == pytest.approx(0.0) and not four["resolved"]
  assert four["num_lower"] == 1
  assert analysis.unpaired_models(short, long) == (2, 0)  # depth 8; depth-4 seed 2


def test_longer_training_needs_the_seeds_to_agree_beyond_student_t():
  """Three seeds that all fall, by 1, 2 and 3: mean 2, se 0.577, t = 3.46 < 4.30 (2 dof),
  so not resolved; four seeds at 1, 2, 3, 2: t = 4.9 > 3.18 (3 dof), resolved. One seed is
  never resolved."""
  def changes(deltas):
    short = [_record(2, s, 2.0) for s in range(len(deltas))]
    long = [_record(2, s, 2.0 - d) for s, d in enumerate(deltas)]
    return analysis.longer_training_changes(short, long)[0]

  assert not changes([1.0, 2.0, 3.0])["resolved"]
  assert changes([1.0, 2.0, 3.0, 2.0])["resolved"]
  single = changes([1.0])
  assert not single["resolved"] and np.isnan(single["mean_change_se"])


def test_longer_training_refuses_a_model_recorded_twice():
  runs = [_record(2, 0, 2.0), _record(2, 0, 2.1)]
  with pytest.raises(ValueError, match="twice"):
    analysis.longer_training_changes(runs, [_record(2, 0, 1.9)])


def test_sign_test_matches_the_binomial_tail():
  assert analysis.sign_test(3, 3) == pytest.approx(0.25)
  assert analysis.sign_test(21, 21) == pytest.approx(2 * 0.5 ** 21)
  assert analysis.sign_test(5, 10) == pytest.approx(1.0)
