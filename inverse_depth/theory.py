"""Attention theory: the linear floor and the linear easy-task theory (docs/theory.md), and
the softmax bound (docs/theory.md, docs/sizes.md).

Floor of the difficult task: a linear-attention model of depth L predicts
beta^T Phi_L(q) w with Phi_L(q) = [Sigma q, ..., Sigma^L q] and weights w shared
by all contexts (the P -> infinity covariance polynomial). With t the mean of
the selected inputs (so y* = beta^T t) and beta ~ N(0, Omega), the best w gives

    R_irr = T - h^T G^+ h,   T = E[t^T Omega t],  h = E[Phi^T Omega t],  G = E[Phi^T Omega Phi],

estimated here by Monte Carlo over contexts. At finite P the model applies its polynomial
to the context's own covariance S = (1/P) sum_i x_i x_i^T instead of Sigma; the same
estimate with Phi = [S q, ..., S^L q] is the floor at that P (`context_floor`).

Softmax bound: one attention layer that weights the context tokens by
p = softmax_i(tau cos(x_i, x_test)) and predicts g p.y; the best (tau, g), and
the best nonnegative mixture sum_j w_j p_{tau_j}.y over a temperature grid, and by depth L
the best equal-weight average of L such layers with one gain (the controlled model with
cosine-scoring layers: `equal_weight_averages`) and the best mixture of at most L of them
(free gains: `sparse_mixture_losses`), also by Monte Carlo over contexts drawn as in training.

Linear easy task (P -> infinity): a covariance polynomial p acts on eigenvalue lam_k through
the residual r(lam) = 1 - lam p(lam), with risk R = sum_k omega_k lam_k r(lam_k)^2
(`residual_risk`, per mode `modewise_risk`). Exponent zeta = (a + b - 1) / a (`zeta`);
repeated identical GD steps, r = (1 - lam)^L, give R ~ L^-zeta (`repeated_update_risk`); the
best r of degree L on the d eigenvalues (`optimal_polynomial_risk`) and in the continuum limit,
weight lam^(zeta - 1) on [0, 1], where it is a shifted Jacobi polynomial with R ~ L^-2zeta
(`jacobi_optimal_residual`, `jacobi_optimal_risk`). `covariance_polynomial` reads p off a
trained linear model with each K_l replaced by its isotropic part.

Optimiser noise: the stationary excess loss of constant-rate SGD with momentum, to leading
order in the rate (`sgd_stationary_excess`) and exactly on a quadratic
(`sgd_quadratic_excess`); under SGD each layer of a depth-L model feels 1/L of a one-layer
model's gradient, which makes the layers' share of that excess c / L (docs/theory.md).

Monte Carlo chunk i of every estimator here uses the key fold_in(key, i).
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.special

from inverse_depth import tasks

DEFAULT_TEMPERATURES = np.geomspace(1.0, 200.0, 48)


def _chunks(key: jax.Array, num_samples: int, chunk_size: int):
  """(chunk key, chunk size) pairs covering `num_samples` contexts."""
  for i, start in enumerate(range(0, num_samples, chunk_size)):
    yield jax.random.fold_in(key, i), min(chunk_size, num_samples - start)


@functools.partial(jax.jit, static_argnames=("num", "d", "P", "k", "task", "depth"))
def _eigenbasis_features(key: jax.Array, num: int, *, d: int, P: int, a, b, k: int, task: str,
                         depth: int):
  """For `num` contexts from `tasks.sample_batch(key, num, ...)`, each in its own eigenbasis
  (Sigma = diag(lam), Omega = diag(omega)), with q = O^T x_test:
  t = O^T (mean of the selected inputs) and q, shape (num, d) each; the context features
  O^T S^r x_test, S = (1/P) sum_i x_i x_i^T the context's own input covariance, r = 1..depth:
  shape (num, depth, d)."""
  batch = tasks.sample_batch(key, num, d=d, P=P, a=a, b=b, task=task, k=k)
  rotations_BDD = jax.vmap(lambda kk: tasks.context_rotation(kk, d))(jax.random.split(key, num))
  to_eigenbasis = lambda v_BD: jnp.einsum("bji,bj->bi", rotations_BDD, v_BD)
  power_BD, context_powers = batch.x_test_BD, []
  for _ in range(depth):
    scores_BP = jnp.einsum("bpd,bd->bp", batch.x_context_BPD, power_BD)
    power_BD = jnp.einsum("bpd,bp->bd", batch.x_context_BPD, scores_BP) / P
    context_powers.append(to_eigenbasis(power_BD))
  return (to_eigenbasis(batch.selected_mean_BD), to_eigenbasis(batch.x_test_BD),
          jnp.stack(context_powers, axis=1))


def _floor_residuals(t_BD: np.ndarray, features_BRD: np.ndarray, w_R: np.ndarray,
                     omega_D: np.ndarray) -> np.ndarray:
  """Per-context r = (t - Phi^T w)^T Omega (t - Phi^T w), Phi^T w = sum_r w_r features_r."""
  return np.sum(omega_D * (t_BD - np.einsum("r,brd->bd", w_R, features_BRD)) ** 2, axis=-1)


def linear_floor(key: jax.Array, *, d: int, P: int, a: float, b: float, k: int, depth: int,
                 num_samples: int = 100_000, task: str = "topk", chunk_size: int = 10_000) -> dict:
  """Monte Carlo estimate of T - h^T G^+ h for a depth-`depth` covariance polynomial.

  The paper's floor (`floor`) takes the population covariance, Phi = [Sigma q, ...,
  Sigma^L q]; in each context's eigenbasis Phi rows are lam^r * q, so
    T = E[sum_d omega_d t_d^2],  h_r = sum_d lam_d^r omega_d E[q_d t_d],
    G_rs = sum_d lam_d^(r+s) omega_d E[q_d^2].
  A trained model applies its polynomial to the context's own covariance S = (1/P) sum_i
  x_i x_i^T, whose powers S^r q lean towards the context inputs most aligned with q, the
  ones t averages. `context_floor` is the same estimate with Phi = [S q, ..., S^L q] (the
  floor of the model at this P; it tends to `floor` as P -> infinity at fixed k).
  Moments accumulate in float64 over the same contexts for both. *_se = std(r) / sqrt(n)
  over the per-context residuals r = (t - Phi^T w)^T Omega (t - Phi^T w) at w = G^+ h,
  from a second pass over the same chunk keys (mean(r) = floor).

  Returns dict(floor, floor_se, T, h, G, context_floor, context_floor_se, context_h,
  context_G) as float64 numpy values (moments are per-context means).
  """
  problem = dict(d=d, P=P, k=k, task=task, depth=depth, a=a, b=b)
  omega_D = np.asarray(tasks.power_spectrum(d, b), np.float64)
  powers_RD = np.asarray(tasks.power_spectrum(d, a), np.float64) ** np.arange(1, depth + 1)[:, None]

  def chunks():
    """(t, population features lam^r q, context features) per chunk, in float64."""
    for chunk_key, num in _chunks(key, num_samples, chunk_size):
      t_BD, q_BD, context_BRD = (np.asarray(x, np.float64)
                                 for x in _eigenbasis_features(chunk_key, num, **problem))
      yield t_BD, q_BD[:, None, :] * powers_RD, context_BRD

  T, done = 0.0, 0
  h = {kind: np.zeros(depth) for kind in ("population", "context")}
  G = {kind: np.zeros((depth, depth)) for kind in ("population", "context")}
  for t_BD, *features in chunks():
    T += float(np.sum(omega_D * t_BD ** 2))
    for kind, features_BRD in zip(("population", "context"), features):
      h[kind] += np.einsum("brd,bd->r", features_BRD * omega_D, t_BD)
      G[kind] += np.einsum("brd,bsd->rs", features_BRD * omega_D, features_BRD)
    done += len(t_BD)
  T = T / done
  w = {kind: np.linalg.pinv(G[kind] / done) @ (h[kind] / done) for kind in h}
  residuals = {kind: [] for kind in h}
  for t_BD, *features in chunks():
    for kind, features_BRD in zip(("population", "context"), features):
      residuals[kind].append(_floor_residuals(t_BD, features_BRD, w[kind], omega_D))
  result = dict(T=float(T))
  for kind, prefix in (("population", ""), ("context", "context_")):
    h_R, G_RR = h[kind] / done, G[kind] / done
    result.update({prefix + "floor": float(T - h_R @ w[kind]),
                   prefix + "floor_se": float(np.concatenate(residuals[kind]).std(ddof=1)
                                              / np.sqrt(done)),
                   prefix + "h": h_R, prefix + "G": G_RR})
  return result


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


def _moments(readouts_NJ: np.ndarray, target_N: np.ndarray):
  """G = m^T m / n (J x J), h = m^T y / n (J), T = y^T y / n: every least-squares loss below
  is a function of these."""
  n = len(target_N)
  return (readouts_NJ.T @ readouts_NJ / n, readouts_NJ.T @ target_N / n,
          float(target_N @ target_N / n))


# Depth-L optima are exhaustive over supports or multisets of the temperature grid: C(48, 4)
# and C(51, 4) candidates at L = 4, C(53, 6) = 23 million multisets (gigabytes) at L = 6.
MAX_EXHAUSTIVE_LAYERS = 4


def _check_depth_range(name: str, value: int) -> None:
  if not 1 <= value <= MAX_EXHAUSTIVE_LAYERS:
    raise ValueError(f"{name}={value}: allowed 1..{MAX_EXHAUSTIVE_LAYERS} (the depth-L optima "
                     "are exhaustive over the temperature grid)")


def sparse_mixture_losses(readouts_NJ: np.ndarray, target_N: np.ndarray,
                          max_layers: int) -> list[dict]:
  """Best nonnegative mixture of at most L of the J readouts, L = 1..max_layers:

    R_L = min_{w >= 0, |supp w| <= L} mean_n (sum_j w_j m_nj - y_n)^2

  (L layers with free nonnegative gains). Exhaustive over supports S: at the nonnegative
  optimum on S the gradient vanishes on its positive entries S', so there the weights are
  the least-squares solution on S' alone. Hence R_L is the least loss
  T - 2 h_S.w + w^T G_SS w (`_moments`) over the |S| <= L whose least-squares solution
  w = G_SS^+ h_S is nonnegative (pseudo-inverse: a repeated readout makes G_SS singular).
  Returns one dict(loss, indices, weights) per L (empty indices when no nonnegative mixture
  beats w = 0, whose loss is T); in-sample, like `softmax_bound`'s mixture.
  """
  _check_depth_range("max_layers", max_layers)
  gram_JJ, cross_J, target_second_moment = _moments(readouts_NJ, target_N)
  J = len(cross_J)
  found, best = [], dict(loss=target_second_moment, indices=[], weights=[])  # w = 0
  for size in range(1, min(max_layers, J) + 1):
    supports_CS = np.array(list(itertools.combinations(range(J), size)))
    gram_CSS = gram_JJ[supports_CS[:, :, None], supports_CS[:, None, :]]
    cross_CS = cross_J[supports_CS]
    weights_CS = np.einsum("cst,ct->cs", np.linalg.pinv(gram_CSS, hermitian=True), cross_CS)
    losses_C = (target_second_moment - 2 * np.einsum("cs,cs->c", cross_CS, weights_CS)
                + np.einsum("cs,cst,ct->c", weights_CS, gram_CSS, weights_CS))
    losses_C[~np.all(weights_CS >= 0, axis=1)] = np.inf
    c = int(np.argmin(losses_C))
    if losses_C[c] < best["loss"]:
      best = dict(loss=float(losses_C[c]), indices=supports_CS[c].tolist(),
                  weights=weights_CS[c].tolist())
    found.append(dict(best))
  return found + [dict(best) for _ in range(max_layers - len(found))]  # L > J: R_L = R_J


def equal_weight_averages(readouts_NJ: np.ndarray, target_N: np.ndarray,
                          max_layers: int) -> list[dict]:
  """Best average of L readouts (repeats allowed) with one shared gain, L = 1..max_layers:

    R_L = min_{j_1..j_L} min_g mean_n (g (1/L) sum_l m_{n j_l} - y_n)^2
        = min_{j_1..j_L} T - (h.u)^2 / (u^T G u),   u = (1/L) sum_l e_{j_l}  (`_moments`),

  with g = h.u / u^T G u of either sign. This is the controlled softmax model,
  y_hat = g (1/L) sum_l p_l . y with one g = W_o W_v W_y, when every layer scores by cosine at
  a grid temperature. Exhaustive over the C(J + L - 1, L) multisets; an average that is zero
  on every context predicts 0 (loss T). Returns one dict(loss, indices, weights) per L,
  indices with repeats and every weight g / L.
  """
  _check_depth_range("max_layers", max_layers)
  gram_JJ, cross_J, target_second_moment = _moments(readouts_NJ, target_N)
  found = []
  for L in range(1, max_layers + 1):
    multisets_CL = np.array(list(itertools.combinations_with_replacement(range(len(cross_J)), L)))
    second_moment_C = gram_JJ[multisets_CL[:, :, None], multisets_CL[:, None, :]].sum((1, 2)) / L**2
    cross_C = cross_J[multisets_CL].sum(1) / L
    gain_C = np.divide(cross_C, second_moment_C, out=np.zeros_like(cross_C),
                       where=second_moment_C > 0)
    c = int(np.argmin(target_second_moment - cross_C * gain_C))
    found.append(dict(loss=float(target_second_moment - cross_C[c] * gain_C[c]),
                      indices=multisets_CL[c].tolist(), weights=[float(gain_C[c] / L)] * L))
  return found


def softmax_bound(key: jax.Array, *, d: int, P: int, a: float, b: float, k: int,
                  num_samples: int = 200_000, task: str = "topk", temperatures=None,
                  chunk_size: int = 10_000, max_layers: int = 3) -> dict:
  """Monte Carlo loss of the best single cosine-softmax attention layer and of the
  best nonnegative mixture of such layers over a temperature grid.

  With m_tau = softmax_i(tau cos(x_i, x_test)) . y on contexts drawn as in training:
    single  = min_tau min_g E[(g m_tau - y*)^2] = min_tau E[y*^2] - E[y* m_tau]^2 / E[m_tau^2]
              (gain g = E[y* m_tau] / E[m_tau^2]; `equal_weight_averages` at L = 1),
    mixture = min_{w >= 0} E[(sum_j w_j m_{tau_j} - y*)^2]   (scipy NNLS on the n x J matrix).
  Both are minimised and evaluated on the same n contexts (in-sample, so
  mixture <= single whenever the single gain is >= 0). The *_se entries are
  std / sqrt(n) of the per-context squared errors; difference_se is the paired one
  of e_single^2 - e_mixture^2. Default grid: DEFAULT_TEMPERATURES (geomspace(1, 200, 48)).
  By depth, for L = 1..max_layers: average_by_layers[L - 1], the best equal-weight average
  of L grid temperatures with one gain (the controlled model with cosine-scoring layers:
  `equal_weight_averages`), and mixture_by_layers[L - 1], the best nonnegative mixture of at
  most L (free gains: `sparse_mixture_losses`); each dict(loss, temperatures, weights,
  excess, excess_se), excess over the full mixture with its paired standard error.

  Returns dict(single, single_se, temperature, gain, mixture, mixture_se, weights,
  difference, difference_se, average_by_layers, mixture_by_layers, temperatures,
  num_samples, target_second_moment).
  """
  _check_depth_range("max_layers", max_layers)
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

  averages = equal_weight_averages(m_NJ, target_N, max_layers)
  (best,), (gain,) = averages[0]["indices"], averages[0]["weights"]  # L = 1: the single layer
  single_error2_N = (gain * m_NJ[:, best] - target_N) ** 2

  weights_J, _ = scipy.optimize.nnls(m_NJ, target_N, maxiter=50 * m_NJ.shape[1])
  mixture_error2_N = (m_NJ @ weights_J - target_N) ** 2
  single, mixture = float(single_error2_N.mean()), float(mixture_error2_N.mean())

  def beside_mixture(candidates: list[dict]) -> list[dict]:
    """Each candidate's loss on the contexts, and its excess over the full mixture."""
    entries = []
    for candidate in candidates:
      error2_N = (m_NJ[:, candidate["indices"]] @ np.asarray(candidate["weights"], np.float64)
                  - target_N) ** 2
      entries.append(dict(loss=float(error2_N.mean()),
                          temperatures=temperatures_J[candidate["indices"]].tolist(),
                          weights=candidate["weights"], excess=float(error2_N.mean()) - mixture,
                          excess_se=standard_error(error2_N - mixture_error2_N)))
    return entries

  return dict(single=single, single_se=standard_error(single_error2_N),
              temperature=float(temperatures_J[best]), gain=float(gain),
              mixture=mixture, mixture_se=standard_error(mixture_error2_N),
              weights=weights_J.tolist(), difference=single - mixture,
              difference_se=standard_error(single_error2_N - mixture_error2_N),
              average_by_layers=beside_mixture(averages),
              mixture_by_layers=beside_mixture(sparse_mixture_losses(m_NJ, target_N, max_layers)),
              temperatures=temperatures_J.tolist(), num_samples=n,
              target_second_moment=float(np.mean(target_N ** 2)))


