"""Fixtures shared by the test modules."""

import os

import jax
import pytest

from inverse_depth import experiment
from inverse_depth.report import run_report
from tests import tiny


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
  """One persistent XLA compilation cache for the session, in-process and for the
  entrypoint subprocesses (which inherit the environment): the end-to-end tests
  build many trainers with identical programs, and a cache hit replaces a compile."""
  path = str(tmp_path_factory.mktemp("xla_cache"))
  settings = dict(JAX_COMPILATION_CACHE_DIR=path, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  os.environ.update(settings)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  yield path


@pytest.fixture
def x64():
  """float64 inside the test only (`jax.enable_x64` is scoped, so other modules keep float32)."""
  with jax.enable_x64(True):
    yield


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
  """One uninterrupted run of the tiny config: the reference for resume tests."""
  workdir = str(tmp_path_factory.mktemp("experiment"))
  config = tiny.tiny_config()
  results = experiment.run(config, workdir)
  run_report.write_report(workdir)
  with open(os.path.join(workdir, "report.md")) as f:
    first_report = f.read()
  return dict(config=config, workdir=workdir, results=results, first_report=first_report)
