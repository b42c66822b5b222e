"""Controlled softmax model with a value matrix per layer (docs/models.md, C.2), packed layout.

As the controlled model (softmax.py) but layer l updates the label stream with its own
W_v^l: H_y^l = H_y^{l-1} + (1/L) W_v^l H_y^{l-1} A^l^T. Context label states still never
change (mask M(0)), so the model stays parallel:

    y_hat_L = (1/L) sum_l f_l,   f_l = g_l p_l . y,   g_l = W_o W_v^l W_y,

with p_l the query row of layer l, exactly as in the controlled model. W_v is a per-layer
leaf [T, N, N]; with every W_v^l equal to one W_v this is the controlled model.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.models import softmax
from inverse_depth.tasks import Batch


def value_gains(params, layout: GridLayout) -> jax.Array:
  """g_l = W_o W_v^l W_y for every packed layer: [T]."""
  model = params["model"]
  return jnp.einsum("ti,tij,tj->t", layout.expand_to_layers(model["W_o"]),
                    params["layer"]["W_v"], layout.expand_to_layers(model["W_y"]))


def features(params, layout: GridLayout) -> dict[str, jax.Array]:
  """The controlled model's scoring features with every layer's own gain g_l
  (softmax.features); the predictors are then `softmax.predict` of them."""
  return dict(softmax.scoring_features(params, layout), gain_T=value_gains(params, layout))


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l = g_l p_l . y for every packed layer: [T, B]."""
  return softmax.predict(features(params, layout), batch, layout)
