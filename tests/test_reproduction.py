"""Every table config validates at both tiers and runs end to end at a shrunken size, and
the combined reproduction report is written from the runs' results alone."""

import importlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from experiments.configs import tables
from inverse_depth import analysis, checks, config as config_lib, experiment, records
from inverse_depth.report import combined_report, run_report
from inverse_depth.config import ConfigError
from tests import REPO, tiny

CONFIGS = ("table1", "table2", "table3", "table3_top2", "table4", "table4_top16", "table5",
           "easy", "selection")


def _config(name: str, tier: str = "cpu"):
  return importlib.import_module(f"experiments.configs.{name}").get_config(tier)


@pytest.mark.parametrize("tier", tables.TIERS)
@pytest.mark.parametrize("name", CONFIGS)
def test_table_configs_validate(name, tier):
  config = _config(name, tier)
  config_lib.validate(config)
  specs = config_lib.grid_specs(config)
  assert specs and all(spec.problem.spectra for spec in specs)


def test_unknown_tier_is_refused_naming_the_allowed_ones():
  with pytest.raises(ConfigError, match="cpu, paper"):
    _config("table1", "laptop")


def test_model_override_of_a_table_field_is_refused():
  config = _config("table1")
  config.model_overrides.linear.problem = dict(k=16)
  with pytest.raises(ConfigError, match="model_overrides.linear.problem.k"):
    config_lib.validate(config)
  config = _config("table1")
  config.model_overrides.linear.train.learning_rate = -1.0
  with pytest.raises(ConfigError, match="model_overrides.linear.train.learning_rate"):
    config_lib.validate(config)


@pytest.fixture(scope="module")
def reproduction_root(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("reproduce"))
  for name, _ in combined_report.RUNS:
    experiment.run(tiny.shrunk(_config(name)), os.path.join(root, name))
    run_report.write_report(os.path.join(root, name))
  return root


@pytest.mark.slow  # a shrunk run of every config (~1.5-2 min): `make test-all`
def test_every_run_records_every_spectrum(reproduction_root):
  results = records.load_results(reproduction_root, [name for name, _ in combined_report.RUNS])
  assert set(results) == {name for name, _ in combined_report.RUNS}
  for name, found in results.items():
    config = _config(name)
    for model in config_lib.model_names(config):
      fitted = {(f["a"], f["b"]) for f in found["fits"] if f["model"] == model}
      assert fitted == set(config_lib.spectra(config)), (name, model)
  linear = [r for r in results["table1"]["runs"] if r["model"] == "linear"]
  assert {r["depth"] for r in linear} == {1, 2} and all("modewise_loss" in r for r in linear)
  for run in linear:  # the beta-averaged loss is the sum of the mode-wise ones, with an se
    assert run["beta_averaged_loss"] == pytest.approx(sum(run["modewise_loss"]), rel=1e-4)
    assert 0 < run["beta_averaged_loss_se"] < run["beta_averaged_loss"]
  softmax = [r for r in results["table1"]["runs"] if r["model"] == "softmax"]
  assert all("selection_error_percentiles" in r for r in softmax)
  assert all(len(r["layer_temperature"]) == len(r["layer_anisotropy"]) == r["depth"]
             for r in softmax)
  with open(os.path.join(reproduction_root, "table1", "report.md")) as f:
    text = f.read()
  assert "| R_L averaged over beta (+- se) |" in text and "How the layers score" in text


@pytest.mark.slow  # a shrunk run of every config (~1.5-2 min): `make test-all`
def test_combined_report(reproduction_root):
  path = combined_report.write_combined_report(  # the tables runs stand in for the SGD regime's
      reproduction_root, sgd_tables=reproduction_root)
  with open(path) as f:
    text = f.read()
  for heading in ("## Tables 1, 4 and 5 under constant-step SGD", "### Table 1: fitted",
                  "### Table 5: gap fit", "### Table 4: depth exponents", "## Table 1",
                  "## Table 2", "## Table 3", "## Table 4", "## Table 5", "## Easy task",
                  "## Selection error", "## The `make reproduce` runs"):
    assert heading in text, heading
  sgd = text.split("## Tables 1, 4 and 5 under constant-step SGD")[1].split("## The `make")[0]
  table4_rows = sgd.split("### Table 4: depth exponents")[1]
  assert sum(table4_rows.count(f"| {k} | ({a:g}, {b:g}) |")
             for name, k in (("table4", 2), ("table4_top16", 16))
             for a, b in config_lib.spectra(_config(name))) == (
                 len(config_lib.spectra(_config("table4")))
                 + len(config_lib.spectra(_config("table4_top16"))))
  # Each header's count agrees with the PASS/MISS lines under it.
  for block in text.split("Checks: ")[1:]:
    misses, total = map(int, re.match(r"(\d+) of (\d+) miss", block).groups())
    lines = [line for line in block.split("\n\n", 2)[1].splitlines() if line.startswith("- ")]
    assert len(lines) == total and sum(line.startswith("- MISS") for line in lines) == misses
  for a, b in tables.TABLE1_SPECTRA:
    assert f"| ({a:g}, {b:g}) |" in text
  assert "slope of L unit steps, same depths" in text
  assert "not run" not in text.lower().split("## figures")[0].replace("(not run)", "")
  for figure in ("overview", "table1_depth", "table1_decomposition", "selection_error",
                 "modewise", "easy_attention_mass", "training_table1"):
    assert os.path.isfile(os.path.join(reproduction_root, "figures", figure + ".png")), figure


