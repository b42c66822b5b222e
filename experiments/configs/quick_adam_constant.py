"""`make demo`'s grid (quick.py: depths 1..16, 2 seeds) with Adam in place of SGD
(regimes.ADAM_CONSTANT): constant rate 3e-3, the same identity start at 0.73, 6000 steps,
the last 12 evaluations averaged. One of the three regimes
of results/regimes_compared (with quick.py and quick_adam_annealed.py).

    python -m experiments.run --config=experiments/configs/quick_adam_constant.py \
        --workdir=runs/quick_adam_constant
"""

from experiments.configs import arguments, quick, regimes
from inverse_depth import config as config_lib

# The budget of results/regimes_compared's runs: quick.py's before it moved to the stationary
# regime's 8000 steps (6000 steps, the last 12 evaluations averaged).
COMPARED_BUDGET = dict(max_steps=6000, stationary_evals=12)


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = quick.get_config()
  regimes.apply(config, "adam_constant")
  config_lib.set_fields(config, COMPARED_BUDGET)
  return config
