"""What recording the gradient-noise traces adds to a run (inverse_depth.trajectory).

    .venv/bin/python -m bench.noise_cost [--steps=10] [--chunks=8,16]

On the law's grid (experiments/configs/sgd_law.py: softmax, d 16, P 128, N 32, depths 1..64,
3 seeds, batch 256): the median time of a train chunk of `steps` steps, scaled to the
config's eval_every, against one noise evaluation (GridTrainer.gradient_noise on
trajectory.NOISE_CONTEXTS contexts) at each chunk size, timed alternately in one process
(the machine is shared). Prints the added fraction of a run's wall time per chunk size.
"""

import dataclasses
import time

import jax
import numpy as np
from absl import app, flags

from bench.harness import machine, median_seconds
from experiments.configs import sgd_law
from inverse_depth import config as config_lib, experiment, trajectory

flags.DEFINE_integer("steps", 10, "train steps per timed chunk (scaled to eval_every)")
flags.DEFINE_list("chunks", ["8"], "noise chunk sizes to time")
flags.DEFINE_integer("repeats", 3, "timed calls of each")
FLAGS = flags.FLAGS


def main(_):
  spec = config_lib.grid_specs(sgd_law.get_config())[0]
  eval_every = spec.train.eval_every
  spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, eval_every=FLAGS.steps))
  trainer = experiment.grid_trainer(spec)
  state = trainer.init_state()
  contexts = trajectory.noise_contexts(spec.problem, spec.root_seed)
  contexts_S = jax.tree.map(lambda *xs: np.stack(xs)[trainer.replicate_spectrum], *contexts)
  noise = {int(c): jax.jit(lambda p, x, c=int(c): trajectory.gradient_noise(
      lambda q, b: trainer.module.apply({"params": q}, b), p, x, trainer.layout, c))
           for c in FLAGS.chunks}
  start = time.perf_counter()
  state, _ = trainer.train_chunk(state)  # compile + warm-up
  jax.block_until_ready(state)
  print(f"machine {machine()}")
  print(f"train chunk compile + first call {time.perf_counter() - start:.1f} s")
  for c, function in noise.items():
    start = time.perf_counter()
    jax.block_until_ready(function(state.params, contexts_S))
    print(f"noise chunk {c}: compile + first call {time.perf_counter() - start:.1f} s")
  holder = [state]

  def train():
    holder[0], losses = trainer.train_chunk(holder[0])
    jax.block_until_ready(losses)

  for _ in range(FLAGS.repeats):  # alternate, so that both see the same load
    step_s = median_seconds(train, 1) / FLAGS.steps
    chunk_s = step_s * eval_every
    for c, function in noise.items():
      noise_s = median_seconds(lambda: jax.block_until_ready(function(holder[0].params,
                                                                     contexts_S)), 1)
      print(f"step {step_s:.3f} s, chunk of {eval_every} steps {chunk_s:.1f} s; noise "
            f"(chunk {c}, {trajectory.NOISE_CONTEXTS} contexts) {noise_s:.2f} s = "
            f"{100 * noise_s / chunk_s:.2f}% of the chunk")


if __name__ == "__main__":
  app.run(main)
