"""One workdir's report.md and figures, from its results.json alone (its pass/miss lines from
`checks.run_checks`); and the figure helpers every report uses."""

import os

import numpy as np

from inverse_depth import analysis, checks, config as config_lib, paper, records
from inverse_depth.files import atomic_path
from inverse_depth.workdir import read_results
from inverse_depth.report import plt
from inverse_depth.report.markdown import (GAP_COLUMNS, TABLES_DOC, cell, fit_cells, gap_cells,
                                           how_trained, percent, pm, row, section, series, table,
                                           write_lines)

WINDOW_MIN_DEPTHS = 4  # each window fit keeps at least this many depths

# The lines a grid's theory bound draws across a depth plot, by its kind: (field, style, label).
BOUND_LINES = {"softmax_bound": (("single", "--", "best single cosine layer"),
                                 ("mixture", ":", "best mixture of cosine layers")),
               "linear_floor": (("floor", "--", "linear floor theory"),
                                ("context_floor", ":", "floor at this P (S^r q)"))}


def save_report_figure(fig, directory: str, name: str) -> str:
  """Saves `fig` as directory/figures/NAME.png and closes it; returns the markdown's link."""
  relative = os.path.join("figures", f"{name}.png")
  os.makedirs(os.path.join(directory, "figures"), exist_ok=True)
  fig.tight_layout()
  with atomic_path(os.path.join(directory, relative)) as tmp:
    fig.savefig(tmp, dpi=120, format="png")
  plt.close(fig)
  return relative


def image(alt: str, fig, directory: str, name: str) -> str:
  """The markdown line '![alt](figures/NAME.png)' of `fig`, saved by save_report_figure."""
  return f"![{alt}]({save_report_figure(fig, directory, name)})"


def depth_ticks(ax, depths) -> None:
  """A log depth axis labelled at the grid's depths."""
  ax.set_xscale("log")
  ax.set_xticks(depths, [f"{L:g}" for L in depths], minor=False)
  ax.set_xticks([], minor=True)


def fit_curve(fit: dict, depths: np.ndarray) -> np.ndarray:
  """The fitted L0 + c L^-alpha at `depths`."""
  return fit["L0"] + fit["c"] * depths ** (-fit["alpha"])


def draw_fit(ax, fit: dict, color: str, depths) -> dict:
  """A grid's fitted L0 + c L^-alpha over `depths` and its theory bound's BOUND_LINES, labelled;
  returns the bound drawn ({} for none, and for an ensemble)."""
  if fit["resolved"]:
    dense = np.geomspace(min(depths), max(depths), 100)
    ax.plot(dense, fit_curve(fit, dense), "-", color=color, alpha=0.8,
            label=f"fit L0={fit['L0']:.3g}, alpha={fit['alpha']:.2f}")
  bound = {} if analysis.is_ensemble(fit["model"]) else fit.get("bound") or {}
  for key, style, label in BOUND_LINES[bound["kind"]] if bound else ():
    ax.axhline(bound[key], color=color, ls=style, lw=1, label=f"{label} {bound[key]:.4g}")
  return bound


def plot_depth_scaling(results: dict):
  """Log-log R_L against depth, every grid, with its fitted L0 + c L^-alpha and bounds."""
  fig, ax = plt.subplots(figsize=(6, 4.5))
  for i, fit in enumerate(results["fits"]):
    color, runs = f"C{i}", records.runs_of(results, fit)
    for r in (r for r in runs if not r["diverged"]):  # flagged as crosses (not in the means)
      ax.plot(r["depth"], r["eval_loss"], "x" if r.get("flagged") else ".", color=color,
              alpha=0.35)
    depths, losses = records.clean_means(runs, "eval_loss")
    ax.plot(depths, losses, "o", color=color, label=records.grid_label(fit))
    bound = draw_fit(ax, fit, color, depths)
    if bound.get("kind") == "softmax_bound":
      optima = [entry["loss"] for entry in bound["average_by_layers"]]
      ax.plot(range(1, len(optima) + 1), optima, "s--", ms=3, lw=0.8, color=color,
              label="best L cosine layers (theory)")
  ax.set(xscale="log", yscale="log", xlabel="depth L", ylabel="held-out loss R_L (clean models)")
  ax.legend(fontsize=7)
  return fig


