"""The combined reproduction report, ROOT/report.md and ROOT/figures/: the paper's Tables 1-5
from the `make reproduce` runs under ROOT (a missing one reported as not run), after the
regime comparison (REGIME_RUNS) and the tables in the SGD law's regime (SGD_TABLE_RUNS)."""

import os

import numpy as np

from inverse_depth import analysis, checks, claims, config as config_lib, paper, records, theory
from inverse_depth.report import plt, run_report
from inverse_depth.report.markdown import (GAP_COLUMNS, cell, fit_cells, gap_cells, how_trained,
                                           percent, pm, row, section, series, spectrum, table,
                                           write_lines)
from inverse_depth.report.run_report import depth_ticks, image
from inverse_depth.workdir import read_metrics

# (workdir name, config file) in the order `make reproduce` runs them. Table 5 and the
# selection error are read from the Table 1 run.
RUNS = tuple((name, f"experiments/configs/{name}.py") for name in (
    "table1", "table4", "table4_top16", "table3", "table3_top2", "easy", "table2"))

# The first section: one committed run per training regime at the paper's size (softmax,
# top-2, isotropic, d = 16, P = 128), paths from the repository root.
REGIME_RUNS = (("constant-step SGD at its stationary state (regimes.SGD_STATIONARY)",
                "results/sgd_law_stationary"),
               ("annealed Adam (regimes.ANNEALED_ADAM)", "results/depth_law"))

# The second section: Tables 1, 4 and 5 trained in the SGD law's regime, one workdir per
# config experiments/configs/sgd_NAME.py, under SGD_TABLES_ROOT.
SGD_TABLES_ROOT = claims.SGD_TABLES
SGD_TABLE_RUNS = ("table1", "table4", "table4_top16")


def _of_run(name: str, title: str):
  """Renders a section of run `name`'s results under `title`, 'Not run' without them."""
  def titled(render):
    return lambda results, *more: [title, ""] + (
        render(results, *more) if results else [f"Not run (no results.json for {name})."])
  return titled


@_of_run("table1", "## Table 1: floors on the difficult task (top-2)")
def table1_section(results: dict) -> list[str]:
  """Table 1: per spectrum, the softmax and linear floors beside the paper's and theory's."""
  lines = table("(a, b)", "softmax floor", "paper", "diff", "best single cosine layer",
                "best mixture", "linear floor", "paper", "diff", "theory T - h^T G^+ h",
                "linear floor vs its L = 2 loss (same measure)")
  fits = {model: {(f["a"], f["b"]): f for f in records.fits_of(results, model)}
          for model in ("softmax", "linear")}
  for key in sorted(set(fits["softmax"]) | set(fits["linear"])):
    cells = [f"({key[0]:g}, {key[1]:g})"]
    for model, by_spectrum in fits.items():
      fit = by_spectrum.get(key)
      if fit is None:
        cells += ["not run"] + ["-"] * 4
        continue
      value, how = (records.floor_of(fit) if model == "softmax"
                    else records.linear_floor_of(results, fit))
      target, bound = paper.table1_floor(model, "topk", 2, *key), fit.get("bound") or {}
      cells += [f"{value:.4g} ({how})", cell(target), percent(value, target)]
      if model == "softmax":
        cells += [pm(bound, key) for key in ("single", "mixture")]
      else:
        flat, _ = checks.linear_depth_change(fit, records.runs_of(results, fit))
        cells += [pm(bound, "floor"), f"{100 * flat:+.2f}%"]
    lines.append(row(*cells))
  return lines + [
      "", "Softmax floor: the fitted L0 where the fit resolves a depth law, else the deepest clean "
      "loss (shown; only a fitted L0 is checked). Linear floor: the deepest clean loss (the "
      "plateau), averaged exactly over beta where recorded (Table 3). Theory columns: "
      "`theory.softmax_bound` and `theory.linear_floor` on the run's own contexts."]


