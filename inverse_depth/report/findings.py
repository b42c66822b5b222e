"""FINDINGS.md: one row per claim of the paper, built from the committed results.json files by
the checks of inverse_depth.checks, so that it cannot drift from the data
(tests/test_findings.py regenerates it and compares).

Each row names the claim, the paper's number, ours, the training regime (the name the run's
config recorded), a verdict counted from the checks (reproduced: every check passes; not reproduced:
every check misses; partly: m of n pass) and the folders that hold the runs.
"""

import json
import os

import numpy as np

from inverse_depth import analysis, checks, paper, records
from inverse_depth.report import combined_report, generalized_report
from inverse_depth.files import write_text_atomic
from inverse_depth.workdir import read_metrics

# The committed runs each row reads, from the repository root.
SGD_LAW = "results/sgd_law_stationary"
ANNEALED_LAW = "results/depth_law"
SGD_TABLES = combined_report.SGD_TABLES_ROOT
ADAM_TABLES = "results/reproduce"


def _load(folder: str, root: str) -> dict | None:
  return records.load_results(root, [folder]).get(folder)


def regime_name(config: dict, model: str = "softmax") -> str:
  """The training regime a run's `model` models were trained in, as its config recorded it
  (a name of experiments/configs/regimes.py, docs/regimes.md)."""
  return f"`{records.kind_config(config, model)['regime']}`"


def verdict(found: list[checks.Check]) -> str:
  """reproduced (every check passes), not reproduced (every check misses), partly (m of n);
  checks that gave no verdict (Check.status: not stationary, not testable, unresolved) are
  named instead of counted as plain misses: "not stationary" where every check is."""
  if not found:
    return "not run"
  passed = sum(check.passed for check in found)
  if passed == len(found):
    return "**reproduced**"
  statuses = [check.status for check in found if check.status]
  named = "; ".join(f"{statuses.count(status)} {status}" for status in checks.STATUSES
                    if status and status in statuses)
  if len(statuses) == len(found):
    return named if len(set(statuses)) > 1 else statuses[0]
  base = "not reproduced" if passed == 0 else f"partly ({passed} of {len(found)} checks)"
  return base + (f" ({named})" if named else "")


def _runs(results: dict | None, fit: dict) -> list[dict] | None:
  return records.runs_of(results, fit) if results else None


def _law_cell(fit: dict, results: dict | None = None) -> str:
  """The fit in one phrase, with the fitted L0's distance from the paper's floor; with the
  run's `results`, the law check's weighted fits over L >= 1 and L >= 2 after it."""
  target = paper.table1_floor(fit["model"], fit["task"], fit["k"], fit["a"], fit["b"])
  text = generalized_report.law_text(
      fit, f" ({checks.relative(fit['L0'], target):+.1%})" if target and fit["resolved"] else "")
  if results is None:
    return text
  fits = checks.law_fits(fit, _runs(results, fit))
  weighted = "; ".join(
      f"{name} alpha {found['alpha']:.2f} +- {found['alpha_se']:.2g}, R^2 {found['r2']:.3f}"
      for name, found in (("L >= 1", fits["from_1"]), ("L >= 2", fits["from_2"]))
      if found is not None and found["resolved"])
  return text + (f" (weighted: {weighted})" if weighted else "")


def _row(claim: str, paper_text: str, ours: str, results: dict | None, found, folders,
         model: str = "softmax", verdict_text: str | None = None,
         planned_regime: str = "-") -> dict:
  """One FINDINGS row (`planned_regime`: the regime named where the run is missing)."""
  return dict(claim=claim, paper=paper_text, ours=ours if results else "-",
              regime=regime_name(results["config"], model) if results else planned_regime,
              verdict=verdict_text or verdict(found if results else []),
              where=", ".join(f"`{folder}`" for folder in folders), folders=list(folders))


def _percents(fits: list[dict], value) -> str:
  return ", ".join(f"({fit['a']:g}, {fit['b']:g}) {value(fit)}" for fit in fits)


