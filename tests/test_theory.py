"""Tests of the theory estimators: the softmax bound (docs/theory.md) and the linear floor
(docs/theory.md).

Small sizes (d <= 8, P <= 32, a few thousand contexts) keep each test to seconds; the
sizes shared across tests let them share compilations.
"""

import decimal
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.special

from inverse_depth import tasks, theory
from inverse_depth.grid import GridLayout
from inverse_depth.models import linear

SIZES = dict(d=8, P=32, k=2)
GRID = np.geomspace(1.0, 100.0, 8)


def _bound(num_samples, *, a=0.0, b=0.0, temperatures=GRID, chunk_size=2000, seed=0, **kwargs):
  return theory.softmax_bound(jax.random.key(seed), **{**SIZES, **kwargs}, a=a, b=b,
                              num_samples=num_samples, temperatures=temperatures,
                              chunk_size=chunk_size)


def test_softmax_bound_mixture_at_most_single():
  """The NNLS mixture contains the single layer (gain >= 0) on the same contexts."""
  result = _bound(2000, a=0.5)
  assert result["gain"] > 0
  assert result["mixture"] <= result["single"] + 1e-9
  assert result["difference"] == pytest.approx(result["single"] - result["mixture"])
  assert result["difference"] >= -1e-9 and result["difference_se"] > 0
  assert min(result["weights"]) >= 0 and len(result["weights"]) == len(GRID)
  assert result["temperature"] in result["temperatures"]
  assert 0 < result["single"] < result["target_second_moment"]
  assert result["num_samples"] == 2000


def test_softmax_bound_one_temperature_mixture_is_single():
  result = _bound(2000, temperatures=[10.0])
  assert result["temperature"] == 10.0
  assert result["weights"] == pytest.approx([result["gain"]], rel=1e-9)
  assert result["mixture"] == pytest.approx(result["single"], rel=1e-9)
  assert result["difference"] == pytest.approx(0.0, abs=1e-9)


def test_sparse_mixture_losses_match_nnls_on_every_support():
  """R_L (at most L nonnegative components) equals the least scipy NNLS loss over every
  support of size <= L; with L = J it is the full NNLS mixture."""
  rng = np.random.default_rng(0)
  readouts_NJ = rng.normal(size=(200, 5)) + rng.normal(size=(200, 1))
  target_N = readouts_NJ @ np.array([0.7, -0.4, 0.0, 0.5, 0.2]) + 0.3 * rng.normal(size=200)

  def nnls_loss(support):
    weights, _ = scipy.optimize.nnls(readouts_NJ[:, support], target_N)
    return np.mean((readouts_NJ[:, support] @ weights - target_N) ** 2)

  found = theory.sparse_mixture_losses(readouts_NJ, target_N, max_layers=4)
  for size, best in enumerate(found, start=1):
    brute = min(nnls_loss(list(support)) for s in range(1, size + 1)
                for support in itertools.combinations(range(5), s))
    assert best["loss"] == pytest.approx(brute, rel=1e-9)
    assert len(best["indices"]) <= size and min(best["weights"]) >= 0
  assert found[0]["loss"] > found[2]["loss"]  # more components can help here
  assert found[-1]["loss"] == pytest.approx(nnls_loss(list(range(5))), rel=1e-9)


def test_depth_optima_survive_a_repeated_readout_and_a_negative_gain():
  """A readout given twice (a singular Gram block) changes no optimum; a target that every
  readout anti-predicts leaves the nonnegative mixture at w = 0 (loss T) while the average's
  shared gain turns negative; depths beyond the exhaustive limit are refused by name."""
  rng = np.random.default_rng(2)
  readouts_NJ = rng.normal(size=(200, 3)) + 1.0
  target_N = readouts_NJ @ np.array([0.5, 0.3, 0.0]) + 0.1 * rng.normal(size=200)
  repeated_NJ = np.concatenate([readouts_NJ, readouts_NJ[:, :1]], axis=1)
  for optima in (theory.sparse_mixture_losses, theory.equal_weight_averages):
    once, twice = optima(readouts_NJ, target_N, 3), optima(repeated_NJ, target_N, 3)
    assert [e["loss"] for e in twice] == pytest.approx([e["loss"] for e in once], rel=1e-9)

  mixtures = theory.sparse_mixture_losses(readouts_NJ, -target_N, 2)
  assert mixtures[-1]["indices"] == []
  assert mixtures[-1]["loss"] == pytest.approx(np.mean(target_N ** 2))
  averages = theory.equal_weight_averages(readouts_NJ, -target_N, 2)
  assert averages[-1]["weights"][0] < 0 and averages[-1]["loss"] < mixtures[-1]["loss"]
  with pytest.raises(ValueError, match="max_layers=5: allowed 1..4"):
    theory.equal_weight_averages(readouts_NJ, target_N, 5)


