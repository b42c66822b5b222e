"""A results.json of an earlier schema version brought to the current one
(workdir.SCHEMA_VERSION lists what each version added). This is the only module that knows
the earlier layouts: every reader goes through workdir.read_results, which refuses them.

    python -m experiments.upgrade_results --results=DIR [--config=FILE.py[:ARGUMENT]]
"""

import ml_collections

from inverse_depth import analysis, config as config_lib, experiment, records
from inverse_depth.workdir import SCHEMA_VERSION

# A theory bound recomputed for the upgrade must give the stored reference to this relative
# difference (the same Monte Carlo stream, the same code up to summation order).
BOUND_TOLERANCE = 1e-5

# What version 3 added to the theory bound of each kind (experiment.theory_bound).
_BOUND_FIELDS_ADDED = {"softmax_bound": "average_by_layers", "linear_floor": "context_floor"}


# Fields a config of version 3 or earlier may lack, each at the value that reproduces the
# behaviour of a run made before the field existed; version 3 hashed a field at this value as
# absent.
_FIELDS_BEFORE_VERSION_4 = {"value_init": "random", "W_y_init_scale": 1.0, "stationary_evals": 1,
                            "stationarity_z": 3.0, "rate_factors": [1.0], "microbatch_size": 0,
                            "fixed_input_norm": False}


class UpgradeError(ValueError):
  """A results.json that cannot be brought to the current schema as asked."""


def upgrade(results: dict, made_by: ml_collections.ConfigDict | None = None) -> dict:
  """`results` at schema SCHEMA_VERSION (a new dict; its records are changed in place).
  `made_by`: the config that made the run, needed where its config records no regime (it
  must hash as the run's config)."""
  version = results.get("schema_version", 1)
  if version > SCHEMA_VERSION:
    raise UpgradeError(f"schema version {version} is newer than this code's {SCHEMA_VERSION}")
  if version < 4:
    _every_field_recorded(results)
  if version < 3:
    _to_version_3(results, made_by)
  if version < 5:
    _fields_in_groups(results)
  return dict(schema_version=SCHEMA_VERSION, **{k: v for k, v in results.items()
                                                 if k != "schema_version"})


def _version_3_hash(config: dict) -> str:
  """The config hash as version 3 computed it: a field of _FIELDS_BEFORE_VERSION_4 at its
  earlier value left out."""
  return config_lib.config_hash({
      k: v for k, v in config.items()
      if not (k in _FIELDS_BEFORE_VERSION_4
              and config_lib.canonical(v) == config_lib.canonical(_FIELDS_BEFORE_VERSION_4[k]))})


def _every_field_recorded(results: dict) -> None:
  """Version 4: each field the config lacks, at its earlier value, and the config hashes of
  every field: the run's, and each joined source's (the joined config at the source's
  depths, spectra and steps). Each stored hash is first checked to be its config's."""
  config = results["config"]

  def source_config(source: dict) -> dict:
    return dict(config, **{field: source[field] for field in ("depths", "spectra", "max_steps")})

  joined = "joined_from" in results  # a join has no hash of its own
  for where, stored, made_by in ([] if joined else [("the run", results["config_hash"], config)]) + [
      (source["source"], source["config_hash"], source_config(source))
      for source in results.get("joined_from", [])]:
    if _version_3_hash(made_by) != stored:
      raise UpgradeError(f"{where}: the stored config hash {stored} is not its config's "
                         f"({_version_3_hash(made_by)}): the config was edited")
  for field, value in _FIELDS_BEFORE_VERSION_4.items():
    config.setdefault(field, value)
  if joined:
    results.pop("unrecorded_config_fields", None)  # every source records every field now
    for source in results["joined_from"]:
      source["config_hash"] = config_lib.config_hash(source_config(source))
  else:
    results["config_hash"] = config_lib.config_hash(config)


def _fields_in_groups(results: dict) -> None:
  """Version 5: the config's fields in their groups (config.nested; the hash, of the fields by
  name, stays). A run's stored hash is first checked to be its config's."""
  stored = results.get("config_hash")  # a join has none of its own
  if stored is not None and config_lib.config_hash(results["config"]) != stored:
    raise UpgradeError(f"the run's stored config hash {stored} is not its config's "
                       f"({config_lib.config_hash(results['config'])}): the config was edited")
  results["config"] = config_lib.nested(results["config"])


def _to_version_3(results: dict, made_by) -> None:
  """Versions 1 and 2 to 3: provenance (null: the run predates it; joins have none), the
  regime's name, learning_rate on every record, and every theory bound's full fields."""
  joined = "joined_from" in results
  if not joined:
    results.setdefault("provenance", None)
  config = results["config"]
  if "regime" not in config:
    if joined:
      raise UpgradeError("a join's config names no regime: upgrade its sources, then join "
                         "them again (python -m experiments.join_runs)")
    _copy_regime(config, results["config_hash"], made_by)
  for record in results["runs"] + results["fits"]:
    if "learning_rate" not in record:
      kind = records.kind_config(config, analysis.model_kind(record["model"]))
      if list(kind.get("rate_factors", [1.0])) != [1.0]:
        raise UpgradeError("a rate sweep's records must carry their learning_rate")
      record["learning_rate"] = kind["learning_rate"]
  recomputed = {}
  for fit in results["fits"]:
    bound = fit.get("bound")
    if bound and _BOUND_FIELDS_ADDED[bound["kind"]] not in bound:
      key = (analysis.model_kind(fit["model"]), fit["a"], fit["b"])
      if key not in recomputed:
        recomputed[key] = _recomputed_bound(config, *key, stored=bound)
      fit["bound"] = {**recomputed[key], **bound}  # the stored numbers, the added fields


def _copy_regime(config: dict, config_hash: str, made_by) -> None:
  if made_by is None:
    raise UpgradeError("the run's config names no regime: pass the config that made it "
                       "(--config=FILE.py[:ARGUMENT], with its --config.GROUP.FIELD overrides)")
  if config_lib.config_hash(made_by.to_dict()) != config_hash:
    raise UpgradeError("--config does not make this run: its config hash "
                       f"{config_lib.config_hash(made_by.to_dict())} is not the run's "
                       f"{config_hash}")
  config["regime"] = made_by.regime
  for model, overrides in made_by.model_overrides.items():
    if "regime" in overrides:
      config["model_overrides"][model]["regime"] = overrides.regime


def _recomputed_bound(config: dict, model: str, a: float, b: float, stored: dict) -> dict:
  """experiment.theory_bound of `model`'s grid at (a, b), checked to give the stored
  reference (the upgrade keeps the stored fields and adds the new ones from it)."""
  spec = next(spec for spec in config_lib.grid_specs(config_lib.from_saved(
      config_lib.nested(config)))
              if spec.model == model and not spec.ensemble)
  bound = experiment.theory_bound(spec, a, b)
  difference = abs(bound["reference"] - stored["reference"]) / abs(stored["reference"])
  if difference > BOUND_TOLERANCE:
    raise UpgradeError(f"{model} ({a:g}, {b:g}): the recomputed bound {bound['reference']:.6g} "
                       f"is not the stored {stored['reference']:.6g} (relative difference "
                       f"{difference:.1e} > {BOUND_TOLERANCE:g}): the theory changed since "
                       "the run; rerun it instead")
  return bound
