"""Checking an experiment config and turning it into trainer settings.

A config is a few top-level fields (seed, regime, model_overrides) and six groups, each
named after what it fills, its fields named exactly as the dataclass fields they set
(`GROUPS`): `problem` (train.Problem), `grid` (GridSpec's own fields), `init`
(grid.InitScales), `train` (train.TrainSettings), `eval` (EvalSettings) and `checkpoint`
(CheckpointSettings). Field names are unique across groups, so `flat` gives every field by
its name alone (the config hash is of that view).

`validate` runs before anything is compiled or written; each error names the
field (config.GROUP.FIELD), its value and what is allowed. The set of fields is fixed
(`FIELDS`): an unknown or missing field is an error too.
"""

import dataclasses
import hashlib
import json
import math
import numbers
from typing import Callable

import ml_collections

from inverse_depth import tasks
from inverse_depth.analysis import ENSEMBLE_SUFFIX
from inverse_depth.grid import QK_INITS, VALUE_INITS, W_X_INITS, InitScales
from inverse_depth.models import MODELS
from inverse_depth.train import (OPTIMIZERS, SCALE_FREE_INPUT_MODELS, SCHEDULES, Problem,
                                 TrainSettings)


class ConfigError(ValueError):
  """A config field holds a value that is not allowed."""


def _fail(field: str, value, allowed: str):
  raise ConfigError(f"config.{field}={value!r} is invalid: allowed {allowed}")


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _split_names(value) -> tuple[str, ...]:
  return tuple(name.strip() for name in str(value).split(",") if name.strip())


def model_names(config) -> tuple[str, ...]:
  """The model kinds listed in config.grid.model (comma separated); `config` is a config or
  its `flat` fields."""
  return _split_names(config["grid"]["model"] if "grid" in config else config["model"])


def _int_at_least(low: int) -> tuple[Callable, str]:
  return (lambda v: _is_int(v) and v >= low), f"an integer >= {low}"


def _models_ok(value) -> bool:
  names = _split_names(value)
  return bool(names) and all(n in MODELS for n in names) and len(set(names)) == len(names)


def _depths_ok(value) -> bool:
  return (isinstance(value, (list, tuple)) and len(value) > 0
          and all(_is_int(L) and L >= 1 for L in value)
          and all(x < y for x, y in zip(value, value[1:])))  # consecutive depths are paired


def _spectra_ok(value) -> bool:
  pairs = isinstance(value, (list, tuple)) and len(value) > 0 and all(
      isinstance(pair, (list, tuple)) and len(pair) == 2
      and all(_is_real(v) and 0 <= v < math.inf for v in pair) for pair in value)
  return pairs and len({(float(a), float(b)) for a, b in value}) == len(value)


def _real_in(low: float, high: float, *, open_low: bool, open_high: bool) -> tuple[Callable, str]:
  def ok(v):
    return (_is_real(v) and (v > low if open_low else v >= low)
            and (v < high if open_high else v <= high))
  text = f"a number in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
  return ok, text


_POSITIVE = _real_in(0.0, math.inf, open_low=True, open_high=True)

