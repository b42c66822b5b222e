"""The study's training regimes, each defined once (docs/regimes.md), as fields by name (each
goes to its group of the config: config.set_fields). A config applies one by
name, `regimes.apply(config, "sgd_law")` (for one model kind's grids:
`regimes.apply(config, "linear_gradient_descent", model="linear")`), which sets the regime's
fields and records its name in the config's `regime` field, so that config.json says which
regime a run trained in (a field the config sets afterwards departs from the regime; the
name is a label, not part of the config hash).

SGD_LAW: where the paper's law appears (results/sgd_law/): heavy-ball SGD at a constant
  rate, every layer's W_q, W_k started at 0.73 I (logits ~ 17 cos, the temperature of the
  best single cosine layer), losses time-averaged over the last 16 evaluations.
SGD_STATIONARY: SGD_LAW with W_x held at its initial norm (`fixed_input_norm`), which changes
  no prediction but stops SGD noise from growing |W_x| and so slowly lowering its effective
  rate: constant-rate SGD then has a stationary state to reach (docs/notes/stationary.md;
  results/sgd_law_stationary/, `make demo`).
ANNEALED_ADAM: depth_law.py's (results/depth_law/): Adam 1e-3 with cosine decay to zero,
  small random query/key start. Deep models specialise there and sink below the paper's
  floor; no law.
ADAM_COSINE_IDENTITY: the study's base regime before the SGD law (the default until issue
  35): Adam 3e-3 with cosine decay to zero from the identity query/key start at scale 1. The
  tables' cpu tier, the generalised models, linear_floor.py and smoke.py start from it (their
  committed runs were made in it) and change what they name.
ADAM_CONSTANT: SGD_LAW's start, rate and batch with Adam in place of SGD
  (results/regimes_compared/quick_adam_constant).
LINEAR_GRADIENT_DESCENT: the linear model's (the tables' linear grids): Adam 3e-4, batch 64,
  orthogonal W_x, every gain W_o W_v^j W_y = 1 and identity query/key weights at scale
  sqrt(d L), so that a depth-L linear model starts as L unit steps of gradient descent on the
  context (docs/regimes.md).

default.py trains in SGD_LAW, the regime the study recommends.
"""

import math

import ml_collections

from inverse_depth import config as config_lib
from inverse_depth.config import ConfigError

SGD_LAW = dict(optimizer="sgd", momentum=0.9, schedule="constant", learning_rate=3e-3,
               warmup_steps=200, batch_size=256, qk_init="identity", qk_init_scale=0.73,
               eval_every=250, stationary_evals=16, fixed_input_norm=False)

SGD_STATIONARY = dict(SGD_LAW, fixed_input_norm=True)

ANNEALED_ADAM = dict(optimizer="adam", schedule="cosine", learning_rate=1e-3, warmup_steps=200,
                     batch_size=256, qk_init="random", qk_init_scale=0.3, eval_every=250,
                     stationary_evals=1, fixed_input_norm=False)

ADAM_COSINE_IDENTITY = dict(optimizer="adam", schedule="cosine", learning_rate=3e-3,
                            warmup_steps=200, batch_size=256, qk_init="identity",
                            qk_init_scale=1.0, eval_every=200, stationary_evals=1,
                            fixed_input_norm=False)

ADAM_CONSTANT = dict(SGD_LAW, optimizer="adam", fixed_input_norm=False)

# qk_init_scale is sqrt(d) of the linear model's sizes, set by `apply`.
LINEAR_GRADIENT_DESCENT = dict(batch_size=64, W_x_init="orthogonal", value_init="identity",
                               qk_init="identity", qk_init_depth_exponent=1.0,
                               learning_rate=3e-4, warmup_steps=100)

# Query/key start of the SGD regimes per k: identity at scale s puts the logits near s^2 N cos,
# so s = sqrt(tau / N) with tau the best single cosine layer's temperature
# (theory.softmax_bound at d = 16, P = 128: 16.7 for top-2 on six of the seven Table 1
# spectra, 4.8 for top-16 on all four of Table 4's; docs/notes/reproduction.md). SGD_LAW
# carries the top-2 value.
SGD_QK_SCALE = {2: 0.73, 16: 0.39}

REGIMES = dict(sgd_law=SGD_LAW, sgd_stationary=SGD_STATIONARY, annealed_adam=ANNEALED_ADAM,
               adam_cosine_identity=ADAM_COSINE_IDENTITY, adam_constant=ADAM_CONSTANT,
               linear_gradient_descent=LINEAR_GRADIENT_DESCENT)


def fields(name: str, config: ml_collections.ConfigDict, model: str | None = None) -> dict:
  """The fields regime `name` sets (for `model`'s grids: the sizes it reads are that kind's)."""
  if name not in REGIMES:
    raise ConfigError(f"config field regime={name!r} does not exist: allowed "
                      f"{', '.join(REGIMES)}")
  regime = dict(REGIMES[name])
  if name == "linear_gradient_descent":
    regime["qk_init_scale"] = math.sqrt(config.grid.sizes[model or "linear"].d)
  return regime


def apply(config: ml_collections.ConfigDict, name: str, model: str | None = None) -> None:
  """Sets regime `name`'s fields (each in its group) and config.regime = name; with `model`,
  into config.model_overrides[model] (that kind's grids only)."""
  target = config if model is None else config.model_overrides[model]
  config_lib.set_fields(target, fields(name, config, model))
  target.regime = name


def check(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError where config.regime, or a model kind's, names no regime of REGIMES."""
  named = [("regime", config.regime)] + [
      (f"model_overrides.{model}.regime", overrides.regime)
      for model, overrides in config.model_overrides.items() if "regime" in overrides]
  for field, name in named:
    if name not in REGIMES:
      raise ConfigError(f"config.{field}={name!r} is invalid: allowed {', '.join(REGIMES)}")