def law_rows(root: str) -> list[dict]:
  """The central law at the paper's size, in the SGD law's regime and the annealed one."""
  rows = []
  for folder in (SGD_LAW, ANNEALED_LAW):
    results = _load(folder, root)
    fits = records.fits_of(results, "softmax")
    found = [check for fit in fits for check in (checks.depth_law(fit, _runs(results, fit)),
                                                 checks.softmax_floor(fit, _runs(results, fit)))
             if check] + _extrapolated_checks(root, folder)
    rows.append(_row("R_L = L0 + c L^-alpha, alpha ~ 1 (top-2, isotropic, L to 64)",
                     f"alpha ~ 1, L0 {paper.TABLE1_L0['softmax'][(0.0, 0.0)]:g}",
                     "; ".join(_law_cell(fit, results) for fit in fits),
                     results, found, [folder]))
  folder = f"{SGD_TABLES}/table1"
  results = _load(folder, root)
  fits = records.fits_of(results, "softmax")
  rows.append(_row("R_L = L0 + c L^-alpha on the seven Table 1 spectra (L to 32)",
                   f"alpha ~ 1, R^2 >= {paper.TABLE4_MIN_R2:g}", ", ".join(
                       f"({fit['a']:g}, {fit['b']:g}) "
                       + (f"{fit['alpha']:.2f} (R^2 {fit['r2']:.3f})" if fit["resolved"]
                          else "none") for fit in fits),
                   results, [checks.depth_law(fit, _runs(results, fit)) for fit in fits],
                   [folder]))
  return rows


def _extrapolated_checks(root: str, folder: str) -> list[checks.Check]:
  """The law at t -> infinity where the folder holds experiments.stationary_report's
  stationary.json (its fits on both depth sets)."""
  path = os.path.join(root, folder, "stationary.json")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    fits = json.load(f)["fits"]
  return [checks.extrapolated_law(fits["L>=1"], fits["L>=2"], "softmax")]


def _floor_text(fit: dict) -> str:
  target = paper.table1_floor("softmax", fit["task"], fit["k"], fit["a"], fit["b"])
  return (f"{checks.relative(fit['L0'], target):+.1%}" if fit["resolved"] and target
          else "no fit")


