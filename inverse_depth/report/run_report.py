"""Figures and report.md regenerated from results.json alone.

The pass/miss lines come from `checks.run_checks` (inverse_depth/checks.py decides every
pass or miss, with named tolerances); each line states its tolerance.
"""

import json
import os

import numpy as np

from inverse_depth import analysis, paper, records
from inverse_depth import checks as checks_lib
from inverse_depth.files import atomic_path, write_text_atomic
from inverse_depth.workdir import read_results
from inverse_depth.report import plt
from inverse_depth.report.markdown import (fit_cells, percent, pm, row, spectrum, table,
                                           value_or_dash)


def by_depth(runs: list[dict], field: str) -> tuple[np.ndarray, np.ndarray]:
  depths, means, _ = analysis.seed_means(analysis.clean_runs(runs), field)
  return np.array(depths), np.array(means)


def fit_curve(fit: dict, depths: np.ndarray) -> np.ndarray:
  """The fitted L0 + c L^-alpha at `depths`."""
  return fit["L0"] + fit["c"] * depths ** (-fit["alpha"])


def plot_depth_scaling(results: dict, path: str) -> None:
  """Log-log R_L against depth, every grid, with its fitted L0 + c L^-alpha."""
  fig, ax = plt.subplots(figsize=(6, 4.5))
  for i, fit in enumerate(results["fits"]):
    color = f"C{i}"
    runs = records.runs_of(results, fit)
    for r in runs:  # every seed; flagged models as crosses (they are not in the means)
      if not r["diverged"]:
        ax.plot(r["depth"], r["eval_loss"], "x" if r.get("flagged") else ".", color=color,
                alpha=0.35)
    depths, losses = by_depth(runs, "eval_loss")
    ax.plot(depths, losses, "o", color=color, label=records.grid_label(fit))
    if fit["resolved"]:
      dense = np.geomspace(depths.min(), depths.max(), 100)
      ax.plot(dense, fit_curve(fit, dense), "-", color=color, alpha=0.8,
              label=f"fit L0={fit['L0']:.3g}, alpha={fit['alpha']:.2f}")
    bound = fit.get("bound")
    if bound and bound["kind"] == "softmax_bound" and not analysis.is_ensemble(fit["model"]):
      ax.axhline(bound["single"], color=color, ls="--", lw=1,
                 label=f"best single cosine layer {bound['single']:.4g}")
      ax.axhline(bound["mixture"], color=color, ls=":", lw=1,
                 label=f"best mixture of cosine layers {bound['mixture']:.4g}")
      optima = [entry["loss"] for entry in bound["average_by_layers"]]
      ax.plot(range(1, len(optima) + 1), optima, "s--", ms=3, lw=0.8, color=color,
              label="best L cosine layers (theory)")
    elif bound and bound["kind"] == "linear_floor":
      ax.axhline(bound["floor"], color=color, ls="--", lw=1,
                 label=f"linear floor theory {bound['floor']:.4g}")
      ax.axhline(bound["context_floor"], color=color, ls=":", lw=1,
                 label=f"floor at this P (S^r q) {bound['context_floor']:.4g}")
  ax.set(xscale="log", yscale="log", xlabel="depth L", ylabel="held-out loss R_L (clean models)")
  ax.legend(fontsize=7)
  save_figure(fig, path)


def save_figure(fig, path: str) -> None:
  """Saves a PNG to a temporary file, then renames it over `path`."""
  fig.tight_layout()
  with atomic_path(path) as tmp:
    fig.savefig(tmp, dpi=120, format="png")
  plt.close(fig)


def plot_decomposition(results: dict, path: str) -> None:
  """R_L, the shared error C_L and the disagreement A_L - C_L against depth."""
  fits = results["fits"]
  fig, axes = plt.subplots(1, len(fits), figsize=(4.5 * len(fits), 3.8), squeeze=False)
  for ax, fit in zip(axes[0], fits):
    runs = records.runs_of(results, fit)
    curves = [by_depth(runs, field) for field in ("eval_loss", "C", "disagreement")]
    for (depths, values), style, label in zip(curves, ("o-", "s-", "^-"), (
        "R_L", "C_L (shared)", "A_L - C_L (disagreement)")):
      ax.plot(depths, values, style, label=label)
    values = np.concatenate([values for _, values in curves])
    values = values[np.isfinite(values)]
    all_positive = values.size > 0 and np.all(values > 0)  # C_L < 0 is possible
    ax.set(xscale="log" if values.size else "linear",
           yscale="log" if all_positive else ("symlog" if values.size else "linear"),
           xlabel="depth L", title=records.grid_label(fit))
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
  save_figure(fig, path)


