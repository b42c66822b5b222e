"""Default experiment: both controlled models on the top-2 task, isotropic spectrum.

Training regime regimes.SGD_LAW (docs/regimes.md): heavy-ball SGD at a constant rate 3e-3
after a 200-step warm-up, query and key weights started at 0.73 I, the last 16 evaluations
averaged.

The fields sit in six groups, each named after the dataclass it fills and each field named
as that dataclass's field (inverse_depth/config.py GROUPS): problem, grid, init, train, eval,
checkpoint; seed, regime and model_overrides are at the top. Other configs import this one
and override fields (config.train.learning_rate = ...; a regime's fields by name:
regimes.apply). Every field can also be overridden on the command line:
--config.GROUP.FIELD=VALUE (an old flat flag, --config.FIELD=VALUE, is mapped to it with a
message). A scale tier can be
named after the file: --config=experiments/configs/default.py:scale=smoke (or `:smoke`) is
the same as --config=experiments/configs/smoke.py.
"""

import importlib

import ml_collections

from experiments.configs import arguments, regimes

# Scale tiers (docs/sizes.md), each a config module next to this one.
SCALES = ("default", "smoke", "quick")


def get_config(argument: str | None = None) -> ml_collections.ConfigDict:
  scale = arguments.parse(argument, scale=("default", SCALES)).scale
  if scale != "default":
    return importlib.import_module(f"experiments.configs.{scale}").get_config()
  config = ml_collections.ConfigDict()
  # Root PRNG seed: initialisation, training batches, validation and evaluation sets.
  config.seed = 0
  # The training regime's fields (batch_size, optimizer, momentum, schedule, learning_rate,
  # warmup_steps, eval_every, qk_init, qk_init_scale, stationary_evals) come from
  # regimes.SGD_LAW, the regime the study recommends (docs/regimes.md); a config that trains
  # in another applies it by name (regimes.apply(config, NAME)).
  # The name of the regime applied last (a key of regimes.REGIMES), recorded in config.json:
  # a label, not a setting (left out of the config hash: config.LABEL_FIELDS).
  config.regime = "sgd_law"

  # ---- problem: what the models learn (train.Problem; d and P per kind in grid.sizes).
  config.problem = ml_collections.ConfigDict()
  # Task: "topk" (mean label of the k most cosine-similar context inputs) or "top1" (copy).
  config.problem.task = "topk"
  # k of the top-k task (ignored by top1); must be <= P.
  config.problem.k = 2
  # Spectra (a, b): lambda_k = k^-a (inputs), omega_k = k^-b (beta); exponents >= 0.
  config.problem.spectra = ((0.0, 0.0),)

  # ---- grid: which models one process trains together (config.GridSpec): one grid per kind.
  config.grid = ml_collections.ConfigDict()
  # Model kinds to train, comma separated: softmax, linear (the controlled models), and the
  # generalised softmax models single_stream, per_layer_values, context_updates, looped
  # (docs/models.md; inverse_depth/models/). One grid per kind.
  config.grid.model = "softmax,linear"
  # Depths L of the grid: positive, unique. All are trained together in one process.
  config.grid.depths = (1, 2, 4, 8, 16)
  # Seeds per depth (replicates: each has its own initialisation and training stream).
  config.grid.num_seeds = 2
  # A rate sweep on one sampler: every model of a grid is trained at learning_rate x each of
  # these factors (same initialisation and training stream per seed, so the rates are paired);
  # its records and fits carry learning_rate. (1.0,): no sweep.
  config.grid.rate_factors = (1.0,)
  # Sizes per model kind (one entry for every kind in grid.model): input dim d, context
  # length P (labelled examples per context), hidden width N >= d. The paper's own numbers
  # imply softmax d = 16, P = 128 and linear d = 128, P = 1024 (docs/sizes.md,
  # BUILD_NOTES.md "Sizes"); the generalised softmax models take the softmax sizes.
  config.grid.sizes = ml_collections.ConfigDict(dict(
      softmax=dict(d=16, P=128, N=32),
      linear=dict(d=128, P=1024, N=128),
      single_stream=dict(d=16, P=128, N=32),
      per_layer_values=dict(d=16, P=128, N=32),
      context_updates=dict(d=16, P=128, N=32),
      looped=dict(d=16, P=128, N=32)))
  # Looped model only: W_q, W_k are shared by groups of this many consecutive layers (the
  # last group of a model may be shorter); 0 ties all layers of a model into one group.
  config.grid.loop_group = 0
  # Softmax only: also train, per seed, max(depths) one-layer models on the seed's training
  # stream and report the average of the first L of them beside the depth-L model.
  config.grid.ensemble_control = False

  # ---- init: initialisation (grid.InitScales).
  config.init = ml_collections.ConfigDict()
  # Input-map initialisation: "gaussian" (W_x ~ N(0, 1/d)) or "orthogonal" (sqrt(N/d) x
  # orthonormal columns: the same mean W_x^T W_x = (N/d) I with no eigenvalue spread).
  config.init.W_x_init = "gaussian"
  # Query/key initialisation: "random" (W_q, W_k ~ N(0, qk_init_scale^2 / N)) or "identity"
  # (W_q, W_k = qk_init_scale I + qk_init_noise N(0, 1); softmax logits start near
  # qk_init_scale^2 N cos(x_test, x_i)).
  config.init.qk_init = regimes.SGD_LAW["qk_init"]
  # Scale of the query/key initialisation (see qk_init).
  config.init.qk_init_scale = regimes.SGD_LAW["qk_init_scale"]
  # A depth-L model starts with query/key scale qk_init_scale L^(exponent / 2), so each
  # layer's form W_q^T W_k (the linear model's step kappa_l) starts ~ L^exponent; 1 makes
  # the 1/L residual's layers start as L repeated depth-1 steps (0: the same start at
  # every depth).
  config.init.qk_init_depth_exponent = 0.0
  # Noise added to the identity start (qk_init = "identity" only).
  config.init.qk_init_noise = 0.01
  # Flip the sign of W_o where g = W_o W_v W_y starts negative (docs/regimes.md); for
  # per_layer_values, the sign of each W_v^l where g_l = W_o W_v^l W_y starts negative.
  config.init.positive_gain = True
  # Value/readout initialisation: "random" (W_v ~ N(0, 1/N), W_o ~ N(0, 1/N)) or "identity"
  # (W_v = I, W_o = W_y^T / |W_y|^2: every gain W_o W_v^j W_y is 1; with identity query/key
  # weights and an orthogonal W_x the linear model starts as L gradient-descent steps of size
  # qk_init_scale^2 L^qk_init_depth_exponent / (d L) on the context; positive_gain has
  # nothing to flip).
  config.init.value_init = "random"
  # Standard deviation of the label embedding W_y's entries. The controlled models use W_y
  # only through the gains W_o W_v^j W_y (its scale is a change of units); the single
  # stream adds W_y y_i to the keys, where at 1 it outweighs W_x x_i about 4 to 1.
  config.init.W_y_init_scale = 1.0
  # context_updates only: the starting context-attention weight m (0: the controlled model;
  # -1: the context-to-context mask of Bordelon et al.).
  config.init.context_update_m_init = 0.0

  # ---- train: optimiser, schedule and convergence rule (train.TrainSettings).
  config.train = ml_collections.ConfigDict()
  # Contexts per training step (per seed).
  config.train.batch_size = regimes.SGD_LAW["batch_size"]
  # Contexts per block of the training gradient: the step accumulates the gradient over
  # blocks of at most this many contexts (the largest divisor of batch_size not above it),
  # the same gradient up to summation order; small blocks keep a step's intermediates in a
  # CPU's cache. 0: automatic, the block measured best for the model kind on a CPU
  # (train.CPU_CONTEXTS_PER_BLOCK) and the whole batch on an accelerator. Not part of the
  # config hash (config.RUNTIME_FIELDS).
  config.train.microbatch_size = 0
  # Optimiser: "adam" or "sgd" (heavy-ball momentum, below). Element-wise either way, so the
  # models of a grid stay independent.
  config.train.optimizer = regimes.SGD_LAW["optimizer"]
  # SGD momentum (ignored by adam).
  config.train.momentum = regimes.SGD_LAW["momentum"]
  # Learning-rate schedule after the warm-up: "constant", "cosine" (to zero at max_steps) or
  # "stall_decay" (constant, decayed per model on validation stalls; the rule below).
  config.train.schedule = regimes.SGD_LAW["schedule"]
  # Peak learning rate reached after the warm-up.
  config.train.learning_rate = regimes.SGD_LAW["learning_rate"]
  # Linear warm-up steps of the learning rate.
  config.train.warmup_steps = regimes.SGD_LAW["warmup_steps"]
  # Hard cap on training steps; a multiple of eval_every.
  config.train.max_steps = 8000
  # Steps between validation evaluations (one compiled call trains this many steps).
  config.train.eval_every = regimes.SGD_LAW["eval_every"]
  # Convergence (every schedule): an evaluation improves if the validation loss drops below
  # (1 - rel_tol) x best.
  config.train.rel_tol = 0.005
  # Convergence: evaluations without improvement before the learning rate decays (or the
  # model is declared converged once it has decayed max_lr_decays times).
  config.train.patience = 4
  # Convergence: factor applied to a model's learning rate when it stalls.
  config.train.lr_decay_factor = 0.3
  # Convergence: number of learning-rate decays before a stall means "converged".
  config.train.max_lr_decays = 3
  # A model whose training loss exceeds this (or is not finite) is frozen and marked diverged.
  config.train.divergence_loss = 1e6
  # Multiply the updates of a depth-L model's per-layer weights (W_q, W_k; W_v^l for
  # per_layer_values) by L, undoing the 1/L their gradients carry from the residual update
  # under sgd (adam's steps do not see the 1/L: there it makes layer steps L x larger).
  config.train.depth_scaled_layer_lr = False
  # Rescale each model's W_x to its initial norm after every step (softmax-type kinds only,
  # train.SCALE_FREE_INPUT_MODELS): the layer norm makes their loss independent of |W_x|, so
  # this changes no prediction but stops SGD noise from growing |W_x| and so slowly lowering
  # W_x's effective rate (docs/notes/stationary.md).
  config.train.fixed_input_norm = False

  # ---- eval: evaluation and the judgement of a grid (config.EvalSettings).
  config.eval = ml_collections.ConfigDict()
  # Contexts in the fixed validation set used by the convergence rule.
  config.eval.val_size = 2048
  # Contexts in the held-out evaluation set behind every reported number (>= 10240 for reports).
  config.eval.eval_size = 10240
  # Contexts per evaluation call (bounds evaluation memory).
  config.eval.eval_chunk_size = 2048
  # Contexts of the evaluation set (its first ones) on which the diagnostics are computed:
  # mode-wise loss along the eigen-directions of Sigma and, for softmax, the selection error
  # |pbar_L - p*|^2. 0 skips them. (The attention mass on the target's tokens during
  # training is measured on the first validation chunk, whatever this is.)
  config.eval.diagnostic_size = 4096
  # Held-out R, A and C (and each model's loss) are averaged over the last stationary_evals
  # evaluations, one every eval_every steps up to max_steps: the time average of a
  # constant-rate iterate, whose single snapshots move by several % (BUILD_NOTES.md
  # "Stationary evaluation").
  # 1: the final iterate. > 1 needs schedule "constant".
  config.eval.stationary_evals = regimes.SGD_LAW["stationary_evals"]
  # A model is stationary over that window when the means of its two halves differ by less
  # than stationarity_z of their standard errors, and the loss's slope across it is less
  # than stationarity_z of its own; a model that fails is flagged (kept out of the fits).
  config.eval.stationarity_z = 3.0
  # Monte Carlo contexts for the theory bound each grid is judged against (softmax:
  # theory.softmax_bound, linear: theory.linear_floor at the deepest depth); 0 skips it.
  config.eval.bound_samples = 100_000
  # A model whose loss exceeds this factor x the median of the other seeds at its depth or
  # x the theory reference of its depth (evaluation.depth_references) is flagged by name and
  # kept out of the means, the fits and the checks.
  config.eval.outlier_factor = 1.2

  # ---- checkpoint: saving the training state (config.CheckpointSettings).
  config.checkpoint = ml_collections.ConfigDict()
  # Steps between checkpoints of a grid's training state (a multiple of eval_every); a
  # checkpoint is also written on SIGTERM/SIGINT and when the grid stops training.
  config.checkpoint.checkpoint_every = 1000
  # Newest checkpoints kept per grid (older ones are deleted; >= 2 allows a fallback).
  config.checkpoint.checkpoints_to_keep = 3

  # Per model kind, fields whose value differs for that kind's grids, in their groups (any
  # field except model, task, k, spectra, sizes, seed), e.g. the linear model's own
  # train.learning_rate or grid.depths: model_overrides.linear.train.learning_rate. Empty:
  # every kind runs under the fields above.
  config.model_overrides = ml_collections.ConfigDict(
      {model: {} for model in ("softmax", "linear", "single_stream", "per_layer_values",
                               "context_updates", "looped")})
  return config