def table_rows(root: str) -> list[dict]:
  """Tables 1-5, the easy task and the decomposition terms."""
  rows = []
  for folder in (f"{SGD_TABLES}/table1", f"{ADAM_TABLES}/table1"):
    results = _load(folder, root)
    fits = records.fits_of(results, "softmax")
    found = [check for fit in fits for check in [checks.softmax_floor(fit, _runs(results, fit))]
             if check]
    rows.append(_row("Table 1: softmax floors, fitted L0 (7 spectra)",
                     paper.span(paper.TABLE1_L0["softmax"].values()),
                     "L0 vs paper: " + _percents(fits, _floor_text),
                     results, found, [folder]))
  table1 = _load(f"{ADAM_TABLES}/table1", root)
  table1_checks = combined_report.table1_section(table1)[1] if table1 else []
  for claim, words, paper_text in (
      ("Table 1 linear floor", "Table 1: linear plateaus (7 spectra)",
       paper.span(paper.TABLE1_L0["linear"].values())),
      ("linear flat in depth", "Table 1: linear loss flat after two layers", "flat"),
      ("softmax below linear", "Table 1: softmax below linear on every spectrum", "below")):
    found = [check for check in table1_checks if check.claim == claim]
    ours = (f"{sum(check.passed for check in found)} of {len(found)} spectra within tolerance"
            if found else "-")
    rows.append(_row(words, paper_text, ours, table1, found, [f"{ADAM_TABLES}/table1"],
                     model="linear"))
  table2 = _load(f"{ADAM_TABLES}/table2", root)
  found = combined_report.table2_section(table2)[1] if table2 else []
  rows.append(_row("Table 2: linear exponents between zeta and 2 zeta (easy task)",
                   paper.span(paper.TABLE2_ALPHA.values()), ", ".join(
                       f"({fit['a']:g}, {fit['b']:g}) {fit['alpha']:.2f}"
                       for fit in records.fits_of(table2, "linear")),
                   table2, found, [f"{ADAM_TABLES}/table2"], model="linear"))
  grids = [(fit, records.runs_of(results, fit))
           for name in ("table1", "table3_top2", "table3")
           for results in [_load(f"{ADAM_TABLES}/{name}", root)] if results
           for fit in records.fits_of(results, "linear")]
  found = combined_report.table3_section(grids)[1] if grids else []
  rows.append(_row("Table 3: trained linear floor = theory T - h^T G^+ h", "within ~1%",
                   f"{sum(check.passed for check in found)} of {len(found)} grids within "
                   f"{checks.LINEAR_THEORY_TOLERANCE:.0%}", table1 if grids else None, found,
                   [f"{ADAM_TABLES}/table1", f"{ADAM_TABLES}/table3",
                    f"{ADAM_TABLES}/table3_top2"], model="linear"))
  for name, k, spectra in (("table4", 2, "3 top-2 spectra"),
                           ("table4_top16", 16, "4 top-16 spectra")):
    paper_text = paper.span(alpha for (k_, _, _), alpha in paper.TABLE4_ALPHA.items() if k_ == k)
    for tables_root in (SGD_TABLES, ADAM_TABLES):
      results = _load(f"{tables_root}/{name}", root)
      fits = [fit for fit in records.fits_of(results, "softmax")
              if checks.table4_exponent(fit, _runs(results, fit))]
      primaries = [checks.law_fits(fit, _runs(results, fit))["primary"] for fit in fits]
      rows.append(_row(f"Table 4: softmax depth exponents ({spectra})", paper_text, ", ".join(
          f"({fit['a']:g}, {fit['b']:g}) "
          + (f"{primary['alpha']:.2f} +- {primary['alpha_se']:.2g} (R^2 {primary['r2']:.3f})"
             if primary and primary["resolved"] else "none")
          for fit, primary in zip(fits, primaries)) + (" (weighted fits)" if fits else ""), results, [checks.table4_exponent(fit, _runs(results, fit))
                                      for fit in fits],
                       [f"{tables_root}/{name}"]))
  low, high = paper.TABLE5_ALPHA_RANGE
  for folder in (f"{SGD_TABLES}/table1", f"{ADAM_TABLES}/table1"):
    results = _load(folder, root)
    fits = records.fits_of(results, "softmax")
    gaps = [(fit, checks.gap_fit(fit, _runs(results, fit))) for fit in fits]
    found = [checks.table5_gap_exponent(fit, gap, _runs(results, fit)) for fit, gap in gaps]
    rows.append(_row("Table 5: gap exponent of L0 - C_L", f"{low} ... {high}", ", ".join(
        f"({fit['a']:g}, {fit['b']:g}) " + (f"{gap['alpha']:.2f} +- {gap['alpha_se']:.2g}"
                                            if gap and np.isfinite(gap["alpha"]) else "none")
        for fit, gap in gaps), results, found, [folder]))
  for folder in (SGD_LAW, f"{SGD_TABLES}/table1", ANNEALED_LAW):
    results = _load(folder, root)
    fits = records.fits_of(results, "softmax")
    found = [check for fit in fits for field in ("shared_error", "disagreement")
             for check in [checks.levels_off(fit, field)] if check]
    rows.append(_row("C_L and A_L - C_L level off at the deepest depths", "level", "; ".join(
        f"({fit['a']:g}, {fit['b']:g}) C_L "
        f"{checks.last_doubling_change(fit, 'shared_error'):+.1%}, A_L - C_L "
        f"{checks.last_doubling_change(fit, 'disagreement'):+.1%}" for fit in fits),
                     results, found, [folder]))
  easy = _load(f"{ADAM_TABLES}/easy", root)
  found = (combined_report.easy_section(easy, read_metrics(os.path.join(root, ADAM_TABLES,
                                                                     "easy")))[1]
           if easy else [])
  rows.append(_row("Easy task: one softmax layer solves top-1", "R_1 ~ 0",
                   found[0].text.split(": ", 1)[1] if found else "-", easy, found,
                   [f"{ADAM_TABLES}/easy"]))
  return rows


