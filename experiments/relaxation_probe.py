"""Which parameters hold the score temperature back: its approach with groups preset.

    python -m experiments.relaxation_probe --workdir=runs/relaxation --depth=1 \
        --preset=,W_x,W_y+W_v+W_o,W_x+W_y+W_v+W_o

Trains one depth of a finished constant-rate run again from its own initial state (the same
seeds, data stream and regime) for --steps steps, reading the temperature at the run's
evaluation steps, once per entry of
--preset: a '+'-joined set of parameter groups set to the run's final values before the first
step (the empty entry: none, the run itself). If a slow group drives the temperature, presetting
it removes the slow part of the approach. Prints, per entry, tau of y_inf + a exp(-t / tau)
fitted to the seed-mean temperature (trajectory.relaxation_time) and each seed's; with
--curvature, also the temperature direction's predicted time (relaxation.predicted_times) at the
start and at every kept checkpoint of the run, to see whether the curvature changes on the way.
"""

import dataclasses
import json
import os

import jax
import numpy as np
from absl import app, flags

from inverse_depth import config as config_lib, experiment, relaxation, trajectory

flags.DEFINE_string("workdir", None, "a finished constant-rate run with its checkpoints",
                    required=True)
flags.DEFINE_integer("depth", 1, "the depth of the run trained again")
flags.DEFINE_list("preset", ["", "W_x"], "'+'-joined groups set to their final values, per "
                  "probe ('' for none)")
flags.DEFINE_integer("steps", 2000, "steps of each probe")
flags.DEFINE_bool("curvature", False, "also the temperature direction's predicted time at "
                  "every kept checkpoint")
FLAGS = flags.FLAGS

CURVATURE_STREAM = 7  # relaxation_report's contexts


def temperature_approach(spec, final_params, m: int, preset: list[str], steps: int) -> dict:
  """Model m of `spec` trained alone from its initial state with the `preset` groups at their
  values in `final_params`: its temperature [evaluations, seeds] every eval_every steps, the
  fitted tau of the seed mean, and each seed's."""
  alone = dataclasses.replace(spec, depths=(spec.depths[m],))
  source_layout = experiment.grid_trainer(spec).layout
  trainer = experiment.grid_trainer(alone)
  state = trainer.init_state()
  params = jax.tree.map(np.array, state.params)
  for group in preset:
    if group in params["model"]:
      params["model"][group][:, 0] = np.asarray(final_params["model"][group])[:, m]
    elif group in params["layer"]:
      params["layer"][group][:, trainer.layout.layer_slice(0)] = np.asarray(
          final_params["layer"][group])[:, source_layout.layer_slice(m)]
    else:
      raise ValueError(f"--preset: unknown group {group!r}; allowed "
                       f"{', '.join([*params['model'], *params['layer']])}")
  state = state.replace(params=jax.tree.map(
      lambda x, like: jax.device_put(x, like.sharding), params, state.params))
  readings = []
  for _ in range(steps // spec.train.eval_every):
    state, _ = trainer.train_chunk(state)
    readings.append(trajectory.parameter_summary(jax.tree.map(np.asarray, state.params),
                                                 trainer.layout)["temperature"][:, 0])
  temperature_ES = np.asarray(readings)
  t = spec.train.eval_every * np.arange(len(readings), dtype=float)
  return dict(temperature_ES=temperature_ES, tau=trajectory.relaxation_time(t, temperature_ES.mean(axis=1))["tau"],
              seed_taus=[trajectory.relaxation_time(t, series)["tau"]
                         for series in temperature_ES.T])


def curvature_along_the_way(spec, workdir: str, m: int) -> list[tuple[int, list[float]]]:
  """The temperature direction's predicted time per seed at the start and every checkpoint."""
  trainer = experiment.grid_trainer(spec)
  like = trainer.init_state()
  every = spec.checkpoint.checkpoint_every
  steps = list(range(every, spec.train.max_steps + 1, every))
  batch = spec.problem.sample(jax.random.fold_in(jax.random.key(spec.root_seed),
                                                 CURVATURE_STREAM), 2048, *spec.problem.spectra[0])
  out = []
  for step, params in zip([0] + steps, [like.params] + experiment.read_window(
      spec, trainer, like, workdir, tuple(steps))):
    taus = []
    for s in range(len(spec.seeds)):
      model, layers = trainer.layout.model_params(jax.tree.map(lambda x: np.asarray(x[s]),
                                                               params), m)
      taus.append(relaxation.predicted_times(
          spec.model, spec.depths[m], dict(model=model, layer=layers), batch,
          learning_rate=spec.train.learning_rate,
          momentum=spec.train.momentum)["temperature"]["tau"])
    out.append((step, taus))
  return out


def main(argv):
  del argv
  with open(os.path.join(FLAGS.workdir, "config.json")) as f:
    spec = config_lib.grid_specs(config_lib.from_saved(json.load(f)))[0]
  if FLAGS.depth not in spec.depths:
    raise ValueError(f"--depth {FLAGS.depth}: allowed {', '.join(map(str, spec.depths))}")
  m = spec.depths.index(FLAGS.depth)
  trainer = experiment.grid_trainer(spec)
  final = experiment.read_window(spec, trainer, trainer.init_state(), FLAGS.workdir,
                                 (spec.train.max_steps,))[0]
  for entry in FLAGS.preset:
    found = temperature_approach(spec, final, m, list(filter(None, entry.split("+"))),
                                 FLAGS.steps)
    print(f"L={FLAGS.depth} preset {entry or 'none'}: temperature tau {found['tau']:.0f} "
          f"(seeds {', '.join(f'{tau:.0f}' for tau in found['seed_taus'])})")
  if FLAGS.curvature:
    for step, taus in curvature_along_the_way(spec, FLAGS.workdir, m):
      print(f"L={FLAGS.depth} step {step}: temperature direction predicts "
            + ", ".join(f"{tau:.0f}" for tau in taus))


if __name__ == "__main__":
  app.run(main)