def test_equal_weight_averages_match_direct_enumeration():
  """R_L equals the least loss of g (1/L) sum_l m_{j_l} over every multiset, with the gain
  fitted by least squares on the explicit average; repeating each of L layers twice cannot
  lose (R_2L <= R_L)."""
  rng = np.random.default_rng(1)
  readouts_NJ = rng.normal(size=(300, 6)) + rng.normal(size=(300, 1))
  target_N = readouts_NJ @ np.array([0.9, 0.0, 0.6, -0.2, 0.0, 0.3]) + 0.2 * rng.normal(size=300)

  def direct_loss(multiset):
    average_N = readouts_NJ[:, list(multiset)].mean(axis=1)
    gain = (average_N @ target_N) / (average_N @ average_N)
    return np.mean((gain * average_N - target_N) ** 2)

  found = theory.equal_weight_averages(readouts_NJ, target_N, max_layers=4)
  for L, best in enumerate(found, start=1):
    brute = min(direct_loss(multiset)
                for multiset in itertools.combinations_with_replacement(range(6), L))
    assert best["loss"] == pytest.approx(brute, rel=1e-9)
    assert len(best["indices"]) == L
    average_N = readouts_NJ[:, best["indices"]].mean(axis=1)
    assert L * np.array(best["weights"]) == pytest.approx(
        (average_N @ target_N) / (average_N @ average_N), rel=1e-9)  # every weight g / L
    assert direct_loss(best["indices"]) == pytest.approx(best["loss"], rel=1e-9)
  assert found[1]["loss"] <= found[0]["loss"] + 1e-12
  assert found[3]["loss"] <= found[1]["loss"] + 1e-12
  assert found[0]["loss"] > found[2]["loss"]  # averaging helps on this problem


def test_softmax_bound_by_layers_runs_from_single_to_mixture():
  """At L = 1 both depth curves are the single layer; the free-gain mixture falls with L;
  the equal-weight average (a special mixture, gain > 0 here) never beats it; both stay at
  or above the full mixture on the same contexts (excess >= 0)."""
  result = _bound(2000, a=0.5)
  averages, mixtures = result["average_by_layers"], result["mixture_by_layers"]
  assert len(averages) == len(mixtures) == 3
  for by_layers in (averages, mixtures):
    assert by_layers[0]["loss"] == pytest.approx(result["single"], rel=1e-9)
    assert by_layers[0]["temperatures"] == [result["temperature"]]
    for entry in by_layers:
      assert entry["excess"] == pytest.approx(entry["loss"] - result["mixture"], abs=1e-9)
      assert entry["excess"] >= -1e-9
  losses = [entry["loss"] for entry in mixtures]
  assert all(later <= earlier + 1e-12 for earlier, later in zip(losses, losses[1:]))
  for average, mixture in zip(averages, mixtures):
    assert average["loss"] >= mixture["loss"] - 1e-9


