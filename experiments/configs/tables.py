"""Shared pieces of the paper's tables (table1.py ... table4_top16.py, easy.py, selection.py).

Two scale tiers, named after the config file: `cpu` (default; every table on 2 CPU cores,
`make reproduce`) and `paper` (depths to 256 on one accelerator):

    python -m experiments.run --config=experiments/configs/table1.py:paper --workdir=DIR

Sizes are the paper's (BUILD_NOTES "Sizes"): softmax d = 16, P = 128; linear d = 128,
P = 1024. Each model kind trains under its own regime (BUILD_NOTES "Where the law appears" (docs/notes/annealed_adam.md),
"Linear floor"), set through config.model_overrides so that one run holds both kinds.
"""

import ml_collections

from experiments.configs import arguments, default, regimes
from inverse_depth import config as config_lib
from inverse_depth.config import ConfigError

TIERS = ("cpu", "paper")

# Table 1 (difficult task, k = 2): (a, b) with lambda_k = k^-a, omega_k = k^-b.
TABLE1_SPECTRA = ((0.0, 0.0), (0.0, 0.25), (0.0, 0.5), (0.0, 1.0), (0.25, 0.0), (0.5, 0.0),
                  (1.0, 0.0))
# Table 2 (linear model, easy task).
TABLE2_SPECTRA = ((2.0, 0.5), (2.0, 1.0), (2.0, 1.5), (2.0, 2.0), (0.5, 2.0), (1.0, 2.0),
                  (1.5, 2.0))
# Table 4 (softmax fitted exponents).
TABLE4_TOP2_SPECTRA = ((0.25, 0.25), (0.25, 0.5), (0.5, 0.5))
TABLE4_TOP16_SPECTRA = ((0.0, 0.25), (0.0, 0.5), (0.25, 0.25), (0.25, 0.5))

# Per tier: softmax depths, seeds, steps, regime, evaluation contexts, bound contexts; then
# the linear model's depths, steps, evaluation and bound contexts. The softmax regimes: at the
# paper tier depth_law.py's (regimes.ANNEALED_ADAM) for its long budget; at the cpu tier's
# 1500 steps the cosine-scorer start at Adam 3e-3 (regimes.ADAM_COSINE_IDENTITY), where the
# annealed regime leaves every depth 3-4% above the single-layer bound and one (1, 0) model
# stuck (docs/notes/reproduction.md).
_TIER_FIELDS = {
    "cpu": dict(softmax_depths=(1, 2, 4, 8, 16, 32), softmax_seeds=2, softmax_steps=1500,
                softmax_regime="adam_cosine_identity", softmax_eval=20_480, softmax_bound=50_000,
                linear_depths=(1, 2, 4), linear_steps=300, linear_eval=4096,
                linear_bound=10_000),
    "paper": dict(softmax_depths=(1, 2, 4, 8, 16, 32, 64, 128, 256), softmax_seeds=3,
                  softmax_steps=24000, softmax_regime="annealed_adam", softmax_eval=100_000,
                  softmax_bound=200_000, linear_depths=(1, 2, 4, 8), linear_steps=2000,
                  linear_eval=20_480, linear_bound=20_000),
}


def parse_tier(argument: str | None) -> str:
  """The tier a table's config file is asked for (`FILE.py:tier=paper`, or `:paper`)."""
  return arguments.parse(argument, tier=("cpu", TIERS)).tier


def base(tier: str, model: str, task: str, k: int, spectra,
         softmax_regime: str | None = None) -> ml_collections.ConfigDict:
  """The default config at tier `tier`. Softmax trains in the tier's regime: at the paper
  tier depth_law.py's (small random query/key start, Adam 1e-3, cosine decay to zero over
  its 24000 steps; BUILD_NOTES "Where the law appears" (docs/notes/annealed_adam.md)); at the cpu tier's 1500 steps the cosine-scorer
  start at Adam 3e-3, which ends nearer the single-layer optimum in that budget. Linear
  trains under its own regime: Adam 3e-4, batch 64, orthogonal input map, and the
  gradient-descent start (every gain W_o W_v^j W_y = 1, identity query/key at scale
  sqrt(d L)), so that a depth-L linear model starts as L unit steps of gradient descent on
  the context (regimes.LINEAR_GRADIENT_DESCENT; BUILD_NOTES "The paper's tables under
  Adam"). `softmax_regime` replaces the tier's."""
  tier_fields = _TIER_FIELDS[tier]
  config = default.get_config()
  regimes.apply(config, softmax_regime or tier_fields["softmax_regime"])
  config.grid.model = model
  config.problem.task = task
  config.problem.k = k
  config.problem.spectra = tuple(spectra)
  config.grid.depths = tier_fields["softmax_depths"]
  config.grid.num_seeds = tier_fields["softmax_seeds"]
  config.train.warmup_steps = 200
  config.train.max_steps = tier_fields["softmax_steps"]
  config.train.eval_every = 250
  config.checkpoint.checkpoint_every = 500
  config.eval.val_size = 2048
  config.eval.eval_size = tier_fields["softmax_eval"]
  config.eval.eval_chunk_size = 4096
  config.eval.bound_samples = tier_fields["softmax_bound"]
  regimes.apply(config, "linear_gradient_descent", model="linear")
  config_lib.set_fields(config.model_overrides.linear, dict(
      depths=tier_fields["linear_depths"], num_seeds=1, max_steps=tier_fields["linear_steps"],
      eval_every=50, checkpoint_every=100, val_size=1024, eval_size=tier_fields["linear_eval"],
      eval_chunk_size=512, diagnostic_size=1024, bound_samples=tier_fields["linear_bound"]))
  return config


