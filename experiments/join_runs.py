"""Joins finished runs of one regime into one depth curve (no training)

    python -m experiments.join_runs --out=runs/joined --workdirs=runs/shallow,runs/deep

Writes OUT/results.json (every model of the workdirs, each grid refitted over all its
depths), OUT/report.md and OUT/figures/ (`joined.write_joined`). The workdirs' configs may
differ only in which depths and spectra they trained (`joined.JOINABLE_FIELDS`); anything
else is refused before OUT is written.
"""

import sys

from absl import app, flags

from inverse_depth import joined
from inverse_depth.report import run_report

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Finished workdirs to join (comma-separated).",
                              required=True)
_OUT = flags.DEFINE_string("out", None, "New directory for the joined results.json and report.",
                           required=True)


def main(argv):
  del argv
  try:
    joined.write_joined(_WORKDIRS.value, _OUT.value)
    print(f"Report: {run_report.write_report(_OUT.value)}")
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  app.run(main)
