"""Fixtures shared by the end-to-end test modules."""

import os

import pytest

from inverse_depth import experiment
from tests import tiny


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
  """One uninterrupted run of the tiny config: the reference for resume tests."""
  workdir = str(tmp_path_factory.mktemp("experiment"))
  config = tiny.tiny_config()
  results = experiment.run(config, workdir)
  with open(os.path.join(workdir, "report.md")) as f:
    first_report = f.read()
  return dict(config=config, workdir=workdir, results=results, first_report=first_report)
