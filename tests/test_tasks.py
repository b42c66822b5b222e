"""Tests of the data pipeline (docs/tasks.md): spectra, rotations, labels, top-k targets.

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


def test_haar_orthogonal_moments():
  """Under the Haar measure every column is uniform on the sphere:
  E[O_ij] = 0, E[O_ij^2] = 1/d, E[O_ij^4] = 3/(d(d+2)) (= 0.2 for d = 3).

  A wrong sign convention in the QR/Householder construction biases the means
  (e.g. a positive diagonal); a non-uniform direction shows in the 4th moment.
  4000 draws, d = 3: standard errors ~0.009 (mean), ~0.004 (square), ~0.004
  (4th moment); allowed 0.045, 0.02, 0.02.
  """
  keys = jax.random.split(jax.random.key(7), 4000)
  qs = np.asarray(jax.vmap(lambda k: tasks.haar_orthogonal(k, 3))(keys), np.float64)
  np.testing.assert_allclose(np.einsum("bij,bkj->bik", qs, qs), np.broadcast_to(np.eye(3),
                                                                               qs.shape),
                             atol=1e-5)
  np.testing.assert_allclose(qs.mean(axis=0), 0.0, atol=0.045)
  np.testing.assert_allclose((qs ** 2).mean(axis=0), 1 / 3, atol=0.02)
  np.testing.assert_allclose((qs ** 4).mean(axis=0), 3 / 15, atol=0.02)


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
  standard error of about sqrt(2/P) ~ 1% (allowed 5%), and the covariance itself
  is O diag(lambda) O^T for the context's rotation O (`context_rotation`), entry
  by entry up to a standard error <= sqrt(2/P) ~ 0.01 (allowed 0.04).
  """
  key = jax.random.key(0)
  ctx = _np(tasks.sample_context(key, d=4, P=20000, a=1.0, b=0.5, task="topk", k=2))
  x = ctx.x_context_BPD
  cov = x.T @ x / x.shape[0]
  eigenvalues = np.sort(np.linalg.eigvalsh(cov))[::-1]
  spectrum = np.arange(1, 5) ** -1.0
  np.testing.assert_allclose(eigenvalues, spectrum, rtol=0.05)
  np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=0.03)
  O = np.asarray(tasks.context_rotation(key, 4), np.float64)
  np.testing.assert_allclose(cov, O @ np.diag(spectrum) @ O.T, atol=0.04)
  # The eigenvectors are a random rotation, not the coordinate axes.
  assert np.abs(O).max() < 0.995


def test_beta_and_inputs_share_the_rotation_with_their_spectra():
  """beta ~ N(0, O diag(omega) O^T) and x_i, x_test ~ N(0, O diag(lambda) O^T) with the
  *same* per-context O, which `context_rotation(key)` returns.

  Each context has its own O, so pooling over contexts in the original
  coordinates only sees (tr / d) I. In each context's eigenbasis, O^T beta has
  independent coordinates of variance omega_k = k^-b, and O^T x has variance
  lambda_k = k^-a. 4000 contexts, P = 8, d = 4, a = 1, b = 0.5: the relative
  standard error of each omega_k estimate is sqrt(2/4000) ~ 2.2% (allowed 10%),
  of each lambda_k estimate from the 32000 context inputs ~0.8% (allowed 5%), of
  the query's ~2.2% (allowed 10%). Off-diagonal second moments vanish (allowed
  0.1 of the geometric mean of the two variances).
  """
  d, P, contexts, a, b = 4, 8, 4000, 1.0, 0.5
  key = jax.random.key(11)
  batch = jax.jit(lambda kk: tasks.sample_batch(kk, contexts, d=d, P=P, a=a, b=b, task="topk",
                                                k=2))(key)
  rotations = np.asarray(jax.vmap(lambda kk: tasks.context_rotation(kk, d))(
      jax.random.split(key, contexts)), np.float64)
  lam, omega = np.arange(1, d + 1) ** -a, np.arange(1, d + 1) ** -b

  def second_moments(vectors_BND):
    coords = np.einsum("bdk,bnd->bnk", rotations, np.asarray(vectors_BND, np.float64))
    return np.einsum("bnk,bnl->kl", coords, coords) / (coords.shape[0] * coords.shape[1])

  for name, vectors, spectrum, rtol in (
      ("beta", np.asarray(batch.beta_BD)[:, None], omega, 0.1),
      ("x_context", batch.x_context_BPD, lam, 0.05),
      ("x_test", np.asarray(batch.x_test_BD)[:, None], lam, 0.1)):
    m = second_moments(vectors)
    np.testing.assert_allclose(np.diag(m), spectrum, rtol=rtol, err_msg=name)
    off = m - np.diag(np.diag(m))
    assert np.all(np.abs(off) < 0.1 * np.sqrt(np.outer(spectrum, spectrum))), (name, off)
  # E[y^2] = tr(Sigma Omega) = sum_k k^-(a+b) when Sigma and Omega share O (independent
  # rotations would give tr(Sigma) tr(Omega) / d = 1.45 instead of 1.67). The
  # per-context beta^T Sigma beta has standard deviation ~1.5: standard error ~2%.
  y2 = (np.asarray(batch.y_context_BP, np.float64) ** 2).mean()
  np.testing.assert_allclose(y2, np.sum(lam * omega), rtol=0.08)


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


@pytest.mark.slow  # 10-35 s: kept out of `make test` for its 15-minute budget
def test_a_slice_of_a_batch_can_be_drawn_on_its_own():
  """sample_batch(key, n)[i:j] == sample_contexts(split(key, n)[i:j]): evaluation sets too
  large for memory are drawn chunk by chunk and are still the same contexts."""
  kwargs = dict(d=4, P=8, a=0.5, b=0.25, task="topk", k=2)
  whole = tasks.sample_batch(jax.random.key(3), 10, **kwargs)
  part = tasks.sample_contexts(jax.random.split(jax.random.key(3), 10)[4:7], **kwargs)
  for full_leaf, part_leaf in zip(whole, part):
    np.testing.assert_allclose(np.asarray(full_leaf)[4:7], np.asarray(part_leaf), rtol=1e-6,
                               atol=1e-6)
