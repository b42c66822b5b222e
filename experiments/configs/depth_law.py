"""The depth law where the paper puts it: softmax, top-2, isotropic, d = 16, P = 128.

    python -m experiments.run --config=experiments/configs/depth_law.py --workdir=runs/depth_law

Depths 1..64 (powers of two), 3 seeds, evaluation on 100,000 shared contexts so that depth
differences of a few tenths of a percent are resolved by paired standard errors. Training
regime (BUILD_NOTES.md "Where the law appears" (docs/notes/annealed_adam.md), "Depth law", "Convergence"): Adam 1e-3 with cosine
decay to zero over 24000 steps (at 3e-3 for 3000 steps the depth-4 and depth-8 models end
above the depth-2 one; every model ends lower when the schedule doubles, from 6000 to 12000
steps by 0.04-0.9% and from 12000 to 24000 by 0.04-1.1% per depth, although every model met
the convergence rule at 12000; docs/notes/annealed_adam.md), query and key weights drawn at the small
scale 0.3 (initial logits of sd 0.5, so no layer starts saturated on the wrong tokens; the
identity start gives the same depth-1 loss and a higher loss at every depth > 1:
docs/notes/annealed_adam.md). About 57 minutes on 2 CPU cores to itself. Committed results:
results/depth_law/.
`--config.grid.ensemble_control=True` adds the ensemble control (per seed, 64 one-layer models on
the seed's training stream, averaged after training; about twice the main grid's time); it
was measured at 3e-3 (docs/notes/annealed_adam.md).
"""

from experiments.configs import arguments, default, regimes


def get_config(argument: str | None = None):
  arguments.parse(argument)
  config = default.get_config()
  regimes.apply(config, "annealed_adam")
  config.grid.model = "softmax"
  config.grid.sizes.softmax.update(d=16, P=128, N=32)
  config.grid.depths = (1, 2, 4, 8, 16, 32, 64)
  config.grid.num_seeds = 3
  config.train.max_steps = 24000
  config.checkpoint.checkpoint_every = 500
  config.eval.val_size = 2048
  config.eval.eval_size = 100_000
  config.eval.eval_chunk_size = 4096
  config.eval.bound_samples = 200_000
  config.grid.ensemble_control = False
  return config