# field -> (check, what is allowed). Cross-field rules are in `validate`.
FIELDS: dict[str, tuple[Callable, str]] = {
    "model": (_models_ok, f"a comma-separated list of distinct names from {MODELS}"),
    "task": (lambda v: v in tasks.TASKS, f"one of {tasks.TASKS}"),
    "k": _int_at_least(1),
    "spectra": (_spectra_ok, "a non-empty list of distinct (a, b) pairs of finite exponents "
                "a, b >= 0"),
    "depths": (_depths_ok, "a non-empty, strictly increasing list of integers >= 1"),
    "num_seeds": _int_at_least(1),
    "sizes": (lambda v: isinstance(v, (dict, ml_collections.ConfigDict))
              and set(v.keys()) <= set(MODELS),
              f"entries for model kinds ({', '.join(MODELS)}), each with d, P, N, one for "
              "every kind in config.grid.model"),
    "batch_size": _int_at_least(1),
    "microbatch_size": (lambda v: _is_int(v) and v >= 0,
                        "an integer >= 0 (contexts per block of the training gradient; 0: "
                        "automatic, train.CPU_CONTEXTS_PER_BLOCK on a CPU)"),
    "optimizer": (lambda v: v in OPTIMIZERS, f"one of {OPTIMIZERS}"),
    "momentum": _real_in(0.0, 1.0, open_low=False, open_high=True),
    "schedule": (lambda v: v in SCHEDULES, f"one of {SCHEDULES}"),
    "depth_scaled_layer_lr": (lambda v: isinstance(v, bool), "True or False"),
    "fixed_input_norm": (lambda v: isinstance(v, bool), "True or False"),
    "learning_rate": _POSITIVE,
    "rate_factors": (lambda v: isinstance(v, (list, tuple)) and len(v) > 0
                     and all(_is_real(f) and 0 < f < math.inf for f in v)
                     and len(set(map(float, v))) == len(v),
                     "a non-empty list of distinct positive numbers (each model is trained at "
                     "learning_rate x each of them)"),
    "warmup_steps": _int_at_least(0),
    "max_steps": _int_at_least(1),
    "eval_every": _int_at_least(1),
    "rel_tol": _real_in(0.0, 1.0, open_low=False, open_high=True),
    "patience": _int_at_least(1),
    "lr_decay_factor": _real_in(0.0, 1.0, open_low=True, open_high=True),
    "max_lr_decays": _int_at_least(0),
    "divergence_loss": _POSITIVE,
    "val_size": _int_at_least(1),
    "eval_size": _int_at_least(1),
    "eval_chunk_size": _int_at_least(1),
    "W_x_init": (lambda v: v in W_X_INITS, f"one of {W_X_INITS}"),
    "qk_init": (lambda v: v in QK_INITS, f"one of {QK_INITS}"),
    "qk_init_scale": _POSITIVE,
    "qk_init_depth_exponent": _real_in(0.0, 2.0, open_low=False, open_high=False),
    "qk_init_noise": _real_in(0.0, math.inf, open_low=False, open_high=True),
    "context_update_m_init": _real_in(-math.inf, math.inf, open_low=True, open_high=True),
    "positive_gain": (lambda v: isinstance(v, bool), "True or False"),
    "value_init": (lambda v: v in VALUE_INITS, f"one of {VALUE_INITS}"),
    "W_y_init_scale": _POSITIVE,
    "loop_group": (lambda v: _is_int(v) and v >= 0,
                   "an integer >= 0 (looped: layers per group sharing W_q, W_k; 0: one group)"),
    "bound_samples": _int_at_least(0),
    "outlier_factor": _real_in(1.0, math.inf, open_low=True, open_high=True),
    "ensemble_control": (lambda v: isinstance(v, bool), "True or False"),
    "diagnostic_size": _int_at_least(0),
    "stationary_evals": (lambda v: _is_int(v) and (v == 1 or v >= 4),
                         "1 (the final iterate) or an integer >= 4 (a time average)"),
    "stationarity_z": _POSITIVE,
    "regime": (lambda v: isinstance(v, str) and v.isidentifier(),
               "the name of the regime the config applied (experiments/configs/regimes.py)"),
    "model_overrides": (lambda v: isinstance(v, (dict, ml_collections.ConfigDict))
                        and set(v.keys()) <= set(MODELS),
                        f"a mapping from model kinds ({', '.join(MODELS)}) to groups of "
                        "field values"),
    "seed": (_is_int, "an integer"),
    "checkpoint_every": _int_at_least(1),
    "checkpoints_to_keep": _int_at_least(1),
}


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """How a grid is evaluated and judged (the config's `eval` group; default.py says what each
  field means)."""
  val_size: int  # contexts of the validation set (the convergence rule's)
  eval_size: int  # contexts of the held-out set behind every reported number
  eval_chunk_size: int  # contexts per evaluation call
  diagnostic_size: int  # evaluation contexts the diagnostics use (0: none)
  stationary_evals: int  # evaluations averaged at the end of training (1: the final iterate)
  stationarity_z: float  # threshold of the stationarity test, in standard errors
  bound_samples: int  # Monte Carlo contexts of the theory bound (0: none)
  outlier_factor: float  # a model this far above its reference is flagged


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
  """When a grid's training state is saved (the config's `checkpoint` group)."""
  checkpoint_every: int  # steps between checkpoints (a multiple of eval_every)
  checkpoints_to_keep: int  # newest checkpoints kept per grid