def _table(results: dict, fit: dict) -> list[str]:
  """Per depth: means over clean seeds of R (with its seed spread and its change from the
  previous depth), A, C, A - C and (A - C) / L, the two terms of R = C + (A - C) / L; and,
  where the records have it, R averaged exactly over beta with its standard error."""
  runs = records.runs_of(results, fit)
  averaged = any("beta_averaged_loss" in r for r in runs)
  lines = table("depth", "R_L (mean +- seed se)", "change from the previous depth",
                *(["R_L averaged over beta (+- se)"] if averaged else []), "A_L", "C_L",
                "A_L - C_L", "(A_L - C_L) / L", "max abs identity residual", "steps",
                "converged", "flagged", "diverged")
  previous_loss = float("nan")
  for depth in sorted({r["depth"] for r in runs}):
    everyone = [r for r in runs if r["depth"] == depth]
    at = analysis.clean_runs(everyone)

    def mean(field):
      return np.mean([r[field] for r in at]) if at else float("nan")

    spread = (np.std([r["eval_loss"] for r in at], ddof=1) / np.sqrt(len(at))
              if len(at) > 1 else float("nan"))
    change = mean("eval_loss") / previous_loss - 1
    previous_loss = mean("eval_loss")
    cells = [depth, f"{mean('eval_loss'):.4g} +- {spread:.2g}",
             f"{100 * change:+.2f}%" if np.isfinite(change) else "-"]
    if averaged:
      loss, se = analysis.beta_averaged_loss(runs, depth)
      cells.append(f"{loss:.4g} +- {se:.2g}" if np.isfinite(loss) else "-")
    residual = max(abs(r["identity_residual"]) for r in at) if at else float("nan")
    counts = [sum(r["converged"] for r in at), sum(r.get("flagged", False) for r in everyone),
              sum(r["diverged"] for r in everyone)]
    lines.append(row(*cells, f"{mean('A'):.4g}", f"{mean('C'):.4g}",
                     f"{mean('disagreement'):.4g}", f"{mean('disagreement') / depth:.4g}",
                     f"{residual:.1e}", int(np.mean([r["steps"] for r in at])) if at else 0,
                     *(f"{count}/{len(everyone)}" for count in counts)))
  return lines


def _geometry_table(results: dict, fit: dict) -> list[str]:
  """Per depth, means over clean seeds of each layer's scoring geometry
  (diagnostics.scoring_geometry), where the run records have it."""
  runs = [r for r in analysis.clean_runs(records.runs_of(results, fit))
          if "layer_temperature" in r]
  if not runs:
    return []
  lines = ["", "How the layers score (`diagnostics.scoring_geometry`): a cosine scorer has "
           "anisotropy 0 and scores with its temperature tau; alignment is the mean cosine "
           "between two layers' departures from cosine scoring (1: alike, 0: unrelated).", ""]
  lines += table("depth", "temperature tau: mean over layers (min..max)", "anisotropy",
                 "alignment")
  for depth in sorted({r["depth"] for r in runs}):
    at = [r for r in runs if r["depth"] == depth]
    taus = np.concatenate([r["layer_temperature"] for r in at])
    anisotropy = np.mean(np.concatenate([r["layer_anisotropy"] for r in at]))
    alignment = np.mean([r["deviation_alignment"] for r in at])
    lines.append(row(depth, f"{taus.mean():.3g} ({taus.min():.3g}..{taus.max():.3g})",
                     f"{anisotropy:.3f}", f"{alignment:+.3f}" if np.isfinite(alignment) else "-"))
  return lines


