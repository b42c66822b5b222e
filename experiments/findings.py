"""Regenerates FINDINGS.md from the committed results (no training, seconds).

    python -m experiments.findings [--out=FINDINGS.md]

One row per claim of the paper, each verdict counted from inverse_depth.checks
(`inverse_depth.report.findings.build`); tests/test_findings.py fails when the committed file and the
committed results disagree.
"""

from absl import app, flags

from inverse_depth.report import findings

_OUT = flags.DEFINE_string("out", "FINDINGS.md", "Where to write the findings.")


def main(argv):
  del argv
  print(f"Findings: {findings.write(_OUT.value)}")


if __name__ == "__main__":
  app.run(main)
