"""FINDINGS.md is what the committed results say, and its verdicts count the checks."""

import os

from inverse_depth import checks, claims
from inverse_depth.report import findings
from tests import REPO


def test_committed_findings_match_the_committed_results():
  with open(os.path.join(REPO, "FINDINGS.md")) as f:
    committed = f.read()
  assert committed == findings.build(REPO), (
      "FINDINGS.md is stale: regenerate it with `python -m experiments.findings`")


def test_verdicts_count_the_checks():
  passing, missing = checks.Check("depth law", True, ""), checks.Check("depth law", False, "")
  assert checks.verdict_of([passing, passing]) == "**reproduced**"
  assert checks.verdict_of([missing]) == "not reproduced"
  assert checks.verdict_of([passing, missing, missing]) == "partly (1 of 3 checks)"
  assert checks.verdict_of([]) == "not run"


def test_a_root_without_results_reports_every_row_not_run(tmp_path):
  text = findings.build(str(tmp_path))
  rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
  assert rows and all("| not run |" in row for row in rows), rows


def test_regime_names_are_read_from_the_config_not_guessed():
  """A regime is the name the config recorded, per model kind, whatever its optimizer."""
  config = dict(regime="sgd_stationary", train=dict(optimizer="adam", schedule="cosine"),
                model_overrides=dict(linear=dict(regime="linear_gradient_descent")))
  assert findings.regime_name(config) == "`sgd_stationary`"
  assert findings.regime_name(config, "linear") == "`linear_gradient_descent`"


def test_every_claim_reads_committed_results_and_is_decided_by_checks():
  """Each claim of inverse_depth.claims names folders that are committed, and what it
  measures there is decided by checks.Check objects (or says why it cannot be)."""
  for claim in claims.CLAIMS:
    for folder in claim.folders:
      assert os.path.exists(os.path.join(REPO, folder, "results.json")), (claim.text, folder)
    finding = claim.measure(REPO)
    assert finding is not None, claim.text
    assert all(isinstance(check, checks.Check) for check in finding.checks), claim.text
    assert finding.checks or finding.verdict, claim.text