@_of_run("table2", "## Table 2: linear model, easy task: R_L = c L^-alpha")
def table2_section(results: dict) -> list[str]:
  """Table 2: fitted exponents beside zeta, 2 zeta and theory's slopes on the same depths."""
  lines = table("(a, b)", "zeta", "alpha (ours)", "R^2", "2 zeta", "paper alpha", "diff",
                "between zeta and 2 zeta?", "slope of L unit steps, same depths",
                "slope of the best polynomial, same depths", "losses by depth")
  d = results["runs"][0]["d"] if results["runs"] else None
  for fit in records.fits_of(results, "linear"):
    z = theory.zeta(fit["a"], fit["b"])
    alpha = fit["alpha"] if fit["resolved"] else float("nan")
    target = paper.TABLE2_ALPHA.get((fit["a"], fit["b"]))
    repeated, best = theory.depth_slopes(d, fit["a"], fit["b"], fit["depths"])
    lines.append(row(spectrum(fit), f"{z:.3g}", f"{alpha:.3f} +- {fit['alpha_se']:.2g}",
                     f"{fit['r2']:.4f}", f"{2 * z:.3g}", cell(target), percent(alpha, target),
                     "yes" if checks.table2_exponent_band(fit).passed else "no",
                     f"{repeated:.2f}", f"{best:.2f}", series(fit["depths"], fit["losses"], ".3g")))
  return lines + [
      "", "zeta and 2 zeta bound the exponent as L and d grow; beside them theory's slopes on the "
      f"run's own depths and d = {d}: L unit steps of gradient descent and the best degree-L "
      "polynomial (docs/theory.md, \"Linear attention on the easy task\")."]


def table3_section(linear_grids: list[tuple[dict, list[dict]]]) -> list[str]:
  """Table 3: theory floor against the trained plateau, per linear grid ((fit, its runs))."""
  lines = ["## Table 3: linear floor, theory against trained", ""]
  if not linear_grids:
    return lines + ["Not run (no linear difficult-task grid in table1, table3 or table3_top2)."]
  lines += table("k", "(a, b)", "theory T - h^T G^+ h",
                 "trained: loss averaged over beta (deepest L)", "diff", "trained: held-out MSE",
                 "floor at this P (S^r q)", "diff", "paper theory", "paper trained")
  for fit, runs in ((fit, runs) for fit, runs in linear_grids if fit.get("bound")):
    bound, (depth, held_out) = fit["bound"], records.deepest(fit)
    trained, trained_se, measure = analysis.plateau_loss(runs, fit, depth)
    held_out_se = float(np.mean([r["eval_loss_se"] for r in analysis.clean_runs(runs)
                                 if r["depth"] == depth] or [np.nan]))
    quoted = paper.TABLE3_FLOOR.get((fit["k"], fit["a"], fit["b"]), {})
    averaged = measure == "averaged over beta"  # else plateau_loss fell back to the MSE
    lines.append(row(fit["k"], spectrum(fit), pm(bound, "floor"),
                     f"{trained:.4g} +- {trained_se:.2g} (L={depth})" if averaged
                     else f"not recorded (L={depth})",
                     percent(trained, bound["floor"]) if averaged else "-",
                     f"{held_out:.4g} +- {held_out_se:.2g}", pm(bound, "context_floor"),
                     percent(trained, bound["context_floor"]),
                     cell(quoted.get("theory")), cell(quoted.get("trained"))))
  return lines + [
      "", "Trained: the deepest clean model's loss averaged exactly over beta on the diagnostic "
      "contexts (the quantity the theory integrates), beside the noisier held-out MSE. Theory: the "
      "paper's population floor and the floor at this P, the lowest loss at the trained P. How "
      "each is measured and why they differ: docs/theory.md, \"The linear floor on the difficult "
      "task\". results/reproduce/table3_k16_by_P trains k = 16 (0, 0) at P = 2048, 4096 and 8192 "
      "(both floors and the trained loss at each P)."]


def table4_lines(table_results: list[dict | None]) -> list[str]:
  """Table 4 rows of the runs' softmax grids: the fit the check decides on, beside the paper's."""
  lines = table("k", "(a, b)", "fitted L0", "alpha", "R^2", "paper alpha", "(ours - paper) / se",
                "R_L by depth", "best single cosine layer", "best mixture")
  grids = [(fit, records.runs_of(results, fit)) for results in table_results
           for fit in records.fits_of(results, "softmax")]
  if not grids:
    return lines + [row("-", "-", "not run", *["-"] * 7)]
  for fit, runs in grids:
    decided = claims.decided_fit(fit, runs)
    target = paper.TABLE4_ALPHA.get((fit["k"], fit["a"], fit["b"]))
    distance = (f"{checks.exponent_distance(decided, target):+.1f}"
                if decided["resolved"] and target else "-")
    bound = fit.get("bound") or {}
    lines.append(row(fit["k"], spectrum(fit), fit_cells(decided, None, (".2f", ".2g")),
                     cell(target), distance, series(fit["depths"], fit["losses"], ".4g"),
                     cell(bound.get("single"), ".4g"), cell(bound.get("mixture"), ".4g")))
  return lines