def _cosine_layers_section(results: dict) -> list[str]:
  """Trained R_L beside the best controlled model of L cosine-scoring layers
  (bound["average_by_layers"]: `theory.equal_weight_averages`), for the softmax grids whose
  bound has one."""
  rows = []
  for fit in results["fits"]:
    optima = (fit.get("bound") or {}).get("average_by_layers")
    if not optima or analysis.is_ensemble(fit["model"]):
      continue
    trained = dict(zip(fit["depths"], fit["losses"]))
    rows += [row(records.grid_label(fit), L, f"{entry['loss']:.4g}",
                 f"{trained[L]:.4g}" if L in trained else "-")
             for L, entry in enumerate(optima, start=1)]
  if not rows:
    return []
  return ["", "## Against the best L cosine-scoring layers (theory)", "",
          "The controlled model with every layer scoring by softmax(temperature x cosine) at a "
          "grid temperature, equal weights 1/L and one gain, optimised exhaustively on the "
          "bound's contexts (other contexts than the trained models' evaluation set).", ""
          ] + table("grid", "L", "best L cosine layers", "trained R_L") + rows


def _ensemble_comparison(results: dict) -> list[str]:
  """Jointly trained depth-L model beside the average of L one-layer models trained alone."""
  lines = []
  fits = {(f["model"], f["task"], f["k"], f["a"], f["b"]): f for f in results["fits"]}
  for (model, *problem), ensemble in fits.items():
    joint = fits.get(("softmax", *problem))
    if model != "softmax" + analysis.ENSEMBLE_SUFFIX or joint is None:
      continue
    lines += ["", f"## Depth or ensemble? {records.grid_label(joint)}", "",
              "Jointly trained depth-L model against the average of L one-layer models trained "
              "alone on the same stream (means over clean seeds). Where the two agree, depth acts "
              "as an ensemble; where they differ, joint training does something an ensemble "
              "cannot.", ""]
    lines += table("depth", "joint R_L", "ensemble R_L", "joint - ensemble", "joint A_L - C_L",
                   "ensemble A_L - C_L")
    columns = [dict(zip(*by_depth(records.runs_of(results, fit), field)))
               for fit in (joint, ensemble) for field in ("eval_loss", "disagreement")]
    for depth in sorted(set(columns[0]) | set(columns[2])):
      joint_R, joint_gap, ensemble_R, ensemble_gap = (c.get(depth, np.nan) for c in columns)
      lines.append(row(depth, f"{joint_R:.4f}", f"{ensemble_R:.4f}",
                       f"{joint_R - ensemble_R:+.4f}", f"{joint_gap:.3g}", f"{ensemble_gap:.3g}"))
  return lines


def selection_records(results: dict | None) -> list[dict]:
  """Clean softmax top-2 (0, 0) run records that carry selection-error percentiles."""
  return [r for r in (results or {}).get("runs", [])
          if r["model"] == "softmax" and (r["task"], r["k"], r["a"], r["b"]) == ("topk", 2, 0, 0)
          and "selection_error_percentiles" in r and analysis.is_clean(r)]


def _selection_percentiles(records: list[dict]) -> tuple[list[str], dict[int, np.ndarray]]:
  """The percentile keys of `selection_records` and, per depth, the mean over seeds of each."""
  keys = sorted(records[0]["selection_error_percentiles"], key=float) if records else []
  return keys, {L: np.mean([[r["selection_error_percentiles"][q] for q in keys]
                            for r in records if r["depth"] == L], axis=0)
                for L in sorted({r["depth"] for r in records})}


def selection_section(results: dict | None) -> list[str]:
  """Percentiles over contexts of the selection error E_L = |pbar_L - p*|^2 (paper appendix
  D.2), the shallowest against the deepest model, and their difference per percentile."""
  lines = ["## Selection error E_L = |pbar_L - p*|^2 (softmax, top-2, isotropic)", ""]
  records = selection_records(results)
  if not records:
    return lines + ["Not available (no softmax (0, 0) grid with diagnostics in this run)."]
  keys, per = _selection_percentiles(records)
  shallow, deep = min(per), max(per)
  lines += [f"Percentiles over {records[0]['diagnostic_contexts']} evaluation contexts, means "
            "over seeds.", ""]
  lines += table("percentile", f"L={shallow}", f"L={deep}", f"L={deep} - L={shallow}")
  lines += [row(q, f"{per[shallow][i]:.4f}", f"{per[deep][i]:.4f}",
                f"{per[deep][i] - per[shallow][i]:+.4f}") for i, q in enumerate(keys)]
  return lines + ["", "![selection error](figures/selection_error.png)"]