def test_table4_rows_print_the_fit_the_check_decides_on_and_the_run_regime():
  """A Table 4 row shows the weighted fit checks.table4_exponent decides on (not the fit
  record's own numbers), its distance from the paper's exponent in that fit's standard errors,
  R_L by depth and the cosine bounds; the section names the regime the runs trained in."""
  depths = [1.0, 2.0, 4.0, 8.0, 16.0]
  losses = [0.5 + 0.3 / L * (1 + 0.01 * (-1) ** i) for i, L in enumerate(depths)]
  fit = dict(model="softmax", task="topk", k=2, a=0.25, b=0.5, resolved=True, verdict="law",
             depths=depths, losses=losses, L0=9.0, L0_se=0.1, alpha=5.0, alpha_se=0.1, r2=0.5,
             bound=dict(single=0.805, mixture=0.795))
  config = dict(qk_init="random", qk_init_scale=0.3, learning_rate=1e-3, max_steps=24000,
                optimizer="adam", schedule="cosine", batch_size=256, value_init="random",
                fixed_input_norm=False, stationary_evals=1)
  lines = combined_report.table4_section([dict(fits=[fit], runs=[], config=config), None])
  row = next(line for line in lines if line.startswith("| 2 | (0.25, 0.5) |"))
  decided = checks.law_fits(fit, [])["primary"]
  distance = (decided["alpha"] - 0.93) / decided["alpha_se"]
  assert f"| {decided['alpha']:.2f} +- {decided['alpha_se']:.2g} |" in row
  assert "5.00" not in row and "| 0.93 |" in row and f"| {distance:+.1f} |" in row
  assert row.endswith("16: 0.5189 | 0.805 | 0.795 |")
  assert ("adam lr 0.001 (cosine schedule), batch 256, 24000 steps, qk init random (scale "
          "0.3), value init random, final iterate") in lines[-1]
  assert combined_report.table4_section([None, None])[-1].startswith("| - | - | not run")


def test_table5_rows_print_the_gap_fit_the_check_decides_on():
  """Table 5's rows show checks.gap_fit (L0 held at its weighted fit, the slope's se) and its
  local slopes: a gap closing as 1/L reads alpha 1.00 and a power law."""
  depths = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
  L0, nan = 2.0, float("nan")
  fit = dict(model="softmax", task="topk", k=2, a=0.0, b=0.0, resolved=True, depths=depths,
             losses=[L0 + 1.0 / L for L in depths], L0=L0, L0_se=0.01, alpha=1.0,
             alpha_se=0.01, r2=1.0, shared_error=[nan] + [L0 - 0.5 / L for L in depths[1:]],
             disagreement=[nan] + [1.0] * 5)
  lines = combined_report.table5_section(dict(fits=[fit], runs=[]))
  row = next(line for line in lines if line.startswith("| (0, 0) |"))
  assert "| 1.000 +- " in row and "(a power law)" in row
  assert combined_report.table5_section(None)[-1].startswith("Not run")


@pytest.mark.parametrize("name", ["table5", "selection"])
def test_derived_configs_run_end_to_end(name, tmp_path):
  results = experiment.run(tiny.shrunk(_config(name)), str(tmp_path))
  assert {f["model"] for f in results["fits"]} == {"softmax"}
  if name == "selection":  # its own report tables the percentiles, L = 1 against the deepest
    text = open(run_report.write_report(str(tmp_path))).read()
    rows = text.split("## Selection error")[1].split("![selection error]")[0]
    assert rows.count("\n| ") == 1 + 9  # header and the nine percentiles
    assert (tmp_path / "figures" / "selection_error.png").is_file()


