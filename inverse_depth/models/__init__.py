"""Model kinds by name. Each maps (params of one seed, batch, layout) to the
per-layer predictors f_l packed along T, whose per-model mean is the prediction."""

import math

from inverse_depth.models import (context_updates, linear, looped, per_layer_values,
                                  single_stream, softmax)

LAYER_PREDICTIONS = {
    "softmax": softmax.layer_predictions,
    "linear": linear.layer_predictions,
    "single_stream": single_stream.layer_predictions,
    "per_layer_values": per_layer_values.layer_predictions,
    "context_updates": context_updates.layer_predictions,
    "looped": looped.layer_predictions,
}
MODELS = tuple(LAYER_PREDICTIONS)
# (features, predict) per kind: layer_predictions(params, batch, layout) equals
# predict(features(params, layout), batch, layout), where `features` is the part of the model
# that does not depend on the contexts (softmax.features). The trainer computes it once per
# step and runs `predict` block by block over the batch (train.py). Kinds without such a part
# use the parameters themselves as features.
_PARAMS_AS_FEATURES = lambda params, layout: params  # noqa: E731
SPLIT_PREDICTIONS = {
    kind: (_PARAMS_AS_FEATURES, layer_predictions) for kind, layer_predictions in
    LAYER_PREDICTIONS.items()} | {
    "softmax": (softmax.features, softmax.predict),
    "per_layer_values": (per_layer_values.features, softmax.predict),
    "looped": (looped.features, softmax.predict),
}
# Query rows p_l of every packed layer ([T, B, P]) for the models that have them.
TEST_ATTENTION = {
    "softmax": softmax.test_attention,
    "single_stream": single_stream.test_attention,
    "per_layer_values": softmax.test_attention,
    "context_updates": softmax.test_attention,
    "looped": looped.test_attention,
}
# The first layer's context-to-context softmax S_1 of every model ([M, B, P, P]) for the
# kinds whose context tokens attend to each other.
CONTEXT_ATTENTION = {"context_updates": context_updates.first_layer_context_attention}

# Kinds whose prediction is linear in the context labels y (y_hat = w . y, w independent of
# y): the mode-wise loss of diagnostics.py is exact for them. single_stream mixes y into the
# queries and keys.
LINEAR_IN_LABELS = tuple(kind for kind in MODELS if kind != "single_stream")
# Kinds whose query row scores the fixed, layer-normed input stream (softmax.test_attention),
# so each layer's score is a d x d form in input space (diagnostics.scoring_geometry).
FIXED_INPUT_SCORING = tuple(kind for kind, attention in TEST_ATTENTION.items()
                            if attention is softmax.test_attention)
# Kinds with a learned context step m (a model leaf, [S, M] in a grid).
LEARNED_CONTEXT_STEP = ("context_updates",)


def parameter_count(model: str, depth: int, *, d: int, N: int, loop_group: int = 0) -> int:
  """Trainable parameters of one model of kind `model`: W_x (N d), W_y and W_o (N each),
  W_v (N^2, or N^2 per layer for per_layer_values), W_q and W_k (2 N^2 per layer, or per
  group of `loop_group` layers for looped: ceil(depth / loop_group) groups, one if 0) and m
  (1, context_updates). The unused per-layer copies of a looped model are not counted."""
  if model not in MODELS:
    raise ValueError(f"model={model!r}; allowed {MODELS}")
  query_key_sets = math.ceil(depth / (loop_group or depth)) if model == "looped" else depth
  values = depth if model == "per_layer_values" else 1
  return (N * d + 2 * N + values * N * N + 2 * query_key_sets * N * N
          + int(model == "context_updates"))