# Linear theory of the easy task (docs/theory.md): P -> infinity, so S_hat = Sigma and a
# covariance polynomial p acts on each eigen-direction through r(lam) = 1 - lam p(lam).


def zeta(a: float, b: float) -> float:
  """zeta = (a + b - 1) / a, the exponent of the linear theory (a > 0)."""
  if a <= 0:
    raise ValueError(f"a={a} must be > 0 (lambda_k = k^-a must decay)")
  return (a + b - 1) / a


def _power_law(d: int, exponent: float) -> np.ndarray:
  """k^-exponent for k = 1..d in float64: shape (d,)."""
  return np.arange(1, d + 1, dtype=np.float64) ** -exponent


def residual_polynomial(coefficients_J: np.ndarray, lam: np.ndarray) -> np.ndarray:
  """r(lam) = 1 - lam p(lam) with p(lam) = sum_j coefficients_j lam^j."""
  lam = np.asarray(lam, np.float64)
  return 1.0 - lam * np.polynomial.polynomial.polyval(lam, np.asarray(coefficients_J, np.float64))


def modewise_risk(residual_D: np.ndarray, *, a: float, b: float) -> np.ndarray:
  """Easy-task loss along each eigen-direction of Sigma: omega_k lam_k r(lam_k)^2, k = 1..d,
  for residual values residual_D = r(lam_k) (d = len(residual_D)). With y_hat = q^T p(Sigma)
  Sigma beta and target q^T beta, the error is q^T r(Sigma) beta with q ~ N(0, Sigma)."""
  residual_D = np.asarray(residual_D, np.float64)
  d = len(residual_D)
  return _power_law(d, b) * _power_law(d, a) * residual_D ** 2


