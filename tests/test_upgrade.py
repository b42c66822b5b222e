"""A results.json of an earlier schema: refused by every reader, brought to the current one by
inverse_depth.upgrade (the only code that knows the earlier layouts)."""

import copy
import json

import pytest

from inverse_depth import upgrade, workdir
from tests import tiny


def _as_schema_1(results: dict) -> dict:
  """`results` as a version-1 file held it: no version, provenance, regime, learning rates
  or the theory bound's later fields."""
  old = json.loads(json.dumps(results))  # as read from disk: no shared records
  del old["schema_version"], old["provenance"], old["config"]["regime"]
  for record in old["runs"] + old["fits"]:
    del record["learning_rate"]
  for fit in old["fits"]:
    if fit.get("bound"):
      del fit["bound"]["average_by_layers"]
  return old


def test_readers_refuse_an_earlier_schema_naming_the_upgrade(tiny_run, tmp_path):
  (tmp_path / "results.json").write_text(json.dumps(_as_schema_1(tiny_run["results"])))
  with pytest.raises(workdir.SchemaError, match="schema version 1, this code reads 3: run "
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