def test_reproduce_entrypoint_runs_the_chosen_runs_and_writes_the_report(tmp_path, monkeypatch,
                                                                        capsys):
  """experiments.reproduce at toy sizes: a progress line per run, then the combined report."""
  from absl import flags, logging
  from experiments import reproduce
  monkeypatch.setattr(reproduce, "_load_config",
                      lambda path, tier: tiny.shrunk(_config(os.path.basename(path)[:-3], tier)))
  flags.FLAGS(["reproduce", f"--workdir={tmp_path}", "--only=easy,table3"])
  level = logging.get_absl_logger().level  # main() lowers it; later tests read INFO logs
  try:
    reproduce.main([])
  finally:
    flags.FLAGS.unparse_flags()
    logging.get_absl_logger().setLevel(level)
  out = capsys.readouterr().out
  assert "[1/2] table3:" in out and "[2/2] easy:" in out and "min left" in out
  with open(os.path.join(tmp_path, "report.md")) as f:
    table3_rows = [line for line in f.read().split("## Table 3")[1].splitlines()
                   if line.startswith("| 16 |")]
  cells = [[cell.strip() for cell in row.split("|")] for row in table3_rows]
  assert cells and all(row[7] != "-" for row in cells)  # the floor at this P
  assert all(float(row[4].split(" +- ")[0]) > 0 for row in cells)  # averaged over beta
  assert sorted(records.load_results(
      str(tmp_path), [name for name, _ in combined_report.RUNS])) == ["easy", "table3"]


def test_column_labels_follow_the_grid_layout():
  """metrics.jsonl columns are a grid's depths (its own when model_overrides sets them) or,
  for an ensemble control, its max(depths) one-layer members."""
  config = dict(grid=dict(depths=[1, 2, 4]),
                model_overrides=dict(linear=dict(grid=dict(depths=[1, 2]))))
  assert records.column_labels(config, "softmax") == ["L=1", "L=2", "L=4"]
  assert records.column_labels(config, "linear") == ["L=1", "L=2"]
  assert records.column_labels(config, "softmax-ensemble") == [
      "member 1", "member 2", "member 3", "member 4"]