def residual_risk(residual_D: np.ndarray, *, a: float, b: float) -> float:
  """Easy-task risk R = sum_k omega_k lam_k r(lam_k)^2 (the sum of `modewise_risk`)."""
  return float(np.sum(modewise_risk(residual_D, a=a, b=b)))


def repeated_update_risk(*, d: int, a: float, b: float, depth: int, step: float = 1.0) -> float:
  """Risk of `depth` identical preconditioned-GD steps of size `step` (default 1 / lam_1):
  r(lam) = (1 - step lam)^depth, R = sum_k omega_k lam_k (1 - step lam_k)^(2 depth).
  Modes with lam_k >~ 1 / depth are solved, the rest are not, so R ~ depth^-zeta as d -> inf."""
  return residual_risk((1.0 - step * _power_law(d, a)) ** depth, a=a, b=b)


def optimal_polynomial_risk(*, d: int, a: float, b: float, depth: int) -> dict:
  """The free covariance-polynomial optimum on the d eigenvalues:
    min_{deg r <= depth, r(0) = 1} sum_k omega_k lam_k r(lam_k)^2.

  With s_k = sqrt(omega_k lam_k) and r = 1 - lam p(lam), s r = s - p(Lam) Lam s, so the optimal
  s r is s minus its projection onto span{Lam^j Lam s : j < depth}. That Krylov basis is built by
  Arnoldi (Gram-Schmidt twice per vector), which stays accurate in float64: at depth 64, d = 2000
  its r matches the Stieltjes recursion run with 250 digits to 1e-14 (the recursion itself needs
  ~250 digits there; monomial or Legendre least squares is singular to float64).
  The discrete optimum can null the isolated top eigenvalues, so it decays faster than the
  continuum law depth^-2zeta of `jacobi_optimal_risk` (log-log slope -4.1 between depths 16
  and 64 for (a, b) = (2, 1), d = 2000, where 2 zeta = 2).

  Returns dict(risk, residual) with residual = r(lam_k), shape (d,).
  """
  lam_D = _power_law(d, a)
  root_weight_D = np.sqrt(_power_law(d, a + b))
  basis_DJ = np.zeros((d, min(depth, d)))
  vector_D = lam_D * root_weight_D
  first_norm = np.linalg.norm(vector_D)
  for j in range(basis_DJ.shape[1]):
    for _ in range(2):
      vector_D = vector_D - basis_DJ[:, :j] @ (basis_DJ[:, :j].T @ vector_D)
    if np.linalg.norm(vector_D) <= 1e-14 * first_norm:  # the Krylov space is complete
      basis_DJ = basis_DJ[:, :j]  # (repeated eigenvalues: a = 0 has one distinct value)
      break
    basis_DJ[:, j] = vector_D / np.linalg.norm(vector_D)
    vector_D = lam_D * basis_DJ[:, j]
  weighted_residual_D = root_weight_D
  for _ in range(2):
    weighted_residual_D = weighted_residual_D - basis_DJ @ (basis_DJ.T @ weighted_residual_D)
  residual_D = weighted_residual_D / root_weight_D
  return dict(risk=residual_risk(residual_D, a=a, b=b), residual=residual_D)