def identity_row(root: str, folders) -> dict:
  """R = C + (A - C)/L with R from the model's own forward output (checks.identity_from_forward)
  on the clean models of `folders` that record it (runs made since the forward loss is
  recorded); not testable where none does."""
  runs = [r for folder in folders for results in [_load(folder, root)] if results
          for r in results["runs"]]
  clean = [r for r in runs if analysis.is_clean(r)]
  recorded = [r for r in clean if "forward_eval_loss" in r]
  found = [checks.identity_from_forward(recorded)] if recorded else []
  algebraic = max((abs(r["identity_residual"]) / max(r["eval_loss"], 1e-30) for r in clean),
                  default=float("nan"))
  ours = (f"{len(recorded)} of {len(clean)} models record R from their own forward output"
          + (f": {found[0].text.rstrip('.')}" if found else "")
          + f"; from the layer outputs alone it holds by algebra (residual {algebraic:.1e})")
  return dict(claim="Identity R_L = C_L + (A_L - C_L)/L", paper="exact", ours=ours,
              regime="every run",
              verdict=(verdict(found) if found or not clean
                       else "not testable on the committed runs"),
              where="every folder above", folders=list(folders))


def appendix_rows(root: str) -> list[dict]:
  """Each appendix C claim in each regime (generalized_report.CLAIM_RUNS), its variant's
  depth law beside the controlled model's of the same run. A claim is only testable where
  the controlled model shows the law: else the row says so instead of counting its checks."""
  rows = []
  for regime, runs in generalized_report.CLAIM_RUNS.items():
    for key, claim, model, paper_text, paper_finds_law in generalized_report.CLAIMS:
      variant, control = generalized_report.claim_fits(root, regime, key, model)
      status, found = generalized_report.claim_status(variant, control, paper_finds_law)
      folder = f"{regime}/{runs[key][0]}"
      ours = "-" if variant is None else f"{model}: {_law_cell(variant)}" + (
          f" (controlled model: {_law_cell(control)})" if control else "")
      verdict_text = {"not testable": "not testable here: the controlled model of the same "
                                      "run gets no law verdict (not stationary) or misses the "
                                      "law check",
                      "no claim": "no claim to test"}.get(status)
      results = _load(folder, root)
      rows.append(_row(f"Appendix C: {claim}", paper_text, ours, results, found, [folder],
                       model=model, verdict_text=verdict_text,
                       planned_regime=generalized_report.REGIME_NAMES[regime]))
  return rows


def build(root: str = ".") -> str:
  """The text of FINDINGS.md from the committed results under `root`."""
  rows = law_rows(root) + table_rows(root)
  rows.append(identity_row(root, sorted({folder for row in rows for folder in row["folders"]})))
  rows += appendix_rows(root)
  lines = ["# Findings: the paper's claims against our runs", "",
           "Generated by `python -m experiments.findings` from the committed `results.json` "
           "files; every verdict is counted from the checks of `inverse_depth/checks.py` "
           "(tolerances named there: a softmax floor is a fitted L0 within "
           f"{checks.SOFTMAX_FLOOR_TOLERANCE:.0%} of the paper's, the law needs alpha in "
           f"[{checks.LAW_ALPHA_RANGE[0]:g}, {checks.LAW_ALPHA_RANGE[1]:g}] with R^2 >= "
           f"{checks.LAW_MIN_R2:g}, an exponent agrees within "
           f"{checks.EXPONENT_STANDARD_ERRORS:g} standard errors, levelling off means C_L "
           f"within {checks.SHARED_LEVEL_TOLERANCE:.0%} and A_L - C_L within "
           f"{checks.DISAGREEMENT_LEVEL_TOLERANCE:.0%} over the last doubling of depth). "
           "Where a claim was tested in two training regimes it has a row for each; the "
           "regime is the name the run's config.json records (docs/regimes.md). What the "
           "rows mean, and why some miss: README \"What we find\", BUILD_NOTES.md.", "",
           "| claim | paper | ours | regime | verdict | runs |", "|---|---|---|---|---|---|"]
  lines += [f"| {row['claim']} | {row['paper']} | {row['ours']} | {row['regime']} | "
            f"{row['verdict']} | {row['where']} |" for row in rows]
  return "\n".join(lines) + "\n"


def write(path: str = "FINDINGS.md", root: str = ".") -> str:
  write_text_atomic(path, build(root))
  return path
