"""The generalised-models report (paper appendix C and looped layers), ROOT/report.md and
ROOT/figures/, from the runs under ROOT (RUNS or SGD_RUNS, experiment workdirs) alone. Every
trend is computed from the numbers; the paper's description stands beside it as text."""

import numpy as np

from inverse_depth import analysis, checks, claims, evaluation, paper, records
from inverse_depth.report import combined_report, plt, run_report
from inverse_depth.report.markdown import TABLES_DOC, cell, how_trained, pm, row, table, write_lines
from inverse_depth.report.run_report import image

# (workdir name, config file, get_config argument) in the order they run.
RUNS = tuple((name, "experiments/configs/generalized.py", argument) for name, argument in (
    ("generalized", "cpu"), ("single_stream", "single_stream"), ("generalized_top16", "top16"),
    ("m_start_top16", "m_start_top16"), ("m_start", "m_start"),
    ("depth_law_top16", "depth_law_top16"))) + (("looped", "experiments/configs/looped.py", None),)

# The same variants in the SGD law's regime (experiments/configs/sgd_generalized.py, issues 36
# and 46): C.3 at the short16 tier (depths 1..16; the short tier is ~5 h per C.3 run on 2 CPU
# cores). The runs in SGD_JOINED are at the stationary state: the `stationary` run (depths
# 1..16, the tier named here) and the `stationary_deep` run (depth 32) of the variant, under
# NAME/sources/, joined by experiments.join_runs (results/README.md).
SGD_RUNS = tuple((name, "experiments/configs/sgd_generalized.py", f"{name},{tier}")
                 for name, tier in (("looped", "stationary"), ("looped4", "stationary"),
                                    ("single_stream", "stationary"),
                                    ("per_layer_values", "stationary"),
                                    ("context_updates", "short16"),
                                    ("context_updates_top16", "short16")))
SGD_JOINED = ("looped", "looped4", "single_stream", "per_layer_values")


def regime_claims(base: str = ".") -> list[str]:
  """Per appendix C claim, its status in each regime (runs under `base`) and where it holds."""
  names = [claims.REGIME_NAMES[regime] for regime in claims.APPENDIX_C_RUNS]
  lines = table("claim", "the paper", *names, "holds in")
  for key, claim, model, k in claims.APPENDIX_C:
    paper_finds_law = claims.paper_finds_law(model, k)
    cells, statuses = [], {}
    for regime, name in zip(claims.APPENDIX_C_RUNS, names):
      variant, control = claims.appendix_fits(base, regime, key, model)
      statuses[name], _ = claims.appendix_status(variant, control, paper_finds_law)
      cells.append(statuses[name] if variant is None else
                   f"{statuses[name]}: {claims.law_text(variant)}"
                   + (f" (controlled: {claims.law_text(control)})" if control else ""))
    lines.append(row(claim, paper.APPENDIX_C_WORDS[key], *cells,
                     claims.holds_in(statuses, paper_finds_law)))
  return lines


def trend_sentence(fit: dict) -> str:
  """The depth trend of one grid in words, from its fit and paired differences."""
  if len(fit["losses"]) < 2:
    return "fewer than two clean depths"
  falls, rises = checks.falls_and_rises(fit)
  law = (f"fit alpha = {pm(fit, 'alpha', '.2f')}, L0 = {fit['L0']:.4g} (R^2 {fit['r2']:.3f})"
         if fit["resolved"] else fit.get("verdict", "no fit"))
  return (f"R_{int(fit['depths'][-1])} / R_{int(fit['depths'][0])} = "
          f"{fit['losses'][-1] / fit['losses'][0]:.3f}; of "
          f"{len(fit.get('paired_differences', []))} depth doublings {falls} fall and {rises} "
          f"rise beyond {checks.EXPONENT_STANDARD_ERRORS:g} paired standard errors; {law}")


def depth_table(results: dict) -> list[str]:
  """Per grid and depth, over the non-diverged seeds (`records.variant_rows`)."""
  lines = table("model", "depth", "R_L (+- seed se)", "C_L", "A_L - C_L", "flagged", "parameters",
                "m (seeds)", "m g_2/g_1 (seeds)", "rho of S_1 (R^2)")
  for fit in results["fits"]:
    for d in records.variant_rows(results, fit):
      seeds = ("-" if d[field] is None else ", ".join(f"{m:+.2f}" for m in d[field])
               for field in ("m", "m_effective"))
      lines.append(row(fit["model"], d["depth"], pm(d, "eval_loss"), f"{d['C']:.4g}",
                       f"{d['disagreement']:.4g}", f"{d['flagged']} of {d['models']}",
                       d["parameters"], *seeds,
                       "-" if d["rho"] is None else f"{d['rho']:.3f} ({d['rho_r2']:.2f})"))
  return lines


