"""Checking an experiment config and turning it into trainer settings.

`validate` runs before anything is compiled or written; each error names the
field, its value and what is allowed.
"""

import numbers

import ml_collections

from inverse_depth import tasks
from inverse_depth.grid import InitScales
from inverse_depth.models import MODELS
from inverse_depth.train import Problem, TrainSettings


class ConfigError(ValueError):
  """A config field holds a value that is not allowed."""


def _fail(field: str, value, allowed: str):
  raise ConfigError(f"config.{field}={value!r} is invalid: allowed {allowed}")


def _is_int(value) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def model_names(config) -> tuple[str, ...]:
  """The model kinds listed in config.model (comma separated)."""
  return tuple(name.strip() for name in str(config.model).split(",") if name.strip())


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first invalid field."""
  names = model_names(config)
  if not names or any(name not in MODELS for name in names) or len(set(names)) != len(names):
    _fail("model", config.model, f"a comma-separated list of distinct names from {MODELS}")
  if config.task not in tasks.TASKS:
    _fail("task", config.task, f"one of {tasks.TASKS}")

  def positive_int(field):
    if not _is_int(config[field]) or config[field] < 1:
      _fail(field, config[field], "an integer >= 1")

  def in_range(field, low, high, text):
    value = config[field]
    if not _is_real(value) or not low(value) or not high(value):
      _fail(field, value, text)

  for field in ("d", "P", "N", "num_seeds", "batch_size", "max_steps", "eval_every", "patience",
                "val_size", "eval_size", "eval_chunk_size", "k"):
    positive_int(field)
  if config.N < config.d:
    _fail("N", config.N, f"an integer >= d = {config.d}")
  if config.task == "topk" and config.k > config.P:
    _fail("k", config.k, f"an integer in [1, P = {config.P}]")
  if not _is_int(config.warmup_steps) or config.warmup_steps < 0:
    _fail("warmup_steps", config.warmup_steps, "an integer >= 0")
  if not _is_int(config.max_lr_decays) or config.max_lr_decays < 0:
    _fail("max_lr_decays", config.max_lr_decays, "an integer >= 0")
  if not _is_int(config.seed):
    _fail("seed", config.seed, "an integer")
  if config.max_steps % config.eval_every:
    _fail("max_steps", config.max_steps, f"a multiple of eval_every = {config.eval_every}")
  in_range("learning_rate", lambda v: v > 0, lambda v: v < float("inf"), "a number > 0")
  in_range("divergence_loss", lambda v: v > 0, lambda v: True, "a number > 0")
  in_range("qk_init_scale", lambda v: v > 0, lambda v: v < float("inf"), "a number > 0")
  in_range("rel_tol", lambda v: v >= 0, lambda v: v < 1, "a number in [0, 1)")
  in_range("lr_decay_factor", lambda v: v > 0, lambda v: v < 1, "a number in (0, 1)")
  if not isinstance(config.positive_gain, bool):
    _fail("positive_gain", config.positive_gain, "True or False")

  depths = tuple(config.depths) if isinstance(config.depths, (list, tuple)) else None
  if (not depths or any(not _is_int(L) or L < 1 for L in depths)
      or len(set(depths)) != len(depths)):
    _fail("depths", config.depths, "a non-empty list of distinct integers >= 1")

  spectra = config.spectra
  pairs_ok = isinstance(spectra, (list, tuple)) and len(spectra) > 0 and all(
      isinstance(pair, (list, tuple)) and len(pair) == 2 and all(_is_real(v) for v in pair)
      for pair in spectra)
  if not pairs_ok:
    _fail("spectra", spectra, "a non-empty list of (a, b) pairs of numbers")
  for a, b in spectra:
    if a < 0 or b < 0:
      _fail("spectra", spectra, "exponents a, b >= 0 in every (a, b) pair")
  if len({(float(a), float(b)) for a, b in spectra}) != len(spectra):
    _fail("spectra", spectra, "distinct (a, b) pairs")


def problem(config, a: float, b: float) -> Problem:
  return Problem(task=config.task, k=int(config.k), a=float(a), b=float(b), d=int(config.d),
                 P=int(config.P))


def train_settings(config) -> TrainSettings:
  return TrainSettings(
      batch_size=config.batch_size, learning_rate=config.learning_rate,
      warmup_steps=config.warmup_steps, max_steps=config.max_steps,
      eval_every=config.eval_every, rel_tol=config.rel_tol, patience=config.patience,
      lr_decay_factor=config.lr_decay_factor, max_lr_decays=config.max_lr_decays,
      divergence_loss=config.divergence_loss)


def init_scales(config) -> InitScales:
  return InitScales(qk_scale=config.qk_init_scale, positive_gain=config.positive_gain)
