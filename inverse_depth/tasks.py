"""In-context regression tasks (docs/tasks.md).

One *context* is P labelled inputs and one query. Per context a Haar-random
rotation O sets Sigma = O diag(lambda) O^T and Omega = O diag(omega) O^T with
lambda_k = k^-a, omega_k = k^-b. Then beta ~ N(0, Omega), x_i ~ N(0, Sigma),
y_i = beta^T x_i. Every sampler is a pure function of a PRNG key, so the same
key gives the same batch on any backend, and it jits and vmaps (the exponents
may be traced, so spectra can later become a vmapped grid axis).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

TASKS = ("top1", "topk")


class Batch(NamedTuple):
  """A batch of contexts; leading axis B is the context index."""
  x_context_BPD: jax.Array  # context inputs x_1..x_P
  y_context_BP: jax.Array  # context labels y_i = beta^T x_i
  x_test_BD: jax.Array  # the query
  target_B: jax.Array  # y* (copied label for top1, mean of top-k labels for topk)
  selected_mean_BD: jax.Array  # t: mean of the inputs whose labels make y*
  beta_BD: jax.Array  # the context's regression vector


def power_spectrum(d: int, exponent) -> jax.Array:
  """lambda_k = k^-exponent for k = 1..d (so lambda_1 = 1)."""
  return jnp.arange(1, d + 1, dtype=jnp.float32) ** (-jnp.asarray(exponent, jnp.float32))


def haar_orthogonal(key: jax.Array, d: int) -> jax.Array:
  """A d x d Haar-random orthogonal matrix O (Stewart's algorithm).

  O = H_1 ... H_d D is the Q factor, sign-corrected, of the Householder QR of a
  Gaussian matrix: H_k reflects an independent Gaussian vector of length
  d - k + 1 onto the k-th axis and D = diag(-sign of each vector's first entry).
  The d reflections are applied to the identity (O(d^3), no factorisation);
  rotating P vectors is then one (P, d) x (d, d) product.
  """
  gaussian_DD = jax.random.normal(key, (d, d))
  reflectors_DD = jnp.tril(gaussian_DD).T  # row k: a Gaussian vector on coordinates k..d-1
  signs_D = jnp.where(jnp.diagonal(gaussian_DD) >= 0, 1.0, -1.0)
  reflectors_DD = reflectors_DD + jnp.diag(signs_D * jnp.linalg.norm(reflectors_DD, axis=1))
  transposed_DD = jnp.diag(-signs_D)  # O^T, built up one reflection at a time

  def reflect(i, transposed_DD):
    v_D = reflectors_DD[d - 1 - i]
    return transposed_DD - jnp.outer(transposed_DD @ v_D, v_D) * (2.0 / (v_D @ v_D))

  return jax.lax.fori_loop(0, d, reflect, transposed_DD).T


def top_k_indices(x_context_PD: jax.Array, x_test_D: jax.Array, k: int) -> jax.Array:
  """Indices of the k context inputs with the largest cosine similarity to x_test."""
  cosine_P = (x_context_PD @ x_test_D) / (
      jnp.linalg.norm(x_context_PD, axis=-1) * jnp.linalg.norm(x_test_D))
  return jax.lax.top_k(cosine_P, k)[1]


def selected_indices(batch: Batch, k: int) -> jax.Array:
  """Indices of the k context inputs most cosine-similar to the query, per context: [B, k].
  On the top-1 task (k = 1) this is the copied input (its cosine is 1)."""
  return jax.vmap(lambda x, q: top_k_indices(x, q, k))(batch.x_context_BPD, batch.x_test_BD)


def _context_keys(key: jax.Array) -> jax.Array:
  """Keys of one context: rotation, beta, inputs, query choice (in that order)."""
  return jax.random.split(key, 4)


def context_rotation(key: jax.Array, d: int) -> jax.Array:
  """The rotation O of the context drawn from `key` (the one `sample_context` uses)."""
  return haar_orthogonal(_context_keys(key)[0], d)


def sample_context(key: jax.Array, *, d: int, P: int, a, b, task: str, k: int) -> Batch:
  """One context (no leading batch axis) of the `top1` or `topk` task."""
  if task not in TASKS:
    raise ValueError(f"task={task!r}; allowed: {TASKS}")
  key_rot, key_beta, key_x, key_test = _context_keys(key)
  sqrt_lambda_D = jnp.sqrt(power_spectrum(d, a))
  sqrt_omega_D = jnp.sqrt(power_spectrum(d, b))
  eigenbasis_QD = jnp.concatenate([  # x_1..x_P, a fresh query, beta; before the rotation
      sqrt_lambda_D * jax.random.normal(key_x, (P + 1, d)),
      sqrt_omega_D * jax.random.normal(key_beta, (1, d))])
  rotated_QD = eigenbasis_QD @ haar_orthogonal(key_rot, d).T  # rows O v
  x_context_PD, fresh_test_D, beta_D = rotated_QD[:P], rotated_QD[P], rotated_QD[P + 1]
  y_context_P = x_context_PD @ beta_D
  if task == "top1":
    j = jax.random.randint(key_test, (), 0, P)
    x_test_D = x_context_PD[j]
    selected_mean_D = x_test_D
    target = y_context_P[j]
  else:
    x_test_D = fresh_test_D
    selected = top_k_indices(x_context_PD, x_test_D, k)
    selected_mean_D = x_context_PD[selected].mean(axis=0)
    target = y_context_P[selected].mean()
  return Batch(x_context_PD, y_context_P, x_test_D, target, selected_mean_D, beta_D)


def sample_contexts(keys: jax.Array, *, d: int, P: int, a, b, task: str, k: int) -> Batch:
  """One context per key (leading axis of `keys`)."""
  return jax.vmap(lambda kk: sample_context(kk, d=d, P=P, a=a, b=b, task=task, k=k))(keys)


def sample_batch(key: jax.Array, batch_size: int, *, d: int, P: int, a, b, task: str,
                 k: int) -> Batch:
  """`batch_size` independent contexts, each with its own rotation and beta: context i
  is drawn from split(key, batch_size)[i], so any slice of the batch can be drawn on its
  own with `sample_contexts` (large evaluation sets are drawn chunk by chunk)."""
  keys = jax.random.split(key, batch_size)
  return sample_contexts(keys, d=d, P=P, a=a, b=b, task=task, k=k)