def plot_curves(panels: list[tuple], columns: int = 0, size=(4.5, 3.8)):
  """A panel per (title, curves[, axes settings]) in rows of `columns` (default: one row), a curve
  per (label, x, values[, style]); by default against a log depth axis ticked at the labelled
  curves' depths, y on a log axis where the values are positive and span a decade or more."""
  columns = columns or len(panels)
  rows = -(-len(panels) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(size[0] * columns, size[1] * rows),
                           squeeze=False)
  for ax, (title, curves, *settings) in zip(axes.flat, panels):
    for label, x, values, *style in curves:
      ax.plot(x, values, *(style or ["o-"]), ms=3, label=label)
    values = np.array([v for _, _, values, *_ in curves for v in values], dtype=float)
    values = values[np.isfinite(values)]
    log_y = values.size > 0 and values.min() > 0 and values.max() >= 10 * values.min()
    ax.set(**{"xscale": "log", "xlabel": "depth L", "title": title,
              "yscale": "log" if log_y else "linear", **(settings[0] if settings else {})})
    labelled = [(label, x) for label, x, *_ in curves if label]
    if not settings:
      depth_ticks(ax, sorted({L for _, x in labelled for L in x}))
    ax.title.set_fontsize(8)
    if labelled:
      ax.legend(fontsize=6 if len(labelled) < 10 else 4, ncol=1 if len(labelled) < 10 else 2)
  return fig


# The loss and its two parts (analysis.md "The shared/disagreement identity"): (field, label).
DECOMPOSITION = (("eval_loss", "R_L"), ("C", "C_L (shared error)"),
                 ("disagreement", "A_L - C_L (disagreement)"))


def plot_decomposition(results: dict):
  """R_L, the shared error C_L and the disagreement A_L - C_L against depth, a panel a grid."""
  return plot_curves([(records.grid_label(fit), [
      (label, *records.clean_means(records.runs_of(results, fit), field))
      for field, label in DECOMPOSITION]) for fit in results["fits"]])


def selection_section(results: dict | None, directory: str) -> list[str]:
  """Percentiles of the selection error E_L (appendix D.2), shallowest against deepest model,
  and its figure of every depth (saved under `directory`)."""
  lines = ["## Selection error E_L = |pbar_L - p*|^2 (softmax, top-2, isotropic)", ""]
  found = records.selection_percentiles(results)
  if not found:
    return lines + ["Not available (no softmax (0, 0) grid with diagnostics in this run)."]
  per = found["by_depth"]
  shallow, deep = min(per), max(per)
  lines += [f"Percentiles over {found['contexts']} evaluation contexts, means over seeds.", ""]
  lines += table("percentile", f"L={shallow}", f"L={deep}", f"L={deep} - L={shallow}")
  lines += [row(q, f"{per[shallow][i]:.4f}", f"{per[deep][i]:.4f}",
                f"{per[deep][i] - per[shallow][i]:+.4f}") for i, q in enumerate(found["keys"])]
  fig = plot_curves([("E_L = |pbar_L - p*|^2, means over seeds", [
      (f"L={L}", [float(q) for q in found["keys"]], values) for L, values in per.items()],
      {"xlabel": "percentile over contexts", "xscale": "linear"})], size=(5.5, 4))
  return lines + ["", image("selection error", fig, directory, "selection_error")]


def check_lines(found: list[checks.Check]) -> list[str]:
  """A report's check list: the header line, a line per check, the tolerances."""
  return ([checks.header_line(found), ""] + [checks.check_line(check) for check in found]
          + ["", checks.tolerances_line()])