def plot_selection(results: dict, path: str) -> None:
  """Selection-error percentiles per depth (softmax (0, 0)), means over seeds."""
  keys, per = _selection_percentiles(selection_records(results))
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for L, values in per.items():
    ax.plot([float(q) for q in keys], values, "o-", ms=3, label=f"L={L}")
  ax.set(xlabel="percentile over contexts", ylabel="E_L = |pbar_L - p*|^2", yscale="log")
  ax.legend(fontsize=7)
  save_figure(fig, path)


def _weighted_fits(results: dict) -> list[str]:
  """The law check's fits (checks.law_fits): weighted by each depth's standard error, over
  L >= 1 (with L = 1 from its flagged models where none is clean) and over L >= 2."""
  rows = []
  for fit in results["fits"]:
    fits = checks_lib.law_fits(fit, records.runs_of(results, fit))
    label = records.grid_label(fit)
    if fits["from_1"] is not None:
      note = " (L = 1 from flagged models)" if fits["flagged_depth_1"] else ""
      rows.append(row(label, "L >= 1" + note, fit_cells(fits["from_1"])))
    if fits["from_2"] is not None:
      rows.append(row(label, "L >= 2", fit_cells(fits["from_2"])))
    errors = ", ".join(f"{L:g}: {e:.2g}" for L, e in zip(fits["depths"], fits["errors"]))
    rows.append(row(label, "per-depth se used as weights", errors, "-", "-", "-"))
  if not rows:
    return []
  return ["", "## The law check's fits, weighted by each depth's standard error", "",
          "Each depth's error is the larger of the spread over seeds and the models' own error "
          "(over time for a window average, else over evaluation contexts) over sqrt(seeds). "
          "The law check needs both depth sets in range (checks.depth_law).", ""
          ] + table("grid", "depths", "L0", "c", "alpha", "R^2") + rows


WINDOW_MIN_DEPTHS = 4  # each window fit keeps at least this many depths


def _window_fits(results: dict) -> list[str]:
  """The depth fit again over L >= L_min, for grids with more than WINDOW_MIN_DEPTHS depths,
  with alpha free and with alpha held at the paper's 1."""
  rows = []
  for fit in results["fits"]:
    if len(fit["depths"]) <= WINDOW_MIN_DEPTHS:
      continue
    target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
    for alpha in (None, 1.0):
      for window in analysis.fit_depth_windows(fit["depths"], fit["losses"], WINDOW_MIN_DEPTHS,
                                               alpha=alpha):
        depths = f"{window['smallest_depth']:g}..{max(fit['depths']):g}"
        exponent = f"{alpha:g} (held)" if alpha else pm(window, "alpha", ".3f", ".3f")
        if not window["resolved"]:
          rows.append(row(records.grid_label(fit), depths, window["verdict"],
                          exponent if alpha else "-", "-", "-"))
        else:
          rows.append(row(records.grid_label(fit), depths, pm(window, "L0"), exponent,
                          f"{window['r2']:.4f}", percent(window["L0"], target)))
  if not rows:
    return []
  return ["", "## Depth fits by window: the same fit over L >= L_min", "",
          "A law that holds at every depth gives the same L0 and alpha on every window. The "
          "rows with alpha held at 1 fit the paper's law R_L = L0 + c/L itself: its R^2 "
          "says how well that law describes the curve.", ""
          ] + table("grid", "depths", "L0", "alpha", "R^2",
                    "L0 against the paper's Table 1 floor") + rows


