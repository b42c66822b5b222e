"""Looped (weight-tied) controlled softmax models beside the untied ones.

    python -m experiments.run --config=experiments/configs/looped.py --workdir=runs/looped

Every layer of a looped model uses the same W_q, W_k (`loop_group` = 0; r > 0 ties groups
of r consecutive layers). In the controlled model the layers do not see each other (the
context is fixed and the value matrix shared), so a depth-L model tied in groups of r is
exactly the untied depth-L/r model with each layer repeated r times (tests/
test_generalized.py): looping there can only reproduce a shallower model, and loss
against parameter count (run record `parameters`) is the untied curve. Softmax sizes,
top-2, isotropic, depths 1..32, 3 seeds. Runtime on 2 CPU cores: not measured yet.
"""

from experiments.configs import default


def get_config():
  config = default.get_config()
  config.model = "softmax,looped"
  config.depths = (1, 2, 4, 8, 16, 32)
  config.num_seeds = 3
  config.loop_group = 0
  config.max_steps = 2000
  config.eval_every = 250
  config.checkpoint_every = 500
  config.eval_size = 20_480
  config.eval_chunk_size = 2048
  config.bound_samples = 50_000
  return config
