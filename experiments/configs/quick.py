"""`make demo`: softmax and linear, top-2, isotropic, depths 1..16, 2 seeds (~10 min on 2 cores).

d = 16, P = 32 is the smallest size at which the calibration (BUILD_NOTES.md)
saw any early depth advantage; the convergence rule is shortened (evaluations
every 100 steps, two learning-rate decays) to fit the time budget.
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.d = 16
  config.P = 32
  config.N = 32
  config.depths = (1, 2, 4, 8, 16)
  config.num_seeds = 2
  config.eval_every = 100
  config.patience = 3
  config.max_lr_decays = 2
  config.max_steps = 4000
  config.checkpoint_every = 500
  return config