def _stationarity_section(results: dict) -> list[str]:
  """Per model with an averaging window: the time-averaged loss and its error over time, the
  final iterate's, and the stationarity test (analysis.stationarity)."""
  records = [r for r in results["runs"] if "stationarity" in r]
  if not records:
    return []
  config = results["config"]
  first_step = config["max_steps"] - (config["stationary_evals"] - 1) * config["eval_every"]
  lines = ["", "## Stationary evaluation", "",
           f"R, A and C are averages over {config['stationary_evals']} evaluations, steps "
           f"{first_step}..{config['max_steps']} every {config['eval_every']}; the error over "
           "time allows for the correlation of consecutive evaluations. A model is stationary "
           f"when its two half-window means and its slope are within "
           f"{config['stationarity_z']:g} standard errors of no change.", ""]
  lines += table("model", "L", "seed", "R (time average)", "se over time", "final iterate",
                 "first half -> second half", "halves (se)", "slope (se)", "stationary")
  for r in sorted(records, key=lambda r: (r["model"], r["a"], r["b"], r["depth"], r["seed"])):
    window = r["stationarity"]
    lines.append(row(f"{r['model']} {r['a']:g},{r['b']:g}", r["depth"], r["seed"],
                     f"{r['eval_loss']:.4f}", f"{window['se']:.4f}",
                     f"{r['final_eval_loss']:.4f}",
                     f"{window['first_half']:.4f} -> {window['second_half']:.4f}",
                     f"{window['half_z']:.1f}", f"{window['slope_z']:.1f}",
                     "yes" if window["stationary"] else "**no**"))
  return lines


def check_lines(found: list[checks_lib.Check]) -> list[str]:
  """A report's check list: the header line, a line per check, the tolerances."""
  return ([checks_lib.header_line(found), ""] + [checks_lib.check_line(check) for check in found]
          + ["", checks_lib.tolerances_line()])


def _training_header(config: dict, kind: str) -> str:
  """Sizes and training of one model kind, with its `model_overrides` applied."""
  own = records.kind_config(config, kind)
  sizes = config["sizes"][kind]
  return (f"{kind} d={sizes['d']}, P={sizes['P']}, N={sizes['N']}: depths "
          f"{list(own['depths'])}, {own['num_seeds']} seeds, {own['max_steps']} steps at batch "
          f"{own['batch_size']}, {own['optimizer']} lr {own['learning_rate']:g} "
          f"({own['schedule']} schedule), qk init {own['qk_init']} (scale "
          f"{own['qk_init_scale']:g}), value init {own.get('value_init', 'random')}, eval set "
          f"{own['eval_size']} contexts")


def write_report(workdir: str) -> str:
  """Writes figures/*.png and report.md from workdir/results.json alone; returns its path."""
  results = read_results(workdir)
  os.makedirs(os.path.join(workdir, "figures"), exist_ok=True)
  plot_depth_scaling(results, os.path.join(workdir, "figures", "depth_scaling.png"))
  plot_decomposition(results, os.path.join(workdir, "figures", "decomposition.png"))
  kinds = sorted({analysis.model_kind(f["model"]) for f in results["fits"]})
  lines = ["# inverse-depth report", "",
           "; ".join(_training_header(results["config"], kind) for kind in kinds)
           + f"; {results['wall_time_s']:.0f} s on {results['num_devices']} "
           f"{results['backend']} device(s).", ""]
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
  lines += ["## Checks against the paper", ""] + check_lines(checks_lib.run_checks(results))
  lines += ["", "A MISS means the prediction did not appear in this run; BUILD_NOTES.md records "
            "what was tried to find the regime where it does."]
  lines += ["", "## Depth fits  R_L = L0 + c L^-alpha", ""]
  lines += table("grid", "L0", "c", "alpha", "R^2", "gap fit alpha (L0 - C_L = c L^-alpha, L0 "
                 "held at the weighted fit's; se of the slope; local slopes)")
  for fit in results["fits"]:
    gap = checks_lib.gap_fit(fit, records.runs_of(results, fit))  # None without a floor
    gap_text = (f"{pm(gap, 'alpha', '.3f', '.3f')} on depths {gap['depths']}; local slopes "
                + ", ".join(f"{x:.2f}" for x in gap["local_slopes"])
                if gap and np.isfinite(gap["alpha"]) else "n/a")
    lines.append(row(records.grid_label(fit), fit_cells(fit), gap_text))
  lines += _weighted_fits(results)
  lines += _window_fits(results)
  lines += ["", "## Against theory and the paper", ""]
  lines += table("grid", "fitted L0", "R at the deepest depth", "theory bound",
                 "best mixture of cosine layers", "paper Table 1 L0")
  for fit in results["fits"]:
    bound = fit.get("bound") or {}
    target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
    lines.append(row(records.grid_label(fit),
                     f"{fit['L0']:.4g}" if fit["resolved"] else "not resolved",
                     f"{fit['losses'][-1] if fit['losses'] else float('nan'):.4g}",
                     f"{pm(bound, 'reference')} ({bound['kind']})" if bound else "not computed",
                     pm(bound, "mixture") if bound.get("kind") == "softmax_bound" else "-",
                     value_or_dash(target)))
  lines += _cosine_layers_section(results)
  lines += _ensemble_comparison(results)
  for fit in results["fits"]:
    lines += ["", f"## {records.grid_label(fit)}", ""]
    lines += _table(results, fit) + _geometry_table(results, fit)
    if fit.get("flagged"):
      lines += ["", "**Flagged and excluded from the means and the fit:** "
                + "; ".join(f"depth {e['depth']} seed {e['seed']} ({e['reason']})"
                            for e in fit["flagged"]) + "."]
    if fit["excluded_diverged"]:
      lines += ["", "**Excluded from the fit and the means (diverged: loss non-finite or above "
                "divergence_loss; frozen at the last finite state):** "
                + ", ".join(f"depth {e['depth']} seed {e['seed']} at step {e['step']}"
                            for e in fit["excluded_diverged"]) + "."]
  lines += _stationarity_section(results)
  if selection_records(results):
    plot_selection(results, os.path.join(workdir, "figures", "selection_error.png"))
    lines += [""] + selection_section(results)
  lines += ["", "## Figures", "", "![depth scaling](figures/depth_scaling.png)", "",
            "![decomposition](figures/decomposition.png)", ""]
  path = os.path.join(workdir, "report.md")
  write_text_atomic(path, "\n".join(lines))
  return path