def test_softmax_bound_single_matches_brute_force():
  """Recompute the single-layer loss in float64 NumPy on the same contexts (chunk i is drawn
  from fold_in(key, i)): m = softmax(tau cos) . y at the returned (tau, g); the returned tau
  is the grid argmin of E[y*^2] - E[y* m]^2 / E[m^2]."""
  result = _bound(4000, a=0.5, b=0.25, chunk_size=2000, seed=3)
  # Jitted like theory's sampler, so the compilation is shared (same batches either way).
  sample_batch = jax.jit(tasks.sample_batch, static_argnames=("batch_size", "d", "P", "task", "k"))
  batches = [jax.tree.map(lambda x: np.asarray(x, np.float64),
                          sample_batch(jax.random.fold_in(jax.random.key(3), i), 2000, **SIZES,
                                       a=0.5, b=0.25, task="topk"))
             for i in range(2)]
  x_BPD = np.concatenate([batch.x_context_BPD for batch in batches])
  x_test_BD = np.concatenate([batch.x_test_BD for batch in batches])
  y_BP = np.concatenate([batch.y_context_BP for batch in batches])
  target_B = np.concatenate([batch.target_B for batch in batches])
  cosine_BP = np.einsum("bpd,bd->bp", x_BPD, x_test_BD) / (
      np.linalg.norm(x_BPD, axis=-1) * np.linalg.norm(x_test_BD, axis=-1)[:, None])

  def readout_B(temperature):
    logits_BP = temperature * cosine_BP
    weights_BP = np.exp(logits_BP - logits_BP.max(axis=-1, keepdims=True))
    return np.sum(weights_BP * y_BP, axis=-1) / weights_BP.sum(axis=-1)

  m_B = readout_B(result["temperature"])
  np.testing.assert_allclose(np.mean((result["gain"] * m_B - target_B) ** 2), result["single"],
                             rtol=1e-4)
  np.testing.assert_allclose(np.mean(target_B ** 2), result["target_second_moment"], rtol=1e-5)
  m_BJ = np.stack([readout_B(tau) for tau in GRID], axis=1)
  closed_form_J = np.mean(target_B ** 2) - np.mean(target_B[:, None] * m_BJ, axis=0) ** 2 / (
      np.mean(m_BJ ** 2, axis=0))
  assert GRID[np.argmin(closed_form_J)] == pytest.approx(result["temperature"])
  assert np.min(closed_form_J) == pytest.approx(result["single"], rel=1e-4)


def test_softmax_bound_standard_error_shrinks_like_inverse_sqrt_n():
  small, large = _bound(4000, seed=1), _bound(16000, seed=2)
  assert 1.6 < small["single_se"] / large["single_se"] < 2.5
  assert 1.6 < small["mixture_se"] / large["mixture_se"] < 2.5


def test_softmax_bound_one_sharp_layer_solves_copy_task():
  """top1: x_test is a context input, so a high temperature attends to its copy alone."""
  result = _bound(1000, task="top1", temperatures=[1.0, 10.0, 1000.0], chunk_size=1000)
  assert result["temperature"] == 1000.0
  assert result["gain"] == pytest.approx(1.0, abs=0.01)
  assert result["single"] < 1e-3 * result["target_second_moment"]


def _floor(num_samples, *, a, b, depth, chunk_size=2000, seed=0):
  return theory.linear_floor(jax.random.key(seed), d=4, P=16, a=a, b=b, k=2, depth=depth,
                             num_samples=num_samples, chunk_size=chunk_size)


def test_linear_floor_standard_error_and_covariance_moments():
  """floor_se shrinks like 1/sqrt(n); G_rs = E[q^T Sigma^r Omega Sigma^s q] =
  tr(Omega Sigma^(r+s+1)) since the fresh query is N(0, Sigma) (tolerance 5 standard
  errors: Var(q_d^2) = 2 lam_d^2)."""
  small = _floor(2000, a=0.5, b=0.5, depth=2, seed=1)
  large = _floor(8000, a=0.5, b=0.5, depth=2, seed=2)
  assert small["floor_se"] > 0 and large["floor_se"] > 0
  assert 1.6 < small["floor_se"] / large["floor_se"] < 2.5
  assert 0 < large["floor"] < large["T"]
  lam, omega = np.arange(1, 5) ** -0.5, np.arange(1, 5) ** -0.5
  for r in (1, 2):
    for s in (1, 2):
      expected = np.sum(omega * lam ** (r + s + 1))
      se = np.sqrt(np.sum((omega * lam ** (r + s)) ** 2 * 2 * lam ** 2) / 8000)
      assert abs(large["G"][r - 1, s - 1] - expected) < 5 * se