def findings(all_results: dict[str, dict], metrics: dict[str, list[dict]]) -> list[str]:
  """Per grid: how it trained, our depth trend beside the paper's, and the verdict."""
  lines = table("run", "model", "task", "bound (best single cosine layer)", "training",
                "flagged models", "our depth trend (clean models)", "the paper", "verdict")
  for name, results in all_results.items():
    for fit in results["fits"]:
      total, flagged = len(records.runs_of(results, fit)), len(fit.get("flagged") or [])
      change = analysis.last_interval_change(metrics.get(name, []), fit)
      own = records.kind_config(results["config"], fit["model"])
      training = how_trained(own) + (
          "" if change is None else f"; mean validation loss {100 * change['mean']:+.1f}% over "
          f"the last {change['steps']} steps (largest single-model fall "
          f"{100 * change['largest_fall']:+.1f}%)")
      lines.append(row(name, fit["model"], f"top-{fit['k']}",
                       cell((fit.get("bound") or {}).get("single"), ".4g"), training,
                       f"{flagged} of {total}", trend_sentence(fit),
                       paper.APPENDIX_C_STATEMENTS.get(fit["model"], "-"),
                       checks.trend_against_paper(fit, change and change["mean"], flagged,
                                                  total)))
  return lines


def m_summary(all_results: dict[str, dict]) -> list[str]:
  """C.3's learned m and its invariant m g_2/g_1 per run (`records.context_weights`)."""
  lines = []
  for name, results in all_results.items():
    found = records.context_weights(results)
    if found is None:
      continue
    start = records.kind_config(results["config"], "context_updates")["context_update_m_init"]
    text = f"- {name} (top-{found['k']}, m starts at {start:g}): m = " + ", ".join(
        f"{m:+.2f} (L={d})" for d, m in found["m"].items())
    if found["m_effective"] is not None:
      text += "; m g_2/g_1 = " + ", ".join(f"{m:+.2f}" for m in found["m_effective"].values())
    lines.append(text + ".")
  return lines


def m_profile_table(all_results: dict[str, dict]) -> list[str]:
  """Loss along m at every trained depth (`records.m_profiles`) and where it is lowest."""
  lines = []
  for name, results in all_results.items():
    for d in records.m_profiles(results):
      if not lines:
        lines = table("run", "depth", "learned m", *(f"offset {o:+g}" for o in d["offsets"]),
                      "lowest at")
      lines.append(row(name, d["depth"], f"{d['m']:+.2f}", *(f"{x:.4g}" for x in d["loss"]),
                       "flat (m never enters)" if d["lowest"] is None
                       else f"offset {d['lowest']:+g}"))
  return lines


def looped_summary(all_results: dict[str, dict]) -> list[str]:
  """Looped against untied: R_L and parameters per depth and grid."""
  grids = records.looped_grids(all_results)
  if not grids:
    return ["Not run."]
  by_depth = [records.loss_and_parameters(results, fit) for _, results, fit in grids]
  lines = table("depth", *(column for label, _, _ in grids
                           for column in (f"{label}: R_L", "parameters")))
  return lines + [row(depth, *(f"{grid[depth][0]:.4g} | {grid[depth][1]}" if depth in grid
                               else "nan | -" for grid in by_depth))
                  for depth in sorted(set().union(*by_depth))]


def plot_context_updates(all_results: dict[str, dict]):
  """Learned m against depth (every seed) and the S_1 heatmaps of seed 0; None without C.3."""
  panels = [(name, [r for r in results["runs"] if r["model"] == "context_updates"
                    and "first_layer_attention" in r]) for name, results in all_results.items()]
  panels = [(name, runs) for name, runs in panels if runs]
  if not panels:
    return None
  depths = sorted({r["depth"] for _, runs in panels for r in runs})
  fig, axes = plt.subplots(len(panels), len(depths) + 1,
                           figsize=(2.2 * (len(depths) + 1), 2.4 * len(panels)), squeeze=False)
  for panel, (name, runs) in zip(axes, panels):
    for r in runs:
      panel[0].plot(r["depth"], r["m"], "o", color=f"C{r['seed']}", ms=4)
      if "m_effective" in r:
        panel[0].plot(r["depth"], r["m_effective"], "x", color=f"C{r['seed']}", ms=5)
    panel[0].set(xscale="log", xlabel="depth L", ylabel="m (o), m g_2/g_1 (x)", title=name)
    panel[0].axhline(0.0, color="grey", lw=0.5)
    for ax, depth in zip(panel[1:], depths):
      seed0 = [r for r in runs if r["depth"] == depth and r["seed"] == min(x["seed"] for x in runs)]
      ax.axis("off")
      if seed0:
        ax.imshow(np.array(seed0[0]["first_layer_attention"]), cmap="viridis")
        ax.set_title(f"S_1, L={depth}, rho={seed0[0]['first_layer_rho']:.2f}", fontsize=7)
  return fig


