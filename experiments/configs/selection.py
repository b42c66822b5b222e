"""Selection error (paper appendix D.2): how far the mean attention row is from p*.

    python -m experiments.run --config=experiments/configs/selection.py --workdir=runs/selection

Softmax, top-2, isotropic, the depths of the tier; E_L(c) = |pbar_L(c) - p*|^2 on
every evaluation context (diagnostic_size = eval_size; run record
`selection_error_percentiles`), for L = 1 against
the deepest model, with their difference per percentile. `make reproduce` reads the same
records from the Table 1 run's (0, 0) softmax grid.
"""

from experiments.configs import tables


def get_config(argument: str | None = None):
  tier = tables.parse_tier(argument)
  config = tables.base(tier, "softmax", "topk", 2, ((0.0, 0.0),))
  config.eval.diagnostic_size = config.eval.eval_size
  return config
