"""Default experiment: both controlled models on the top-2 task, isotropic spectrum.

Other configs import this one and override fields. Every field can also be
overridden on the command line: --config.FIELD=VALUE. A scale tier can be
named after the file: --config=experiments/configs/default.py:smoke is the
same as --config=experiments/configs/smoke.py.
"""

import importlib

import ml_collections

from inverse_depth.config import ConfigError

# Scale tiers (SPEC section 5), each a config module next to this one.
SCALES = ("default", "smoke", "quick")


def get_config(scale: str = "default") -> ml_collections.ConfigDict:
  if scale not in SCALES:
    raise ConfigError(f"config scale {scale!r} does not exist: allowed {', '.join(SCALES)}")
  if scale != "default":
    return importlib.import_module(f"experiments.configs.{scale}").get_config()
  config = ml_collections.ConfigDict()
  # Model kinds to train, comma separated: softmax, linear. One grid per kind and spectrum.
  config.model = "softmax,linear"
  # Task: "topk" (mean label of the k most cosine-similar context inputs) or "top1" (copy).
  config.task = "topk"
  # k of the top-k task (ignored by top1); must be <= P.
  config.k = 2
  # Spectra (a, b): lambda_k = k^-a (inputs), omega_k = k^-b (beta); exponents >= 0.
  config.spectra = ((0.0, 0.0),)
  # Depths L of the grid: positive, unique. All are trained together in one process.
  config.depths = (1, 2, 4, 8, 16)
  # Seeds per depth (replicates: each has its own initialisation and training stream).
  config.num_seeds = 2
  # Input dimension d.
  config.d = 8
  # Context length P (number of labelled examples per context).
  config.P = 32
  # Hidden width N (>= d).
  config.N = 32
  # Contexts per training step (per seed).
  config.batch_size = 256
  # Adam learning rate reached after the warm-up.
  config.learning_rate = 3e-3
  # Linear warm-up steps of the learning rate.
  config.warmup_steps = 200
  # Hard cap on training steps; a multiple of eval_every.
  config.max_steps = 8000
  # Steps between validation evaluations (one compiled call trains this many steps).
  config.eval_every = 200
  # Convergence: an evaluation improves if the validation loss drops below (1 - rel_tol) x best.
  config.rel_tol = 0.005
  # Convergence: evaluations without improvement before the learning rate decays (or the
  # model is declared converged once it has decayed max_lr_decays times).
  config.patience = 4
  # Convergence: factor applied to a model's learning rate when it stalls.
  config.lr_decay_factor = 0.3
  # Convergence: number of learning-rate decays before a stall means "converged".
  config.max_lr_decays = 3
  # A model whose training loss exceeds this (or is not finite) is frozen and marked diverged.
  config.divergence_loss = 1e6
  # Contexts in the fixed validation set used by the convergence rule.
  config.val_size = 2048
  # Contexts in the held-out evaluation set behind every reported number (>= 10240 for reports).
  config.eval_size = 10240
  # Contexts per evaluation call (bounds evaluation memory).
  config.eval_chunk_size = 2048
  # W_q, W_k ~ N(0, qk_init_scale^2 / N).
  config.qk_init_scale = 1.0
  # Flip the sign of W_o where g = W_o W_v W_y starts negative (SPEC section 7).
  config.positive_gain = True
  # Root PRNG seed: initialisation, training batches, validation and evaluation sets.
  config.seed = 0
  # Steps between checkpoints of a grid's training state (a multiple of eval_every); a
  # checkpoint is also written on SIGTERM/SIGINT and when the grid stops training.
  config.checkpoint_every = 1000
  # Newest checkpoints kept per grid (older ones are deleted; >= 2 allows a fallback).
  config.checkpoints_to_keep = 3
  return config
