"""Tests of the data pipeline (SPEC section 1): spectra, rotations, labels, top-k targets.

Statistical tests use fixed keys (so they are deterministic) and tolerances of
about 4-5 standard errors of the statistic they check, stated next to each.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import tasks


def _np(batch):
  return jax.tree.map(lambda x: np.asarray(x, np.float64), batch)


def test_power_spectrum():
  np.testing.assert_allclose(np.asarray(tasks.power_spectrum(4, 1.0)), [1, 1 / 2, 1 / 3, 1 / 4],
                             rtol=1e-6)
  np.testing.assert_allclose(np.asarray(tasks.power_spectrum(3, 0.0)), [1, 1, 1])
  np.testing.assert_allclose(np.asarray(tasks.power_spectrum(5, 0.5)),
                             np.arange(1, 6) ** -0.5, rtol=1e-6)


def test_haar_orthogonal_is_orthogonal_and_varies_with_key():
  q1 = np.asarray(tasks.haar_orthogonal(jax.random.key(0), 5), np.float64)
  q2 = np.asarray(tasks.haar_orthogonal(jax.random.key(1), 5), np.float64)
  np.testing.assert_allclose(q1 @ q1.T, np.eye(5), atol=1e-5)
  assert not np.allclose(q1, q2)


def test_haar_orthogonal_first_moments():
  """Under the Haar measure E[O_ij^2] = 1/d for every entry and E[O] = 0.

  A QR without the sign fix gives R with a positive diagonal only by convention;
  a biased sign would show up as a nonzero mean of the diagonal. 4000 draws,
  d = 3: the standard error of each mean of O_ij is sqrt(1/3/4000) ~ 0.009.
  """
  keys = jax.random.split(jax.random.key(7), 4000)
  qs = np.asarray(jax.vmap(lambda k: tasks.haar_orthogonal(k, 3))(keys), np.float64)
  np.testing.assert_allclose(qs.mean(axis=0), 0.0, atol=0.045)
  np.testing.assert_allclose((qs ** 2).mean(axis=0), 1 / 3, atol=0.03)


# Most tests share one shape (B contexts, d = 4, P = 32) so that eager sampling
# reuses the per-operation compilations.
B, D, P = 16, 4, 32
SHAPE = dict(d=D, P=P, a=0.5, b=0.25)


@pytest.fixture(scope="module")
def topk_batch():
  return tasks.sample_batch(jax.random.key(9), B, task="topk", k=2, **SHAPE)


@pytest.fixture(scope="module")
def top1_batch():
  return tasks.sample_batch(jax.random.key(2), B, task="top1", k=1, **SHAPE)


@pytest.mark.parametrize("task", ["top1", "topk"])
def test_labels_are_exactly_linear_in_inputs(task, topk_batch, top1_batch):
  batch = _np(topk_batch if task == "topk" else top1_batch)
  np.testing.assert_allclose(np.einsum("bpd,bd->bp", batch.x_context_BPD, batch.beta_BD),
                             batch.y_context_BP, rtol=1e-5, atol=1e-5)
  assert batch.x_context_BPD.shape == (B, P, D)
  assert batch.x_test_BD.shape == (B, D)
  assert batch.target_B.shape == (B,)
  assert batch.selected_mean_BD.shape == (B, D)


def test_within_context_input_covariance_has_the_spectrum():
  """One context, P = 20000 inputs from N(0, O diag(k^-a) O^T), d = 4, a = 1.

  The eigenvalues of the empirical covariance are the spectrum up to a relative
  standard error of about sqrt(2/P) ~ 1%; we allow 5%.
  """
  ctx = _np(tasks.sample_context(jax.random.key(0), d=4, P=20000, a=1.0, b=0.5, task="topk",
                                 k=2))
  x = ctx.x_context_BPD
  cov = x.T @ x / x.shape[0]
  eigenvalues = np.sort(np.linalg.eigvalsh(cov))[::-1]
  np.testing.assert_allclose(eigenvalues, np.arange(1, 5) ** -1.0, rtol=0.05)
  np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=0.03)
  # The eigenvectors are a random rotation, not the coordinate axes.
  _, vectors = np.linalg.eigh(cov)
  assert np.max(np.abs(np.abs(vectors).max(axis=0))) < 0.995


def test_beta_shares_the_rotation_and_has_the_omega_spectrum():
  """beta ~ N(0, O diag(omega) O^T) with the *same* O as Sigma.

  Each context has its own O, so pooling beta over contexts only sees
  (tr Omega / d) I. Instead, per context we estimate the eigenvectors v_k of
  Sigma from its P = 1024 inputs (eigenvector error ~ 0.11 rad for the closest
  pair, lambda = 1/3 and 1/4, which mixes omega_3 and omega_4 by ~1%), and
  average (v_k . beta)^2 over 1000 contexts: this estimates omega_k = k^-b with
  a relative standard error sqrt(2/1000) ~ 4.5%; we allow 18% (~4 SE). If beta
  were drawn with an independent rotation, every mode would give
  tr(Omega)/d ~ 0.70 and the first (1.0) and last (0.5) would fail.

  The same per-context eigenbasis also checks x_test of the top-k task: it is a
  fresh N(0, Sigma) draw, so x_test^T Sigma^-1 x_test ~ chi^2_d has mean d = 4
  (standard error sqrt(8/1000) ~ 0.09; allowed 0.4). An x_test ~ N(0, I) would
  give tr(Sigma^-1) = 1 + 2 + 3 + 4 = 10.
  """
  d, P, contexts = 4, 1024, 1000
  batch = tasks.sample_batch(jax.random.key(11), contexts, d=d, P=P, a=1.0, b=0.5,
                             task="topk", k=2)
  x = np.asarray(batch.x_context_BPD, np.float64)
  beta = np.asarray(batch.beta_BD, np.float64)
  x_test = np.asarray(batch.x_test_BD, np.float64)
  cov = np.einsum("bpd,bpe->bde", x, x) / P
  eigenvalues, vectors = np.linalg.eigh(cov)  # ascending
  eigenvalues, vectors = eigenvalues[:, ::-1], vectors[:, :, ::-1]
  coords = np.einsum("bdk,bd->bk", vectors, beta)
  omega_hat = (coords ** 2).mean(axis=0)
  np.testing.assert_allclose(omega_hat, np.arange(1, d + 1) ** -0.5, rtol=0.18)
  assert omega_hat[0] > 1.5 * omega_hat[-1]

  test_coords = np.einsum("bdk,bd->bk", vectors, x_test)
  mahalanobis = (test_coords ** 2 / eigenvalues).sum(axis=1)
  assert abs(mahalanobis.mean() - d) < 0.4
  # E[y^2] = tr(Sigma Omega) = sum_k k^-(a+b) = 1.67 when Sigma and Omega share O
  # (independent rotations would give tr(Sigma) tr(Omega) / d = 1.45). The per-context
  # beta^T Sigma beta has standard deviation ~1.5, so the standard error is ~2.9%.
  y2 = (np.asarray(batch.y_context_BP, np.float64) ** 2).mean()
  np.testing.assert_allclose(y2, np.sum(np.arange(1, d + 1) ** -1.5), rtol=0.1)


def _brute_force_top_k(x_context_PD, x_test_D, k):
  cosine = [float(np.dot(xi, x_test_D) / (np.linalg.norm(xi) * np.linalg.norm(x_test_D)))
            for xi in x_context_PD]
  return sorted(range(len(cosine)), key=lambda i: -cosine[i])[:k]


@pytest.mark.parametrize("k", [1, 2, 5])
def test_top_k_indices_match_brute_force_ranking(k, topk_batch):
  batch = _np(topk_batch)
  for c in range(B):
    got = np.asarray(tasks.top_k_indices(topk_batch.x_context_BPD[c], topk_batch.x_test_BD[c], k))
    want = _brute_force_top_k(batch.x_context_BPD[c], batch.x_test_BD[c], k)
    assert sorted(got.tolist()) == sorted(want)


@pytest.mark.parametrize("k", [2, 16])
def test_topk_target_is_mean_of_brute_force_selected_labels(k, topk_batch):
  if k == 2:
    batch = topk_batch
  else:
    batch = tasks.sample_batch(jax.random.key(10), B, task="topk", k=k, **SHAPE)
  batch = _np(batch)
  for c in range(B):
    selected = _brute_force_top_k(batch.x_context_BPD[c], batch.x_test_BD[c], k)
    np.testing.assert_allclose(batch.target_B[c], batch.y_context_BP[c, selected].mean(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.selected_mean_BD[c],
                               batch.x_context_BPD[c, selected].mean(axis=0), rtol=1e-5,
                               atol=1e-6)
    # x_test is a fresh draw, not one of the context inputs.
    assert np.min(np.abs(batch.x_context_BPD[c] - batch.x_test_BD[c]).max(axis=1)) > 1e-6


def test_top1_copies_a_context_input_and_its_label(top1_batch):
  batch = _np(top1_batch)
  chosen = []
  for c in range(B):
    matches = np.flatnonzero(np.all(batch.x_context_BPD[c] == batch.x_test_BD[c], axis=1))
    assert matches.size == 1
    j = int(matches[0])
    chosen.append(j)
    assert batch.target_B[c] == batch.y_context_BP[c, j]
    np.testing.assert_array_equal(batch.selected_mean_BD[c], batch.x_test_BD[c])
    np.testing.assert_allclose(batch.target_B[c], batch.x_test_BD[c] @ batch.beta_BD[c],
                               rtol=1e-5, atol=1e-5)
  # The copied index is spread over the context (16 uniform draws over 32 slots).
  assert len(set(chosen)) >= 8


def test_unknown_task_raises():
  with pytest.raises(ValueError, match="task"):
    tasks.sample_context(jax.random.key(0), d=2, P=4, a=0.0, b=0.0, task="top3", k=1)


@pytest.mark.parametrize("task", ["top1", "topk"])
def test_same_key_same_batch_and_different_key_different_batch(task, topk_batch, top1_batch):
  first, key, k = (topk_batch, 9, 2) if task == "topk" else (top1_batch, 2, 1)
  again = tasks.sample_batch(jax.random.key(key), B, task=task, k=k, **SHAPE)
  other = tasks.sample_batch(jax.random.key(key + 100), B, task=task, k=k, **SHAPE)
  for leaf1, leaf2, leaf3 in zip(first, again, other):
    np.testing.assert_array_equal(np.asarray(leaf1), np.asarray(leaf2))
    assert not np.array_equal(np.asarray(leaf1), np.asarray(leaf3))


def test_sample_batch_under_jit_equals_eager(topk_batch):
  """Jitted, with the exponents traced (the module promises spectra may become a vmapped
  grid axis; the trainer jits with them constant), equals the eager batch."""
  jitted = jax.jit(lambda kk, a, b: tasks.sample_batch(kk, B, d=D, P=P, a=a, b=b, task="topk",
                                                       k=2))(jax.random.key(9), 0.5, 0.25)
  for e, j in zip(topk_batch, jitted):
    np.testing.assert_allclose(np.asarray(j), np.asarray(e), rtol=1e-5, atol=1e-6)


def test_sample_context_vmaps_over_keys_and_exponents(topk_batch):
  """sample_batch is the vmap of sample_context over split keys, and the exponent can be
  a vmapped (traced) axis: contexts with a = 0.5 reproduce `topk_batch`, those with
  a = 1 differ only through the spectrum."""
  keys = jax.random.split(jax.random.key(9), B)
  exponents = jnp.where(jnp.arange(B) < B // 2, 0.5, 1.0)
  batch = jax.vmap(lambda kk, a: tasks.sample_context(kk, d=D, P=P, a=a, b=0.25, task="topk",
                                                      k=2))(keys, exponents)
  half = B // 2
  for v, w in zip(batch, topk_batch):
    np.testing.assert_allclose(np.asarray(v[:half]), np.asarray(w[:half]), rtol=1e-5,
                               atol=1e-6)
  np.testing.assert_allclose(np.asarray(batch.beta_BD), np.asarray(topk_batch.beta_BD),
                             rtol=1e-5, atol=1e-6)  # beta does not depend on a
  x_new = np.asarray(batch.x_context_BPD[half:], np.float64)
  x_old = np.asarray(topk_batch.x_context_BPD[half:], np.float64)
  assert not np.allclose(x_new, x_old)
  # Same rotation and noise, smaller eigenvalues: the second moment shrinks.
  assert (x_new ** 2).sum() < (x_old ** 2).sum()