def test_linear_floor_isotropic_and_residual_mean():
  """a = b = 0: Sigma = Omega = I, so every row of Phi is q, G is rank one and the floor is
  T - h_1^2 / G_11 at any depth. The mean per-context residual at w = G^+ h is the floor."""
  result = _floor(2000, a=0.0, b=0.0, depth=2)
  h, G = result["h"], result["G"]
  np.testing.assert_allclose(h, h[0])
  np.testing.assert_allclose(G, G[0, 0])
  assert result["floor"] == pytest.approx(result["T"] - h[0] ** 2 / G[0, 0], rel=1e-9)
  assert result["floor"] == pytest.approx(_floor(2000, a=0.0, b=0.0, depth=1)["floor"], rel=1e-6)
  assert abs(G[0, 0] - 4) < 5 * np.sqrt(2 * 4 / 2000)  # E|q|^2 = d, Var |q|^2 = 2d
  t_BD, q_BD, _ = (np.asarray(x, np.float64) for x in theory._eigenbasis_features(
      jax.random.fold_in(jax.random.key(0), 0), 2000, d=4, P=16, a=0.0, b=0.0, k=2,
      task="topk", depth=2))
  residuals_B = theory._floor_residuals(t_BD, np.stack([q_BD, q_BD], axis=1),
                                        np.linalg.pinv(G) @ h, np.ones(4))
  assert np.mean(residuals_B) == pytest.approx(result["floor"], rel=1e-9)
  assert residuals_B.std(ddof=1) / np.sqrt(2000) == pytest.approx(result["floor_se"], rel=1e-9)


@pytest.mark.slow  # 10-35 s: kept out of `make test` for its 15-minute budget
def test_context_floor_is_least_squares_on_explicit_sample_covariance_powers():
  """context_floor = min_w mean_n (t - sum_r w_r S^r x)^T Omega (t - sum_r w_r S^r x) over the
  same contexts, with S = X^T X / P, Omega = O diag(omega) O^T built explicitly per context
  in the original frame (np.linalg.matrix_power, lstsq on Omega^(1/2)-weighted rows)."""
  d, P, depth, n, a, b = 4, 16, 3, 500, 0.5, 1.0
  key = jax.random.key(3)
  result = theory.linear_floor(key, d=d, P=P, a=a, b=b, k=2, depth=depth, num_samples=n,
                               chunk_size=n)
  chunk_key = jax.random.fold_in(key, 0)
  batch = tasks.sample_batch(chunk_key, n, d=d, P=P, a=a, b=b, task="topk", k=2)
  omega_D = np.arange(1, d + 1, dtype=np.float64) ** -b
  design, targets = [], []
  for i, context_key in enumerate(jax.random.split(chunk_key, n)):
    O = np.asarray(tasks.context_rotation(context_key, d), np.float64)
    root_omega = np.diag(np.sqrt(omega_D)) @ O.T  # Omega = root_omega^T root_omega
    X = np.asarray(batch.x_context_BPD[i], np.float64)
    S = X.T @ X / P
    x = np.asarray(batch.x_test_BD[i], np.float64)
    design.append(np.stack([root_omega @ np.linalg.matrix_power(S, r) @ x
                            for r in range(1, depth + 1)], axis=1))
    targets.append(root_omega @ np.asarray(batch.selected_mean_BD[i], np.float64))
  design, targets = np.concatenate(design), np.concatenate(targets)
  w, *_ = np.linalg.lstsq(design, targets, rcond=None)
  brute_force = np.sum((targets - design @ w) ** 2) / n
  assert result["context_floor"] == pytest.approx(brute_force, rel=1e-4)
  assert 0 < result["context_floor_se"] < result["context_floor"]


@pytest.mark.slow  # 10-35 s: kept out of `make test` for its 15-minute budget
def test_context_floor_approaches_the_population_floor_as_P_grows():
  """S -> Sigma as P -> infinity at fixed k. With k = 8 of P = 32 the powers S^r q lean on
  the selected inputs and the context floor is >10% below the population one; at P = 1024
  the two agree to 1%."""
  def relative_gap(P):
    result = theory.linear_floor(jax.random.key(4), d=4, P=P, a=0.5, b=0.5, k=8, depth=2,
                                 num_samples=4000, chunk_size=1000)
    return result["context_floor"] / result["floor"] - 1
  assert relative_gap(32) < -0.1
  assert abs(relative_gap(1024)) < 0.01


# Linear theory of the easy task.


