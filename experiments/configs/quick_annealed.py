"""The annealed depth-law run (depth_law.py) shrunk to about 5 minutes on 2 cores (`make demo`
before the SGD law was found; the base of `make regimes`).

Softmax, top-2, isotropic, at the paper's softmax size (d = 16, P = 128, N = 32) and
depth_law.py's training regime (small random query/key start, Adam 1e-3, cosine decay to
zero) over a twelfth of its steps; depths 1, 4, 16, 64, two seeds, 2000 steps, 20,480
evaluation contexts, no ensemble control. It shows what the
full run shows, with wider error bars: R_1 near the best single cosine-attention layer,
and how far depth moves the loss. Linear attention at its paper size (d = 128,
P = 1024) costs minutes per hundred steps on a CPU: see linear_floor.py.
"""

from experiments.configs import arguments, depth_law


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = depth_law.get_config()
  config.grid.depths = (1, 4, 16, 64)
  config.grid.num_seeds = 2
  config.train.max_steps = 2000
  config.train.eval_every = 250
  config.checkpoint.checkpoint_every = 500
  config.eval.eval_size = 20_480
  config.eval.eval_chunk_size = 4096
  config.eval.bound_samples = 50_000
  config.grid.ensemble_control = False
  return config