def _excess_text(entry: dict) -> str:
  """An excess over the full mixture with its paired se; float round-off prints as 0."""
  if abs(entry["excess"]) < 1e-12:
    return "0"
  return pm(entry, "excess", ".2g", ".1g")


def _by_layers_table(results: dict, field: str, label: str) -> list[str]:
  """One row per spectrum: the depth-L optima in `field` of each bound (average_by_layers or
  mixture_by_layers), the full mixture, the fall from L = 1 to 2 and the excess at the
  deepest L; then a sentence, from the numbers, on the depth from which every optimum stays
  at the full mixture (checks.settled_depth)."""
  bounds = results["bounds"]
  max_layers = len(bounds[0][field])
  lines = table("(a, b)", "paper Table 1 L0",
                *(f"{label} {L}" for L in range(1, max_layers + 1)), "full mixture",
                "L = 1 -> 2", f"excess at {label} {max_layers}", "its temperatures")
  falls, settled_from = [], []
  for bound in bounds:
    by_layers = bound[field]
    falls.append(1 - by_layers[1]["loss"] / by_layers[0]["loss"])
    settled_from.append(checks_lib.settled_depth(by_layers, bound["mixture"]))
    target = paper.table1_floor("softmax", "topk", results["sizes"]["k"], bound["a"], bound["b"])
    lines.append(row(spectrum(bound), value_or_dash(target),
                     *(f"{entry['loss']:.4f}" for entry in by_layers), pm(bound, "mixture", ".4f"),
                     f"{-100 * falls[-1]:.1f}%", _excess_text(by_layers[-1]),
                     ", ".join(f"{t:.3g}" for t in by_layers[-1]["temperatures"])))
  settled = [L for L in settled_from if L is not None]
  positive_gains = all(entry["weights"] and min(entry["weights"]) > 0
                       for bound in bounds for entry in bound[field])
  saturation = f"{100 * checks_lib.SATURATION_FRACTION:g}% of the loss"
  summary = (f"From one layer to two the optimum falls by {100 * min(falls):.1f}-"
             f"{100 * max(falls):.1f}%. ")
  if len(settled) < len(bounds):
    summary += (f"For {len(bounds) - len(settled)} of {len(bounds)} spectra it is still above "
                f"the full mixture at L = {max_layers} (beyond 2 paired standard errors and "
                f"{saturation}): deeper optima still improve there.")
  elif positive_gains:
    summary += (f"From L = {max(settled)} on it stays at the full mixture (excess within 2 "
                f"paired standard errors or {saturation}) for every spectrum; with every gain "
                "positive no depth goes below the full mixture, so deeper optima gain at most "
                "that excess: a drop within the first layers, not a floor approached like 1/L.")
  else:
    summary += (f"From L = {max(settled)} on it stays at the full mixture for every spectrum, "
                "but some gains are negative, so the full (nonnegative) mixture does not bound "
                "deeper optima.")
  return lines + ["", summary]


