"""Config validation and the command-line entrypoint's handling of bad overrides."""

import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

from experiments.configs import default, quick, regimes, sgd_generalized, sgd_law, smoke, table1
from inverse_depth import config as config_lib, records
from inverse_depth.report import generalized_report
from tests import REPO


# Every config file (a module with get_config) with each argument it documents.
SHIPPED = [(name, arg) for name in sorted(
    os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "experiments", "configs",
                                                              "*.py")))
    if hasattr(importlib.import_module(f"experiments.configs.{name}"), "get_config")
    for arg in dict(sgd_law=(None, "paper"), sgd_sweep=("256", "1024", "quick", "quick1024"),
                    sgd_table1=("short", "cpu", "paper"), sgd_table4=("short", "cpu", "paper"),
                    sgd_table4_top16=("short", "cpu", "paper"),
                    sgd_generalized=("top2,short", "looped,short", "looped4,cpu",
                                     "context_updates,cpu", "context_updates_top16,paper",
                                     "context_updates,short16", "top2,stationary",
                                     "single_stream,stationary_deep")).get(
                        name, (None,))]


@pytest.mark.parametrize("name, arg", SHIPPED, ids=[f"{n}:{a}" if a else n for n, a in SHIPPED])
def test_shipped_configs_validate(name, arg):
  module = importlib.import_module(f"experiments.configs.{name}")
  config = module.get_config() if arg is None else module.get_config(arg)
  config_lib.validate(config)
  # Every grid's settings are built from the groups.
  for spec in config_lib.grid_specs(config):
    assert spec.train.max_steps % spec.train.eval_every == 0
    assert spec.problem.P == config.grid.sizes[spec.model].P


def _set(**fields):
  """Sets fields, bypassing ConfigDict's own type check (a config file could build the
  dict differently), so that validate() is what must catch the value."""
  def apply(config):
    for name, value in fields.items():
      group = config[config_lib.GROUP_OF[name]] if name in config_lib.GROUP_OF else config
      with group.unlocked():
        del group[name]
        group[name] = value
  return apply


def _set_size(model, **fields):
  def apply(config):
    for name, value in fields.items():
      with config.grid.sizes[model].unlocked():
        del config.grid.sizes[model][name]
        config.grid.sizes[model][name] = value
  return apply


INVALID = [
    ("spectra", _set(spectra=((-1.0, 0.0),))),
    ("spectra", _set(spectra=((0.0, 0.0), (0.5, -0.25)))),
    ("spectra", _set(spectra=((0.0, 0.0), (0.0, 0.0)))),
    ("k", _set(k=9)),  # smoke has P = 8
    ("depths", _set(depths=(0, 1, 2))),
    ("depths", _set(depths=(1, 2, 2))),
    ("depths", _set(depths=(4, 1, 2))),  # consecutive depths are compared as pairs
    ("sizes.softmax.N", _set_size("softmax", N=2)),  # smoke has d = 4
    ("sizes.linear.P", _set_size("linear", P=0)),
    ("sizes", _set(sizes=dict(softmax=dict(d=4, P=8, N=8)))),
    ("optimizer", _set(optimizer="rmsprop")),
    ("schedule", _set(schedule="linear")),
    ("qk_init", _set(qk_init="orthogonal")),
    ("value_init", _set(value_init="orthogonal")),
    ("W_y_init_scale", _set(W_y_init_scale=0.0)),
    ("W_x_init", _set(W_x_init="identity")),
    ("momentum", _set(momentum=1.0)),
    ("model", _set(model="transformer")),
    ("model", _set(model="softmax,softmax")),
    ("task", _set(task="top3")),
    ("max_steps", _set(max_steps=210)),  # eval_every = 20
    ("learning_rate", _set(learning_rate=-1e-3)),
    ("lr_decay_factor", _set(lr_decay_factor=1.5)),
    ("rel_tol", _set(rel_tol=1.0)),
    ("num_seeds", _set(num_seeds=0)),
    ("sizes.softmax.d", _set_size("softmax", d=8.5)),
    ("batch_size", _set(batch_size=True)),
    ("positive_gain", _set(positive_gain=1)),
    ("seed", _set(seed="zero")),
    ("spectra", _set(spectra=((float("inf"), 0.0),))),
    ("spectra", _set(spectra=(0.0, 0.0))),
    ("depths", _set(depths=())),
    ("qk_init_scale", _set(qk_init_scale=0.0)),
    ("divergence_loss", _set(divergence_loss=float("nan"))),
    ("warmup_steps", _set(warmup_steps=-1)),
    ("checkpoint_every", _set(checkpoint_every=30)),  # eval_every = 20
    ("checkpoints_to_keep", _set(checkpoints_to_keep=0)),
    ("eval_size", _set(eval_size=0)),
    ("fixed_input_norm", _set(fixed_input_norm=1)),
    ("fixed_input_norm", _set(model="linear", fixed_input_norm=True)),  # |W_x| matters there
    ("fixed_input_norm", _set(model="softmax,single_stream", fixed_input_norm=True)),
]


