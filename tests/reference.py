"""Naive token-space implementations of the controlled and generalised models (docs/models.md), written straight from the stream equations, for checking the fast ones."""

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


def _softmax(scores):
  e = np.exp(scores - scores.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def softmax_two_stream_readouts(model, layers, x_context_PD, y_context_P, x_test_D,
                                context_weight=0.0):
  """Residual two-stream softmax model with mask M(m) on one context; returns z_0..z_L.

  H_y^l = H_y^{l-1} + (1/L) W_v^l H_y^{l-1} A^l^T; W_v^l = layers["W_v"][l] if the layers
  hold one (C.2), else model["W_v"]. A^l: query row softmax over the context; context rows
  m x softmax over the context (each context token attending to itself too; C.3); the
  query column zero.
  """
  X_DT = np.concatenate([x_context_PD, x_test_D[None]], axis=0).T
  P = x_context_PD.shape[0]
  depth = layers["W_q"].shape[0]
  hhat_NT = _layer_norm(model["W_x"] @ X_DT)
  H_y_NT = np.outer(model["W_y"], np.append(y_context_P, 0.0))
  readouts = [model["W_o"] @ H_y_NT[:, P]]
  for l in range(depth):
    W_v = layers["W_v"][l] if "W_v" in layers else model["W_v"]
    scores = (layers["W_q"][l] @ hhat_NT).T @ (layers["W_k"][l] @ hhat_NT)
    A = np.zeros((P + 1, P + 1))
    A[:P, :P] = context_weight * _softmax(scores[:P, :P])
    A[P, :P] = _softmax(scores[P, :P])
    H_y_NT = H_y_NT + (W_v @ H_y_NT) @ A.T / depth
    readouts.append(model["W_o"] @ H_y_NT[:, P])
  return np.array(readouts)


def first_layer_context_attention(model, layers, x_context_PD):
  """S_1 of the C.3 model on one context: the first layer's context-to-context softmax."""
  hhat_NP = _layer_norm(model["W_x"] @ x_context_PD.T)
  return _softmax((layers["W_q"][0] @ hhat_NP).T @ (layers["W_k"][0] @ hhat_NP))


def single_stream_readouts(model, layers, x_context_PD, y_context_P, x_test_D):
  """Residual single-stream softmax model (C.1) on one context; returns z_0..z_L.

  H^0 = W_x X + W_y y_in; Q, K = W_q^l, W_k^l LN(H^{l-1}), V = W_v H^{l-1};
  A^l = M(0) . softmax(Q^T K); H^l = H^{l-1} + (1/L) V A^l^T.
  """
  X_DT = np.concatenate([x_context_PD, x_test_D[None]], axis=0).T
  P = x_context_PD.shape[0]
  depth = layers["W_q"].shape[0]
  H_NT = model["W_x"] @ X_DT + np.outer(model["W_y"], np.append(y_context_P, 0.0))
  readouts = [model["W_o"] @ H_NT[:, P]]
  for l in range(depth):
    hhat_NT = _layer_norm(H_NT)
    scores = (layers["W_q"][l] @ hhat_NT).T @ (layers["W_k"][l] @ hhat_NT)
    A = np.zeros((P + 1, P + 1))
    A[P, :P] = _softmax(scores[P, :P])
    H_NT = H_NT + (model["W_v"] @ H_NT) @ A.T / depth
    readouts.append(model["W_o"] @ H_NT[:, P])
  return np.array(readouts)
