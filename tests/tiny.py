"""The shrunken experiment config shared by the end-to-end tests."""

from experiments.configs import smoke

MODELS = ("softmax",)


def tiny_config():
  """The smoke config, shrunk to fit the fast suite: the softmax grid only, three 20-step
  chunks with a checkpoint after each, the newest two kept (one compile of the step
  per run).

  Both model kinds and the convergence rule are covered by test_train.py and by
  the slow entrypoint tests (the unmodified smoke config).
  """
  config = smoke.get_config()
  config.model = ",".join(MODELS)
  config.max_steps = 60
  config.eval_every = 20
  config.checkpoint_every = 20
  config.checkpoints_to_keep = 2  # three saves: the oldest is rotated out
  # One set size for validation and evaluation: their samplers and the evaluation
  # share compilations.
  config.val_size = 256
  config.eval_size = 256
  config.eval_chunk_size = 256
  return config