@pytest.mark.parametrize("field,mutate", INVALID,
                         ids=[f"{field}-{i}" for i, (field, _) in enumerate(INVALID)])
def test_invalid_values_raise_config_error_naming_the_field(field, mutate):
  config = smoke.get_config()
  mutate(config)
  with pytest.raises(config_lib.ConfigError) as info:
    config_lib.validate(config)
  name, _, rest = field.partition(".")
  assert f"config.{config_lib.path(name)}{'.' * bool(rest)}{rest}=" in str(info.value)


def test_fixed_input_norm_is_set_per_model_kind():
  """A kind whose loss depends on |W_x| may train beside one that holds it fixed; asking it
  to hold |W_x| names the override."""
  config = smoke.get_config()
  config.grid.model = "softmax,single_stream"
  config.train.fixed_input_norm = True
  config.model_overrides.single_stream = dict(train=dict(fixed_input_norm=False))
  config_lib.validate(config)
  fixed = {spec.model: spec.train.fixed_input_norm for spec in config_lib.grid_specs(config)}
  assert fixed == {"softmax": True, "single_stream": False}
  config.grid.model = "softmax,single_stream,linear"
  config.model_overrides.linear = dict(train=dict(fixed_input_norm=True))
  with pytest.raises(config_lib.ConfigError,
                     match="config.model_overrides.linear.train.fixed_input_norm=True is invalid"):
    config_lib.validate(config)


def test_error_message_names_value_and_what_is_allowed():
  config = smoke.get_config()
  config.problem.task = "top3"
  with pytest.raises(config_lib.ConfigError,
                     match=r"config.problem.task='top3' is invalid: allowed one "
                     r"of \('top1', 'topk'\)"):
    config_lib.validate(config)


def test_unknown_and_missing_fields_are_refused_by_name():
  config = smoke.get_config()
  config.unlock()
  config.lerning_rate = 1e-3
  with pytest.raises(config_lib.ConfigError, match="config.lerning_rate is not a known field"):
    config_lib.validate(config)
  config = smoke.get_config()
  config.unlock()
  del config.train["patience"]
  with pytest.raises(config_lib.ConfigError, match="config.train.patience is missing"):
    config_lib.validate(config)
  config = smoke.get_config()
  config.unlock()
  config.learning_rate = 1e-3  # a field outside its group
  with pytest.raises(config_lib.ConfigError, match=r"config.learning_rate is not a known field "
                     r"or group \(it is a field of the train group: config.train.learning_rate\)"):
    config_lib.validate(config)


def test_schema_covers_exactly_the_default_fields_in_their_groups():
  config = default.get_config()
  assert set(config_lib.flat(config)) == set(config_lib.FIELDS)
  assert {group: set(config[group].keys()) for group in config_lib.GROUPS} == {
      group: set(names) for group, names in config_lib.GROUPS.items()}


def test_flat_fields_and_groups_are_inverse_and_keep_the_hash():
  config = sgd_generalized.get_config("looped,stationary").to_dict()
  fields = config_lib.flat(config)
  assert "learning_rate" in fields and "train" not in fields
  assert fields["model_overrides"]["single_stream"]["W_y_init_scale"] == 0.25
  assert config_lib.nested(fields) == config
  assert config_lib.config_hash(fields) == config_lib.config_hash(config)