def write_cosine_mixture_report(workdir: str) -> str:
  """report.md of experiments/cosine_mixtures.py from workdir/results.json alone: per spectrum,
  the best equal-weight average of L cosine-attention layers and the best mixture of at most
  L (`theory.softmax_bound`'s average_by_layers, mixture_by_layers) beside the full mixture
  and the paper's floor; returns its path."""
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  sizes, first = results["sizes"], results["bounds"][0]
  lines = ["# The best L cosine-attention layers", "",
           f"Theory only (no training): d = {sizes['d']}, P = {sizes['P']}, top-{sizes['k']}, "
           f"{results['num_samples']} Monte Carlo contexts per spectrum, "
           f"{len(first['temperatures'])} temperatures from {min(first['temperatures']):g} to "
           f"{max(first['temperatures']):g}; {results['wall_time_s']:.0f} s. Each layer weights "
           "the context by softmax(temperature x cosine) exactly; L = 1 is the best single "
           "layer. Excess: the loss minus the full nonnegative mixture over the grid on the "
           "same contexts, with its paired standard error.", "",
           "## Equal-weight averages with one gain: the controlled model", "",
           "y_hat = g (1/L) sum_l p_l . y with every layer scoring by cosine at a grid "
           "temperature (repeats allowed), exhaustive over the temperatures. Each layer has "
           "weight 1/L, so L + 1 layers cannot always copy L (the loss can rise by a little "
           "from L to L + 1); 2L layers can always copy L.", ""]
  lines += _by_layers_table(results, "average_by_layers", "L =")
  lines += ["", "## Mixtures of at most L layers with free nonnegative gains", "",
            "sum_l w_l p_l . y with w >= 0 (a special case of per-layer value matrices, C.2, "
            "whose gains take either sign), exhaustive over supports; a lower bound on the "
            "equal-weight average of L whenever its gain is positive.", ""]
  lines += _by_layers_table(results, "mixture_by_layers", "L <=")
  path = os.path.join(workdir, "report.md")
  write_text_atomic(path, "\n".join(lines) + "\n")
  return path


def _steps_text(steps: list[int]) -> str:
  return str(steps[0]) if min(steps) == max(steps) else f"{min(steps)}..{max(steps)}"


