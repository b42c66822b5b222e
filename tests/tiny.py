"""The shrunken experiment config shared by the end-to-end tests."""

import math

from experiments.configs import smoke
from inverse_depth import config as config_lib

MODELS = ("softmax",)


def tiny_config():
  """The smoke config, shrunk to fit the fast suite: the softmax grid only, three 20-step
  chunks with a checkpoint after each, the newest two kept (one compile of the step
  per run).

  Both model kinds and the convergence rule are covered by test_train.py and by
  the slow entrypoint tests (the unmodified smoke config).
  """
  config = smoke.get_config()
  config.grid.model = ",".join(MODELS)
  config.train.max_steps = 60
  config.train.eval_every = 20
  config.checkpoint.checkpoint_every = 20
  config.checkpoint.checkpoints_to_keep = 2  # three saves: the oldest is rotated out
  config.train.microbatch_size = WHOLE_BATCH
  # One set size for validation and evaluation: their samplers and the evaluation
  # share compilations.
  config.eval.val_size = 256
  config.eval.eval_size = 256
  config.eval.eval_chunk_size = 256
  return config


# WHOLE_BATCH: one block of the training gradient (train.block_size): at toy sizes the blocks
# that keep a real grid's step in cache are only per-block overhead.
WHOLE_BATCH = 1 << 20
SHRUNK = dict(depths=(1, 2), num_seeds=1, max_steps=10, eval_every=5, checkpoint_every=5,
              microbatch_size=WHOLE_BATCH,
              warmup_steps=2, val_size=32, eval_size=64, eval_chunk_size=32,
              diagnostic_size=32, bound_samples=300,
              outlier_factor=1e6)  # toy models are far from the bounds: keep them in the tables


def shrunk(config):
  """A shipped config at toy sizes (d = 4 attention / 8 linear, P = 32, 10 steps), every
  model kind, spectrum and per-kind override kept."""
  config_lib.set_fields(config, SHRUNK)
  for model, sizes in config.grid.sizes.items():
    sizes.update(d=8 if model == "linear" else 4, P=32, N=8)
  for model, overrides in config.model_overrides.items():
    if overrides:
      config_lib.set_fields(overrides, dict(SHRUNK, batch_size=16))
      if overrides.get("init", {}).get("value_init") == "identity":  # the unit-step start
        overrides.init.qk_init_scale = math.sqrt(config.grid.sizes[model].d)
  return config
