"""Several processes under jax.distributed: two local processes (CPU backend, two host
devices each, a local coordinator port) train the softmax grid of the smoke config into one
workdir, and match one process on four devices (the same mesh size, so the same packed
layout) to float tolerance; an interrupted two-process run resumes.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from inverse_depth.config import grid_specs
from experiments.configs import smoke
from tests import REPO

DEVICES = 4  # in all: one process with 4, or two with 2 each
COMPARED = ("eval_loss", "A", "C")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _start(workdir: str, num_processes: int, *overrides: str) -> list[subprocess.Popen]:
  """`experiments.run` on the smoke config's softmax grid as `num_processes` processes."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES // num_processes}")
  command = [sys.executable, "-m", "experiments.run", "--config=experiments/configs/smoke.py",
             f"--workdir={workdir}", "--config.grid.model=softmax", *overrides]
  if num_processes == 1:
    return [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)]
  port = _free_port()
  return [subprocess.Popen(command + ["--distributed", f"--coordinator_address=localhost:{port}",
                                      f"--num_processes={num_processes}", f"--process_id={i}"],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
          for i in range(num_processes)]


def _finish(processes: list[subprocess.Popen], timeout_s: float = 900) -> list[tuple[int, str]]:
  """(return code, stderr) of each process, once all have ended."""
  stderrs = [proc.communicate(timeout=timeout_s)[1] for proc in processes]
  return [(proc.returncode, stderr) for proc, stderr in zip(processes, stderrs)]


def _run(workdir: str, num_processes: int, *overrides: str) -> dict:
  for returncode, stderr in _finish(_start(workdir, num_processes, *overrides)):
    assert returncode == 0, stderr[-3000:]
  with open(os.path.join(workdir, "results.json")) as f:
    return json.load(f)


def _assert_same_models(got: dict, want: dict) -> None:
  key = lambda r: (r["a"], r["b"], r["seed"], r["depth"])
  got_runs, want_runs = sorted(got["runs"], key=key), sorted(want["runs"], key=key)
  assert [key(r) for r in got_runs] == [key(r) for r in want_runs]
  assert [(r["steps"], r["diverged"]) for r in got_runs] == [(r["steps"], r["diverged"])
                                                              for r in want_runs]
  for field in COMPARED:
    np.testing.assert_allclose([r[field] for r in got_runs], [r[field] for r in want_runs],
                               rtol=1e-5, atol=1e-7, err_msg=field)


SHORT = ("--config.train.max_steps=40",)  # two evaluations: the suite's time goes to start-up


@pytest.mark.slow  # ~75 s: three process start-ups and compiles, gloo collectives
def test_two_processes_write_one_workdir_matching_one_process(tmp_path):
  one_process = _run(str(tmp_path / "one"), 1, *SHORT)
  workdir = str(tmp_path / "two")
  results = _run(workdir, 2, *SHORT)
  assert (results["num_processes"], results["num_devices"]) == (2, DEVICES)
  assert (one_process["num_processes"], one_process["num_devices"]) == (1, DEVICES)
  _assert_same_models(results, one_process)
  # Process 0 alone wrote the curves: every (step, spectrum) line once.
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    lines = [json.loads(line) for line in f if line.strip()]
  steps = [(line["step"], line["a"], line["b"]) for line in lines]
  assert steps and len(steps) == len(set(steps))
  # the gradient-noise traces, computed on the layer axis that spans both processes
  with open(os.path.join(tmp_path, "one", "metrics.jsonl")) as f:
    alone = [json.loads(line) for line in f if line.strip()]
  for name in ("noise_layer", "noise_model"):
    np.testing.assert_allclose([line[name] for line in lines], [line[name] for line in alone],
                               rtol=1e-4, err_msg=name)
  assert os.path.exists(os.path.join(workdir, "report.md"))


@pytest.mark.slow
def test_an_interrupted_two_process_run_resumes(tmp_path):
  """SIGTERM reaches process 1 only; both processes checkpoint the same step and stop
  (exit 143); the same two commands again resume and finish as one uninterrupted process."""
  overrides = ("--config.train.max_steps=400", "--config.checkpoint.checkpoint_every=1000000",
               "--config.train.patience=1000000")
  want = _run(str(tmp_path / "one"), 1, *overrides)
  workdir = str(tmp_path / "two")
  processes = _start(workdir, 2, *overrides)
  metrics = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + 600
  while not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
    assert all(proc.poll() is None for proc in processes), _finish(processes)
    assert time.time() < deadline, "timed out"
    time.sleep(0.05)
  processes[1].send_signal(signal.SIGTERM)
  ended = _finish(processes)
  assert [returncode for returncode, _ in ended] == [128 + signal.SIGTERM] * 2, ended
  config = smoke.get_config()
  config.grid.model = "softmax"
  grid = grid_specs(config)[0].name
  saved = os.listdir(os.path.join(workdir, "checkpoints", grid))
  assert len(saved) == 1 and int(saved[0]) < 400
  assert not os.path.exists(os.path.join(workdir, "results.json"))

  resumed = _start(workdir, 2, *overrides)
  for returncode, stderr in _finish(resumed):
    assert returncode == 0, stderr[-3000:]
    assert f"resuming from the checkpoint at step {saved[0]}" in stderr
  with open(os.path.join(workdir, "results.json")) as f:
    _assert_same_models(json.load(f), want)