def _header(results: dict) -> list[str]:
  """The report's title, the sizes and training of each model kind (its `model_overrides`
  applied), provenance and, for a join, its sources."""
  training = []
  for kind in sorted({analysis.model_kind(f["model"]) for f in results["fits"]}):
    own = records.kind_config(results["config"], kind)
    sizes = own["sizes"][kind]
    training.append(f"{kind} d={sizes['d']}, P={sizes['P']}, N={sizes['N']}: depths "
                    f"{list(own['depths'])}, {own['num_seeds']} seeds, {how_trained(own)}, eval "
                    f"set {own['eval_size']} contexts")
  lines = ["# inverse-depth report", "", "; ".join(training) + f"; {results['wall_time_s']:.0f} "
           f"s on {results['num_devices']} {results['backend']} device(s).", ""]
  provenance = results.get("provenance")
  if provenance:  # null for runs made before it was recorded; a join has none
    commit = (provenance["commit"] or "unknown")[:7]
    lines += [f"Made by `{provenance['command']}` at commit {commit}"
              + (" (with uncommitted changes)" if provenance.get("uncommitted_changes") else "")
              + f", {provenance['time']}.", ""]
  if "joined_from" in results:
    lines += [f"Joined from {len(results['joined_from'])} runs of one regime "
              "(`inverse_depth.joined`; the time above is their sum): "
              + "; ".join(f"`{s['source']}` (depths {s['depths']}, spectra {s['spectra']}, "
                          f"{s['wall_time_s'] / 60:.0f} min)" for s in results["joined_from"])
              + ". Steps between depths from different runs have no paired standard error.",
              ""]
  return lines


def _depth_fit_rows(results: dict, fit: dict):
  """A grid's depth fit and its gap fit (`checks.gap_fit`, none without a floor)."""
  yield row(records.grid_label(fit), fit_cells(fit),
            gap_cells(checks.gap_fit(fit, records.runs_of(results, fit))))


def _weighted_fit_rows(results: dict, fit: dict):
  """A grid's weighted fits of the law check over L >= 1 and L >= 2 (checks.law_fits)."""
  fits, label = checks.law_fits(fit, records.runs_of(results, fit)), records.grid_label(fit)
  if fits["from_1"] is not None:
    note = " (L = 1 from flagged models)" if fits["flagged_depth_1"] else ""
    yield row(label, "L >= 1" + note, fit_cells(fits["from_1"]))
  if fits["from_2"] is not None:
    yield row(label, "L >= 2", fit_cells(fits["from_2"]))
  yield row(label, "per-depth se used as weights", series(fits["depths"], fits["errors"], ".2g"),
            "-", "-", "-")


def _window_fit_rows(results: dict, fit: dict):
  """A grid's depth fit over L >= L_min, with alpha free and held at the paper's 1."""
  if len(fit["depths"]) <= WINDOW_MIN_DEPTHS:
    return
  target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
  for alpha in (None, 1.0):
    for window in analysis.fit_depth_windows(fit["depths"], fit["losses"], WINDOW_MIN_DEPTHS,
                                             alpha=alpha):
      exponent = f"{alpha:g} (held)" if alpha else pm(window, "alpha", ".3f", ".3f")
      cells = ((pm(window, "L0"), exponent, f"{window['r2']:.4f}", percent(window["L0"], target))
               if window["resolved"] else (window["verdict"], exponent if alpha else "-", "-", "-"))
      yield row(records.grid_label(fit), f"{window['smallest_depth']:g}..{max(fit['depths']):g}",
                *cells)


def _against_theory_rows(results: dict, fit: dict):
  """A grid's fitted floor and deepest loss beside its theory bound and the paper's L0."""
  bound = fit.get("bound") or {}
  yield row(records.grid_label(fit), f"{fit['L0']:.4g}" if fit["resolved"] else "not resolved",
            f"{fit['losses'][-1] if fit['losses'] else float('nan'):.4g}",
            f"{pm(bound, 'reference')} ({bound['kind']})" if bound else "not computed",
            pm(bound, "mixture") if bound.get("kind") == "softmax_bound" else "-",
            cell(paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])))


