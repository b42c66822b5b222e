"""What a run records about every model at every evaluation, to find which mode still drifts.

Per model, on the fixed validation contexts of the convergence rule:

- R, A and C of the identity R = C + (A - C)/L (analysis.decompose), from the layer
  predictors f_l: A = (1/L) sum_l E[e_l^2], C = (L R - A)/(L - 1) with R = E[(mean_l e_l)^2];
- the Frobenius norm |W| of every per-model parameter (W_x, W_y, W_v, W_o, ...) and the
  root mean square over the model's layers of every per-layer one (W_q, W_k, ...);
- for the kinds with one value matrix, the gain g = W_o W_v W_y;
- for the kinds with query and key matrices, the score temperature tau_l = tr(W_q^l^T W_k^l)
  (the logit of a query-key pair at cosine 1 when the form is isotropic: W_q = W_k = s I gives
  tau = s^2 N), as its mean over the model's layers and its spread (standard deviation over
  the layers divided by the mean).

W_x sits behind the layer norm, so nothing in the loss fixes its scale: its norm is the first
suspect of a slow drift (docs/notes/stationary.md). The value product g = W_o W_v W_y can
rebalance its factors at fixed g, which the three norms show.
"""

import jax.numpy as jnp
import numpy as np

from inverse_depth.grid import GridLayout, Params


def identity_terms(layer_preds_STE: np.ndarray, target_E: np.ndarray,
                   layout: GridLayout) -> dict[str, np.ndarray]:
  """R, A and C of every model of one group's seeds: arrays [S, M] (C is NaN at L = 1)."""
  errors_STE = np.asarray(layer_preds_STE, np.float64) - np.asarray(target_E, np.float64)
  depths_M = np.asarray(layout.depths, np.float64)
  A, R = [], []
  for m in range(layout.num_models):
    errors_SLE = errors_STE[:, layout.layer_slice(m)]
    A.append(np.mean(errors_SLE ** 2, axis=(1, 2)))
    R.append(np.mean(errors_SLE.mean(axis=1) ** 2, axis=1))
  A, R = np.stack(A, axis=1), np.stack(R, axis=1)
  with np.errstate(invalid="ignore", divide="ignore"):
    C = np.where(depths_M > 1, (depths_M * R - A) / (depths_M - 1), np.nan)
  return dict(R=R, A=A, C=C)


def parameter_summary(params: Params, layout: GridLayout) -> dict[str, np.ndarray]:
  """Norms, gain and score temperature of every model: arrays [S, M] (module docstring)."""
  out = {}
  for name, leaf in params["model"].items():
    leaf = np.asarray(leaf, np.float64)
    out[f"norm_{name}"] = np.sqrt((leaf ** 2).reshape(leaf.shape[:2] + (-1,)).sum(-1))
  for name, leaf in params["layer"].items():
    leaf = np.asarray(leaf, np.float64)
    square_ST = (leaf ** 2).reshape(leaf.shape[:2] + (-1,)).sum(-1)
    out[f"norm_{name}"] = np.sqrt(_per_model_mean(square_ST, layout))
  model = params["model"]
  if {"W_o", "W_v", "W_y"} <= set(model) and np.ndim(model["W_v"]) == 4:
    out["gain"] = np.asarray(jnp.einsum("smi,smij,smj->sm", model["W_o"], model["W_v"],
                                        model["W_y"]), np.float64)
  if {"W_q", "W_k"} <= set(params["layer"]):
    temperature_ST = np.einsum("stij,stij->st", np.asarray(params["layer"]["W_q"], np.float64),
                               np.asarray(params["layer"]["W_k"], np.float64))
    mean_SM = _per_model_mean(temperature_ST, layout)
    square_SM = _per_model_mean(temperature_ST ** 2, layout)
    out["temperature"] = mean_SM
    with np.errstate(invalid="ignore", divide="ignore"):
      out["temperature_spread"] = np.sqrt(np.maximum(square_SM - mean_SM ** 2, 0.0)) / mean_SM
  return out


def _per_model_mean(values_ST: np.ndarray, layout: GridLayout) -> np.ndarray:
  """Mean over each model's own layers: [S, T] -> [S, M]."""
  return np.stack([values_ST[:, layout.layer_slice(m)].mean(axis=1)
                   for m in range(layout.num_models)], axis=1)
