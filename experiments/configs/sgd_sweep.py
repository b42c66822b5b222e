"""The SGD law's noise sweep: rates 1e-3, 3e-3, 1e-2 on one sampler, at batch 256 or 1024.

    python -m experiments.run --config=experiments/configs/sgd_sweep.py --workdir=runs/sgd_sweep_b256
    python -m experiments.run --config=experiments/configs/sgd_sweep.py:1024 \
        --workdir=runs/sgd_sweep_b1024
    python -m experiments.run --config=experiments/configs/sgd_sweep.py:quick \
        --workdir=runs/sgd_sweep_quick
    python -m experiments.run --config=experiments/configs/sgd_sweep.py:quick1024 \
        --workdir=runs/sgd_sweep_quick1024

sgd_law.py's regime (regimes.SGD_LAW) with `rate_factors` (1/3, 1, 10/3) of its 3e-3: every
model is trained at each rate from the same start on the same stream, so the three rates are
paired. The hypothesis under test (BUILD_NOTES "Where the law appears"): the depth term c and the
floor's excess over the best single cosine layer both grow in proportion to
eta_eff / B = rate / ((1 - momentum) batch). Depths 1..32 at batch 256 and 1..16 at batch
1024 (four times the work per step), 2 seeds, 12000 steps and the last 16 evaluations
averaged, as in sgd_law.py: there the validation losses still fell 1-2% over steps
4000..12000 at every depth (the deep models the most), so a shorter schedule is not yet
justified. Cost on 2 CPU cores, from sgd_law.py's 0.37 s per step for 381 layers at batch
256: about 75 min at batch 256 (378 layers) and 2.5 h at batch 1024 (186 layers, 4x batch).
The two full sweeps are not yet run; `:quick` (depths 1..8, 6000 steps, about 10 min) is
results/sgd_sweep/b256 (BUILD_NOTES "Where the law appears").
"""

from experiments.configs import arguments, sgd_law

# Variants: the batch size, or "quick": batch 256 at depths 1..8 over 6000 steps (the last 12
# evaluations averaged), a 10-minute first look at c against the rate; "quick1024": the same
# at batch 1024 with one seed (four times the work per step: 0.6 s per step on 2 cores,
# about 60 min).
VARIANTS = ("256", "1024", "quick", "quick1024")


def get_config(argument: str | None = None):
  variant = arguments.parse(argument, variant=("256", VARIANTS)).variant
  config = sgd_law.get_config()
  config.grid.rate_factors = (1 / 3, 1.0, 10 / 3)
  config.train.batch_size = 1024 if variant in ("1024", "quick1024") else 256
  config.grid.depths = {"256": (1, 2, 4, 8, 16, 32), "1024": (1, 2, 4, 8, 16),
                        "quick": (1, 2, 4, 8), "quick1024": (1, 2, 4, 8)}[variant]
  config.grid.num_seeds = 1 if variant == "quick1024" else 2
  if variant in ("quick", "quick1024"):
    config.train.max_steps = 6000
    config.eval.stationary_evals = 12
    config.checkpoint.checkpoint_every = 500
  # the one-layer models' noise excess is not a stuck model (quick.py)
  config.eval.outlier_factor = 1.5
  return config
