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

import json
import os

from absl import app, flags

from inverse_depth import config as config_lib, experiment, relaxation

flags.DEFINE_string("workdir", None, "a finished constant-rate run with its checkpoints",
                    required=True)
flags.DEFINE_integer("depth", 1, "the depth of the run trained again")
flags.DEFINE_list("preset", ["", "W_x"], "'+'-joined groups set to their final values, per "
                  "probe ('' for none)")
flags.DEFINE_integer("steps", 2000, "steps of each probe")
flags.DEFINE_bool("curvature", False, "also the temperature direction's predicted time at "
                  "every kept checkpoint")
FLAGS = flags.FLAGS

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
    found = relaxation.approach_with_groups_preset(
        spec, trainer.layout, final, m, list(filter(None, entry.split("+"))), FLAGS.steps)
    print(f"L={FLAGS.depth} preset {entry or 'none'}: temperature tau {found['tau']:.0f} "
          f"(seeds {', '.join(f'{tau:.0f}' for tau in found['seed_taus'])})")
  if FLAGS.curvature:
    batch = relaxation.curvature_batch(spec, 2048)
    for step, taus in relaxation.temperature_times_along_the_run(spec, FLAGS.workdir, m,
                                                                 batch):
      print(f"L={FLAGS.depth} step {step}: temperature direction predicts "
            + ", ".join(f"{tau:.0f}" for tau in taus))


if __name__ == "__main__":
  app.run(main)