def test_zeta_values_and_invalid_a():
  """Table 2's constrained exponents; a <= 0 is refused, naming a."""
  assert theory.zeta(2, 1) == 1.0 and theory.zeta(1, 2) == 2.0 and theory.zeta(0.5, 2) == 3.0
  assert theory.zeta(2, 0.5) == pytest.approx(0.75)
  for a in (0.0, -1.0):
    with pytest.raises(ValueError, match="a="):
      theory.zeta(a, 1.0)
  with pytest.raises(ValueError, match="a \\+ b"):
    theory.jacobi_optimal_risk(a=1.0, b=0.0, depth=2)


def test_residual_risk_is_sum_of_modewise_terms_and_repeated_update():
  """modewise = omega_k lam_k r_k^2 and sums to residual_risk; the repeated update is
  r = (1 - lam)^L, whose p has coefficients p_j = (-1)^j binom(L, j + 1)."""
  d, a, b, depth = 6, 1.5, 0.5, 5
  lam, omega = np.arange(1, d + 1) ** -a, np.arange(1, d + 1) ** -b
  residual = np.linspace(-1, 1, d)
  modewise = theory.modewise_risk(residual, a=a, b=b)
  np.testing.assert_allclose(modewise, omega * lam * residual ** 2, rtol=1e-14)
  assert theory.residual_risk(residual, a=a, b=b) == pytest.approx(modewise.sum(), rel=1e-14)
  j = np.arange(depth)
  coefficients = (-1.0) ** j * np.array([math.comb(depth, int(i) + 1) for i in j])
  np.testing.assert_allclose(theory.residual_polynomial(coefficients, lam), (1 - lam) ** depth,
                             atol=1e-14)
  assert theory.repeated_update_risk(d=d, a=a, b=b, depth=depth) == pytest.approx(
      np.sum(omega * lam * (1 - lam) ** (2 * depth)), rel=1e-14)
  assert theory.repeated_update_risk(d=d, a=a, b=b, depth=depth, step=0.5) == pytest.approx(
      np.sum(omega * lam * (1 - 0.5 * lam) ** (2 * depth)), rel=1e-14)


@pytest.mark.parametrize("a,b", [(2.0, 1.0), (1.0, 2.0)])
def test_repeated_update_risk_decays_like_depth_to_minus_zeta(a, b):
  """Log-log slope of R(L) between L = 64 and 1024 at d = 10^6 (measured: -0.997, -1.992)."""
  risks = [theory.repeated_update_risk(d=10 ** 6, a=a, b=b, depth=depth) for depth in (64, 1024)]
  slope = np.log(risks[1] / risks[0]) / np.log(16)
  assert slope == pytest.approx(-theory.zeta(a, b), rel=0.02)


def _stieltjes_optimum(a, b, d, depth, digits=250):
  """Reference for optimal_polynomial_risk by another algorithm, in `digits`-digit decimals:
  orthonormal polynomials phi_n of the discrete weight omega_k lam_k from the three-term
  (Stieltjes) recursion, evaluated at lam_k and at 0; the optimum is K(lam, 0) / K(0, 0) with
  risk 1 / K(0, 0), K(x, y) = sum_{n <= depth} phi_n(x) phi_n(y). (In float64 this recursion is
  wrong by tens of percent here; it needs ~250 digits at d = 2000, depth = 64.)"""
  with decimal.localcontext() as context:
    context.prec = digits
    ks = [decimal.Decimal(k) for k in range(1, d + 1)]
    lam = np.array([k ** -decimal.Decimal(a) for k in ks], dtype=object)
    weight = np.array([k ** -decimal.Decimal(a + b) for k in ks], dtype=object)
    phi = np.full(d, 1 / np.sum(weight).sqrt(), dtype=object)
    previous, at_zero, previous_at_zero, beta = np.zeros(d, dtype=object), phi[0], 0, 0
    kernel, kernel_at_zero = phi * at_zero, at_zero ** 2
    for _ in range(depth):
      alpha = np.sum(weight * lam * phi * phi)
      step = (lam - alpha) * phi - beta * previous
      step_at_zero = -alpha * at_zero - beta * previous_at_zero
      beta = np.sum(weight * step * step).sqrt()
      previous, phi = phi, step / beta
      previous_at_zero, at_zero = at_zero, step_at_zero / beta
      kernel, kernel_at_zero = kernel + phi * at_zero, kernel_at_zero + at_zero ** 2
    return float(1 / kernel_at_zero), np.array([float(x) for x in kernel / kernel_at_zero])


