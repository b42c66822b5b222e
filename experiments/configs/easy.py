"""The easy task (top-1 copy): one softmax layer solves it, linear attention cannot.

    python -m experiments.run --config=experiments/configs/easy.py --workdir=runs/easy

Isotropic spectrum. Softmax (d = 16, P = 128) at depths 1, 2, 4: the loss should fall
towards 0 and the top-1 attention mass (metrics.jsonl `selected_mass`, plotted per
evaluation) towards 1. Linear (d = 128, P = 1024) beside it at depths 1, 2, 4. Softmax
starts as the cosine scorer (identity query/key start, Adam 3e-3), which the copy task
rewards directly (the copied input has cosine 1), rather than in depth_law.py's regime for
the difficult task.
"""

from experiments.configs import tables
from inverse_depth import config as config_lib


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  config = tables.base(tier, "softmax,linear", "top1", 1, ((0.0, 0.0),),
                       softmax_regime="adam_cosine_identity")
  config.grid.depths = (1, 2, 4)
  config.train.max_steps = 1000 if tier == "cpu" else 4000
  config.eval.bound_samples = 0  # the bounds are for the difficult task
  config_lib.set_fields(config.model_overrides.linear,
                        dict(depths=(1, 2, 4), max_steps=300, bound_samples=0))
  return config