def plot_looped(all_results: dict[str, dict]):
  """Loss against depth and against parameters, looped beside untied; None without both."""
  grids = records.looped_grids(all_results)
  if not grids:
    return None
  by_grid = [(label, sorted(records.loss_and_parameters(results, fit).items()))
             for label, results, fit in grids]
  return run_report.plot_curves([("R_L", [(label, [d for d, _ in rows], [R for _, (R, _) in rows])
                                          for label, rows in by_grid]),
                                 ("R_L", [(label, [n for _, (_, n) in rows],
                                           [R for _, (R, _) in rows]) for label, rows in by_grid],
                                  {"xlabel": "trained parameters"})])


def write_generalized_report(root: str, runs=RUNS, base: str = ".") -> str:
  """Writes ROOT/report.md and ROOT/figures/ from `runs` under ROOT and the appendix C runs
  under the repository root `base`; returns the report's path."""
  names = [name for name, _, _ in runs]
  all_results, metrics = combined_report.load_root(root, names)
  regime = claims.REGIME_NAMES[claims.SGD_GENERALIZED if runs == SGD_RUNS
                               else claims.ANNEALED_GENERALIZED]
  lines = [f"# Generalised models and looped layers: {regime} runs", "",
           "Every number comes from the runs under this directory (one experiment workdir each, "
           "with its own report.md). " + combined_report.run_times_sentence(all_results, names),
           "", "## Appendix C claims in both regimes", "",
           "A claim is testable in a regime only where the controlled model of the same run "
           f"shows the law there (checks.depth_law: alpha in [{checks.LAW_ALPHA_RANGE[0]:g}, "
           f"{checks.LAW_ALPHA_RANGE[1]:g}], R^2 >= {checks.LAW_MIN_R2:g}); the variant then "
           "holds the claim when its fit shows the paper's approximately inverse-depth trend "
           f"(checks.depth_trend: alpha in [{checks.TREND_ALPHA_RANGE[0]:g}, "
           f"{checks.TREND_ALPHA_RANGE[1]:g}], R^2 >= {checks.TREND_MIN_R2:g}; the top-16 "
           "claim: when it does not).", ""] + regime_claims(base)
  lines += ["", "## Depth trends beside the paper's description", ""]
  lines += findings(all_results, metrics) if all_results else ["Nothing has run yet."]
  lines += ["", f"A doubling falls below -{checks.EXPONENT_STANDARD_ERRORS:g} paired standard "
            "errors; a verdict cannot say where the validation loss still fell by more than "
            f"{checks.UNDER_TRAINED_FALL:.0%} over the last interval or most models are flagged "
            f"(the rules in full: {TABLES_DOC}).", "", "## Learned context weight m (C.3)", "",
            f"m alone is not identifiable; m g_2/g_1 is its invariant ({TABLES_DOC}).", ""]
  lines += m_summary(all_results) or ["No context-updates run."]
  profile = m_profile_table(all_results)
  if profile:
    lines += ["", "Loss on the diagnosed contexts with m moved from its learned value, every "
              "other trained weight fixed (seed means):", ""] + profile
  lines += ["", "## Looped against untied", ""] + looped_summary(all_results)
  figure_lines = ["", "## Figures", ""]
  context_updates, looped = plot_context_updates(all_results), plot_looped(all_results)
  if context_updates is not None:
    figure_lines += ["Learned m (o) and its invariant m g_2/g_1 (x) against depth (a colour "
                     "per seed), and the first layer's context attention S_1 (one context, "
                     f"the first {evaluation.HEATMAP_TOKENS} tokens; rho from the fit "
                     "S_1 = rho I + (1 - rho) 11^T/P over the diagnosed contexts):", "",
                     image("context updates", context_updates, root, "context_updates"), ""]
  if looped is not None:
    figure_lines += [image("looped", looped, root, "looped"), ""]
  for name, results in all_results.items():
    lines += ["", f"## {name}", ""] + depth_table(results)
    training = combined_report.plot_training_curves(name, metrics[name], results)
    figure_lines += [f"{name}: depth curves (dashed: best single cosine layer), C_L and "
                     f"A_L - C_L, training curves:", "",
                     image(name, run_report.plot_depth_scaling(results), root, f"{name}_depth"),
                     "", image(f"{name} decomposition", run_report.plot_decomposition(results),
                               root, f"{name}_decomposition"),
                     "", image(f"{name} training", training, root, f"training_{name}"), ""]
  return write_lines(root, "report.md", lines + figure_lines + [""])