def _cosine_layer_rows(results: dict, fit: dict):
  """A grid's R_L beside the best L cosine-scoring layers (`theory.equal_weight_averages`)."""
  optima = (fit.get("bound") or {}).get("average_by_layers")
  if optima and not analysis.is_ensemble(fit["model"]):
    trained = dict(zip(fit["depths"], fit["losses"]))
    for L, entry in enumerate(optima, start=1):
      yield row(records.grid_label(fit), L, f"{entry['loss']:.4g}",
                f"{trained[L]:.4g}" if L in trained else "-")


# The tables with rows by grid, in the report's order: (title, columns, intro, a grid's rows).
GRID_TABLES = (
    ("## Depth fits  R_L = L0 + c L^-alpha", (
        "grid", "L0", "c", "alpha", "R^2", *GAP_COLUMNS), "", _depth_fit_rows),
    ("## The law check's fits, weighted by each depth's standard error",
     ("grid", "depths", "L0", "c", "alpha", "R^2"),
     f"How each depth's error is formed, the law check's rule: {TABLES_DOC}.", _weighted_fit_rows),
    ("## Depth fits by window: the same fit over L >= L_min",
     ("grid", "depths", "L0", "alpha", "R^2", "L0 against the paper's Table 1 floor"),
     f"Each window with alpha free, then held at the paper's 1 (R_L = L0 + c/L): {TABLES_DOC}.",
     _window_fit_rows),
    ("## Against theory and the paper",
     ("grid", "fitted L0", "R at the deepest depth", "theory bound",
      "best mixture of cosine layers", "paper Table 1 L0"), "", _against_theory_rows),
    ("## Against the best L cosine-scoring layers (theory)",
     ("grid", "L", "best L cosine layers", "trained R_L"),
     f"Equal-weight averages of L cosine-scoring layers at their optimum ({TABLES_DOC}).",
     _cosine_layer_rows))


def _ensemble_comparison(results: dict) -> list[str]:
  """Jointly trained depth-L model beside the average of L one-layer models trained alone."""
  lines = []
  for joint, ensemble in records.ensemble_pairs(results):
    columns = [dict(zip(*records.clean_means(records.runs_of(results, fit), field)))
               for fit in (joint, ensemble) for field in ("eval_loss", "disagreement")]
    by_depth = {L: [c.get(L, np.nan) for c in columns] for L in sorted({*columns[0], *columns[2]})}
    rows = [row(L, f"{R:.4f}", f"{R_ens:.4f}", f"{R - R_ens:+.4f}", f"{gap:.3g}", f"{gap_ens:.3g}")
            for L, (R, gap, R_ens, gap_ens) in by_depth.items()]
    lines += section(
        f"## Depth or ensemble? {records.grid_label(joint)}",
        ("depth", "joint R_L", "ensemble R_L", "joint - ensemble", "joint A_L - C_L",
         "ensemble A_L - C_L"), rows,
        "Jointly trained depth-L model against the average of L one-layer models trained alone "
        f"on the same stream, means over clean seeds ({TABLES_DOC}).")
  return lines