def test_flat_config_flags_are_mapped_to_their_groups_with_a_message():
  argv = ["run", "--config=x.py", "--config.learning_rate=0.1", "--config.train.max_steps=40",
          "--config.model_overrides.linear.depths=(1,2)", "--workdir=w", "--config.seed=3"]
  mapped, messages = config_lib.map_flat_flags(argv)
  assert mapped == ["run", "--config=x.py", "--config.train.learning_rate=0.1",
                    "--config.train.max_steps=40",
                    "--config.model_overrides.linear.grid.depths=(1,2)", "--workdir=w",
                    "--config.seed=3"]
  assert messages == [
      "--config.learning_rate is now --config.train.learning_rate (config groups: "
      "inverse_depth/config.py GROUPS); mapped",
      "--config.model_overrides.linear.depths is now --config.model_overrides.linear.grid."
      "depths (config groups: inverse_depth/config.py GROUPS); mapped"]


def test_scale_names(tmp_path):
  assert default.get_config("smoke").to_dict() == smoke.get_config().to_dict()
  assert default.get_config("quick").to_dict() == quick.get_config().to_dict()
  with pytest.raises(config_lib.ConfigError, match="scale 'huge' does not exist: allowed "
                     "default, smoke, quick"):
    default.get_config("huge")


def test_config_arguments_take_key_value_pairs_or_bare_values_in_order():
  """One convention for every config file (experiments/configs/arguments.py)."""
  assert (sgd_generalized.get_config("variant=looped,tier=short16").to_dict()
          == sgd_generalized.get_config("looped,short16").to_dict()
          == sgd_generalized.get_config("tier=short16,looped").to_dict())
  assert sgd_law.get_config("tier=stationary").to_dict() == sgd_law.get_config(
      "stationary").to_dict()
  for argument, message in (("tier=cpu,tier=paper", "tier is set twice"),
                            ("size=big", "unknown key 'size'; allowed tier"),
                            ("cpu,paper", "too many values; this file takes tier=VALUE"),
                            ("tier=long", "tier 'long' does not exist: allowed cpu, paper")):
    with pytest.raises(config_lib.ConfigError, match=message):
      table1.get_config(argument)
  with pytest.raises(config_lib.ConfigError, match="this file takes no argument"):
    quick.get_config("fast")


def test_a_regime_is_applied_by_name_and_recorded_but_not_hashed():
  config = default.get_config()
  regimes.apply(config, "annealed_adam")
  assert config.regime == "annealed_adam" and config.train.optimizer == "adam"
  regimes.apply(config, "linear_gradient_descent", model="linear")
  assert config.model_overrides.linear.regime == "linear_gradient_descent"
  assert config.model_overrides.linear.init.qk_init_scale == config.grid.sizes.linear.d ** 0.5
  config_lib.validate(config)
  relabelled = config.to_dict()
  relabelled["regime"] = "sgd_law"
  assert config_lib.config_hash(relabelled) == config_lib.config_hash(config.to_dict())
  with pytest.raises(config_lib.ConfigError, match="regime='adam' does not exist"):
    regimes.apply(config, "adam")
  config.model_overrides.softmax.regime = "fast"
  with pytest.raises(config_lib.ConfigError, match="model_overrides.softmax.regime='fast' is "
                     "invalid: allowed sgd_law, sgd_stationary"):
    regimes.check(config)


def test_config_hash_ignores_runtime_fields_only():
  base = config_lib.flat(smoke.get_config())
  assert config_lib.config_hash(base) == config_lib.config_hash(dict(base, checkpoint_every=1))
  assert config_lib.config_hash(base) != config_lib.config_hash(dict(base, seed=1))
  assert config_lib.config_hash(base) != config_lib.config_hash(dict(base, eval_chunk_size=1))
  # 0 and 0.0 compare equal in the workdir guard, so they must hash alike.
  assert config_lib.config_hash(dict(base, spectra=((0, 0),))) == config_lib.config_hash(
      dict(base, spectra=((0.0, 0.0),)))


