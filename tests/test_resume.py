"""Reliability: interrupted runs resume exactly, corrupt checkpoints fall back, signals
checkpoint before exiting, a diverging model never spoils its grid, the workdir guard.

"Exactly" means bit-for-bit on CPU: every number in results.json of a resumed run
equals the uninterrupted run's (the batches come from the step number, and the
restored state is byte-identical, which the checkpoint checksum verifies).
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optax.tree_utils import tree_set

from inverse_depth import config as config_lib, experiment, workdir as workdir_lib
from inverse_depth.checkpoint import CheckpointMismatch, GridCheckpoints, state_checksum
from inverse_depth.grid import InitScales
from inverse_depth.report import run_report
from inverse_depth.train import GridTrainer
from tests import REPO, tiny

GRID = config_lib.grid_specs(tiny.tiny_config())[0].name  # the one (softmax) grid
CRASH_STEP = 40  # tiny config: checkpoints at 20, 40, 60


class _Crash(Exception):
  """Stands in for the process dying."""


def _numbers(results):
  """Everything in results.json that a run computes (not wall times), comparable with ==."""
  return json.dumps(dict(runs=results["runs"], fits=results["fits"]), sort_keys=True)


def _metric_steps(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line)["step"] for line in f if line.strip()]


def _metric_values(workdir):
  """metrics.jsonl without its timings: what each evaluation computed from the state."""
  timings = ("train_time_s", "elapsed_s", "eta_max_s")
  return [{k: v for k, v in line.items() if k not in timings}
          for line in workdir_lib.read_metrics(workdir)]


@pytest.fixture(scope="module")
def crashed_workdir(tmp_path_factory):
  """A tiny run that died right after writing its step-40 checkpoint."""
  workdir = str(tmp_path_factory.mktemp("crashed"))
  save = GridCheckpoints.save

  def save_then_die(self, state, *, train_time_s):
    save(self, state, train_time_s=train_time_s)
    if int(state.step) == CRASH_STEP:
      raise _Crash

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(GridCheckpoints, "save", save_then_die)
    with pytest.raises(_Crash):
      experiment.run(tiny.tiny_config(), workdir)
  assert sorted(map(int, os.listdir(os.path.join(workdir, "checkpoints", GRID)))) == [20, 40]
  assert not os.path.exists(os.path.join(workdir, "results.json"))
  return workdir


def test_checksum_sees_one_changed_bit():
  """The fallback relies on state_checksum catching any change of the state's bytes."""
  config = tiny.tiny_config()
  spec = config_lib.grid_specs(config)[0]
  trainer = GridTrainer("softmax", spec.problem, (1, 2), (0,), spec.train, N=spec.N,
                        init_scales=InitScales(),
                        init_key=jax.random.key(0), data_key=jax.random.key(1))
  state = trainer.init_state()
  W_q = np.asarray(state.params["layer"]["W_q"])
  flipped = W_q.copy()
  flipped.view(np.uint32)[0, 1, 2, 3] ^= 1  # the lowest mantissa bit of one weight
  changed = state.replace(params=dict(state.params, layer=dict(state.params["layer"],
                                                               W_q=jnp.asarray(flipped))))
  assert state_checksum(state) == state_checksum(jax.tree.map(jnp.array, state))
  assert state_checksum(changed) != state_checksum(state)


def _copy(workdir, tmp_path):
  destination = str(tmp_path / "resumed")
  shutil.copytree(workdir, destination)
  return destination