def _continuum_zeta(a: float, b: float) -> float:
  """zeta(a, b), which must be > 0 for the continuum weight lam^(zeta - 1) to be finite."""
  value = zeta(a, b)
  if value <= 0:
    raise ValueError(f"a + b = {a + b} must be > 1 (zeta = {value} <= 0)")
  return value


def jacobi_optimal_residual(lam: np.ndarray, *, a: float, b: float, depth: int) -> np.ndarray:
  """Continuum optimal residual r(lam) = P_n^(zeta, 0)(1 - 2 lam) / binom(n + zeta, n), n = depth.

  Substituting k = lam^(-1/a) (dk = lam^(-1/a - 1) dlam / a, omega_k lam_k = lam^((a + b) / a))
  turns sum_k omega_k lam_k f(lam_k) into (1/a) int_0^1 lam^(zeta - 1) f(lam) dlam, the k >= 1
  integral in place of the sum. The minimiser of int_0^1 lam^(zeta-1) r^2 dlam with r(0) = 1,
  deg r <= n is the kernel polynomial K_n(lam, 0) / K_n(0, 0) of that weight. Its reproducing
  property, int_0^1 lam^(zeta-1) K_n(lam, 0) q(lam) dlam = q(0) for deg q <= n, with q = lam s
  gives int_0^1 lam^zeta K_n(lam, 0) s(lam) dlam = 0 for deg s < n, so K_n(., 0) is the
  degree-n orthogonal polynomial of the weight lam^zeta: the shifted Jacobi polynomial
  P_n^(zeta, 0)(1 - 2 lam), with P_n^(zeta, 0)(1) = binom(n + zeta, n). Depends on (a, b) only
  through zeta.
  """
  value = _continuum_zeta(a, b)
  x = 1.0 - 2.0 * np.asarray(lam, np.float64)
  return scipy.special.eval_jacobi(depth, value, 0.0, x) / scipy.special.binom(depth + value, depth)


