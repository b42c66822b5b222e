"""Model kinds by name. Each maps (params of one seed, batch, layout) to the
per-layer predictors f_l packed along T, whose per-model mean is the prediction."""

from inverse_depth.models import linear, softmax

LAYER_PREDICTIONS = {
    "softmax": softmax.layer_predictions,
    "linear": linear.layer_predictions,
}
MODELS = tuple(LAYER_PREDICTIONS)
# Query rows p_l of every packed layer ([T, B, P]) for the models that have them.
TEST_ATTENTION = {"softmax": softmax.test_attention}