def _field_names(cls) -> tuple[str, ...]:
  return tuple(field.name for field in dataclasses.fields(cls))


# The config's groups and their fields, each group named after what it fills and each field
# named as the dataclass field it sets. `grid` holds GridSpec's own fields: the model kinds
# (one grid per kind), its depths, seeds (range(num_seeds)), swept rate factors, sizes
# (N, and the Problem's d and P, per kind), the looped models' tying and the ensemble control.
GROUPS: dict[str, tuple[str, ...]] = {
    "problem": ("task", "k", "spectra"),
    "grid": ("model", "depths", "num_seeds", "rate_factors", "sizes", "loop_group",
             "ensemble_control"),
    "init": _field_names(InitScales),
    "train": _field_names(TrainSettings),
    "eval": _field_names(EvalSettings),
    "checkpoint": _field_names(CheckpointSettings),
}
TOP_LEVEL_FIELDS = ("seed", "regime", "model_overrides")
GROUP_OF = {field: group for group, names in GROUPS.items() for field in names}
assert set(GROUP_OF) | set(TOP_LEVEL_FIELDS) == set(FIELDS), "every field in one place"


def path(field: str) -> str:
  """Where `field` sits in the config: "train.learning_rate", or "seed" at the top level."""
  return f"{GROUP_OF[field]}.{field}" if field in GROUP_OF else field


# Fields that change how a run is saved or blocked but not what it computes: a rerun may
# change them without starting over, and they are left out of the config hash.
# microbatch_size changes only the summation order of the training gradient (train.py); a
# resumed run with another block size continues the same state. (eval_chunk_size is not one:
# evaluation compiled for another chunk shape may round differently, and the convergence
# rule can amplify a last-bit difference in the validation losses it compares.)
RUNTIME_FIELDS = ("checkpoint_every", "checkpoints_to_keep", "microbatch_size")

# Names, not settings: `regime` records which regime of experiments/configs/regimes.py the
# config applied (the fields it set are hashed themselves). Left out of the config hash and
# of the workdir comparison, at the top level and in model_overrides.
LABEL_FIELDS = ("regime",)

# Fields a model kind may set for its own grids
# (config.model_overrides.<kind>.<group>.<field>): everything but what defines the table
# (task, k, spectra), the root seed and the sizes (which are per kind already).
NOT_OVERRIDABLE = ("model", "model_overrides", "task", "k", "spectra", "sizes", "seed")


def flat(config) -> dict:
  """Every field of a config (ConfigDict or the dict config.json holds) by its name alone,
  the groups opened; model_overrides likewise per kind ({kind: {field: value}})."""
  config = config.to_dict() if hasattr(config, "to_dict") else config
  fields = {}
  for key, value in config.items():
    if key in GROUPS:
      fields.update(value)
    elif key == "model_overrides":
      fields[key] = {kind: flat(overrides) for kind, overrides in value.items()}
    else:
      fields[key] = value
  return fields


def nested(fields: dict) -> dict:
  """The inverse of `flat`: fields by name put into their groups."""
  config = {}
  for field, value in fields.items():
    if field == "model_overrides":
      value = {kind: nested(overrides) for kind, overrides in value.items()}
    if field in GROUP_OF:
      config.setdefault(GROUP_OF[field], {})[field] = value
    else:
      config[field] = value
  return config


def set_fields(target: ml_collections.ConfigDict, fields: dict) -> None:
  """Sets each field of `fields` (by name) in its group of `target`, a config or one kind's
  model_overrides (whose groups are made as needed)."""
  for field, value in fields.items():
    if field not in GROUP_OF:
      target[field] = value
      continue
    group = GROUP_OF[field]
    if group not in target:
      target[group] = ml_collections.ConfigDict()
    target[group][field] = value


