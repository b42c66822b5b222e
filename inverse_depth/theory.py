"""Linear-attention theory (SPEC section 3).

Floor of the difficult task: a linear-attention model of depth L predicts
beta^T Phi_L(q) w with Phi_L(q) = [Sigma q, ..., Sigma^L q] and weights w shared
by all contexts (the P -> infinity covariance polynomial). With t the mean of
the selected inputs (so y* = beta^T t) and beta ~ N(0, Omega), the best w gives

    R_irr = T - h^T G^+ h,   T = E[t^T Omega t],  h = E[Phi^T Omega t],  G = E[Phi^T Omega Phi],

estimated here by Monte Carlo over contexts.
"""

import jax
import jax.numpy as jnp
import numpy as np

from inverse_depth import tasks


def _moments(key: jax.Array, num: int, *, d: int, P: int, a, b, k: int, depth: int, task: str):
  """Monte Carlo sums of (T, h, G) over `num` contexts."""
  batch = tasks.sample_batch(key, num, d=d, P=P, a=a, b=b, task=task, k=k)
  rotations_BDD = jax.vmap(lambda kk: tasks.context_rotation(kk, d))(jax.random.split(key, num))
  lam_D, omega_D = tasks.power_spectrum(d, a), tasks.power_spectrum(d, b)
  # In each context's eigenbasis: Sigma = diag(lam), Omega = diag(omega).
  q_BD = jnp.einsum("bji,bj->bi", rotations_BDD, batch.x_test_BD)
  t_BD = jnp.einsum("bji,bj->bi", rotations_BDD, batch.selected_mean_BD)
  powers_LD = lam_D[None, :] ** jnp.arange(1, depth + 1)[:, None]
  phi_BLD = powers_LD[None] * q_BD[:, None, :]  # rows: Sigma^r q
  T = jnp.sum(omega_D * t_BD ** 2)
  h_L = jnp.einsum("bld,d,bd->l", phi_BLD, omega_D, t_BD)
  G_LL = jnp.einsum("bld,d,bmd->lm", phi_BLD, omega_D, phi_BLD)
  return T, h_L, G_LL


def linear_floor(key: jax.Array, *, d: int, P: int, a: float, b: float, k: int, depth: int,
                 num_samples: int = 100_000, task: str = "topk", chunk_size: int = 10_000) -> dict:
  """Monte Carlo estimate of T - h^T G^+ h for a depth-`depth` covariance polynomial.

  Returns dict(floor, T, h, G) as float64 numpy values (moments are per-context means).
  """
  T, h, G = 0.0, np.zeros(depth), np.zeros((depth, depth))
  moments = jax.jit(_moments, static_argnames=("num", "d", "P", "k", "depth", "task"))
  done = 0
  for i, start in enumerate(range(0, num_samples, chunk_size)):
    num = min(chunk_size, num_samples - start)
    T_i, h_i, G_i = moments(jax.random.fold_in(key, i), num, d=d, P=P, a=a, b=b, k=k,
                            depth=depth, task=task)
    T, h, G = T + float(T_i), h + np.asarray(h_i, np.float64), G + np.asarray(G_i, np.float64)
    done += num
  T, h, G = T / done, h / done, G / done
  floor = T - h @ np.linalg.pinv(G) @ h
  return dict(floor=float(floor), T=float(T), h=h, G=G)