def table4_section(table_results: list[dict | None]) -> list[str]:
  """Table 4 of `make reproduce` (top-2 and top-16 runs) and the regime they trained in."""
  lines = ["## Table 4: softmax depth exponents", ""] + table4_lines(table_results)
  config = next((config_lib.flat(r["config"]) for r in table_results if r), None)
  return lines + (["", f"These runs train with {how_trained(config)}. The same spectra in the SGD "
                   "law's regime are in the section \"Tables 1, 4 and 5 under constant-step "
                   "SGD\"; FINDINGS.md says which reproduce."] if config else [])


def table5_lines(results: dict | None) -> list[str]:
  """Table 5 rows of a Table 1 run's softmax grids: the gap fit the check decides on and more."""
  lines = table("(a, b)", *GAP_COLUMNS, "gap alpha from the best single cosine layer",
                "C_L by depth", "C_L, last doubling", "A_L - C_L by depth",
                "A_L - C_L, last doubling")
  for fit in records.fits_of(results, "softmax"):
    single = (fit.get("bound") or {}).get("single")
    cells = [spectrum(fit), gap_cells(checks.gap_fit(fit, records.runs_of(results, fit))),
             pm(analysis.fit_gap(fit["depths"], fit["shared_error"], single) if single else {},
                "alpha", ".3f")]
    for field in ("shared_error", "disagreement"):
      cells += [", ".join(f"{value:.3f}" for value in fit[field] if np.isfinite(value)),
                f"{checks.last_doubling_change(fit, field):+.1%}"]
    lines.append(row(*cells))
  low, high = paper.TABLE5_ALPHA_RANGE
  return lines + ["", f"Paper: gap alpha {low}-{high} for all seven spectra, C_L and A_L - C_L "
                  "levelling off."]


table5_section = _of_run(  # Table 5 of the `make reproduce` Table 1 run
    "table1", "## Table 5: gap fit L0 - C_L = c L^-alpha (softmax, Table 1 spectra)")(table5_lines)


@_of_run("easy", "## Easy task (top-1 copy): one softmax layer solves it")
def easy_section(results: dict, metrics: list[dict]) -> list[str]:
  """The easy task: R_L beside E[y*^2] and the final top-1 attention mass, per model."""
  lines = table("model", "depth", "R_L (mean over unflagged seeds)", "E[y*^2]",
                "final top-1 attention mass")
  last_mass = records.final_selected_mass(metrics)
  for fit in results["fits"]:
    runs = records.runs_of(results, fit)
    second = np.mean([r["target_second_moment"] for r in runs])
    mass = last_mass.get((fit["model"], fit["a"], fit["b"]))
    grid_depths = sorted({r["depth"] for r in runs})  # the columns of selected_mass
    for L, R in zip(fit["depths"], fit["losses"]):
      lines.append(row(fit["model"], int(L), f"{R:.4g}", f"{second:.4g}",
                       f"{mass[grid_depths.index(int(L))]:.3f}" if mass is not None else "-"))
  return lines


