"""`make demo`'s grid (quick.py: depths 1..16, 2 seeds) over 6000 steps in the annealed Adam regime
(regimes.ANNEALED_ADAM: small random query/key start, Adam 1e-3 with cosine decay to zero,
final iterate). One of the three regimes of results/regimes_compared (with quick.py and
quick_adam_constant.py).

    python -m experiments.run --config=experiments/configs/quick_adam_annealed.py \
        --workdir=runs/quick_adam_annealed
"""

from experiments.configs import arguments, quick, quick_adam_constant, regimes


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = quick.get_config()
  regimes.apply(config, "annealed_adam")
  config.train.max_steps = quick_adam_constant.COMPARED_BUDGET["max_steps"]
  return config
