"""The SGD law's noise sweep: rates 1e-3, 3e-3, 1e-2 on one sampler, at batch 256 or 1024.

    python -m experiments.run --config=experiments/configs/sgd_sweep.py --workdir=runs/sgd_sweep_b256
    python -m experiments.run --config=experiments/configs/sgd_sweep.py:1024 \
        --workdir=runs/sgd_sweep_b1024

sgd_law.py's regime (regimes.SGD_LAW) with `rate_factors` (1/3, 1, 10/3) of its 3e-3: every
model is trained at each rate from the same start on the same stream, so the three rates are
paired. The hypothesis under test (BUILD_NOTES "The SGD law"): the depth term c and the
floor's excess over the best single cosine layer both grow in proportion to
eta_eff / B = rate / ((1 - momentum) batch). Depths 1..32 at batch 256 and 1..16 at batch
1024 (four times the work per step), 2 seeds, 12000 steps and the last 16 evaluations
averaged, as in sgd_law.py: there the validation losses still fell 1-2% over steps
4000..12000 at every depth (the deep models the most), so a shorter schedule is not yet
justified. Cost on 2 CPU cores, from sgd_law.py's 0.37 s per step for 381 layers at batch
256: about 75 min at batch 256 (378 layers) and 2.5 h at batch 1024 (186 layers, 4x batch).
Not yet run (BUILD_NOTES "The SGD law").
"""

from experiments.configs import sgd_law
from inverse_depth.config import ConfigError

BATCHES = ("256", "1024")


def get_config(batch: str = "256"):
  if batch not in BATCHES:
    raise ConfigError(f"sgd_sweep batch {batch!r} does not exist: allowed {', '.join(BATCHES)}")
  config = sgd_law.get_config()
  config.rate_factors = (1 / 3, 1.0, 10 / 3)
  config.batch_size = int(batch)
  config.depths = (1, 2, 4, 8, 16, 32) if batch == "256" else (1, 2, 4, 8, 16)
  config.num_seeds = 2
  config.outlier_factor = 1.5  # the one-layer models' noise excess is not a stuck model (quick.py)
  return config