def jacobi_optimal_risk(*, a: float, b: float, depth: int) -> float:
  """Continuum optimal easy-task risk (1/a) min_r int_0^1 lam^(zeta-1) r(lam)^2 dlam
  = 1 / (a zeta binom(depth + zeta, depth)^2) ~ Gamma(zeta + 1)^2 / (a zeta) depth^-2zeta.
  The integral stands in for the mode sum only in its depth exponent: the sum's top mode
  lam_1 = 1 keeps r(1)^2 = binom(depth + zeta, depth)^-2 whole, so `residual_risk` of this
  residual on d modes is a constant factor larger (about 3 for (a, b) = (2, 1) at every depth).

  The minimum is 1 / K_n(0, 0) (see `jacobi_optimal_residual`), and over the orthonormal shifted
  Jacobi polynomials phi_j of the weight lam^(zeta-1),
    K_n(0, 0) = sum_{j <= n} phi_j(0)^2 = sum_{j <= n} (2j + zeta) binom(j + zeta - 1, j)^2
              = zeta binom(n + zeta, n)^2.
  """
  value = _continuum_zeta(a, b)
  return float(1.0 / (a * value * scipy.special.binom(depth + value, depth) ** 2))


def covariance_polynomial(model: dict, layers: dict) -> dict:
  """Covariance polynomial p of one linear model (models/linear.py) read with each
  K_l = (W_k^l W_x)^T (W_q^l W_x) replaced by its isotropic part kappa_l I, kappa_l = tr(K_l)/d.

  Then y_hat = q^T p(S_hat) U y / P with S_hat = U U^T / P and, for j = 0..L-1,
    p_j = (-1)^j g_{j+1} e_{j+1}(kappa_1..kappa_L) / (L N)^(j+1),   g_j = W_o W_v^j W_y,
  e_j the elementary symmetric polynomials. Proof: the Krylov recursion of models/linear.py
  becomes sum_j a_{l,j} t^j = prod_{m <= l} (1 - c kappa_m t S) U y, so a_{l,j} = (-c)^j
  e_j(kappa_1..kappa_l) S^j U y; summing z_l - z_{l-1} = c kappa_l sum_j g_{j+1} a_{l-1,j}^T q
  over l uses sum_l kappa_l e_j(kappa_1..kappa_{l-1}) = e_{j+1}(kappa_1..kappa_L), and
  c S = S_hat / (L N) (c = 1/(L P N), S = P S_hat), so P drops out.

  `model`: W_x [N, d], W_y [N], W_v [N, N], W_o [N] of one model; `layers`: its W_q, W_k
  [L, N, N] (for a grid, params["layer"][leaf][seed, layout.layer_slice(m)]).
  Returns dict(coefficients [L] = p_0..p_{L-1}, kappa [L], anisotropy [L] =
  |K_l - kappa_l I|_F / |K_l|_F, 0 when the isotropic reading is exact), float64 numpy.
  """
  model = {name: np.asarray(leaf, np.float64) for name, leaf in model.items()}
  W_q_LNN, W_k_LNN = (np.asarray(layers[name], np.float64) for name in ("W_q", "W_k"))
  depth, (hidden, d) = len(W_q_LNN), model["W_x"].shape
  forms_LDD = np.einsum("lnd,lne->lde", W_k_LNN @ model["W_x"], W_q_LNN @ model["W_x"])
  kappa_L = np.trace(forms_LDD, axis1=1, axis2=2) / d
  anisotropy_L = (np.linalg.norm(forms_LDD - kappa_L[:, None, None] * np.eye(d), axis=(1, 2))
                  / np.linalg.norm(forms_LDD, axis=(1, 2)))
  product_J = np.ones(1)  # coefficients of prod_l (1 - kappa_l t / (L N)), [L + 1]
  for kappa in kappa_L:
    product_J = np.convolve(product_J, [1.0, -kappa / (depth * hidden)])
  gains_L, vector_N = np.zeros(depth), model["W_y"]
  for j in range(depth):
    vector_N = model["W_v"] @ vector_N
    gains_L[j] = model["W_o"] @ vector_N
  coefficients_L = -gains_L * product_J[1:]  # product_{j+1} = (-1)^(j+1) e_{j+1} / (L N)^(j+1)
  return dict(coefficients=coefficients_L, kappa=kappa_L, anisotropy=anisotropy_L)