def test_a_workdir_whose_config_lacks_a_field_is_refused_naming_it(tmp_path):
  """A config.json saved without a field (by code older than the field) is another config:
  its results are brought forward by experiments.upgrade_results, not resumed."""
  from inverse_depth import workdir
  base = smoke.get_config().to_dict()
  (tmp_path / "config.json").write_text(json.dumps(
      dict(base, init={k: v for k, v in base["init"].items() if k != "value_init"})))
  with pytest.raises(workdir.WorkdirConflict, match="value_init saved None vs now 'random'"):
    workdir.check_workdir(base, str(tmp_path))


def test_config_error_is_a_value_error():
  assert issubclass(config_lib.ConfigError, ValueError)


def test_k_larger_than_P_is_allowed_for_top1():
  config = smoke.get_config()
  config.problem.task = "top1"
  config.problem.k = 100  # ignored by top1
  config_lib.validate(config)


def _written(workdir):
  if not os.path.exists(workdir):
    return []
  return sorted(os.path.relpath(os.path.join(root, name), workdir)
                for root, _, names in os.walk(workdir) for name in names)


BAD_COMMAND_LINES = [
    ("unknown-override", "smoke.py", ["--config.not_a_field=1"], ["not_a_field"]),
    ("invalid-value", "smoke.py", ["--config.problem.k=100"], ["config.problem.k=100", "allowed"]),
    ("flat-flag-mapped", "smoke.py", ["--config.k=100"],
     ["--config.k is now --config.problem.k", "config.problem.k=100 is invalid"]),
    ("badly-typed", "smoke.py", ["--config.grid.sizes.softmax.d=eight"],
     ["config.grid.sizes.softmax.d", "eight"]),
    ("unknown-scale", "default.py:huge", [], ["scale 'huge' does not exist", "smoke"]),
    ("unknown-regime", "smoke.py", ["--config.regime=fast"],
     ["config.regime='fast' is invalid", "sgd_law"]),
]


@pytest.mark.parametrize("config_file,overrides,messages",
                         [case[1:] for case in BAD_COMMAND_LINES],
                         ids=[case[0] for case in BAD_COMMAND_LINES])
def test_entrypoint_refuses_bad_input_before_writing(tmp_path, config_file, overrides, messages):
  workdir = str(tmp_path / "run")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.run", f"--config=experiments/configs/{config_file}",
       f"--workdir={workdir}", *overrides],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  for message in messages:
    assert message in proc.stderr, proc.stderr[-2000:]
  assert _written(workdir) == []


def test_a_workdir_that_is_a_file_gets_a_one_line_error(tmp_path):
  path = tmp_path / "results.txt"
  path.write_text("not a directory")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.run", "--config=experiments/configs/smoke.py",
       f"--workdir={path}"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2
  assert f"error: --workdir {path} exists and is not a directory" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert path.read_text() == "not a directory"


# Table 1 at the stationary state is four runs (results/README.md): two depth groups (tiers),
# each split into two spectrum groups by --config.problem.spectra.
TABLE1_SPLIT = {"a": ((0.0, 0.0), (0.0, 0.25), (0.0, 0.5), (0.0, 1.0)),
                "b": ((0.25, 0.0), (0.5, 0.0), (1.0, 0.0))}

