"""How far each depth of a constant-rate run still had to go: the law at t -> infinity.

    python -m experiments.stationary_report --results=results/sgd_law_stationary \
        --metrics=results/sgd_law_stationary/sources/stationary/metrics.jsonl,\
results/sgd_law_stationary/sources/stationary_deep/metrics.jsonl --tau_per_depth=205

Reads a run's (or a join's) results.json and the metrics.jsonl of every run it holds. Per depth
(seed means): the averaged held-out R of results.json, its drift across the averaging window
(checks.window_drift), and the change still to come, y_inf minus the window's mean of the
validation R, from y(t) = y_inf + a exp(-t / tau) fitted per seed over steps >= --from_step
(trajectory.remaining_change); R_inf = R + that change, with the standard error over seeds of
both. The law is then fitted to R_inf on L >= 1 and L >= 2 (checks.law_fits' tolerances).
Writes RESULTS/stationary.md and RESULTS/stationary.json.
"""

import os

from absl import app, flags

from inverse_depth import checks
from inverse_depth.files import write_json_atomic
from inverse_depth.stationary import extrapolate, law_at_infinity, series_by_depth
from inverse_depth.workdir import read_results

flags.DEFINE_string("results", None, "folder of results.json", required=True)
flags.DEFINE_list("metrics", None, "metrics.jsonl of every run in results.json", required=True)
flags.DEFINE_float("from_step", 2000, "first step of the exponential fit (past the warm-up "
                   "and the layers' first parting)")
flags.DEFINE_float("tau_per_depth", 0.0, "tau = this x L at every depth (the slowest mode's "
                   "measured time per layer: experiments.relaxation_report); 0: fit tau per seed")
FLAGS = flags.FLAGS


def markdown(results: dict, rows: list[dict], fits: dict, from_step: float,
             tau_per_depth: float) -> str:
  tau_text = (f"tau = {tau_per_depth:g} L, the slowest mode's measured time per layer (A - C, "
              "experiments.relaxation_report), with y_inf and a fitted per seed"
              if tau_per_depth else "tau fitted per seed (the median shown; unresolved where a "
              "seed's tau exceeds half the fitted span)")
  lines = ["# The law at t -> infinity", "",
           f"Per depth, seed means (a depth's flagged models where none is clean: L marked *); "
           f"remaining: y_inf minus the averaging window's mean of the validation R, "
           f"y(t) = y_inf + a exp(-t / tau) over steps >= {from_step:.0f}, {tau_text}; "
           "R_inf = R + remaining, se over seeds of both.", "",
           f"Drift check of the run: {checks.window_drift(results['fits'][0], results['runs']).text}",
           "", "| L | seeds | steps | R | remaining | tau | R_inf |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    tau = f"{r['tau']:.0f}" + ("" if r["resolved"] else " (unresolved)")
    lines.append(f"| {r['depth']}{'*' if r['flagged'] else ''} | {r['seeds']} | {r['steps']} | {r['R']:.4f} +- {r['R_se']:.4f} "
                 f"| {r['remaining']:+.4f} +- {r['remaining_se']:.4f} | {tau} | "
                 f"{r['R_inf']:.4f} +- {r['R_inf_se']:.4f} |")
  lines += ["", "The law on R_inf (fits weighted by the standard errors of R_inf):", ""]
  for name, fit in fits.items():
    lines.append(f"- {name}: L0 {fit['L0']:.4f} +- {fit['L0_se']:.4f}, c {fit['c']:.3f} +- "
                 f"{fit['c_se']:.3f}, alpha {fit['alpha']:.2f} +- {fit['alpha_se']:.2f}, R^2 "
                 f"{fit['r2']:.4f}.")
  lines += ["", checks.check_line(checks.extrapolated_law(fits["L>=1"], fits["L>=2"],
                                                          results["fits"][0]["model"]))]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  results = read_results(FLAGS.results)
  series = series_by_depth(FLAGS.metrics, results["fits"][0]["model"])
  rows = extrapolate(results, series, FLAGS.from_step, FLAGS.tau_per_depth)
  fits = law_at_infinity(rows)
  with open(os.path.join(FLAGS.results, "stationary.md"), "w") as f:
    f.write(markdown(results, rows, fits, FLAGS.from_step, FLAGS.tau_per_depth))
  write_json_atomic(os.path.join(FLAGS.results, "stationary.json"), dict(
      from_step=FLAGS.from_step, tau_per_depth=FLAGS.tau_per_depth, depths=rows,
      fits={name: {k: fit[k] for k in ("L0", "L0_se", "c", "c_se", "alpha", "alpha_se", "r2",
                                       "resolved", "verdict")}
            for name, fit in fits.items()}))
  print(os.path.join(FLAGS.results, "stationary.md"))


if __name__ == "__main__":
  app.run(main)
