"""Today's step against committed runs: the first evaluation chunk retrained, its training and
validation losses compared with the run's metrics.jsonl (issue 44, "same numbers").

    python -m bench.first_chunk RESULTS_DIR [RESULTS_DIR ...]

Each RESULTS_DIR is a committed run folder (config.json, metrics.jsonl). Its config is
rebuilt from config.json; every grid trains its first `eval_every` steps with today's step,
and the largest relative difference of the chunk's mean training loss and of the
validation loss is printed per grid.
"""

import json
import os
import sys

import jax
import numpy as np

from inverse_depth import config as config_lib
from inverse_depth import experiment


def first_chunk_differences(results_dir: str) -> list[dict]:
  """Per grid: the largest relative difference of the first chunk's losses."""
  with open(os.path.join(results_dir, "config.json")) as f:
    config = config_lib.from_saved(json.load(f))
  with open(os.path.join(results_dir, "metrics.jsonl")) as f:
    metrics = [json.loads(line) for line in f]
  out = []
  for spec in config_lib.grid_specs(config):
    first = next(m for m in metrics if m["model"] == spec.label
                 and m["step"] == spec.train.eval_every)
    trainer = experiment.grid_trainer(spec)
    state, train_loss_SM = trainer.train_chunk(trainer.init_state())
    sample = jax.jit(spec.problem.sample, static_argnums=1)
    val_key = experiment._root_keys(spec.root_seed)["val"]
    val_sets = tuple(sample(val_key, spec.eval.val_size, a, b) for a, b in spec.problem.spectra)
    val_loss_SM = trainer.model_losses(state.params, val_sets, spec.eval.eval_chunk_size)
    train, val = (np.asarray(x)[:, :trainer.num_models] for x in (train_loss_SM, val_loss_SM))
    out.append(dict(run=results_dir, grid=spec.name,
                    train_loss=float(np.max(np.abs(train / np.asarray(first["train_loss"]) - 1))),
                    val_loss=float(np.max(np.abs(val / np.asarray(first["val_loss"]) - 1)))))
  return out


if __name__ == "__main__":
  for folder in sys.argv[1:]:
    for row in first_chunk_differences(folder):
      print(json.dumps(row), flush=True)