def _unknown_key(where: str, key: str, known) -> ConfigError:
  hint = (f" (it is a field of the {GROUP_OF[key]} group: config.{path(key)})"
          if key in GROUP_OF else "")
  kind = "field" if where else "field or group"
  return ConfigError(f"config.{where}{key} is not a known {kind}{hint}; known: "
                     f"{', '.join(known)}")


def _check_layout(config: ml_collections.ConfigDict) -> None:
  """Every group and top-level field present, each group holding exactly its fields."""
  known = tuple(GROUPS) + TOP_LEVEL_FIELDS
  for key in config.keys():
    if key not in known:
      raise _unknown_key("", key, known)
  for key in known:
    if key not in config:
      raise ConfigError(f"config.{key} is missing (every group and field of {', '.join(known)} "
                        "must be set)")
  for group, names in GROUPS.items():
    for key in config[group].keys():
      if key not in names:
        raise _unknown_key(f"{group}.", key, names)
    missing = [name for name in names if name not in config[group]]
    if missing:
      raise ConfigError(f"config.{group}.{missing[0]} is missing (every field of the "
                        f"{group} group, {', '.join(names)}, must be set)")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first invalid, unknown or missing field, checking every
  model kind's resolved config (`resolve`) too."""
  _check_layout(config)
  _validate_fields(flat(config))
  for model, overrides in config.model_overrides.items():
    where = f"model_overrides.{model}."
    for key in overrides.keys():
      if key in LABEL_FIELDS:
        continue
      if key not in GROUPS:
        raise ConfigError(f"config.{where}{key} is invalid: allowed a group ("
                          f"{', '.join(GROUPS)}) holding the fields that kind overrides"
                          + (f" (here config.{where}{path(key)})" if key in GROUP_OF else ""))
      for field in overrides[key].keys():
        value = overrides[key][field]
        if field not in GROUPS[key] or field in NOT_OVERRIDABLE:
          _fail(f"{where}{key}.{field}", value, f"a field of the {key} group other than "
                + ", ".join(NOT_OVERRIDABLE) + f" ({', '.join(GROUPS[key])})")
        ok, allowed = FIELDS[field]
        if not ok(value):
          _fail(f"{where}{key}.{field}", value, allowed)
  for model in model_names(config):
    resolved = flat(resolve(config, model))
    _validate_fields(resolved)
    if resolved["fixed_input_norm"] and model not in SCALE_FREE_INPUT_MODELS:
      overridden = "fixed_input_norm" in config.model_overrides.get(model, {}).get("train", {})
      field = (f"model_overrides.{model}.train.fixed_input_norm" if overridden
               else path("fixed_input_norm"))
      _fail(field, True, f"False for model {model!r} (set model_overrides.{model}.train."
            "fixed_input_norm=False): only the kinds whose W_x enters through a layer norm "
            f"({', '.join(SCALE_FREE_INPUT_MODELS)}) may fix its norm")


def resolve(config: ml_collections.ConfigDict, model: str) -> ml_collections.ConfigDict:
  """The config that the grids of `model` run under: config with
  config.model_overrides[model] applied (and no overrides left)."""
  resolved = ml_collections.ConfigDict(config.to_dict())
  overrides = config.model_overrides.get(model, {})
  with resolved.unlocked():
    for key in overrides.keys():
      if key in GROUPS:
        for field in overrides[key].keys():
          resolved[key][field] = overrides[key][field]
      else:
        resolved[key] = overrides[key]
    resolved.model_overrides = {}
  return resolved