@pytest.mark.parametrize("a,b,d,depth", [(2.0, 1.0, 2000, 64), (1.0, 2.0, 400, 48)])
def test_optimal_polynomial_matches_high_precision_reference(a, b, d, depth):
  """Float64 Arnoldi against the 250-digit Stieltjes kernel polynomial (measured agreement:
  risk 2e-15 and 2e-9 relative (the second risk is 1e-18), residuals 1e-14)."""
  result = theory.optimal_polynomial_risk(d=d, a=a, b=b, depth=depth)
  risk, residual = _stieltjes_optimum(a, b, d, depth)
  assert result["risk"] == pytest.approx(risk, rel=1e-6)
  np.testing.assert_allclose(result["residual"], residual, atol=1e-12)


def test_optimal_polynomial_low_depth_closed_forms():
  """Depth 0: r = 1. Depth 1: r = 1 - c lam with c = sum w lam / sum w lam^2 (w = omega lam)."""
  d, a, b = 50, 1.5, 0.5
  lam, w = np.arange(1, d + 1) ** -a, np.arange(1, d + 1) ** -(a + b)
  zero = theory.optimal_polynomial_risk(d=d, a=a, b=b, depth=0)
  np.testing.assert_array_equal(zero["residual"], 1.0)
  assert zero["risk"] == pytest.approx(w.sum(), rel=1e-14)
  one = theory.optimal_polynomial_risk(d=d, a=a, b=b, depth=1)
  np.testing.assert_allclose(one["residual"], 1 - (w @ lam) / (w @ lam ** 2) * lam, atol=1e-14)
  assert one["risk"] == pytest.approx(w.sum() - (w @ lam) ** 2 / (w @ lam ** 2), rel=1e-12)
  assert theory.optimal_polynomial_risk(d=8, a=a, b=b, depth=8)["risk"] < 1e-25
  flat = theory.optimal_polynomial_risk(d=d, a=0.0, b=b, depth=8)  # one distinct eigenvalue:
  assert flat["risk"] < 1e-25 and np.all(np.isfinite(flat["residual"]))  # r = 1 - lam nulls it


@pytest.mark.parametrize("a,b", [(2.0, 1.0), (1.0, 2.0)])
def test_optimal_polynomial_below_repeated_update_and_decreasing(a, b):
  """(1 - lam)^L is one of the polynomials minimised over, and deeper sets contain shallower."""
  risks = []
  for depth in (1, 2, 4, 8, 16, 32, 64):
    result = theory.optimal_polynomial_risk(d=2000, a=a, b=b, depth=depth)
    assert result["risk"] == pytest.approx(
        theory.modewise_risk(result["residual"], a=a, b=b).sum(), rel=1e-12)
    assert result["risk"] <= theory.repeated_update_risk(d=2000, a=a, b=b, depth=depth)
    risks.append(result["risk"])
  assert np.all(np.diff(risks) < 0) and risks[-1] > 0


@pytest.mark.parametrize("a,b,depth", [(2.0, 1.0, 8), (1.0, 2.0, 16), (2.0, 0.5, 12)])
def test_jacobi_optimum_equals_direct_least_squares_fit(a, b, depth):
  """Minimise int_0^1 lam^(zeta-1) r^2 over r = 1 - lam p(lam), deg p < depth, by weighted least
  squares (Legendre basis on [0, 1]) at Gauss-Jacobi nodes, exact for r^2: x = 1 - 2 lam,
  int_0^1 lam^(zeta-1) f dlam = 2^-zeta sum_i w_i f(lam_i) for roots_jacobi(., zeta - 1, 0)."""
  zeta = theory.zeta(a, b)
  x, weights = scipy.special.roots_jacobi(depth + 8, zeta - 1, 0.0)
  lam = (1 - x) / 2
  design = lam[:, None] * np.polynomial.legendre.legvander(2 * lam - 1, depth - 1)
  root_weights = np.sqrt(weights)
  p_coefficients = np.linalg.lstsq(root_weights[:, None] * design, root_weights, rcond=None)[0]
  grid = np.linspace(0, 1, 201)
  fitted = 1 - grid * np.polynomial.legendre.legval(2 * grid - 1, p_coefficients)
  np.testing.assert_allclose(theory.jacobi_optimal_residual(grid, a=a, b=b, depth=depth), fitted,
                             atol=1e-8)
  fitted_risk = 2.0 ** -zeta * np.sum(weights * (1 - design @ p_coefficients) ** 2) / a
  assert theory.jacobi_optimal_risk(a=a, b=b, depth=depth) == pytest.approx(fitted_risk, rel=1e-8)


