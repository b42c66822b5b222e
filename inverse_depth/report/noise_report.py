"""The SGD law against optimiser noise: sgd_noise.md per run (the prediction of
inverse_depth.sgd_noise beside the fit) and the sweep table and figure over several runs."""

import json
import os

import numpy as np

from inverse_depth import sgd_noise
from inverse_depth.report.markdown import TABLES_DOC, cell, fit_cells, pm, row, table, write_lines
from inverse_depth.report.run_report import image, plot_curves


def noise_markdown(found: dict) -> str:
  """The predictions beside the measurements, one table per rate (from sgd_noise.json)."""
  lines = [f"Gradient noise of the one-layer models over steps {found['steps'][0]}.."
           f"{found['steps'][-1]} of `{found['workdir']}`, on {found['contexts']} contexts, and "
           f"the excess eta_eff tr(Sigma) / (4 B) it predicts ({TABLES_DOC})."]
  for entry in found["rates"]:
    lines += ["", f"**rate {entry['learning_rate']:g}, batch {entry['batch_size']}** "
              f"(eta_eff / B = {entry['eta_eff_over_B']:.3g}; tr Sigma: layer weights "
              f"{pm(entry, 'trace_layer')}, shared weights {pm(entry, 'trace_model')}; "
              + (f"fitted alpha {entry['fitted_alpha']:.3f}, the prediction assumes 1)"
                 if entry.get("resolved", True) else "no depth law resolved)"), ""]
    lines += table("quantity", "predicted", "measured", "measured / predicted")
    for name, predicted, measured, from_fit in (
        ("c (depth term)", "predicted_c", "fitted_c", True),
        ("L0 - best single cosine layer", "predicted_floor_excess", "measured_floor_excess",
         True),
        ("R_1 - best single cosine layer", "predicted_R1_excess", "measured_R1_excess", False)):
      unresolved = from_fit and not entry.get("resolved", True)  # the fit has no c or L0
      ratio = entry[measured] / entry[predicted] if entry[predicted] and not unresolved else None
      lines.append(row(name, pm(entry, predicted), "no resolved fit" if unresolved
                       else pm(entry, measured), cell(ratio, ".2f")))
  return "\n".join(lines)


def write_report(workdir: str, num_contexts: int = 4096, results_dir: str | None = None) -> str:
  """Runs `predict` (which writes results_dir/sgd_noise.json; default: the workdir) and
  writes results_dir/sgd_noise.md; returns its path."""
  results_dir = results_dir or workdir
  return write_markdown(results_dir, sgd_noise.predict(workdir, num_contexts, results_dir))


def write_markdown(workdir: str, found: dict | None = None) -> str:
  """workdir/sgd_noise.md from `found` (default: its sgd_noise.json); returns its path."""
  if found is None:
    with open(os.path.join(workdir, sgd_noise.NOISE_FILE)) as f:
      found = json.load(f)
  return write_lines(workdir, "sgd_noise.md", [
      "# SGD noise: predicted against fitted coefficients", "", noise_markdown(found), ""])


def write_sweep_report(out_dir: str, workdirs: list[str]) -> str:
  """OUT_DIR/sweep.md and figures/sweep.png (R_L - L0 against L, a curve per setting) from the
  runs' results.json and sgd_noise.json; returns the markdown's path."""
  lines = ["# The SGD law against optimiser noise", "",
           "Per setting: the fit R_L = L0 + c L^-alpha over the clean models, A_L - C_L at the "
           "deepest depth whose models all passed the stationarity test, and c predicted from "
           "the one-layer models' gradient noise (`sgd_noise.json`; - where not computed).", ""]
  lines += table("run", "batch", "rate", "eta_eff / B", "L0", "c", "alpha", "R^2",
                 "A_L - C_L (at L)", "predicted c", "fitted / predicted c")
  curves = []
  for i, setting in enumerate(sgd_noise.sweep_rows(workdirs)):
    fit = setting["fit"]
    lines.append(row(f"`{setting['workdir']}`", setting["batch_size"],
                     f"{setting['learning_rate']:g}", f"{setting['eta_eff_over_B']:.3g}",
                     fit_cells(fit, c_spec=".3g"),
                     f"{setting['disagreement']:.3g} (L = {setting['deepest_stationary']})",
                     pm(setting, "predicted_c", ".3g"),
                     cell(setting["c_ratio"], ".2f")))
    if fit["resolved"]:  # the points above L0 and the fitted c L^-alpha
      depths, excess = np.asarray(fit["depths"]), np.asarray(fit["losses"]) - fit["L0"]
      dense = np.geomspace(depths.min(), depths.max(), 50)
      curves += [(f"B {setting['batch_size']}, rate {setting['learning_rate']:g}",
                  depths[excess > 0], excess[excess > 0], f"C{i}o"),
                 (None, dense, fit["c"] * dense ** -fit["alpha"], f"C{i}-")]
  fig = plot_curves([("R_L - L0 and the fitted c L^-alpha", curves)], size=(6, 4.5))
  lines += ["", image("R_L - L0", fig, out_dir, "sweep"), ""]
  return write_lines(out_dir, "sweep.md", lines)
