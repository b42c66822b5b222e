"""`make demo`: softmax and linear, top-2, isotropic, depths 1..16, 2 seeds (~10 min, 2 cores)."""

from experiments.configs import default


def get_config():
  config = default.get_config()
  return config
