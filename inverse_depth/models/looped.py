"""Looped controlled softmax model: query/key weights tied in groups of layers, packed layout.

The controlled model (softmax.py) in which the layers of a model share W_q, W_k in groups
of r = layout.loop_group consecutive layers (r = 0: one group for all of a model's layers).
Storage stays per layer ([T, N, N]); layer l of a model uses the weights stored at the
first layer of its group (`GridLayout.tied_layer_index`), so the other copies get zero
gradient and never change. In the parallel controlled model a layer's predictor depends
only on its own W_q, W_k, so the layers of a group predict alike: a depth-L model with
groups of r (r dividing L) predicts exactly what the untied depth-L/r model with the
groups' weights predicts, each f_l repeated r times.
"""

import jax

from inverse_depth.grid import GridLayout
from inverse_depth.models import softmax
from inverse_depth.tasks import Batch


def tied_params(params, layout: GridLayout):
  """The params with every layer's W_q, W_k replaced by those of its group's first layer."""
  return dict(params, layer=jax.tree.map(lambda w: w[layout.tied_layer_index], params["layer"]))


def test_attention(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """Query rows p_l of every packed layer: [T, B, P]."""
  return softmax.test_attention(tied_params(params, layout), batch, layout)


def features(params, layout: GridLayout) -> dict:
  """The controlled model's features (softmax.features) of the tied parameters."""
  return softmax.features(tied_params(params, layout), layout)


def layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l = g p_l . y with the tied query rows: [T, B]."""
  return softmax.layer_predictions(tied_params(params, layout), batch, layout)
