"""The grid sharded over 8 devices trains the same models as on 1 device.

XLA's device count is fixed when JAX starts, so the 8-device side runs in a
subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8; it trains
the tiny grid on a mesh of all 8 devices and on a mesh of device 0 alone, checks
that a checkpoint of each restores with the same bytes and shardings, and prints
both results, which this test compares. Depths (1, 2, 4) give T = 7
layers per seed, so the 8-device grid also exercises the padding model.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import REPO

SCRIPT = r"""
import json, sys
import jax, numpy as np
from jax.sharding import Mesh
from inverse_depth import trajectory
from inverse_depth.checkpoint import GridCheckpoints, state_checksum
from inverse_depth.grid import InitScales
from inverse_depth.train import GridTrainer, LAYER_AXIS, Problem, TrainSettings

problem = Problem(task="topk", k=2, d=4, P=8, spectra=((0.0, 0.0),))
settings = TrainSettings(batch_size=16, learning_rate=1e-2, warmup_steps=2, max_steps=10,
                         eval_every=5, rel_tol=0.05, patience=1, lr_decay_factor=0.5,
                         max_lr_decays=1, divergence_loss=1e6)
val_set = (jax.jit(lambda key: problem.sample(key, 64, 0.0, 0.0))(jax.random.key(12)),)
noise_sets = tuple(trajectory.noise_contexts(problem, root_seed=0, num_contexts=64))
out = dict(num_devices=jax.device_count())
for model in sys.argv[2:]:
  for name, devices in (("all", jax.devices()), ("one", jax.devices()[:1])):
    trainer = GridTrainer(model, problem, (1, 2, 4), (0, 1), settings, N=8,
                          init_scales=InitScales(), init_key=jax.random.key(10),
                          data_key=jax.random.key(11), mesh=Mesh(np.array(devices), (LAYER_AXIS,)))
    state = trainer.init_state()
    history, noise = [], []
    for state, progress in trainer.fit(state, val_set, 64, noise_sets):
      history.append(progress["val_loss"])
      noise.append([progress["noise_layer"], progress["noise_model"]])
    # A checkpoint of the sharded state restores with the same bytes and shardings.
    checkpoints = GridCheckpoints(f"{sys.argv[1]}/{model}-{name}", max_to_keep=1,
                                  config_hash="test", layout_depths=trainer.layout.depths)
    checkpoints.save(state, train_time_s=0.0)
    restored, _ = checkpoints.restore_latest(trainer.init_state())
    checkpoints.close()
    assert state_checksum(restored) == state_checksum(state)
    assert jax.tree.map(lambda x: x.sharding, restored) == trainer.state_shardings
    W_q = state.params["layer"]["W_q"]
    out[f"{model}/{name}"] = dict(
        val_loss=history, noise=noise, total_layers=trainer.layout.total_layers,
        W_q_devices=len(W_q.sharding.device_set),
        W_q_shard_shape=list(W_q.sharding.shard_shape(W_q.shape)),
        W_q_real=np.asarray(W_q)[:, :7].tolist(),
        W_o=np.asarray(state.params["model"]["W_o"])[:, :3].tolist(),
        steps=np.asarray(state.steps_trained_SM)[:, :3].tolist())
print("RESULT" + json.dumps(out))
"""


# The linear grid's 8-device compile is the slowest part: it runs with the slow tests.
MODELS = ["softmax", pytest.param("linear", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=MODELS)
def on_eight_devices(request, tmp_path_factory):
  """(model, the script's results) for one model kind."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  checkpoints = str(tmp_path_factory.mktemp("checkpoints"))
  proc = subprocess.run([sys.executable, "-c", SCRIPT, checkpoints, request.param], cwd=REPO,
                        env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1]
  return request.param, json.loads(line[len("RESULT"):])


def test_layers_are_spread_over_all_devices_with_a_padding_model(on_eight_devices):
  model, results = on_eight_devices
  assert results["num_devices"] == 8
  sharded, single = results[f"{model}/all"], results[f"{model}/one"]
  assert sharded["W_q_devices"] == 8 and single["W_q_devices"] == 1
  assert sharded["total_layers"] == 8 and single["total_layers"] == 7  # 1 + 2 + 4 (+ 1 pad)
  assert sharded["W_q_shard_shape"][1] == 1  # one layer per device


def test_eight_devices_train_the_same_models_as_one(on_eight_devices):
  model, results = on_eight_devices
  sharded, single = results[f"{model}/all"], results[f"{model}/one"]
  assert sharded["steps"] == single["steps"]
  np.testing.assert_allclose(np.array(sharded["val_loss"])[:, :, :3],
                             np.array(single["val_loss"])[:, :, :3], rtol=1e-4)
  # the gradient-noise traces of the real models: the padding model is not reported
  assert np.shape(sharded["noise"]) == np.shape(single["noise"]) == (2, 2, 2, 3)
  np.testing.assert_allclose(sharded["noise"], single["noise"], rtol=1e-4)
  np.testing.assert_allclose(sharded["W_q_real"], single["W_q_real"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(sharded["W_o"], single["W_o"], rtol=1e-4, atol=1e-5)
