"""How far each depth of a constant-rate run still had to go: its losses at t -> infinity.

Per depth (seed means): the averaged held-out R of results.json, and the change still to come,
y_inf minus the averaging window's mean of the validation R, from
y(t) = y_inf + a exp(-t / tau) fitted per seed (trajectory.remaining_change); R_inf = R + that
change, with the standard error over seeds of both; the law fitted to R_inf on L >= 1 and
L >= 2 (experiments.stationary_report writes them; checks.extrapolated_law judges them).
"""

import json
import os

import numpy as np

from inverse_depth import analysis, checks, config as config_lib, trajectory


def series_by_depth(metrics_paths: list[str], label: str) -> dict[int, tuple]:
  """depth -> (steps [E], validation R [S, E]) from every run's metrics.jsonl."""
  out = {}
  for path in metrics_paths:
    with open(os.path.join(os.path.dirname(path), "config.json")) as f:
      depths = config_lib.flat(json.load(f))["depths"]
    with open(path) as f:
      found = trajectory.read_metrics([json.loads(line) for line in f], label)
    for m, depth in enumerate(depths):
      out[depth] = (found["step"], found["val_loss"][:, :, m].T)
  return out


def extrapolate(results: dict, series: dict, from_step: float,
                tau_per_depth: float = 0.0) -> list[dict]:
  """One row per depth of the first fit: R, the remaining change and R_inf (module docstring).
  R is the mean of a depth's clean models, or of its flagged ones where none is clean, with
  checks.depth_standard_errors' error (as checks.law_fits takes them); the remaining change
  is the mean over every seed's series (a model flagged for its level still shows how far
  its depth has to go)."""
  config = config_lib.flat(results["config"])
  fit = results["fits"][0]
  runs = [r for r in results["runs"] if r["model"] == fit["model"] and not r["diverged"]]
  rows = []
  for depth in sorted({r["depth"] for r in runs}):
    mine = [r for r in runs if r["depth"] == depth]
    mine = [r for r in mine if analysis.is_clean(r)] or mine
    losses = np.asarray([r["eval_loss"] for r in mine])
    steps, values_SE = series[depth]
    last = steps[-1]
    window_start = last - (config["stationary_evals"] - 1) * config["eval_every"]
    found = trajectory.remaining_change(steps, values_SE, window_start, from_step,
                                        tau=tau_per_depth * depth if tau_per_depth else None)
    se = checks.depth_standard_errors([mine])[0]
    rows.append(dict(depth=depth, seeds=int(losses.size), flagged=not analysis.is_clean(mine[0]), steps=int(last), R=float(losses.mean()),
                     R_se=float(se), remaining=found["change"], remaining_se=found["change_se"],
                     tau=found["tau"], resolved=found["resolved"],
                     R_inf=float(losses.mean() + found["change"]),
                     R_inf_se=float(np.hypot(se, found["change_se"]))))
  return rows


def law_at_infinity(rows: list[dict]) -> dict:
  """The law fitted to R_inf on L >= 1 and L >= 2, weighted by its standard errors."""
  out = {}
  for name, first in (("L>=1", 1), ("L>=2", 2)):
    kept = [r for r in rows if r["depth"] >= first]
    out[name] = analysis.fit_depth_scaling([r["depth"] for r in kept], [r["R_inf"] for r in kept],
                                           standard_errors=[r["R_inf_se"] for r in kept])
  return out