def test_resume_after_a_crash_equals_the_uninterrupted_run(crashed_workdir, tiny_run, tmp_path,
                                                           caplog):
  """Also: the process died in the middle of writing a metrics line."""
  workdir = _copy(crashed_workdir, tmp_path)
  with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
    f.write('{"model": "softmax", "a": 0.0, "b": 0.0, "step": 6')
  with caplog.at_level("INFO"):
    results = experiment.run(tiny.tiny_config(), workdir)
  assert f"resuming from the checkpoint at step {CRASH_STEP}" in caplog.text
  assert "Dropping a half-written line" in caplog.text
  assert _numbers(results) == _numbers(tiny_run["results"])
  assert _metric_steps(workdir) == [20, 40, 60]  # no step logged twice
  # every recorded number, the gradient-noise traces included, as if never interrupted
  assert json.dumps(_metric_values(workdir)) == json.dumps(_metric_values(tiny_run["workdir"]))
  assert "noise_layer" in _metric_values(workdir)[-1]


def _newest_step_dir(workdir):
  return os.path.join(workdir, "checkpoints", GRID, str(CRASH_STEP))


def _truncate_largest_file(step_dir):
  files = [p for p in glob.glob(os.path.join(step_dir, "state", "**"), recursive=True)
           if os.path.isfile(p)]
  largest = max(files, key=os.path.getsize)
  with open(largest, "r+b") as f:
    f.truncate(os.path.getsize(largest) // 2)


def _change_recorded_checksum(step_dir):
  """The state files stay readable, but no longer match what was saved."""
  path = os.path.join(step_dir, "meta", "metadata")
  with open(path) as f:
    meta = json.load(f)
  meta["checksum"] = "0" * 64
  with open(path, "w") as f:
    json.dump(meta, f)


def test_a_checkpoint_of_another_layout_is_refused_not_quarantined(crashed_workdir, tmp_path):
  """As if the checkpoints had been written on 2 devices (a padding model of depth 1
  appended): resuming on 1 device must stop, naming both layouts, and move nothing."""
  workdir = _copy(crashed_workdir, tmp_path)
  for step in (20, 40):
    path = os.path.join(workdir, "checkpoints", GRID, str(step), "meta", "metadata")
    with open(path) as f:
      meta = json.load(f)
    meta["layout_depths"] = meta["layout_depths"] + [1]
    with open(path, "w") as f:
      json.dump(meta, f)
  with pytest.raises(CheckpointMismatch, match=r"laid out as depths \[1, 2, 4, 1\] but this run "
                     r"lays it out as \[1, 2, 4\]"):
    experiment.run(tiny.tiny_config(), workdir)
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == [GRID]
  assert sorted(map(int, os.listdir(os.path.join(workdir, "checkpoints", GRID)))) == [20, 40]


@pytest.mark.parametrize("corrupt", [_truncate_largest_file, _change_recorded_checksum],
                         ids=["truncated-file", "checksum-mismatch"])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous(crashed_workdir, tiny_run,
                                                              tmp_path, caplog, corrupt):
  workdir = _copy(crashed_workdir, tmp_path)
  corrupt(_newest_step_dir(workdir))
  with caplog.at_level("INFO"):
    results = experiment.run(tiny.tiny_config(), workdir)
  assert f"{GRID}/{CRASH_STEP} is " in caplog.text and "falling back" in caplog.text
  assert "resuming from the checkpoint at step 20" in caplog.text
  moved = glob.glob(os.path.join(workdir, "checkpoints", f"{GRID}.corrupt", f"{CRASH_STEP}-*"))
  assert len(moved) == 1  # kept for inspection, not deleted
  assert _numbers(results) == _numbers(tiny_run["results"])
  assert _metric_steps(workdir) == [20, 40, 60]


def test_a_diverging_member_is_marked_and_leaves_the_others_unchanged(tiny_run, tmp_path,
                                                                      monkeypatch):
  """Model (seed 0, depth 2) gets a 1e8 x learning rate through the state (a test-only
  override); it must diverge, be frozen, marked and excluded, and every other model
  must end as in the run without it (to 1e-6: the diverged model's non-finite values
  share batched contractions with the others, so bit equality is not promised)."""
  init_state = GridTrainer.init_state
  seed, m = 0, 1

  def with_a_huge_learning_rate(self):
    state = init_state(self)
    rate_scale_SM = state.lr_scale_SM.at[seed, m].set(jnp.float32(1e8))
    return state.replace(opt_state=tree_set(state.opt_state, rate_scale_SM=rate_scale_SM))

  monkeypatch.setattr(GridTrainer, "init_state", with_a_huge_learning_rate)
  workdir = str(tmp_path / "diverging")
  results = experiment.run(tiny.tiny_config(), workdir)
  depth = tiny.tiny_config().grid.depths[m]
  reference = {(r["depth"], r["seed"]): r for r in tiny_run["results"]["runs"]}
  for run in results["runs"]:
    if (run["depth"], run["seed"]) == (depth, seed):
      assert run["diverged"] and not run["converged"]
      assert 0 <= run["diverged_at_step"] < tiny.tiny_config().train.max_steps
      assert run["steps"] == run["diverged_at_step"]
    else:
      want = reference[(run["depth"], run["seed"])]
      assert not run["diverged"] and run["diverged_at_step"] == -1
      for field in ("eval_loss", "A", "C", "steps"):
        np.testing.assert_allclose(run[field], want[field], rtol=1e-6)
  fit = results["fits"][0]
  assert [(e["depth"], e["seed"]) for e in fit["excluded_diverged"]] == [(depth, seed)]
  # The fitted curve at that depth is the mean of the surviving seed only.
  survivor = reference[(depth, 1)]["eval_loss"]
  np.testing.assert_allclose(fit["losses"][fit["depths"].index(depth)], survivor, rtol=1e-6)
  with open(run_report.write_report(workdir)) as f:
    text = f.read()
  assert f"depth {depth} seed {seed} at step {fit['excluded_diverged'][0]['step']}" in text
  assert "Excluded from the fit" in text


# --- signals, through the entrypoint ------------------------------------------------------------


def _start(workdir, *overrides):
  command = [sys.executable, "-m", "experiments.run", "--config=experiments/configs/smoke.py",
             f"--workdir={workdir}", "--config.grid.model=softmax", *overrides]
  return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _wait_for(predicate, timeout_s, proc):
  deadline = time.time() + timeout_s
  while not predicate():
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline, "timed out"
    time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM,
                                    pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_writes_a_checkpoint_then_exits(tmp_path, signum):
  """Periodic checkpoints are off (checkpoint_every = max_steps), so a checkpoint at the
  step where it stopped can only come from the signal."""
  workdir = str(tmp_path / "run")
  proc = _start(workdir, "--config.train.max_steps=1000000",
                "--config.checkpoint.checkpoint_every=1000000",
                "--config.train.patience=1000000")  # no model converges before the signal
  _wait_for(lambda: os.path.exists(os.path.join(workdir, "metrics.jsonl"))
            and os.path.getsize(os.path.join(workdir, "metrics.jsonl")) > 0, 300, proc)
  proc.send_signal(signum)
  _, stderr = proc.communicate(timeout=120)
  assert proc.returncode == 128 + signum, stderr[-3000:]
  assert f"Stopped by {signal.Signals(signum).name}" in stderr
  last_step = _metric_steps(workdir)[-1]
  assert os.listdir(os.path.join(workdir, "checkpoints", GRID)) == [str(last_step)]
  assert not os.path.exists(os.path.join(workdir, "results.json"))


@pytest.mark.slow
def test_sigkill_then_rerun_equals_an_uninterrupted_run(tmp_path):
  """The smoke config (softmax, 2000 steps so there is training left to kill), killed
  with SIGKILL once its step-200 checkpoint exists, then rerun with the same command."""
  overrides = ("--config.train.max_steps=2000",)
  straight = _start(str(tmp_path / "straight"), *overrides)
  assert straight.wait(timeout=1800) == 0, straight.communicate()[1][-3000:]

  workdir = str(tmp_path / "killed")
  proc = _start(workdir, *overrides)
  _wait_for(lambda: os.path.isdir(os.path.join(workdir, "checkpoints", GRID, "200")), 1200, proc)
  proc.kill()
  proc.wait()
  assert not os.path.exists(os.path.join(workdir, "results.json"))
  resumed = _start(workdir, *overrides)
  _, stderr = resumed.communicate(timeout=1800)
  assert resumed.returncode == 0, stderr[-3000:]
  assert "resuming from the checkpoint at step" in stderr
  with open(os.path.join(workdir, "results.json")) as f:
    got = json.load(f)
  with open(str(tmp_path / "straight" / "results.json")) as f:
    want = json.load(f)
  assert _numbers(got) == _numbers(want)


# --- the workdir guard ---------------------------------------------------------------------------


def test_runtime_fields_may_change_on_a_rerun(tiny_run, tmp_path, monkeypatch):
  """checkpoint_every and checkpoints_to_keep do not change results, so a rerun may change
  them; the finished run is reported again without training. eval_chunk_size may not."""
  workdir = _copy(tiny_run["workdir"], tmp_path)
  monkeypatch.setattr(experiment, "GridTrainer", None)  # any training attempt would fail
  config = tiny.tiny_config()
  config.checkpoint.checkpoint_every = 40
  config.checkpoint.checkpoints_to_keep = 5
  results = experiment.run(config, workdir)
  assert _numbers(results) == _numbers(tiny_run["results"])
  config.eval.eval_chunk_size = 128
  with pytest.raises(experiment.WorkdirConflict, match="eval_chunk_size"):
    experiment.run(config, workdir)


def test_guard_refuses_a_changed_config_and_start_over_moves_the_old_run_aside(
    tiny_run, tmp_path, monkeypatch):
  workdir = _copy(tiny_run["workdir"], tmp_path)
  changed = tiny.tiny_config()
  changed.train.learning_rate = 0.01
  with pytest.raises(experiment.WorkdirConflict, match="learning_rate.*--start_over"):
    experiment.run(changed, workdir)

  def stop_before_training(*args, **kwargs):
    raise _Crash

  monkeypatch.setattr(experiment, "train_grid", stop_before_training)
  with pytest.raises(_Crash):
    experiment.run(changed, workdir, start_over=True)
  (old,) = glob.glob(f"{workdir}.replaced-*")
  with open(os.path.join(old, "results.json")) as f:
    assert _numbers(json.load(f)) == _numbers(tiny_run["results"])  # nothing lost
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["train"]["learning_rate"] == 0.01
  assert not os.path.exists(os.path.join(workdir, "checkpoints"))


@pytest.mark.parametrize("start_over", [False, True])
def test_guard_refuses_a_directory_that_is_not_a_workdir(tmp_path, start_over):
  (tmp_path / "notes.txt").write_text("mine")
  with pytest.raises(experiment.WorkdirConflict, match="holds no config.json"):
    experiment.run(tiny.tiny_config(), str(tmp_path), start_over=start_over)
  assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
  assert not glob.glob(f"{tmp_path}.replaced-*")


def test_metrics_log_drops_only_the_resumed_grids_later_lines(tmp_path):
  """drop_after removes the lines of one grid's spectra beyond the restored step, keeps every
  other grid's, and drops a torn last line."""
  log = workdir_lib.MetricsLog(str(tmp_path))
  log.append([dict(model=model, a=a, b=0.0, step=step)
              for step in (10, 20, 30) for model in ("softmax", "linear") for a in (0.0, 1.0)])
  with open(log.path, "a") as f:
    f.write('{"model": "softmax", "a": 0.0, "b"')  # killed mid-line
  log.drop_after("softmax", ((0.0, 0.0), (1.0, 0.0)), 20)
  kept = workdir_lib.read_metrics(str(tmp_path))
  assert sorted((m["model"], m["a"], m["step"]) for m in kept) == sorted(
      [("softmax", a, s) for a in (0.0, 1.0) for s in (10, 20)]
      + [("linear", a, s) for a in (0.0, 1.0) for s in (10, 20, 30)])
