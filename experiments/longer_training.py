"""Does a depth curve move when the same models train longer? (no training)

    python -m experiments.longer_training --short=runs/depth_law_12000steps \
        --long=runs/depth_law

Pairs the models of two finished runs of one config that differ in the schedule's length
(same start, data stream and held-out contexts), and writes LONG/longer_training.md and
LONG/figures/longer_training.png from the two results.json alone (`write_report`). The
in-training convergence rule cannot settle this at the end of a decay to zero, where the rate
and so every change vanish (BUILD_NOTES "Convergence"); the paired comparison can.
"""

import os

import numpy as np
from absl import app, flags

from inverse_depth import analysis, records
from inverse_depth.files import write_text_atomic
from inverse_depth.report import plt, run_report
from inverse_depth.report.markdown import pm, row, table
from inverse_depth.workdir import read_results

_SHORT = flags.DEFINE_string("short", None, "Workdir of the shorter run.", required=True)
_LONG = flags.DEFINE_string("long", None, "Workdir of the longer run (receives the report).",
                            required=True)


def _steps_text(steps: list[int]) -> str:
  return str(steps[0]) if min(steps) == max(steps) else f"{min(steps)}..{max(steps)}"


def write_report(short_dir: str, long_dir: str) -> str:
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
  figure = run_report.save_report_figure(fig, long_dir, "longer_training")
  lines += ["", f"![longer training]({figure})", ""]
  path = os.path.join(long_dir, "longer_training.md")
  write_text_atomic(path, "\n".join(lines))
  return path


def main(argv):
  del argv
  print(f"Report: {write_report(_SHORT.value, _LONG.value)}")


if __name__ == "__main__":
  app.run(main)
