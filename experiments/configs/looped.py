"""Looped (weight-tied) controlled softmax models beside the untied ones.

    python -m experiments.run --config=experiments/configs/looped.py --workdir=runs/looped

Every layer of a looped model uses the same W_q, W_k (`loop_group` = 0; r > 0 ties groups
of r consecutive layers). In the controlled model the layers do not see each other (the
context is fixed and the value matrix shared), so a depth-L model tied in groups of r is
exactly the untied depth-L/r model with each layer repeated r times (tests/
test_generalized.py): looping there can only reproduce a shallower model, and loss
against parameter count (run record `parameters`) is the untied curve. The sizes, depths,
seeds and training of generalized.py (top-2, isotropic). Runtime on 2 shared CPU cores:
12.5 min.
"""

from experiments.configs import arguments, generalized


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = generalized.get_config()
  config.grid.model = "softmax,looped"
  config.grid.loop_group = 0
  return config