def regime_section(regimes: list[tuple[str, str, dict]]) -> list[str]:
  """Where the law appears: the depth fit and levelling off per (regime, workdir, results)."""
  if not regimes:
    return []
  target = paper.table1_floor("softmax", "topk", 2, 0.0, 0.0)
  lines = ["## Where the law appears: one problem under each training regime", "",
           "Softmax, top-2, isotropic, d = 16, P = 128 (BUILD_NOTES.md \"Where the law appears\"; "
           f"docs/regimes.md). Paper: L0 = {target:g} with alpha ~ 1, C_L and A_L - C_L level.",
           ""] + table("regime", "run", "depths", "R_L", "fit L0", "alpha", "R^2", "L0 vs paper",
                       "C_L, last doubling", "A_L - C_L, last doubling")
  for name, workdir, results in regimes:
    fit = records.fits_of(results, "softmax")[0]
    lines.append(row(name, f"`{workdir}`", f"{min(fit['depths']):g}..{max(fit['depths']):g}",
                     ", ".join(f"{loss:.3f}" for loss in fit["losses"]),
                     fit_cells(fit, None, (".2f", ".2g")),
                     percent(fit["L0"], target) if fit["resolved"] else "-",
                     *(f"{checks.last_doubling_change(fit, field):+.1%}"
                       for field in ("shared_error", "disagreement"))))
  return lines


def _run_line(name: str, results: dict) -> str:
  """One run in words: depths, seeds, training (steps by depth where they differ), clean models
  and time."""
  config, runs = config_lib.flat(results["config"]), results["runs"]
  steps = {r["depth"]: r["steps"] for r in runs}
  by_depth = (" (steps by depth " + ", ".join(f"L={L}: {n}" for L, n in sorted(steps.items()))
              + ")" if len(set(steps.values())) > 1 else "")
  joined = f" in {len(results['joined_from'])} runs joined" if "joined_from" in results else ""
  return (f"`{name}`: depths {', '.join(str(L) for L in sorted(steps))}, {config['num_seeds']} "
          f"seed(s), {how_trained(config)}{by_depth}; {sum(analysis.is_clean(r) for r in runs)} "
          f"of {len(runs)} models clean ({results['wall_time_s'] / 60:.0f} min{joined}).")


def sgd_tables_section(tables: dict[str, dict]) -> list[str]:
  """Tables 1, 4 and 5 in the SGD law's regime (results by run name) and their checks."""
  lines = ["## Tables 1, 4 and 5 under constant-step SGD (regimes.SGD_LAW, SGD_STATIONARY)", ""]
  if not tables:
    return lines + [f"Not run (no results under {SGD_TABLES_ROOT})."]
  lines += [f"Committed runs under `{SGD_TABLES_ROOT}/` (one workdir each, with its report.md):",
            ""] + [f"- {_run_line(name, results)}" for name, results in tables.items()]
  table1, table4 = tables.get("table1"), [tables.get("table4"), tables.get("table4_top16")]
  if table1:
    rows = []
    for fit in records.fits_of(table1, "softmax"):
      target = paper.table1_floor("softmax", fit["task"], fit["k"], fit["a"], fit["b"])
      bound, (depth, loss) = fit.get("bound") or {}, records.deepest(fit)
      decided = claims.decided_fit(fit, records.runs_of(table1, fit))
      L0 = decided["L0"] if decided["resolved"] else float("nan")
      rows.append(row(spectrum(fit), fit_cells(decided, None, (".2f", ".2g")), cell(target),
                      percent(L0, target), pm(bound, "single"),
                      percent(L0, bound["single"]) if bound else "-", f"{loss:.4g} (L={depth})"))
    lines += section("### Table 1: fitted softmax floors (top-2)", (
        "(a, b)", "fitted L0 (weighted, as checked)", "alpha", "R^2", "paper L0", "diff",
        "best single cosine layer", "L0 vs single layer",
        "R_L at the deepest clean depth (shown, not counted)"), rows)
    lines += ["", "### Table 5: gap fit L0 - C_L = c L^-alpha (Table 1 spectra)", ""]
    lines += table5_lines(table1)
  if any(table4):
    lines += ["", "### Table 4: depth exponents", ""] + table4_lines(table4)
  return lines + [""] + run_report.check_lines(claims.sgd_table_checks(tables))


def run_times_sentence(all_results: dict[str, dict], names) -> str:
  """'Runs, with their training and evaluation time ...: NAME (M min), ...'."""
  return ("Runs, with their training and evaluation time (compilation included, theory bounds "
          "not): " + ", ".join(f"{name} ({all_results[name]['wall_time_s'] / 60:.0f} min)"
                                   if name in all_results else f"{name} (not run)"
                                   for name in names) + ".")


