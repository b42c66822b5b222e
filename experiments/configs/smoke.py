"""A tiny grid that runs end to end in about a minute on 2 CPU cores, most of it compiling
(tests, quick checks)."""

from experiments.configs import arguments, default, regimes


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = default.get_config()
  regimes.apply(config, "adam_cosine_identity")  # the regime the tests' expected values assume
  config.depths = (1, 2, 4)
  config.sizes.softmax.update(d=4, P=8, N=8)
  config.sizes.linear.update(d=4, P=8, N=8)
  config.batch_size = 32
  config.warmup_steps = 10
  config.max_steps = 100
  config.eval_every = 20
  config.patience = 2
  config.max_lr_decays = 1
  config.val_size = 256
  config.eval_size = 512
  config.eval_chunk_size = 256
  config.bound_samples = 2000
  config.outlier_factor = 5.0  # 100 steps are far from converged: flag only runaway models
  config.checkpoint_every = 20  # every chunk: a kill-and-resume test has steps to land on
  return config
