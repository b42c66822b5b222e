"""Where each depth of a constant-rate run settles: a table and a figure from metrics.jsonl.

    python -m experiments.trajectory_report --workdir=results/sgd_law_trajectory

For every model of the run's grid, per recorded quantity (inverse_depth.trajectory: the
validation R, A - C, the parameter norms, gain and score temperature, and the gradient-noise
traces of the layer and shared parameters; a quantity a run did not record is listed as not
recorded): the block means of the
first and last four evaluations, the least-squares slope per 1000 steps over the second half
of the run with its standard error, and for R the relaxation time tau of a fit
R(t) = R_inf + a exp(-t / tau). Writes WORKDIR/trajectory.md and figures/trajectory.png.
"""

import json
import os

import matplotlib
import numpy as np
from absl import app, flags

from inverse_depth import config as config_lib, trajectory

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

flags.DEFINE_string("workdir", None, "a finished run folder with metrics.jsonl", required=True)
FLAGS = flags.FLAGS

QUANTITIES = ("val_loss", "disagreement", "norm_W_x", "norm_W_y", "norm_W_v", "norm_W_o",
              "norm_W_q", "gain", "temperature", "temperature_spread", "noise_layer",
              "noise_model")


def series(workdir: str) -> tuple[list[int], dict[str, np.ndarray]]:
  """The depths and the seed-mean series [E, M] of every quantity (A - C as
  `disagreement`) of the run's softmax grid."""
  with open(os.path.join(workdir, "config.json")) as f:
    depths = config_lib.flat(json.load(f))["depths"]
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    lines = [json.loads(line) for line in f]
  found = trajectory.read_metrics(lines, "softmax")
  found["disagreement"] = found["val_A"] - found["val_C"]
  return depths, {k: (v.mean(axis=1) if v.ndim == 3 else v) for k, v in found.items()}


def recorded(found, name: str) -> bool:
  """Whether any evaluation of the run recorded `name`."""
  return name in found and bool(np.isfinite(found[name]).any())


def table(depths, found) -> str:
  steps = found["step"]
  half = steps[len(steps) // 2]
  lines = [f"# Trajectories of {os.path.basename(FLAGS.workdir.rstrip('/'))}", "",
           f"Seed means on the fixed validation contexts, {len(steps)} evaluations to step "
           f"{steps[-1]:.0f}. first / last: means of the first and last four evaluations; "
           f"slope: least squares per 1000 steps over steps >= {half:.0f} (se corrected for "
           "lag-1 autocorrelation), z = slope / se; tau: relaxation time of "
           "R(t) = R_inf + a exp(-t / tau) over the whole run (not resolved where tau exceeds half the "
           "run: fewer than two e-folds seen).", ""]
  fit_rows = ["| L | tau (steps) | R_inf | R last | R_inf - R last |", "|---|---|---|---|---|"]
  for m, depth in enumerate(depths):
    fit = trajectory.relaxation_time(steps, found["val_loss"][:, m])
    last = np.nanmean(found["val_loss"][-4:, m])
    if not fit["resolved"]:
      fit_rows.append(f"| {depth} | not resolved (best tau {fit['tau']:.0f}) | | "
                      f"{last:.4f} | |")
      continue
    fit_rows.append(f"| {depth} | {fit['tau']:.0f} | {fit['y_inf']:.4f} | {last:.4f} | "
                    f"{fit['y_inf'] - last:+.4f} |")
  lines += ["## Relaxation of R", ""] + fit_rows + [""]
  missing = [name for name in QUANTITIES if not recorded(found, name)]
  if missing:
    lines += [f"Not recorded by this run: {', '.join(missing)}.", ""]
  for name in QUANTITIES:
    if name in missing:
      continue
    lines += [f"## {name}", "", "| L | first | last | slope / 1000 steps | se | z |",
              "|---|---|---|---|---|---|"]
    for m, depth in enumerate(depths):
      values = found[name][:, m]
      slope = trajectory.late_slope(steps, values, half)
      lines.append(f"| {depth} | {np.nanmean(values[:4]):.4g} | {np.nanmean(values[-4:]):.4g} | "
                   f"{slope['slope']:+.3g} | {slope['se']:.2g} | {slope['z']:+.1f} |")
    lines.append("")
  return "\n".join(lines)


def figure(depths, found, path: str) -> None:
  names = [n for n in QUANTITIES if recorded(found, n)]
  fig, axes = plt.subplots(2, (len(names) + 1) // 2, figsize=(4 * ((len(names) + 1) // 2), 7))
  for ax, name in zip(axes.ravel(), names):
    for m, depth in enumerate(depths):
      ax.plot(found["step"], found[name][:, m], label=f"L={depth}", lw=1)
    ax.set_title(name)
    ax.set_xlabel("step")
  axes.ravel()[0].legend(fontsize=7)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=90)


def main(_):
  depths, found = series(FLAGS.workdir)
  with open(os.path.join(FLAGS.workdir, "trajectory.md"), "w") as f:
    f.write(table(depths, found) + "\n")
  figure(depths, found, os.path.join(FLAGS.workdir, "figures", "trajectory.png"))
  print(f"written {os.path.join(FLAGS.workdir, 'trajectory.md')}")


if __name__ == "__main__":
  app.run(main)