def test_cosine_mixtures_entrypoint_writes_a_table_regenerated_from_its_results(tmp_path):
  """experiments.cosine_mixtures with few contexts: one row per Table 1 spectrum in each of
  the two depth tables, both starting at the single layer, the free-gain mixtures falling in
  L and never above the equal-weight averages; the report's verdict follows the numbers (a
  spectrum whose depth-L optima all stay far above the full mixture turns it)."""
  proc = subprocess.run(  # a process of its own: its absl flags would clash with reproduce's
      [sys.executable, "-m", "experiments.cosine_mixtures", f"--workdir={tmp_path}",
       "--num_samples=300", "--max_layers=3"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "Report:" in proc.stdout
  with open(tmp_path / "results.json") as f:
    results = json.load(f)
  assert len(results["bounds"]) == len(tables.TABLE1_SPECTRA)
  for bound in results["bounds"]:
    averages = [entry["loss"] for entry in bound["average_by_layers"]]
    mixtures = [entry["loss"] for entry in bound["mixture_by_layers"]]
    assert len(averages) == len(mixtures) == 3
    assert averages[0] == pytest.approx(bound["single"]) == mixtures[0]
    assert mixtures[0] >= mixtures[1] >= mixtures[2] >= bound["mixture"] - 1e-9
    assert all(m <= a + 1e-9 for a, m in zip(averages, mixtures))
  text = (tmp_path / "report.md").read_text()
  rows = [line for line in text.splitlines()
          if line.startswith("| (") and not line.startswith("| (a, b)")]
  assert len(rows) == 2 * len(tables.TABLE1_SPECTRA)

  for entry in results["bounds"][0]["mixture_by_layers"]:
    entry.update(excess=0.5, excess_se=0.01)
  (tmp_path / "results.json").write_text(json.dumps(results))
  subprocess.run([sys.executable, "-c", "import sys; from experiments import cosine_mixtures; "
                  "cosine_mixtures.write_report(sys.argv[1])", str(tmp_path)],
                 cwd=REPO, check=True, capture_output=True, timeout=120)
  verdict = (tmp_path / "report.md").read_text()
  assert verdict.count("For 1 of 7 spectra it is still above the full mixture at L = 3") == 1


def _longer_training(tmp_path) -> subprocess.CompletedProcess:
  """experiments.longer_training on tmp_path/short and tmp_path/long, in a process of its own:
  its required flags would fail reproduce's flag parsing."""
  return subprocess.run([sys.executable, "-m", "experiments.longer_training",
                         f"--short={tmp_path / 'short'}", f"--long={tmp_path / 'long'}"],
                        cwd=REPO, capture_output=True, text=True, timeout=120)


def test_longer_training_entrypoint_pairs_each_model_with_its_longer_trained_self(tmp_path):
  """experiments.longer_training on the committed depth_law run and a copy of it as the
  shorter schedule (every loss raised by a known amount): one row per depth whose per-seed
  changes are the differences of the two results.json's eval_loss, and a figure."""
  with open(os.path.join(REPO, "results", "depth_law", "results.json")) as f:
    long = json.load(f)
  rng = np.random.default_rng(0)
  short = json.loads(json.dumps(long))
  short["config"]["train"]["max_steps"] = 12000
  for run in short["runs"]:
    run["eval_loss"] += float(rng.uniform(0.001, 0.01))
  dirs = {}
  for name, results in (("short", short), ("long", long)):
    dirs[name] = tmp_path / name
    dirs[name].mkdir()
    (dirs[name] / "results.json").write_text(json.dumps(results))
  _longer_training(tmp_path).check_returncode()
  text = (dirs["long"] / "longer_training.md").read_text()
  assert (dirs["long"] / "figures" / "longer_training.png").stat().st_size > 0
  loss = {name: {(r["depth"], r["seed"]): r["eval_loss"] for r in results["runs"]}
          for name, results in (("short", short), ("long", long))}
  rows = [line.split(" | ") for line in text.splitlines() if re.match(r"\| \d+ \| 3 \|", line)]
  assert [int(row[0].strip("| ")) for row in rows] == [1, 2, 4, 8, 16, 32, 64]
  for row in rows:
    depth = int(row[0].strip("| "))
    expected = [loss["long"][depth, s] - loss["short"][depth, s] for s in range(3)]
    np.testing.assert_allclose([float(x) for x in row[5].split(", ")], expected, atol=5e-5)
  assert "max_steps: 12000 -> 24000" in text


def test_longer_training_pairs_a_run_of_one_spectrum_with_a_grid_of_several(tmp_path):
  """A long run of one of the short run's spectra is compared on that spectrum's models; the
  other spectra's models are counted as having no partner."""
  with open(os.path.join(REPO, "results", "reproduce", "table4_top16", "results.json")) as f:
    results = json.load(f)
  (tmp_path / "short").mkdir()
  (tmp_path / "short" / "results.json").write_text(json.dumps(results))
  kept = [r for r in results["runs"] if (r["a"], r["b"]) == (0.0, 0.25)]
  clean_kept = analysis.clean_runs(kept)
  clean_others = [r for r in analysis.clean_runs(results["runs"]) if r not in kept]
  results["runs"] = kept
  results["fits"] = [f for f in results["fits"] if (f["a"], f["b"]) == (0.0, 0.25)]
  results["config"]["problem"]["spectra"] = [[0.0, 0.25]]
  results["config"]["train"]["max_steps"] = 24000
  (tmp_path / "long").mkdir()
  (tmp_path / "long" / "results.json").write_text(json.dumps(results))
  _longer_training(tmp_path).check_returncode()
  text = (tmp_path / "long" / "longer_training.md").read_text()
  assert f"{len(clean_others)} clean models of the short run and 0 of the long" in text
  assert f"0 of {len(clean_kept)} models end lower" in text  # the same models, unchanged


def test_longer_training_refuses_runs_that_differ_in_more_than_the_schedule(tmp_path):
  """Two runs whose configs differ in the learning rate are not the same models trained
  longer: the report refuses them by field before writing anything."""
  with open(os.path.join(REPO, "results", "depth_law", "results.json")) as f:
    results = json.load(f)
  for name, rate in (("short", 1e-3), ("long", 3e-3)):
    (tmp_path / name).mkdir()
    results["config"]["train"]["learning_rate"] = rate
    (tmp_path / name / "results.json").write_text(json.dumps(results))
  proc = _longer_training(tmp_path)
  assert proc.returncode != 0 and "learning_rate: 0.001 -> 0.003" in proc.stderr
  assert not (tmp_path / "long" / "longer_training.md").exists()


def test_regime_section_reads_each_regimes_fit_and_its_last_doubling():
  with open(os.path.join(REPO, "results", "depth_law", "results.json")) as f:
    annealed = json.load(f)
  fit = annealed["fits"][0]
  level = dict(fit, shared_error=[float("nan"), 1.8, 2.0, 2.0], disagreement=[float("nan"), 1.0,
                                                                               1.2, 1.26])
  lines = combined_report.regime_section([("annealed", "results/depth_law", annealed),
                                       ("level", "x", dict(annealed, fits=[level]))])
  annealed_row = next(line for line in lines if line.startswith("| annealed |"))
  assert f"{fit['L0']:.4g} +- {fit['L0_se']:.2g}" in annealed_row
  change = fit["disagreement"][-1] / fit["disagreement"][-2] - 1
  assert annealed_row.endswith(f"| {change:+.1%} |")
  assert next(line for line in lines if line.startswith("| level |")).endswith(
      "| +0.0% | +5.0% |")
  assert combined_report.regime_section([]) == []
