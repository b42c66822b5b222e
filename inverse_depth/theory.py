"""Attention theory: the linear floor (SPEC section 3) and the softmax bound (SPEC section 5).

Floor of the difficult task: a linear-attention model of depth L predicts
beta^T Phi_L(q) w with Phi_L(q) = [Sigma q, ..., Sigma^L q] and weights w shared
by all contexts (the P -> infinity covariance polynomial). With t the mean of
the selected inputs (so y* = beta^T t) and beta ~ N(0, Omega), the best w gives

    R_irr = T - h^T G^+ h,   T = E[t^T Omega t],  h = E[Phi^T Omega t],  G = E[Phi^T Omega Phi],

estimated here by Monte Carlo over contexts.

Softmax bound: one attention layer that weights the context tokens by
p = softmax_i(tau cos(x_i, x_test)) and predicts g p.y; the best (tau, g), and
the best nonnegative mixture sum_j w_j p_{tau_j}.y over a temperature grid, also
by Monte Carlo over contexts drawn as in training.

Monte Carlo chunk i of every estimator here uses the key fold_in(key, i).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from inverse_depth import tasks

DEFAULT_TEMPERATURES = np.geomspace(1.0, 200.0, 48)


def _chunks(key: jax.Array, num_samples: int, chunk_size: int):
  """(chunk key, chunk size) pairs covering `num_samples` contexts."""
  for i, start in enumerate(range(0, num_samples, chunk_size)):
    yield jax.random.fold_in(key, i), min(chunk_size, num_samples - start)


@functools.partial(jax.jit, static_argnames=("num", "d", "P", "k", "task"))
def _eigenbasis_query_and_mean(key: jax.Array, num: int, *, d: int, P: int, a, b, k: int,
                               task: str):
  """q = O^T x_test and t = O^T (mean of the selected inputs) for `num` contexts from
  `tasks.sample_batch(key, num, ...)`, each in its own eigenbasis (Sigma = diag(lam),
  Omega = diag(omega)): shapes (num, d), (num, d)."""
  batch = tasks.sample_batch(key, num, d=d, P=P, a=a, b=b, task=task, k=k)
  rotations_BDD = jax.vmap(lambda kk: tasks.context_rotation(kk, d))(jax.random.split(key, num))
  q_BD = jnp.einsum("bji,bj->bi", rotations_BDD, batch.x_test_BD)
  t_BD = jnp.einsum("bji,bj->bi", rotations_BDD, batch.selected_mean_BD)
  return q_BD, t_BD


def _floor_residuals(q_BD: np.ndarray, t_BD: np.ndarray, coefficients_D: np.ndarray,
                     omega_D: np.ndarray) -> np.ndarray:
  """Per-context r = (t - Phi^T w)^T Omega (t - Phi^T w), where Phi^T w = sum_r w_r Sigma^r q
  = coefficients * q in the eigenbasis (coefficients_d = sum_r w_r lam_d^r)."""
  return np.sum(omega_D * (t_BD - coefficients_D * q_BD) ** 2, axis=-1)


def linear_floor(key: jax.Array, *, d: int, P: int, a: float, b: float, k: int, depth: int,
                 num_samples: int = 100_000, task: str = "topk", chunk_size: int = 10_000) -> dict:
  """Monte Carlo estimate of T - h^T G^+ h for a depth-`depth` covariance polynomial.

  In each context's eigenbasis Phi rows are lam^r * q (r = 1..depth), so
    T = E[sum_d omega_d t_d^2],  h_r = sum_d lam_d^r omega_d E[q_d t_d],
    G_rs = sum_d lam_d^(r+s) omega_d E[q_d^2],
  accumulated in float64. floor_se = std(r) / sqrt(n) over the per-context residuals
  r = (t - Phi^T w)^T Omega (t - Phi^T w) at w = G^+ h, from a second pass over the same
  chunk keys (mean(r) = floor).

  Returns dict(floor, floor_se, T, h, G) as float64 numpy values (moments are
  per-context means).
  """
  sizes = dict(d=d, P=P, k=k, task=task)
  lam_D = np.asarray(tasks.power_spectrum(d, a), np.float64)
  omega_D = np.asarray(tasks.power_spectrum(d, b), np.float64)
  powers_LD = lam_D[None, :] ** np.arange(1, depth + 1)[:, None]
  T, h, G = 0.0, np.zeros(depth), np.zeros((depth, depth))
  done = 0
  for chunk_key, num in _chunks(key, num_samples, chunk_size):
    q_BD, t_BD = (np.asarray(x, np.float64)
                  for x in _eigenbasis_query_and_mean(chunk_key, num, a=a, b=b, **sizes))
    T += float(np.sum(omega_D * t_BD ** 2))
    h += powers_LD @ (omega_D * np.sum(q_BD * t_BD, axis=0))
    G += (powers_LD * omega_D * np.sum(q_BD ** 2, axis=0)) @ powers_LD.T
    done += num
  T, h, G = T / done, h / done, G / done
  w_L = np.linalg.pinv(G) @ h
  floor = T - h @ w_L
  coefficients_D = w_L @ powers_LD
  residuals_N = np.concatenate([
      _floor_residuals(*(np.asarray(x, np.float64)
                         for x in _eigenbasis_query_and_mean(chunk_key, num, a=a, b=b, **sizes)),
                       coefficients_D, omega_D)
      for chunk_key, num in _chunks(key, num_samples, chunk_size)])
  floor_se = residuals_N.std(ddof=1) / np.sqrt(done)
  return dict(floor=float(floor), floor_se=float(floor_se), T=float(T), h=h, G=G)


# Jitted once per (batch_size, d, P, task, k); the spectra exponents are traced.
_sample_batch = jax.jit(tasks.sample_batch, static_argnames=("batch_size", "d", "P", "task", "k"))


@jax.jit
def _softmax_readouts(x_context_BPD: jax.Array, y_context_BP: jax.Array, x_test_BD: jax.Array,
                      temperatures_J: jax.Array) -> jax.Array:
  """m[b, j] = softmax_i(tau_j cos(x_i, x_test)) . y, cos = x_i.x_test / (|x_i| |x_test|):
  shape (B, J)."""
  cosine_BP = jnp.einsum("bpd,bd->bp", x_context_BPD, x_test_BD) / (
      jnp.linalg.norm(x_context_BPD, axis=-1) * jnp.linalg.norm(x_test_BD, axis=-1)[:, None])

  def readout_B(temperature):
    return jnp.sum(jax.nn.softmax(temperature * cosine_BP, axis=-1) * y_context_BP, axis=-1)

  # lax.map over temperatures keeps a few (B, P) attention arrays in memory at a time.
  return jax.lax.map(readout_B, temperatures_J, batch_size=8).T


def softmax_bound(key: jax.Array, *, d: int, P: int, a: float, b: float, k: int,
                  num_samples: int = 200_000, task: str = "topk", temperatures=None,
                  chunk_size: int = 10_000) -> dict:
  """Monte Carlo loss of the best single cosine-softmax attention layer and of the
  best nonnegative mixture of such layers over a temperature grid.

  With m_tau = softmax_i(tau cos(x_i, x_test)) . y on contexts drawn as in training:
    single  = min_tau min_g E[(g m_tau - y*)^2] = min_tau E[y*^2] - E[y* m_tau]^2 / E[m_tau^2]
              (gain g = E[y* m_tau] / E[m_tau^2]),
    mixture = min_{w >= 0} E[(sum_j w_j m_{tau_j} - y*)^2]   (scipy NNLS on the n x J matrix).
  Both are minimised and evaluated on the same n contexts (in-sample, so
  mixture <= single whenever the single gain is >= 0). The *_se entries are
  std / sqrt(n) of the per-context squared errors; difference_se is the paired one
  of e_single^2 - e_mixture^2. Default grid: DEFAULT_TEMPERATURES (geomspace(1, 200, 48)).

  Returns dict(single, single_se, temperature, gain, mixture, mixture_se, weights,
  difference, difference_se, temperatures, num_samples, target_second_moment).
  """
  temperatures_J = np.asarray(DEFAULT_TEMPERATURES if temperatures is None else temperatures,
                              np.float64).reshape(-1)
  readouts, targets = [], []
  for chunk_key, num in _chunks(key, num_samples, chunk_size):
    batch = _sample_batch(chunk_key, num, d=d, P=P, a=a, b=b, task=task, k=k)
    m_BJ = _softmax_readouts(batch.x_context_BPD, batch.y_context_BP, batch.x_test_BD,
                             jnp.asarray(temperatures_J, jnp.float32))
    readouts.append(np.asarray(m_BJ, np.float64))
    targets.append(np.asarray(batch.target_B, np.float64))
  m_NJ, target_N = np.concatenate(readouts), np.concatenate(targets)
  n = len(target_N)

  def standard_error(values_N):
    return float(values_N.std(ddof=1) / np.sqrt(n))

  target_second_moment = float(np.mean(target_N ** 2))
  cross_J = target_N @ m_NJ / n  # E[y* m_tau]
  readout_second_moment_J = np.einsum("nj,nj->j", m_NJ, m_NJ) / n  # E[m_tau^2]
  best = int(np.argmin(target_second_moment - cross_J ** 2 / readout_second_moment_J))
  gain = cross_J[best] / readout_second_moment_J[best]
  single_error2_N = (gain * m_NJ[:, best] - target_N) ** 2

  weights_J, _ = scipy.optimize.nnls(m_NJ, target_N, maxiter=50 * m_NJ.shape[1])
  mixture_error2_N = (m_NJ @ weights_J - target_N) ** 2

  single, mixture = float(single_error2_N.mean()), float(mixture_error2_N.mean())
  return dict(single=single, single_se=standard_error(single_error2_N),
              temperature=float(temperatures_J[best]), gain=float(gain),
              mixture=mixture, mixture_se=standard_error(mixture_error2_N),
              weights=weights_J.tolist(), difference=single - mixture,
              difference_se=standard_error(single_error2_N - mixture_error2_N),
              temperatures=temperatures_J.tolist(), num_samples=n,
              target_second_moment=target_second_moment)