@pytest.mark.parametrize("a,b", [(2.0, 1.0), (1.0, 2.0), (2.0, 0.5)])
def test_jacobi_optimal_risk_decays_like_depth_to_minus_two_zeta(a, b):
  """Log-log slope between depth 16 and 64 (measured: -1.93, -3.81, -1.46 for 2 zeta = 2, 4,
  1.5); depth 0 is r = 1, (1/a) int_0^1 lam^(zeta-1) dlam = 1 / (a zeta)."""
  risks = [theory.jacobi_optimal_risk(a=a, b=b, depth=depth) for depth in (16, 64)]
  slope = np.log(risks[1] / risks[0]) / np.log(4)
  assert slope == pytest.approx(-2 * theory.zeta(a, b), rel=0.1)
  assert theory.jacobi_optimal_risk(a=a, b=b, depth=0) == pytest.approx(
      1 / (a * theory.zeta(a, b)), rel=1e-14)


def _random_linear_model(rng, *, d, N, depth):
  """Gaussian model leaves (W_x, W_y, W_v, W_o) and layer leaves (W_q, W_k) of one linear model."""
  model = dict(W_x=rng.normal(size=(N, d)) / np.sqrt(d), W_y=rng.normal(size=N),
               W_v=rng.normal(size=(N, N)) / np.sqrt(N), W_o=rng.normal(size=N) / np.sqrt(N))
  layers = dict(W_q=rng.normal(size=(depth, N, N)) / np.sqrt(N),
                W_k=rng.normal(size=(depth, N, N)) / np.sqrt(N))
  return model, layers


def test_covariance_polynomial_reproduces_isotropic_linear_model():
  """With W_x = sqrt(N/d) (orthonormal columns), W_q^l = s_l I, W_k^l = I, every K_l = s_l (N/d) I
  exactly, and the model's prediction (mean of its layer predictors, float32) is
  q^T p(S_hat) U y / P (float64) on random contexts, for depths 1, 2, 3 packed in one grid."""
  d, N, P, batch_size, depths = 4, 6, 16, 8, (1, 2, 3)
  rng = np.random.default_rng(0)
  models, layers = [], []
  for depth in depths:
    model, _ = _random_linear_model(rng, d=d, N=N, depth=depth)
    model["W_x"] = np.linalg.qr(rng.normal(size=(N, d)))[0] * np.sqrt(N / d)
    scales = depth * d * np.linspace(0.3, 0.8, depth)  # kappa_l / (L N) = s_l / (L d)
    models.append(model)
    layers.append(dict(W_q=scales[:, None, None] * np.eye(N),
                       W_k=np.broadcast_to(np.eye(N), (depth, N, N))))
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), {
      "model": jax.tree.map(lambda *xs: np.stack(xs), *models),
      "layer": jax.tree.map(lambda *xs: np.concatenate(xs), *layers)})
  U_BPD = rng.normal(size=(batch_size, P, d)) * np.arange(1, d + 1) ** -0.25
  q_BD = U_BPD[:, 0]  # the top-1 task's query is a copy of a context input
  y_BP = np.einsum("bpd,bd->bp", U_BPD, rng.normal(size=(batch_size, d)))
  batch = tasks.Batch(*(jnp.asarray(x, jnp.float32)
                        for x in (U_BPD, y_BP, q_BD, y_BP[:, 0], q_BD, q_BD)))
  layout = GridLayout(depths)
  layer_predictions = np.asarray(
      jax.jit(linear.layer_predictions, static_argnums=2)(params, batch, layout))
  covariance_BDD = np.einsum("bpd,bpe->bde", U_BPD, U_BPD) / P
  for m, depth in enumerate(depths):
    result = theory.covariance_polynomial(models[m], layers[m])
    assert result["coefficients"].shape == result["kappa"].shape == (depth,)
    assert np.all(result["anisotropy"] < 1e-12)
    np.testing.assert_allclose(result["kappa"], depth * N * np.linspace(0.3, 0.8, depth),
                               rtol=1e-12)
    vector_BD = np.einsum("bp,bpd->bd", y_BP, U_BPD) / P
    polynomial_BD = np.zeros_like(vector_BD)  # p(S_hat) U y / P
    for coefficient in result["coefficients"]:
      polynomial_BD += coefficient * vector_BD
      vector_BD = np.einsum("bde,be->bd", covariance_BDD, vector_BD)
    expected_B = np.einsum("bd,bd->b", q_BD, polynomial_BD)
    np.testing.assert_allclose(layer_predictions[layout.layer_slice(m)].mean(axis=0), expected_B,
                               rtol=1e-4, atol=1e-4 * np.abs(expected_B).max())


