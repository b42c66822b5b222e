"""Analytic FLOP counts of one training step, for the algorithm the code runs.

A multiply-add counts 2 FLOPs; contractions and the softmax are counted, other
elementwise work is not. Forward + backward: the backward of a contraction
costs one contraction of the same size per operand that needs a gradient, so a
contraction of two parameter-dependent operands costs 3 x its forward FLOPs in
all, one against the data (x, y) 2 x, and data-only work (the context moments)
1 x. That is the "3 x forward" rule applied only where it holds. The sampler
(Haar rotation, labels, top-k) and Adam are counted separately and are not model
FLOPs. Sizes: batch B, context P, input d, width N, M models of depths L_m,
T = sum L_m layers.

XLA's cost analysis counts the body of a loop once. The softmax model has no
loop, so its count is comparable as is; the linear model scans over each
model's layers, so `scan_bodies_once=True` gives the count XLA should report.
"""


def softmax_train(*, depths, B: int, P: int, d: int, N: int) -> float:
  """Controlled softmax model (models/softmax.py), per seed, forward x multiplier:

      input scales    2 M B (P + 1) (d^2 + d) x 2 + 2 M N d^2 x 3   (r = 1/sigma per model, token)
      B_l forms       T (4 N^2 d + 2 N d^2) x 3                     ((W_q Wc)^T (W_k Wc))
      probes          2 T B d^2 x 2                                 (B_l x_test)
      scores          2 T B P d x 2                                 (probe . x_i)
      softmax         5 T B P x 3,   p . y: 2 T B P x 2
  """
  M, T = len(depths), sum(depths)
  return (2 * 2 * M * B * (P + 1) * (d * d + d) + 3 * 2 * M * N * d * d
          + 3 * T * (4 * N * N * d + 2 * N * d * d) + 2 * 2 * T * B * d * d
          + 2 * 2 * T * B * P * d + 3 * 5 * T * B * P + 2 * 2 * T * B * P)


def linear_train(*, depths, B: int, P: int, d: int, N: int, scan_bodies_once=False) -> float:
  """Controlled linear model, Krylov form (models/linear.py), per seed:

      moments         (2 B P d^2 + 2 B P d) x 1                 (S = U U^T, U y, data only)
      gains g_j       L x 2 (N^2 + N) x 3                       (per model of depth L)
      per layer       (4 N^2 d + 2 N d^2) x 3                   (K_l)
                      2 B d^2 x 2 + 2 L B d x 3                 (K_l q; increment over j < L)
                      2 (L - 1) B d^2 x 3 + 2 (L - 1) B d^2 x 2 (a_{l-1,j} K_l, then . S)
  """
  total = 2 * B * P * d * d + 2 * B * P * d
  for L in depths:
    per_layer = (3 * (4 * N * N * d + 2 * N * d * d) + 2 * 2 * B * d * d + 3 * 2 * L * B * d
                 + 5 * 2 * (L - 1) * B * d * d)
    per_gain = 3 * 2 * (N * N + N)
    repeats = 1 if scan_bodies_once else L
    total += repeats * (per_gain + per_layer)
  return total


TRAIN = {"softmax": softmax_train, "linear": linear_train}


def model_train_flops(model: str, *, depths, num_seeds: int, B: int, P: int, d: int,
                      N: int, **options) -> float:
  """Model FLOPs (forward + backward) of one training step of the grid, all seeds."""
  return num_seeds * TRAIN[model](depths=depths, B=B, P=P, d=d, N=N, **options)


def sampler_flops(*, num_seeds: int, B: int, P: int, d: int) -> float:
  """Training batch: d Householder reflections of P + 2 vectors (4 (P + 2) d^2), labels
  2 P d, cosine similarities 4 P d, per context."""
  return num_seeds * B * (4 * (P + 2) * d * d + 6 * P * d)
