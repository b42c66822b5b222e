"""The linear model's floor at the paper's linear size: top-2, isotropic, d = 128, P = 1024.

    python -m experiments.run --config=experiments/configs/linear_floor.py --workdir=runs/linear_floor

Isotropic inputs make every Sigma^r q equal, so the floor T - h^T G^+ h does not move
with depth: depths 1, 2, 4 show the plateau, and the deepest trained loss is compared
with `theory.linear_floor` (paper Table 3: 59.37 theory vs 59.85 trained). Same training
schedule and optimiser as depth_law.py (Adam, cosine), with a lower rate, an orthogonal input
map and a larger identity scale: what the linear model needs at this size (BUILD_NOTES
"Linear floor"). About 30 minutes on 2 CPU cores. Committed results: results/linear_floor/.
"""

from experiments.configs import arguments, default, regimes


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = default.get_config()
  regimes.apply(config, "adam_cosine_identity")  # the regime its committed runs were made in
  config.grid.model = "linear"
  config.grid.sizes.linear.update(d=128, P=1024, N=128)
  config.grid.depths = (1, 2, 4)
  config.grid.num_seeds = 1
  config.train.batch_size = 64
  # The linear model predicts g (1/(P N)) y^T U K q with K = W_x^T W_k^T W_q W_x: at the
  # identity start K ~ qk_init_scale^2 W_x^T W_x, whose eigenvalues spread from 0 to 4 for a
  # Gaussian W_x with N = d; an orthogonal W_x makes K isotropic, and qk_init_scale = 6 puts
  # the gain near its optimum (BUILD_NOTES "Linear floor").
  config.init.W_x_init = "orthogonal"
  config.init.qk_init_scale = 6.0
  config.train.learning_rate = 3e-4
  config.train.warmup_steps = 100
  config.train.max_steps = 1000
  config.train.eval_every = 250
  config.checkpoint.checkpoint_every = 250
  config.eval.val_size = 1024
  config.eval.eval_size = 20_480
  config.eval.eval_chunk_size = 1024
  config.eval.bound_samples = 20_000
  return config
