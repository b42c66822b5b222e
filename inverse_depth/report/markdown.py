"""Markdown cells, tables and sections shared by the report modules, and their writer."""

import os

import numpy as np

from inverse_depth.files import write_text_atomic


# Where the reports' tables are explained once (method prose, never numbers or verdicts).
TABLES_DOC = 'docs/analysis.md, section "Report tables"'


def table(*columns: str) -> list[str]:
  """A markdown table's header line and separator line."""
  return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def row(*cells) -> str:
  """A markdown table row; each cell as str() gives it."""
  return "| " + " | ".join(str(cell) for cell in cells) + " |"


def section(title: str, columns: tuple, rows: list[str], intro: str = "") -> list[str]:
  """A section: its title line ('## ...'), intro paragraph and table; none without rows."""
  return ["", title, ""] + ([intro, ""] if intro else []) + table(*columns) + rows if rows else []


def cell(value: float | None, spec: str = "g") -> str:
  """`value` formatted by `spec`; '-' where it is missing or not finite."""
  return "-" if value is None or not np.isfinite(value) else f"{value:{spec}}"


def series(depths, values, spec: str) -> str:
  """'L: value, ...' of a curve over depths."""
  return ", ".join(f"{L:g}: {value:{spec}}" for L, value in zip(depths, values))


def pm(record: dict, name: str, spec: str = ".4g", se_spec: str = ".2g") -> str:
  """'value +- se' of record[name] and its standard error record[name + '_se'] (as `cell`
  prints each: '-' where missing), without ' +- se' where the error is missing."""
  se = cell(record.get(f"{name}_se"), se_spec)
  return cell(record.get(name), spec) + ("" if se == "-" else f" +- {se}")


def how_trained(config: dict) -> str:
  """How a run's models train (a flat config or a kind's own), in every report's one wording."""
  window = config["stationary_evals"]
  return (f"{config['optimizer']} lr {config['learning_rate']:g} ({config['schedule']} schedule), "
          f"batch {config['batch_size']}, {config['max_steps']} steps, qk init {config['qk_init']} "
          f"(scale {config['qk_init_scale']:g}), value init {config['value_init']}"
          + (", |W_x| held at its initial norm" if config["fixed_input_norm"] else "")
          + (f", R, A and C averaged over the last {window} evaluations" if window > 1
             else ", final iterate"))


def fit_cells(fit: dict, c_spec: str | None = ".4g", alpha_spec=(".3f", ".3f")) -> str:
  """'L0 +- se | c +- se | alpha +- se | R^2' of a depth fit R_L = L0 + c L^-alpha (c_spec
  None: without c); its verdict and dashes where it resolves no depth law."""
  if not fit["resolved"]:
    return f"{fit['verdict']} | - | -" + (" | -" if c_spec else "")
  c_cell = f"{pm(fit, 'c', c_spec)} | " if c_spec else ""
  return f"{pm(fit, 'L0')} | {c_cell}{pm(fit, 'alpha', *alpha_spec)} | {fit['r2']:.4f}"


# The columns of gap_cells, a gap fit L0 - C_L = c L^-alpha with L0 held at the weighted fit's.
GAP_COLUMNS = ("gap alpha (L0 - C_L = c L^-alpha, L0 held)", "gap R^2", "gap depths",
               "gap local slopes")


def gap_cells(gap: dict | None) -> str:
  """The GAP_COLUMNS cells of a gap fit (checks.gap_fit); 'no fit' and dashes without one."""
  if not gap or not np.isfinite(gap["alpha"]):
    return "no fit | - | - | -"
  return (f"{pm(gap, 'alpha', '.3f')} | {gap['r2']:.3f} | "
          + ", ".join(f"{L:g}" for L in gap["depths"]) + " | "
          + ", ".join(f"{x:.2f}" for x in gap["local_slopes"])
          + (" (a power law)" if gap["power_law"] else " (not a power law)"))


def percent(ours: float, theirs: float | None) -> str:
  """ours relative to theirs, '+1.2%'; '-' without a reference or a finite value."""
  if theirs is None or not np.isfinite(ours):
    return "-"
  return f"{100 * (ours / theirs - 1):+.1f}%"


def spectrum(fit: dict) -> str:
  """'(a, b)' of a grid's spectrum."""
  return f"({fit['a']:g}, {fit['b']:g})"


def write_lines(directory: str, name: str, lines: list[str]) -> str:
  """Writes `lines` as directory/NAME, one a line; returns its path."""
  path = os.path.join(directory, name)
  write_text_atomic(path, "\n".join(lines))
  return path
