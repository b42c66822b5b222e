"""A tiny grid that runs end to end in about a minute on 2 CPU cores, most of it compiling
(tests, quick checks)."""

from experiments.configs import arguments, default, regimes


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = default.get_config()
  regimes.apply(config, "adam_cosine_identity")  # the regime the tests' expected values assume
  config.grid.depths = (1, 2, 4)
  config.grid.sizes.softmax.update(d=4, P=8, N=8)
  config.grid.sizes.linear.update(d=4, P=8, N=8)
  config.train.batch_size = 32
  config.train.warmup_steps = 10
  config.train.max_steps = 100
  config.train.eval_every = 20
  config.train.patience = 2
  config.train.max_lr_decays = 1
  config.eval.val_size = 256
  config.eval.eval_size = 512
  config.eval.eval_chunk_size = 256
  config.eval.bound_samples = 2000
  config.eval.outlier_factor = 5.0  # 100 steps are far from converged: flag only runaway models
  # every chunk: a kill-and-resume test has steps to land on
  config.checkpoint.checkpoint_every = 20
  return config