def _grid_section(results: dict, fit: dict) -> list[str]:
  """One grid: its depth table, its layers' scoring geometry and the models left out."""
  runs = records.runs_of(results, fit)
  averaged = any("beta_averaged_loss" in r for r in runs)
  lines = ["", f"## {records.grid_label(fit)}", ""]
  lines += table("depth", "R_L (mean +- seed se)", "change from the previous depth",
                 *(["R_L averaged over beta (+- se)"] if averaged else []), "A_L", "C_L",
                 "A_L - C_L", "(A_L - C_L) / L", "max abs identity residual", "steps",
                 "converged", "flagged", "diverged")
  for d in records.depth_rows(runs):
    cells = [d["depth"], pm(d, "eval_loss"), f"{100 * d['change']:+.2f}%"
             if np.isfinite(d["change"]) else "-", *([pm(d, "beta_averaged")] if averaged else [])]
    lines.append(row(*cells, *(f"{d[field]:.4g}" for field in ("A", "C", "disagreement")),
                     f"{d['disagreement'] / d['depth']:.4g}", f"{d['residual']:.1e}", d["steps"],
                     *(f"{d[n]}/{d['models']}" for n in ("converged", "flagged", "diverged"))))
  lines += section("### How the layers score", (
      "depth", "temperature tau: mean over layers (min..max)", "anisotropy", "alignment"), [
          row(d["depth"], f"{d['taus'].mean():.3g} ({d['taus'].min():.3g}..{d['taus'].max():.3g})",
              f"{d['anisotropy']:.3f}", cell(d["alignment"], "+.3f"))
          for d in records.geometry_rows(runs)], f"`diagnostics.scoring_geometry`; {TABLES_DOC}.")
  for left_out, why, each in (
      (fit.get("flagged"), "Flagged and excluded from the means and the fit", "({reason})"),
      (fit["excluded_diverged"], "Excluded from the fit and the means (diverged: loss non-finite "
       "or above divergence_loss; frozen at the last finite state)", "at step {step}")):
    if left_out:
      lines += ["", f"**{why}:** " + "; ".join(f"depth {e['depth']} seed {e['seed']} "
                                               + each.format(**e) for e in left_out) + "."]
  return lines


def _stationarity(results: dict) -> list[str]:
  """Per model with an averaging window: its time average and stationarity test."""
  rows = []
  for r in sorted((r for r in results["runs"] if "stationarity" in r),
                  key=lambda r: (r["model"], r["a"], r["b"], r["depth"], r["seed"])):
    window = r["stationarity"]
    rows.append(row(f"{r['model']} {r['a']:g},{r['b']:g}", r["depth"], r["seed"],
                    f"{r['eval_loss']:.4f}", f"{window['se']:.4f}", f"{r['final_eval_loss']:.4f}",
                    f"{window['first_half']:.4f} -> {window['second_half']:.4f}",
                    f"{window['half_z']:.1f}", f"{window['slope_z']:.1f}",
                    "yes" if window["stationary"] else "**no**"))
  if not rows:
    return []
  config = config_lib.flat(results["config"])
  first_step = config["max_steps"] - (config["stationary_evals"] - 1) * config["eval_every"]
  return section(
      "## Stationary evaluation",
      ("model", "L", "seed", "R (time average)", "se over time", "final iterate",
       "first half -> second half", "halves (se)", "slope (se)", "stationary"), rows,
      f"R, A and C are averages over {config['stationary_evals']} evaluations, steps "
      f"{first_step}..{config['max_steps']} every {config['eval_every']}; a model is stationary "
      f"when its half-window means and slope are within {config['stationarity_z']:g} standard "
      "errors of no change (docs/analysis.md, \"Stationarity and longer training\").")


def write_report(workdir: str) -> str:
  """Writes figures/*.png and report.md from workdir/results.json alone; returns its path."""
  results = read_results(workdir)
  lines = _header(results)
  lines += ["## Checks against the paper", ""] + check_lines(checks.run_checks(results))
  lines += ["", "A MISS means the prediction did not appear in this run; BUILD_NOTES.md records "
            "what was tried to find the regime where it does."]
  for title, columns, intro, rows_of in GRID_TABLES:
    lines += section(title, columns, [line for fit in results["fits"]
                                      for line in rows_of(results, fit)], intro)
  lines += _ensemble_comparison(results)
  for fit in results["fits"]:
    lines += _grid_section(results, fit)
  lines += _stationarity(results)
  if records.selection_percentiles(results):
    lines += [""] + selection_section(results, workdir)
  lines += ["", "## Figures", "",
            image("depth scaling", plot_depth_scaling(results), workdir, "depth_scaling"), "",
            image("decomposition", plot_decomposition(results), workdir, "decomposition"), ""]
  return write_lines(workdir, "report.md", lines)
