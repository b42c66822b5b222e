"""The trainer trains the Flax modules (modules.PackedModels, the optimiser of
per_model.py) and gets the numbers the trainer of plain functions got before.

`tests/data/train_reference.json` was written at commit 0f47020, where the step called
models.SPLIT_PREDICTIONS and applied the rate scale and the freeze masks by hand after
optax's update, by `reference_histories()` of this file (then the same cases). Each case is
a grid of depths 1..3 x 2 seeds x 2 spectra x 2 rate factors trained for 30 steps; Adam
decays and freezes models by the stall rule; the SGD cases scale layer rates by depth, keep
|W_x| fixed, and two of their models diverge (frozen at their last finite state).
Tolerances, measured: Adam 1.6e-6 relative with the packages of the time, 1.3e-4 (single
stream's validation loss) with jax 0.10.2, flax 0.12.8, optax 0.2.8 (setup.cfg pins lower
bounds only, and another XLA rounds differently); SGD 4.5e-5, its step at the edge of
stability (the rate that diverges the depth-1 models) amplifying float rounding over 30
steps, and 4.7e-4 (one of 144 values) since the softmax step sums its scores in another order
(contexts first, blocks of 8).
"""

import dataclasses
import json
import pathlib

import jax
import numpy as np
import pytest

from inverse_depth.grid import InitScales
from inverse_depth.train import GridTrainer, Problem, TrainSettings

REFERENCE = pathlib.Path(__file__).parent / "data" / "train_reference.json"
PROBLEM = Problem(task="topk", k=2, d=4, P=8, spectra=((0.0, 0.0), (0.5, 0.25)))
ADAM = TrainSettings(batch_size=16, learning_rate=1e-2, warmup_steps=2, max_steps=30,
                     eval_every=5, rel_tol=0.05, patience=1, lr_decay_factor=0.5,
                     max_lr_decays=1, divergence_loss=1e6)
SGD = dataclasses.replace(ADAM, optimizer="sgd", schedule="cosine", learning_rate=0.01,
                          depth_scaled_layer_lr=True, fixed_input_norm=True, divergence_loss=10.0)
SETTINGS = {"adam": ADAM, "sgd": SGD}
FAST_CASES = ("softmax/adam", "softmax/sgd")
CASES = FAST_CASES + tuple(f"{kind}/adam" for kind in (
    "linear", "single_stream", "per_layer_values", "context_updates", "looped")) + (
    "context_updates/sgd",)
RELATIVE_TOLERANCE = {"adam": 3e-4, "sgd": 1e-3}
RECORDED = ("step", "train_loss", "val_loss", "lr_scale", "diverged", "converged")


def history(case: str) -> dict[str, list]:
  """Every evaluation's recorded progress of one case's grid, fitted to the end."""
  kind, optimizer = case.split("/")
  trainer = GridTrainer(kind, PROBLEM, (1, 2, 3), (0, 1), SETTINGS[optimizer], N=8,
                        init_scales=InitScales(qk_init_scale=1.5, context_update_m_init=-0.3),
                        init_key=jax.random.key(10), data_key=jax.random.key(11),
                        loop_group=2 if kind == "looped" else 0, rate_factors=(1.0, 3.0))
  val_sets = tuple(jax.jit(lambda key, a=a, b=b: PROBLEM.sample(key, 64, a, b))(jax.random.key(12))
                   for a, b in PROBLEM.spectra)
  progress = [p for _, p in trainer.fit(trainer.init_state(), val_sets, 64)]
  return {name: [p[name] for p in progress] for name in RECORDED}


def reference_histories() -> dict[str, dict[str, list]]:
  return {case: history(case) for case in CASES}


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c in FAST_CASES
                                               else pytest.mark.slow) for c in CASES])
def test_grid_trained_through_the_modules_matches_the_reference(case):
  expected, got = json.loads(REFERENCE.read_text())[case], history(case)
  assert got["step"] == expected["step"]
  for name in ("diverged", "converged", "lr_scale"):
    np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
  for name in ("train_loss", "val_loss"):
    np.testing.assert_allclose(got[name], expected[name], err_msg=name,
                               rtol=RELATIVE_TOLERANCE[case.split("/")[1]])


if __name__ == "__main__":  # python -m tests.test_train_modules > tests/data/train_reference.json
  print(json.dumps(reference_histories()))