# The SGD law's tables (sgd_table1.py, sgd_table4.py, sgd_table4_top16.py): softmax only, in
# regimes.SGD_LAW, per tier: depths, seeds, steps, averaged evaluations, evaluation contexts.
# The cpu tier trains as long as results/sgd_law did (deep models still relax there at 12000
# steps); Table 1's seven spectra then take about 3.5 h on 2 cores: split them with
# --config.problem.spectra and join the runs (experiments.join_runs). The `short` tier is what one
# session of 2 cores affords for all three tables (about 1.5 h together): one seed, 6000
# steps, the last 12 evaluations averaged; at 6000 steps a depth-32 model of the isotropic
# task sits within 0.2% of its 12000-step loss (BUILD_NOTES "Where the law appears").
# The `stationary` tiers (issue 46) train in regimes.SGD_STATIONARY with the step budget of
# results/sgd_law_stationary, 500 L steps, about 2.4 relaxation times of the slowest mode at
# the grid's deepest depth (docs/notes/stationary.md): `stationary` trains depths 1..16 for
# 8000 steps, `stationary_deep` depth 32 for 16000 steps; experiments.join_runs joins them
# (and spectra split with --config.problem.spectra) into one grid.
SGD_TIERS = ("short", "cpu", "paper", "stationary", "stationary_deep")
_SGD_TIER_FIELDS = {
    "short": dict(depths=(1, 2, 4, 8, 16, 32), num_seeds=1, max_steps=6000, stationary_evals=12,
                  eval_size=20_480, bound_samples=50_000, outlier_factor=1.5),
    "cpu": dict(depths=(1, 2, 4, 8, 16, 32), num_seeds=2, max_steps=12000, stationary_evals=16,
                eval_size=20_480, bound_samples=50_000, outlier_factor=1.5),
    "paper": dict(depths=(1, 2, 4, 8, 16, 32, 64, 128, 256), num_seeds=3, max_steps=48000,
                  stationary_evals=16, eval_size=100_000, bound_samples=200_000,
                  outlier_factor=1.5),
    "stationary": dict(depths=(1, 2, 4, 8, 16), num_seeds=2, max_steps=8000,
                       stationary_evals=16, eval_size=20_480, bound_samples=50_000,
                       outlier_factor=1.5),
    "stationary_deep": dict(depths=(32,), num_seeds=2, max_steps=16000, stationary_evals=16,
                            eval_size=20_480, bound_samples=50_000, outlier_factor=1.5),
}


def parse_sgd_tier(argument: str | None) -> str:
  """The SGD tier a table's config file is asked for (`FILE.py:tier=stationary`)."""
  return arguments.parse(argument, tier=("cpu", SGD_TIERS)).tier


def sgd_law_base(tier: str, k: int, spectra) -> ml_collections.ConfigDict:
  """Softmax on the top-k task over `spectra` in regimes.SGD_LAW (SGD_STATIONARY at the
  stationary tiers) at tier `tier` (_SGD_TIER_FIELDS), its query/key start at the top-k
  optimum's temperature (regimes.SGD_QK_SCALE):
  under SGD a depth-L model's layers move 1/L as fast together, so the deep models of a grid
  could not reach another temperature in the cpu budget."""
  if k not in regimes.SGD_QK_SCALE:
    raise ConfigError(f"sgd_law tables: k={k} has no query/key scale; allowed "
                      f"{sorted(regimes.SGD_QK_SCALE)}")
  config = default.get_config()
  regimes.apply(config, "sgd_stationary" if tier.startswith("stationary") else "sgd_law")
  config_lib.set_fields(config, _SGD_TIER_FIELDS[tier])
  config.grid.model = "softmax"
  config.problem.task = "topk"
  config.problem.k = k
  config.problem.spectra = tuple(spectra)
  config.init.qk_init_scale = regimes.SGD_QK_SCALE[k]
  config.checkpoint.checkpoint_every = 500
  config.eval.val_size = 2048
  config.eval.eval_chunk_size = 4096
  return config