def models_line(all_results: dict[str, dict]) -> str:
  """How many models of a set of runs converged, were stationary and are clean."""
  n = records.model_counts([r for results in all_results.values() for r in results["runs"]])
  return (f"Models: {n['trained']} trained; {n['converged']} converged by the stated rule (a "
          "decayed or constant rate rarely meets it: docs/regimes.md); " + (
              f"{n['stationary']} of {n['windowed']} stationary over their averaging window; "
              if n["windowed"] else "") + f"{n['clean']} clean (neither diverged nor flagged).")


def plot_overview(all_results: dict[str, dict]):
  """Figure 1: R_L against depth, a curve per grid (linear dashed); difficult task, easy task."""
  fits = [f for results in all_results.values() for f in results["fits"]
          if not analysis.is_ensemble(f["model"])]
  return run_report.plot_curves([(f"R_L, {title}", [
      (f"{f['model']} k={f['k']} {spectrum(f)}", f["depths"], f["losses"],
       "o-" if f["model"] == "softmax" else "s--") for f in fits if f["task"] == task])
      for task, title in (("topk", "difficult task (top-k)"), ("top1", "easy task (top-1)"))])


def plot_table1(results: dict):
  """Per Table 1 spectrum: softmax depth curve with fit and both bounds; linear with theory."""
  columns = max(len(records.fits_of(results, "softmax")), 1)
  fig, axes = plt.subplots(2, columns, figsize=(2.6 * columns, 5.2), squeeze=False)
  for model, row_axes in zip(("softmax", "linear"), axes):
    for ax, fit in zip(row_axes, records.fits_of(results, model)):
      ax.plot(fit["depths"], fit["losses"], "o", ms=4)
      run_report.draw_fit(ax, fit, "C0", fit["depths"])
      depth_ticks(ax, fit["depths"])
      ax.set_title(f"{model} ({fit['a']:g},{fit['b']:g})", fontsize=7)
      ax.tick_params(labelsize=6)
  return fig


def plot_modewise(panels: list[tuple[str, list[dict]]]):
  """Mode-wise loss over the zero predictor's against depth, a panel per (title, grid's runs)."""
  def curves(runs):
    depths, normalised_LD = records.modewise_means(runs)
    count = normalised_LD.shape[1] if depths else 0
    return [(f"mode {j + 1}", depths, normalised_LD[:, j])
            for j in sorted({0, 1, 3, 7, 15, 31, 63, count - 1} & set(range(count)))]
  return run_report.plot_curves([(f"{title}: mode loss / zero-predictor mode loss",
                                  curves(runs)) for title, runs in panels])


def _columns(logged: list[dict], field: str, labels: list[str]) -> list[tuple]:
  """metrics.jsonl `field` against step, a plot_curves curve per model column (seed means)."""
  by_step = np.array([np.mean(m[field], axis=0) for m in logged])  # [steps, columns]
  return [(labels[i] if i < len(labels) else None, [m["step"] for m in logged], by_step[:, i],
           "-") for i in range(by_step.shape[1])]


def plot_attention_mass(metrics: list[dict], config: dict):
  """Attention mass on the target's tokens during training, a line per depth."""
  logged = [m for m in metrics if "selected_mass" in m]
  curves = (_columns(logged, "selected_mass", records.column_labels(config, logged[0]["model"]))
            if logged else [])
  return run_report.plot_curves([("attention mass on the copied token", curves,
                                  {"xlabel": "step", "xscale": "linear", "yscale": "linear",
                                   "ylim": (0, 1.02)})], size=(5.5, 4))


def plot_training_curves(name: str, metrics: list[dict], results: dict):
  """Validation loss against step, a line per depth (mean over seeds), a panel per grid."""
  grids = sorted({(m["model"], m["a"], m["b"]) for m in metrics})
  return run_report.plot_curves([(f"{name}: {model} ({a:g},{b:g})", _columns(
      [m for m in metrics if (m["model"], m["a"], m["b"]) == (model, a, b)], "val_loss",
      records.column_labels(results["config"], model)), {"xlabel": "step", "xscale": "linear"})
      for model, a, b in grids] or [(name, [])], min(len(grids), 7) or 1, size=(2.6, 2.4))


def load_root(root: str, names) -> tuple[dict[str, dict], dict[str, list[dict]]]:
  """The results and metrics of each finished run of `names` under `root`, by run name."""
  all_results = records.load_results(root, names)
  return all_results, {name: read_metrics(os.path.join(root, name)) for name in all_results}