def _validate_fields(config: dict) -> None:
  """The rules of FIELDS and the cross-field rules, on a config's `flat` fields."""
  for field, (ok, allowed) in FIELDS.items():
    if not ok(config[field]):
      _fail(path(field), config[field], allowed)
  sizes_of = config["sizes"]
  for model in model_names(config):
    if model not in sizes_of:
      _fail("grid.sizes", sizes_of, f"an entry (d, P, N) for every kind in "
            f"config.grid.model, here {model!r}")
  for model in sizes_of.keys():
    sizes = sizes_of[model]
    unknown_sizes = sorted(set(sizes.keys()) - set(SIZE_FIELDS))
    missing_sizes = [f for f in SIZE_FIELDS if f not in sizes]
    if unknown_sizes or missing_sizes:
      _fail(f"grid.sizes.{model}", sizes, f"exactly the fields {', '.join(SIZE_FIELDS)}")
    for field in SIZE_FIELDS:
      if not (_is_int(sizes[field]) and sizes[field] >= 1):
        _fail(f"grid.sizes.{model}.{field}", sizes[field], "an integer >= 1")
    if sizes["N"] < sizes["d"]:
      _fail(f"grid.sizes.{model}.N", sizes["N"], f"an integer >= d = {sizes['d']}")
    if config["task"] == "topk" and config["k"] > sizes["P"] and model in model_names(config):
      _fail(path("k"), config["k"], f"an integer in [1, P = {sizes['P']}] "
            f"(grid.sizes.{model}.P) for the topk task")
  every = config["eval_every"]
  for field in ("max_steps", "checkpoint_every"):
    if config[field] % every:
      _fail(path(field), config[field], f"a multiple of train.eval_every = {every}")
  averaged = config["stationary_evals"]
  if averaged > 1:
    if config["schedule"] != "constant":
      _fail(path("stationary_evals"), averaged,
            f"1 unless train.schedule is 'constant' (here {config['schedule']!r}): a time "
            "average is only meaningful for a stationary iterate")
    window_steps = (averaged - 1) * every
    if window_steps >= config["max_steps"] - config["warmup_steps"]:
      _fail(path("stationary_evals"), averaged,
            f"an integer whose window (stationary_evals - 1) x eval_every = {window_steps} "
            f"steps ends after the warm-up (max_steps - warmup_steps = "
            f"{config['max_steps'] - config['warmup_steps']})")


def canonical(value):
  """Numbers as floats (so 0 and 0.0 hash alike, as they compare alike), tuples as lists."""
  if isinstance(value, (list, tuple)):
    return [canonical(v) for v in value]
  if _is_real(value):
    return float(value)
  return value


def from_saved(saved: dict) -> ml_collections.ConfigDict:
  """A saved config.json (of a run at the current schema, which records every field) as a
  config."""
  return ml_collections.ConfigDict(saved)


def without_labels(fields: dict) -> dict:
  """`flat` fields without LABEL_FIELDS, at the top level and in model_overrides."""
  unlabelled = {k: v for k, v in fields.items() if k not in LABEL_FIELDS}
  if "model_overrides" in fields:
    unlabelled["model_overrides"] = {
        model: {k: v for k, v in overrides.items() if k not in LABEL_FIELDS}
        for model, overrides in fields["model_overrides"].items()}
  return unlabelled


def config_hash(config_dict: dict) -> str:
  """SHA-256 (first 16 hex digits) of the `flat` fields that determine the results (all but
  RUNTIME_FIELDS and LABEL_FIELDS): the groups are a layout, not a setting."""
  fields = {k: canonical(v) for k, v in without_labels(flat(config_dict)).items()
            if k not in RUNTIME_FIELDS}
  return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


SIZE_FIELDS = ("d", "P", "N")  # per model kind: input dim, context length, hidden width


def spectra(config) -> tuple[tuple[float, float], ...]:
  return tuple((float(a), float(b)) for a, b in config.problem.spectra)


def problem(config, model: str) -> Problem:
  """The task, sizes and spectra the grid of `model` learns."""
  sizes = config.grid.sizes[model]
  return Problem(task=config.problem.task, k=int(config.problem.k), d=int(sizes["d"]),
                 P=int(sizes["P"]), spectra=spectra(config))


