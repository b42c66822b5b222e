"""Markdown cells, tables and sections shared by the report modules, and their writer."""

import os

import numpy as np

from inverse_depth.files import write_text_atomic


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
  """'value +- se' of record[name] and its standard error record[name + '_se']."""
  return f"{record[name]:{spec}} +- {record[name + '_se']:{se_spec}}"


def fit_cells(fit: dict, c_spec: str | None = ".4g", alpha_spec=(".3f", ".3f")) -> str:
  """'L0 +- se | c +- se | alpha +- se | R^2' of a depth fit R_L = L0 + c L^-alpha (c_spec
  None: without c); its verdict and dashes where it resolves no depth law."""
  if not fit["resolved"]:
    return f"{fit['verdict']} | - | -" + (" | -" if c_spec else "")
  c_cell = f"{pm(fit, 'c', c_spec)} | " if c_spec else ""
  return f"{pm(fit, 'L0')} | {c_cell}{pm(fit, 'alpha', *alpha_spec)} | {fit['r2']:.4f}"


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