# Every committed run folder (results/README.md) and the config file (with its argument, and
# the --config.GROUP.FIELD=VALUE overrides of its command, where it has any) that made it.
COMMITTED_RUNS = {
    "sgd_law": ("sgd_law", None), "sgd_law_trajectory": ("sgd_law", "trajectory"),
    "sgd_law_stationary/sources/stationary": ("sgd_law", "stationary"),
    "sgd_law_stationary/sources/stationary_deep": ("sgd_law", "stationary_deep"),
    "sgd_law_stationary/relaxation": ("sgd_law", "relaxation"),
    "quick": ("quick", None),
    "regimes_compared/quick_adam_constant": ("quick_adam_constant", None),
    "regimes_compared/quick_adam_annealed": ("quick_adam_annealed", None),
    "depth_law": ("depth_law", None), "linear_floor": ("linear_floor", None),
    **{f"reproduce/{name}": (name, "cpu") for name in (
        "table1", "table2", "table3", "table3_top2", "table4", "table4_top16", "easy")},
    **{f"reproduce/table3_k16_by_P/P{P}": ("table3_k16_by_P", P)
       for P in ("2048", "4096", "8192")},
    **{f"generalized/{run}": ("generalized", variant) for run, variant in (
        ("generalized", "cpu"), ("single_stream", "single_stream"), ("generalized_top16", "top16"),
        ("m_start", "m_start"), ("m_start_top16", "m_start_top16"),
        ("depth_law_top16", "depth_law_top16"))},
    "generalized/looped": ("looped", None),
    **{f"sgd_tables/{name}/sources/{tier}": (f"sgd_{name}", tier)
       for name in ("table4", "table4_top16") for tier in ("stationary", "stationary_deep")},
    **{f"sgd_tables/table1/sources/{tier}_{half}": ("sgd_table1", tier, dict(spectra=spectra))
       for tier in ("stationary", "stationary_deep") for half, spectra in TABLE1_SPLIT.items()},
    "sgd_sweep/b256": ("sgd_sweep", "quick"), "sgd_sweep/b1024": ("sgd_sweep", "quick1024"),
    **{f"sgd_generalized/{name}": ("sgd_generalized", argument)
       for name, _, argument in generalized_report.SGD_RUNS
       if name not in generalized_report.SGD_JOINED},
    **{f"sgd_generalized/{name}/sources/{tier}": ("sgd_generalized", f"{name},{tier}")
       for name in generalized_report.SGD_JOINED for tier in ("stationary", "stationary_deep")},
}


def _committed(folder):
  """(the committed results.json, the config its file builds today); skips a run not yet
  committed."""
  path = os.path.join(REPO, "results", folder, "results.json")
  if not os.path.exists(path):
    pytest.skip(f"results/{folder} is not committed yet")
  name, argument, *overrides = COMMITTED_RUNS[folder]
  module = importlib.import_module(f"experiments.configs.{name}")
  config = module.get_config() if argument is None else module.get_config(argument)
  for override in overrides:
    config_lib.set_fields(config, override)
  with open(path) as f:
    return json.load(f), config


@pytest.mark.parametrize("folder", sorted(COMMITTED_RUNS))
def test_each_committed_run_is_what_its_config_file_makes_today(folder):
  """A committed run's config hash equals the hash of the config its file builds now (a field
  added to the code later comes with a schema version whose upgrade records it), so rerunning
  the documented command resumes or regenerates that run instead of refusing its workdir."""
  committed, config = _committed(folder)
  assert config_lib.config_hash(config.to_dict()) == committed["config_hash"], folder
  _assert_same_regime(committed["config"], config)


def _assert_same_regime(saved: dict, config) -> None:
  """The run's config.json names the regimes (the run's and each kind's) its file applies."""
  for model in config_lib.model_names(config):
    assert (records.kind_config(saved, model)["regime"]
            == config_lib.resolve(config, model).regime), model


def test_every_committed_run_folder_is_listed():
  found = {os.path.relpath(os.path.dirname(path), os.path.join(REPO, "results"))
           for path in glob.glob(os.path.join(REPO, "results", "**", "results.json"),
                                 recursive=True)}
  without_config = {"cosine_mixtures"}  # theory only: experiments.cosine_mixtures
  joins = set()  # experiments.join_runs of listed runs: each source is checked above
  for folder in found:
    with open(os.path.join(REPO, "results", folder, "results.json")) as f:
      sources = json.load(f).get("joined_from")
    if sources:
      joins.add(folder)
      assert {os.path.relpath(os.path.join(folder, "sources", os.path.basename(s["source"])))
              for s in sources} <= set(COMMITTED_RUNS), folder
  assert found - without_config - joins == set(COMMITTED_RUNS) & found