@dataclasses.dataclass(frozen=True)
class GridSpec:
  """Everything one grid needs, resolved from the config once (`grid_specs`).

  A grid is one model kind trained on every (spectrum, seed, depth) of the config in
  one process. The ensemble control of a softmax grid is a grid of its own: per seed,
  max(depths) one-layer models, reported at depth L as the average of the first L.
  """
  model: str  # model kind (a key of models.LAYER_PREDICTIONS)
  ensemble: bool  # the ensemble control of `model`
  problem: Problem  # task, k, d, P and the spectra
  depths: tuple[int, ...]  # the reported depths
  seeds: tuple[int, ...]
  rate_factors: tuple[float, ...]  # every model trains at learning_rate x each of them
  N: int  # hidden width
  loop_group: int  # looped only: layers per group sharing W_q, W_k (0: one group per model)
  train: TrainSettings
  init: InitScales
  eval: EvalSettings
  checkpoint: CheckpointSettings
  root_seed: int
  config_hash: str  # of the whole experiment config

  @property
  def label(self) -> str:
    """The model name the grid's records and metrics carry ("softmax-ensemble" for the
    ensemble control)."""
    return self.model + ENSEMBLE_SUFFIX if self.ensemble else self.model

  @property
  def trained_depths(self) -> tuple[int, ...]:
    return (1,) * max(self.depths) if self.ensemble else self.depths

  @property
  def checkpoints_kept(self) -> int:
    """Checkpoints kept per grid: checkpoints_to_keep, and the whole averaging window."""
    return self.checkpoint.checkpoints_to_keep + self.eval.stationary_evals - 1

  @property
  def stationary_steps(self) -> tuple[int, ...]:
    """The steps whose held-out evaluations are averaged: the last `stationary_evals`
    evaluations of training (every `eval_every` steps up to max_steps)."""
    every, last = self.train.eval_every, self.train.max_steps
    return tuple(last - every * i for i in reversed(range(self.eval.stationary_evals)))

  @property
  def name(self) -> str:
    """File name of the grid (grids/<name>.json, checkpoints/<name>/)."""
    return self.label + "_" + "+".join(spectrum_name(a, b) for a, b in self.problem.spectra)


def spectrum_name(a: float, b: float) -> str:
  return f"a{float(a):g}_b{float(b):g}"


def grid_specs(config: ml_collections.ConfigDict) -> list[GridSpec]:
  """The grids of a validated config, in training order: per model kind its grid, then (for
  softmax with ensemble_control) the ensemble control. Each settings dataclass is its group."""
  specs = []
  digest = config_hash(config.to_dict())
  for model in model_names(config):
    resolved = resolve(config, model)
    grid = resolved.grid
    for ensemble in (False, True):
      if ensemble and not (grid.ensemble_control and model == "softmax"):
        continue
      specs.append(GridSpec(
          model=model, ensemble=ensemble, problem=problem(resolved, model),
          depths=tuple(int(L) for L in grid.depths), seeds=tuple(range(grid.num_seeds)),
          rate_factors=tuple(float(f) for f in grid.rate_factors),
          N=int(grid.sizes[model]["N"]), loop_group=grid.loop_group,
          train=TrainSettings(**resolved.train.to_dict()),
          init=InitScales(**resolved.init.to_dict()),
          eval=EvalSettings(**resolved.eval.to_dict()),
          checkpoint=CheckpointSettings(**resolved.checkpoint.to_dict()),
          root_seed=resolved.seed, config_hash=digest))
  return specs


def map_flat_flags(argv: list[str]) -> tuple[list[str], list[str]]:
  """`argv` with each flat config flag of before the groups (--config.FIELD=VALUE,
  --config.model_overrides.KIND.FIELD=VALUE) renamed to its place in the groups
  (--config.GROUP.FIELD=VALUE), and a message per renamed flag."""
  mapped, messages = [], []
  for argument in argv:
    name, equals, value = argument.partition("=")
    parts = name.split(".")
    if parts[0] == "--config" and len(parts) > 1:
      field_at = 3 if parts[1] == "model_overrides" else 1
      if len(parts) == field_at + 1 and parts[field_at] in GROUP_OF:
        parts.insert(field_at, GROUP_OF[parts[field_at]])
        new_name = ".".join(parts)
        messages.append(f"{name} is now {new_name} (config groups: inverse_depth/config.py "
                        "GROUPS); mapped")
        argument = new_name + equals + value
    mapped.append(argument)
  return mapped, messages
