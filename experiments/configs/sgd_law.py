"""The depth law under constant-step SGD: softmax, top-2, isotropic, d = 16, P = 128, N = 32.

    python -m experiments.run --config=experiments/configs/sgd_law.py --workdir=runs/sgd_law
    python -m experiments.run --config=experiments/configs/sgd_law.py:paper \
        --workdir=runs/sgd_law_paper

Regime regimes.SGD_LAW: SGD with heavy-ball momentum 0.9 at a constant rate 3e-3 after a 200-step warm-up, batch
256; every layer's W_q, W_k start at 0.73 I (+ 0.01 noise), so the attention logits start
near 0.73^2 N cos = 17 cos, the temperature of the best single cosine-attention layer
(theory.softmax_bound). Depths 1..64 (powers of two), 3 seeds. A constant-rate iterate
fluctuates (single evaluations move by several %), so every reported R, A and C is the
average over the last `stationary_evals` evaluations (one every 250 steps), and each
model is tested for stationarity over that window (BUILD_NOTES.md "The SGD law: machinery").
Committed results: results/sgd_law/ (the default `cpu` tier). The `paper` tier goes to depth
256 over 48000 steps with 100,000 evaluation contexts: a depth-L model relaxes about L times
slower under SGD (BUILD_NOTES "Where the law appears": depth 64 is not converged at 12000
steps), so four times the depth takes four times the steps; an accelerator's run, not run yet.
The `trajectory` tier trains one seed for 20000 steps and keeps every evaluation's checkpoint:
metrics.jsonl then carries, per model and evaluation, R, A, C, the parameter norms, gain and
score temperature, and the gradient-noise traces (inverse_depth.trajectory), to find where each
depth settles.
The `stationary` tiers train the law's grid at its stationary state (docs/notes/stationary.md):
regimes.SGD_STATIONARY (W_x held at its initial norm, which changes no prediction), and a step
budget per depth of 500 L steps, about 2.4 relaxation times of the slowest mode (A - C, ~205 L):
`stationary` trains depths 1..32 for 16000 steps, `stationary_deep` depth 64 for 32000 steps
(87 and 110 min run side by side on 2 cores); experiments.join_runs joins them (committed:
results/sgd_law_stationary/, with the commands of results/README.md). Every evaluation's
checkpoint is kept, for experiments.relaxation_report and experiments.sgd_noise.
The `relaxation` tier trains depths 1, 2 and 4 of the stationary regime for 4000 steps and
evaluates every 25 steps (checkpoints every 250): relaxation times of 100-1000 steps, which the
250-step evaluations of `stationary` resolve poorly or not at all (L = 1's temperature, L = 2's
A - C); about 5 min on 2 cores (committed: results/sgd_law_stationary/relaxation/).
"""

from experiments.configs import arguments, default, regimes

TIERS = ("cpu", "paper", "trajectory", "stationary", "stationary_deep", "relaxation")


def get_config(argument: str | None = None):
  tier = arguments.parse(argument, tier=("cpu", TIERS)).tier
  config = default.get_config()
  regimes.apply(config, "sgd_law")
  config.grid.model = "softmax"
  config.grid.sizes.softmax.update(d=16, P=128, N=32)
  config.grid.depths = (1, 2, 4, 8, 16, 32, 64)
  config.grid.num_seeds = 3
  config.train.max_steps = 12000
  config.checkpoint.checkpoint_every = 1000
  config.eval.val_size = 2048
  config.eval.eval_size = 20_480
  config.eval.eval_chunk_size = 4096
  config.eval.bound_samples = 100_000
  config.grid.ensemble_control = False
  if tier == "trajectory":
    # Where each depth settles (issue 43): one seed trained 1.7 x as long (about an hour on 2
    # cores), every evaluation's checkpoint kept, so that anything not in metrics.jsonl can be
    # computed afterwards.
    config.grid.num_seeds = 1
    config.train.max_steps = 20000
    config.checkpoint.checkpoint_every = config.train.eval_every
    config.checkpoint.checkpoints_to_keep = config.train.max_steps // config.train.eval_every
  if tier in ("stationary", "stationary_deep"):
    regimes.apply(config, "sgd_stationary")
    config.grid.depths = (1, 2, 4, 8, 16, 32) if tier == "stationary" else (64,)
    config.train.max_steps = 16000 if tier == "stationary" else 32000
    config.checkpoint.checkpoint_every = config.train.eval_every
    config.checkpoint.checkpoints_to_keep = config.train.max_steps // config.train.eval_every
  if tier == "relaxation":
    regimes.apply(config, "sgd_stationary")
    config.grid.depths = (1, 2, 4)
    config.train.max_steps = 4000
    config.train.eval_every = 25
    config.eval.bound_samples = 0  # the one-layer bound is stationary/'s
    config.checkpoint.checkpoint_every = 250
    config.checkpoint.checkpoints_to_keep = config.train.max_steps // 250
  if tier == "paper":
    config.grid.depths = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    config.train.max_steps = 48000
    config.eval.eval_size = 100_000
    config.eval.bound_samples = 200_000
  return config