def test_covariance_polynomial_anisotropy_of_random_model():
  """A Gaussian model's K_l is far from isotropic, and the measure says so."""
  model, layers = _random_linear_model(np.random.default_rng(1), d=4, N=6, depth=3)
  result = theory.covariance_polynomial(model, layers)
  assert np.all(result["anisotropy"] > 0.3) and np.all(result["anisotropy"] <= 1)


def test_sgd_excess_to_leading_order_is_the_quadratic_excess_at_small_rates():
  """eta_eff tr(Sigma) / (4 B) is the small-rate limit of the exact excess, whatever H."""
  hessian = np.array([[1.0, 0.2], [0.2, 0.3]])
  covariance = np.array([[2.0, -0.5], [-0.5, 5.0]])
  for rate, tolerance in ((1e-4, 1e-3), (1e-3, 1e-2)):
    exact = theory.sgd_quadratic_excess(hessian, covariance, learning_rate=rate, momentum=0.9,
                                        batch_size=4)
    leading = theory.sgd_stationary_excess(np.trace(covariance), learning_rate=rate,
                                           momentum=0.9, batch_size=4)
    assert leading == pytest.approx(exact, rel=tolerance)
  with pytest.raises(ValueError, match="unstable"):  # heavy ball needs eta h < 2 (1 + mu)
    theory.sgd_quadratic_excess(hessian, covariance, learning_rate=4.0, momentum=0.9,
                                batch_size=4)


def test_sgd_quadratic_excess_is_what_optax_sgd_reaches():
  """optax.sgd with momentum on a noisy quadratic: the time-averaged excess over 100,000 steps
  matches the Lyapunov solution (about 9,000 relaxation times: ~2% Monte Carlo error)."""
  import optax
  hessian = jnp.array([[1.0, 0.2], [0.2, 0.3]])
  covariance = np.array([[2.0, -0.5], [-0.5, 5.0]])
  rate, momentum, batch = 0.03, 0.9, 4
  noise_factor = jnp.asarray(np.linalg.cholesky(covariance / batch), jnp.float32)
  optimizer = optax.sgd(rate, momentum=momentum)

  def step(carry, key):
    delta, opt_state = carry
    gradient = hessian @ delta + noise_factor @ jax.random.normal(key, (2,))
    updates, opt_state = optimizer.update(gradient, opt_state)
    delta = optax.apply_updates(delta, updates)
    return (delta, opt_state), 0.5 * delta @ hessian @ delta

  delta = jnp.zeros(2)
  _, excess = jax.lax.scan(step, (delta, optimizer.init(delta)),
                           jax.random.split(jax.random.key(0), 100_000))
  measured = float(jnp.mean(excess[10_000:]))
  exact = theory.sgd_quadratic_excess(np.asarray(hessian), covariance, learning_rate=rate,
                                      momentum=momentum, batch_size=batch)
  assert measured == pytest.approx(exact, rel=0.06)
  assert exact != pytest.approx(theory.sgd_stationary_excess(
      np.trace(covariance), learning_rate=rate, momentum=0.0, batch_size=batch), rel=0.5)