def sgd_stationary_excess(gradient_noise_trace: float, *, learning_rate: float, momentum: float,
                          batch_size: int) -> float:
  """Excess loss of constant-rate heavy-ball SGD at stationarity, to leading order in the rate.

  Near a minimum with Hessian H, per-example gradient covariance Sigma and minibatches of B,
  the iterate's covariance S solves H S + S H = eta_eff Sigma / B, eta_eff = eta / (1 - mu)
  (momentum mu), so the excess E[R] - R* = tr(H S) / 2 = eta_eff tr(Sigma) / (4 B), whatever
  H is (as long as it is positive definite where Sigma has noise). `gradient_noise_trace`
  is tr(Sigma) of the loss whose gradient the optimiser follows.
  """
  return learning_rate / (1.0 - momentum) * gradient_noise_trace / (4.0 * batch_size)


def sgd_quadratic_excess(hessian, gradient_covariance, *, learning_rate: float, momentum: float,
                         batch_size: int) -> float:
  """The same excess exactly, on the quadratic R(theta) = R* + (theta - theta*)^T H (theta -
  theta*) / 2 with additive gradient noise of covariance Sigma / B: the stationary covariance
  of the linear recursion v' = mu v + H delta + xi, delta' = delta - eta v' (optax.sgd with
  momentum), from the discrete Lyapunov equation; returns tr(H S_delta) / 2. Raises
  ValueError when the recursion is unstable (no stationary state)."""
  H = np.atleast_2d(np.asarray(hessian, np.float64))
  noise = np.atleast_2d(np.asarray(gradient_covariance, np.float64)) / batch_size
  n, eta, mu = H.shape[0], learning_rate, momentum
  identity = np.eye(n)
  # state (delta, v): v' = H delta + mu v + xi; delta' = delta - eta v'
  transition = np.block([[identity - eta * H, -eta * mu * identity], [H, mu * identity]])
  if np.max(np.abs(np.linalg.eigvals(transition))) >= 1:
    raise ValueError(f"sgd_quadratic_excess: learning_rate {eta:g} with momentum {mu:g} is "
                     "unstable on this Hessian (no stationary state)")
  injection = np.vstack([-eta * identity, identity])
  covariance = scipy.linalg.solve_discrete_lyapunov(transition,
                                                    injection @ noise @ injection.T)
  return float(np.trace(H @ covariance[:n, :n]) / 2)


def depth_slopes(d: int, a: float, b: float, depths) -> tuple[float, float]:
  """-d log R / d log L, least squares over `depths`, of L repeated unit steps
  (`repeated_update_risk`) and of the best degree-L polynomial (`optimal_polynomial_risk`)."""
  def slope(risks):
    return float(-np.polyfit(np.log(depths), np.log(risks), 1)[0])
  return (slope([repeated_update_risk(d=d, a=a, b=b, depth=int(L)) for L in depths]),
          slope([optimal_polynomial_risk(d=d, a=a, b=b, depth=int(L))["risk"] for L in depths]))
