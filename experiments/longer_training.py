"""Does a depth curve move when the same models train longer? (no training)

    python -m experiments.longer_training --short=runs/depth_law_12000steps \
        --long=runs/depth_law

Pairs the models of two finished runs of one config that differ in the schedule's length
(same start, data stream and held-out contexts), and writes LONG/longer_training.md and
LONG/figures/longer_training.png from the two results.json alone
(`run_report.write_longer_training_report`). The in-training convergence rule cannot settle this
at the end of a decay to zero, where the rate and so every change vanish (BUILD_NOTES
"Convergence"); the paired comparison can.
"""

from absl import app, flags

from inverse_depth.report import run_report

_SHORT = flags.DEFINE_string("short", None, "Workdir of the shorter run.", required=True)
_LONG = flags.DEFINE_string("long", None, "Workdir of the longer run (receives the report).",
                            required=True)


def main(argv):
  del argv
  print(f"Report: {run_report.write_longer_training_report(_SHORT.value, _LONG.value)}")


if __name__ == "__main__":
  app.run(main)
