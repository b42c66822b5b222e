"""Tests of the theory estimators: the softmax bound (SPEC section 5) and the linear floor
(SPEC section 3).

Small sizes (d <= 8, P <= 32, a few thousand contexts) keep each test to seconds; the
sizes shared across tests let them share compilations.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import tasks, theory

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
  lam_D = omega_D = np.ones(4)
  coefficients_D = (np.linalg.pinv(G) @ h) @ lam_D[None, :] ** np.arange(1, 3)[:, None]
  q_BD, t_BD = (np.asarray(x, np.float64) for x in theory._eigenbasis_query_and_mean(
      jax.random.fold_in(jax.random.key(0), 0), 2000, d=4, P=16, a=0.0, b=0.0, k=2, task="topk"))
  residuals_B = theory._floor_residuals(q_BD, t_BD, coefficients_D, omega_D)
  assert np.mean(residuals_B) == pytest.approx(result["floor"], rel=1e-9)
  assert residuals_B.std(ddof=1) / np.sqrt(2000) == pytest.approx(result["floor_se"], rel=1e-9)