def write_longer_training_report(short_dir: str, long_dir: str) -> str:
  """long_dir/longer_training.md and figures/longer_training.png from the two runs'
  results.json alone: per grid and depth, the change in R_L when the same models train for
  the longer schedule (`analysis.longer_training_changes`), a sign test over the grid, and
  both curves' fits over the paired models; returns the report's path. Raises ValueError
  when the configs differ in more than records.SCHEDULE_COMPARISON_FIELDS or share no clean
  model. A field only one config records (added to the code between the two runs) is listed
  in the report, not checked: the older run ran with that field's default."""
  short, long = read_results(short_dir), read_results(long_dir)
  differing, unrecorded = records.config_differences(short["config"], long["config"])
  other = [text for field, text in differing.items()
           if field not in records.SCHEDULE_COMPARISON_FIELDS]
  if other:
    raise ValueError(f"{short_dir} and {long_dir} differ in more than the schedule's length "
                     f"(allowed: {', '.join(records.SCHEDULE_COMPARISON_FIELDS)}): "
                     f"{'; '.join(other)}")
  changes = analysis.longer_training_changes(short["runs"], long["runs"])
  if not changes:
    raise ValueError(f"{short_dir} and {long_dir} share no clean model (paired by "
                     f"{', '.join(analysis.PAIRING_FIELDS)})")
  unpaired_short, unpaired_long = analysis.unpaired_models(short["runs"], long["runs"])
  num_lower = sum(c["num_lower"] for c in changes)
  num_models = sum(len(c["changes"]) for c in changes)
  t_quantiles = sorted({f"{c['t_critical']:.2f} at {len(c['changes'])} seeds"
                        for c in changes if len(c["changes"]) > 1})
  rows_by_grid: dict[tuple, list[dict]] = {}
  for c in changes:
    rows_by_grid.setdefault(tuple(c.get(f) for f in analysis.GRID_FIELDS), []).append(c)
  lines = ["# Trained longer: does the depth curve move?", "",
           f"The same models (paired by {', '.join(analysis.PAIRING_FIELDS)}) from `{short_dir}` "
           f"and `{long_dir}`, on the same held-out contexts: {num_models} pairs; "
           f"{unpaired_short} clean models of the short run and {unpaired_long} of the long "
           "run have no partner. Config fields that differ: "
           + ("; ".join(differing.values()) if differing else "none")
           + (f" (recorded by one run only: {', '.join(unrecorded)})" if unrecorded else "")
           + ". A depth's change is resolved when the seeds agree on it: |mean| > t x se, with "
           "t the two-sided 95% Student quantile on (seeds - 1) degrees of freedom ("
           + ", ".join(t_quantiles) + "). A resolved change means the shorter schedule had "
           "not converged at that depth, whatever its convergence rule said; an unresolved "
           "one is not proof that it had.", "",
           f"**{num_lower} of {num_models} models end lower** after the longer schedule "
           "(two-sided sign test against no change: "
           f"p = {analysis.sign_test(num_lower, num_models):.2g})."]
  fig, ax = plt.subplots(figsize=(6, 4.5))
  for i, (grid, rows) in enumerate(sorted(rows_by_grid.items())):
    grid = dict(zip(analysis.GRID_FIELDS, grid))
    label, depths = records.grid_label(grid), [c["depth"] for c in rows]
    lines += ["", f"## {label}", ""]
    lines += table("L", "seeds", "steps (short -> long)", "R_L short", "R_L long",
                   "change per seed", "mean change +- se", "seeds lower", "resolved")
    for c in rows:
      se_text = (f"{100 * c['mean_change_se'] / c['short_loss']:.2f}%"
                 if np.isfinite(c["mean_change_se"]) else "n/a (one seed)")
      lines.append(row(c["depth"], len(c["seeds"]), f"{_steps_text(c['short_steps'])} -> "
                       f"{_steps_text(c['long_steps'])}", f"{c['short_loss']:.4f}",
                       f"{c['long_loss']:.4f}", ", ".join(f"{x:+.4f}" for x in c["changes"]),
                       f"{100 * c['relative_change']:+.2f}% +- {se_text}",
                       f"{c['num_lower']}/{len(c['changes'])}", "yes" if c["resolved"] else "no"))
    moved = [c for c in rows if c["resolved"]]
    if moved:
      largest = max(moved, key=lambda c: abs(c["relative_change"]))
      lines += ["", f"Resolved at {len(moved)} of {len(rows)} depths "
                f"({[c['depth'] for c in moved]}); the largest of those is "
                f"{100 * largest['relative_change']:+.2f}% at L = {largest['depth']}."]
    else:
      lines += ["", "No depth's change is resolved at these seeds."]
    for name in ("short", "long") if len(rows) >= 3 else ():
      fit = analysis.fit_depth_scaling(depths, [c[f"{name}_loss"] for c in rows],
                                       fit_floor=grid["task"] == "topk")
      lines.append(f"- fit of the {name} run over the paired models: " + (
          f"L0 = {pm(fit, 'L0')}, alpha = {pm(fit, 'alpha', '.3f', '.3f')}, R^2 = "
          f"{fit['r2']:.4f}" if fit["resolved"] else fit["verdict"]))
    for name, style, mfc in (("short", "o--", "none"), ("long", "o-", None)):
      ax.plot(depths, [c[f"{name}_loss"] for c in rows], style, color=f"C{i}", mfc=mfc,
              label=f"{label}, {max(rows[0][name + '_steps'])} steps")
  ax.set(xscale="log", yscale="log", xlabel="depth L",
         ylabel="held-out loss R_L (mean over paired seeds)")
  ax.legend(fontsize=7)
  os.makedirs(os.path.join(long_dir, "figures"), exist_ok=True)
  save_figure(fig, os.path.join(long_dir, "figures", "longer_training.png"))
  lines += ["", "![longer training](figures/longer_training.png)", ""]
  path = os.path.join(long_dir, "longer_training.md")
  write_text_atomic(path, "\n".join(lines))
  return path
