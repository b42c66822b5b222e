"""`make demo`'s grid (quick.py) with Adam in place of SGD, all else equal: constant rate 3e-3,
the same identity start at 0.73, the last 12 evaluations averaged. One of the three regimes
of results/regimes_compared (with quick.py and quick_adam_annealed.py).

    python -m experiments.run --config=experiments/configs/quick_adam_constant.py \
        --workdir=runs/quick_adam_constant
"""

from experiments.configs import quick


def get_config():
  config = quick.get_config()
  config.optimizer = "adam"
  return config
