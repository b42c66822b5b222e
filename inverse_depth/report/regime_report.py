"""Several training regimes of one problem side by side (experiments.compare_regimes), from
their results.json alone: R_L, C_L, A_L - C_L and how the layers score by depth."""

from inverse_depth import config as config_lib, records
from inverse_depth.report.markdown import fit_cells, how_trained, row, table, write_lines
from inverse_depth.report.run_report import DECOMPOSITION, image, plot_curves
from inverse_depth.workdir import read_results

# (field of records.regime_rows, panel title)
PANELS = DECOMPOSITION + (("temperature_spread", "layer temperature std / mean"),
          ("anisotropy", "mean layer anisotropy |M - tau I| / |tau I|"),
          ("deviation_alignment", "alignment of the layers' departures from cosine"))


def write_comparison(out_dir: str, workdirs: dict[str, str]) -> str:
  """OUT_DIR/regimes.md and figures/regimes.png from {regime name: workdir} (each run's first
  fit is its grid); returns the markdown's path."""
  results = {name: read_results(workdir) for name, workdir in workdirs.items()}
  rows = {name: records.regime_rows(r) for name, r in results.items()}
  depths = sorted({L for by_field in rows.values() for L in by_field["eval_loss"]})
  fig = plot_curves([(label, [(name, list(by[field]), list(by[field].values()))
                              for name, by in rows.items()]) for field, label in PANELS], 3)
  lines = ["# Training regimes side by side", "",
           "Seed means over each run's clean models (flagged and diverged ones left out).", ""]
  lines += table("regime", "run", "how it trains", "fit L0", "alpha", "R^2")
  lines += [row(name, f"`{workdirs[name]}`", how_trained(config_lib.flat(r["config"])),
                fit_cells(r["fits"][0], c_spec=None)) for name, r in results.items()]
  for field, label in PANELS:
    lines += ["", f"**{label}**", ""] + table("regime", *(f"L={L}" for L in depths))
    lines += [row(name, *(f"{rows[name][field][L]:.4g}" if L in rows[name][field] else "-"
                          for L in depths)) for name in rows]
  lines += ["", image("regimes", fig, out_dir, "regimes"), ""]
  return write_lines(out_dir, "regimes.md", lines)
