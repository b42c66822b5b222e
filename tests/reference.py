"""Naive token-space implementations of the controlled models (SPEC section 2),
written straight from the two-stream equations, for checking the fast ones."""

import numpy as np


def _layer_norm(h_NT):
  centred = h_NT - h_NT.mean(axis=0, keepdims=True)
  return centred / np.sqrt((centred ** 2).mean(axis=0, keepdims=True) + 1e-5)


def softmax_two_stream(model, layers, x_context_PD, y_context_P, x_test_D):
  """Residual two-stream softmax model on one context; returns y_hat.

  H_y^l = H_y^{l-1} + (1/L) V A^l^T with V = W_v H_y^{l-1} and
  A^l = M(0) . softmax(Q^T K) (query row over the context only, context rows zero).
  """
  X_DT = np.concatenate([x_context_PD, x_test_D[None]], axis=0).T
  P = x_context_PD.shape[0]
  depth = layers["W_q"].shape[0]
  hhat_NT = _layer_norm(model["W_x"] @ X_DT)
  H_y_NT = np.outer(model["W_y"], np.append(y_context_P, 0.0))
  for l in range(depth):
    Q, K = layers["W_q"][l] @ hhat_NT, layers["W_k"][l] @ hhat_NT
    scores = Q.T @ K  # [query token, key token]
    A = np.zeros((P + 1, P + 1))
    row = scores[P, :P]
    A[P, :P] = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
    H_y_NT = H_y_NT + (model["W_v"] @ H_y_NT) @ A.T / depth
  return model["W_o"] @ H_y_NT[:, P]


def linear_two_stream(model, layers, x_context_PD, y_context_P, x_test_D):
  """Residual two-stream linear model on one context; returns the readouts z_0..z_L.

  A^l = (1/(P N)) M . (Q^T K), M: -1 context-to-context, +1 query-to-context, else 0.
  """
  X_DT = np.concatenate([x_context_PD, x_test_D[None]], axis=0).T
  P = x_context_PD.shape[0]
  N = model["W_x"].shape[0]
  depth = layers["W_q"].shape[0]
  mask = np.zeros((P + 1, P + 1))
  mask[:P, :P] = -1.0
  mask[P, :P] = 1.0
  H_x_NT = model["W_x"] @ X_DT
  H_y_NT = np.outer(model["W_y"], np.append(y_context_P, 0.0))
  readouts = [model["W_o"] @ H_y_NT[:, P]]
  for l in range(depth):
    Q, K = layers["W_q"][l] @ H_x_NT, layers["W_k"][l] @ H_x_NT
    A = mask * (Q.T @ K) / (P * N)
    H_y_NT = H_y_NT + (model["W_v"] @ H_y_NT) @ A.T / depth
    readouts.append(model["W_o"] @ H_y_NT[:, P])
  return np.array(readouts)
