"""A results.json of an earlier schema: refused by every reader, brought to the current one by
inverse_depth.upgrade (the only code that knows the earlier layouts)."""

import copy
import json

import pytest

from inverse_depth import config as config_lib, joined, upgrade, workdir
from tests import tiny


# Fields that version 4 added to every config, at the value of a run made before each existed.
ADDED_BY_VERSION_4 = {"value_init": "random", "W_y_init_scale": 1.0, "stationary_evals": 1,
                      "stationarity_z": 3.0, "rate_factors": [1.0], "fixed_input_norm": False}


def _as_schema_4(results: dict) -> dict:
  """`results` as a version-4 file held it: the config's fields by name, not in groups."""
  old = json.loads(json.dumps(results))  # as read from disk: no shared records
  old["schema_version"] = 4
  old["config"] = config_lib.flat(old["config"])
  return old


def _as_schema_3(results: dict) -> dict:
  """`results` as a version-3 file held it: the version-4 config without the fields version 4
  added (where at their earlier value), hashed without them."""
  old = _as_schema_4(results)
  old["schema_version"] = 3
  for field, value in ADDED_BY_VERSION_4.items():
    assert old["config"][field] == value, field
    del old["config"][field]
  old["config_hash"] = config_lib.config_hash(old["config"])
  return old


def _as_schema_1(results: dict) -> dict:
  """`results` as a version-1 file held it: the version-3 config, no version, provenance,
  regime, learning rates or the theory bound's later fields."""
  old = _as_schema_3(results)
  del old["schema_version"], old["provenance"], old["config"]["regime"]
  for record in old["runs"] + old["fits"]:
    del record["learning_rate"]
  for fit in old["fits"]:
    if fit.get("bound"):
      del fit["bound"]["average_by_layers"]
  return old


def test_readers_refuse_an_earlier_schema_naming_the_upgrade(tiny_run, tmp_path):
  (tmp_path / "results.json").write_text(json.dumps(_as_schema_1(tiny_run["results"])))
  with pytest.raises(workdir.SchemaError, match="schema version 1, this code reads 5: run "
                     f"python -m experiments.upgrade_results --results={tmp_path}"):
    workdir.read_results(str(tmp_path))


def test_a_version_1_file_upgrades_to_what_the_run_writes_today(tiny_run):
  """Every field a version-1 file lacks comes back as the run wrote it: the regime from the
  config that made the run, learning rates from its config, the theory bound's later fields
  recomputed from its config (checked to give the stored reference)."""
  results = tiny_run["results"]
  assert any(fit.get("bound") for fit in results["fits"])
  upgraded = upgrade.upgrade(_as_schema_1(results), tiny_run["config"])
  assert upgraded["provenance"] is None
  assert json.dumps(dict(upgraded, provenance=results["provenance"]), sort_keys=True) == (
      json.dumps(json.loads(json.dumps(results)), sort_keys=True))


def test_a_version_4_file_gets_its_fields_in_groups_with_the_same_hash(tiny_run):
  results = tiny_run["results"]
  old = _as_schema_4(results)
  assert "learning_rate" in old["config"] and old["config_hash"] == results["config_hash"]
  assert json.dumps(upgrade.upgrade(old), sort_keys=True) == json.dumps(
      json.loads(json.dumps(results)), sort_keys=True)
  edited = _as_schema_4(results)
  edited["config"]["learning_rate"] *= 2
  with pytest.raises(upgrade.UpgradeError, match="the run's stored config hash .* is not its "
                     "config's"):
    upgrade.upgrade(edited)


def test_a_version_3_file_gets_every_field_and_hash_as_the_run_writes_today(tiny_run):
  results = tiny_run["results"]
  upgraded = upgrade.upgrade(_as_schema_3(results))
  assert json.dumps(upgraded, sort_keys=True) == json.dumps(json.loads(json.dumps(results)),
                                                           sort_keys=True)


def test_a_version_3_join_gets_each_source_hash_of_every_field(tiny_run):
  """A join has no hash of its own; each source's is recomputed from the joined config at the
  source's depths, after the stored one is checked under version 3's rule."""
  results = json.loads(json.dumps(tiny_run["results"]))
  fields = config_lib.flat(results["config"])
  depths = fields["depths"]
  parts = {}
  for name, part_depths in (("shallow", depths[:1]), ("deep", depths[1:])):
    config = config_lib.nested(dict(fields, depths=part_depths))
    parts[name] = dict(results, config=config, config_hash=config_lib.config_hash(config),
                       runs=[run for run in results["runs"] if run["depth"] in part_depths])
  union = json.loads(json.dumps(joined.join_results(parts)))
  old = json.loads(json.dumps(union))
  old["schema_version"] = 3
  old["config"] = config_lib.flat(old["config"])
  for field in ADDED_BY_VERSION_4:
    del old["config"][field]
  for source in old["joined_from"]:
    source["config_hash"] = config_lib.config_hash(dict(old["config"], depths=source["depths"]))
  assert old["joined_from"][0]["config_hash"] != union["joined_from"][0]["config_hash"]
  assert json.dumps(upgrade.upgrade(old), sort_keys=True) == json.dumps(union, sort_keys=True)


def test_a_version_3_file_whose_config_was_edited_is_refused(tiny_run):
  old = _as_schema_3(tiny_run["results"])
  old["config"]["seed"] += 1
  with pytest.raises(upgrade.UpgradeError, match="the stored config hash .* is not its config's"):
    upgrade.upgrade(old)


def test_the_regime_comes_only_from_the_config_that_made_the_run(tiny_run):
  old = _as_schema_1(tiny_run["results"])
  with pytest.raises(upgrade.UpgradeError, match="names no regime: pass the config"):
    upgrade.upgrade(copy.deepcopy(old))
  other = tiny.tiny_config()
  other.seed = 1
  with pytest.raises(upgrade.UpgradeError, match="--config does not make this run"):
    upgrade.upgrade(copy.deepcopy(old), other)


def test_a_bound_the_theory_no_longer_gives_is_refused(tiny_run):
  old = _as_schema_1(tiny_run["results"])
  fit = next(fit for fit in old["fits"] if fit.get("bound"))
  fit["bound"]["reference"] *= 1.01
  with pytest.raises(upgrade.UpgradeError, match="the theory changed since the run"):
    upgrade.upgrade(old, tiny_run["config"])