def _figures(root: str, all_results: dict[str, dict], metrics: dict[str, list[dict]]
             ) -> list[str]:
  """Draws the combined report's figures under ROOT/figures; returns its Figures section."""
  table1 = all_results.get("table1")
  softmax = records.fits_of(table1, "softmax")
  lines = ["", "## Figures", ""] + ([image("Figure 1 overview", plot_overview(all_results), root,
                                           "overview")] if all_results else [])
  if table1:
    lines += ["", "Table 1 depth curves with their fits (dashed: best single cosine layer or "
              "linear theory floor; dotted: best mixture or the floor at this P):", "",
              image("table 1", plot_table1(table1), root, "table1_depth"), "",
              image("C_L and A_L - C_L", run_report.plot_curves([  # softmax, a curve a spectrum
                  (label, [(spectrum(f), f["depths"], f[field]) for f in softmax])
                  for field, (_, label) in zip(("shared_error", "disagreement"),
                                               run_report.DECOMPOSITION[1:])]), root,
                    "table1_decomposition")]
  modewise = [(title, [r for r in all_results[name]["runs"] if (r["model"], r["a"], r["b"]) == key])
              for title, name, key in (("softmax, top-2, (1, 0)", "table1", ("softmax", 1.0, 0.0)),
                                       ("linear, top-1, (1, 2)", "table2", ("linear", 1.0, 2.0)))
              if name in all_results]
  if modewise:
    lines += ["", "Normalised mode-wise loss (sequential for linear, collapsed for softmax in "
              "the paper):", "", image("mode-wise loss", plot_modewise(modewise), root, "modewise")]
  if metrics.get("easy") and "easy" in all_results:
    fig = plot_attention_mass([m for m in metrics["easy"] if m["model"] == "softmax"],
                              all_results["easy"]["config"])
    lines += ["", image("top-1 attention mass", fig, root, "easy_attention_mass")]
  for name, results in all_results.items():
    fig = plot_training_curves(name, metrics[name], results)
    lines += ["", f"Training curves, {name} (validation loss per depth):", "",
              image(f"training {name}", fig, root, f"training_{name}")]
  return lines


def write_combined_report(root: str, regimes=REGIME_RUNS, sgd_tables=SGD_TABLES_ROOT) -> str:
  """Writes ROOT/report.md and ROOT/figures/ from the runs under ROOT, the `regimes` ((name,
  workdir) pairs) and the SGD-regime tables under `sgd_tables`; returns the report's path."""
  names = [name for name, _ in RUNS]
  all_results, metrics = load_root(root, names)
  sgd_results = records.load_results(sgd_tables, SGD_TABLE_RUNS)
  regime_results = records.load_results(".", [workdir for _, workdir in regimes])
  regime_lines = regime_section([(name, workdir, regime_results[workdir])
                                 for name, workdir in regimes if workdir in regime_results])
  table1 = all_results.get("table1")
  lines = ["# Reproducing the paper: Tables 1-5", "",
           "Every number below comes from committed runs; the paper's values are references, "
           "never inputs. The first two sections are in the regime where the paper's law "
           "appears (constant-step SGD); the rest are the runs of `make reproduce` under this "
           "directory, in the regime of each table's config (Adam).", ""]
  lines += regime_lines + ([""] if regime_lines else []) + sgd_tables_section(sgd_results)
  lines += ["", models_line(sgd_results), ""] if sgd_results else [""]
  lines += ["## The `make reproduce` runs under this directory", "",
            run_times_sentence(all_results, names), "", models_line(all_results), ""]
  lines += run_report.check_lines(claims.reproduce_checks(all_results))
  for section in (table1_section(table1), table2_section(all_results.get("table2")),
                  table3_section(claims.linear_grids(all_results)),
                  easy_section(all_results.get("easy"), metrics.get("easy", [])),
                  table4_section([all_results.get("table4"), all_results.get("table4_top16")]),
                  table5_section(table1),
                  run_report.selection_section(table1, root)):
    lines += [""] + section
  return write_lines(root, "report.md", lines + _figures(root, all_results, metrics) + [""])
