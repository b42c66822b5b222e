"""The relaxation theory's pieces: the curvature of a direction, the time heavy-ball SGD takes
along it, and the 1/L of the common mode under the 1/L residual."""

import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inverse_depth import relaxation, trajectory
from inverse_depth.grid import GridLayout, InitScales, init_grid
from inverse_depth.train import Problem

PROBLEM = Problem(task="topk", k=2, d=4, P=8, spectra=((0.0, 0.0),))


def test_rayleigh_quotient_of_an_eigenvector_is_its_eigenvalue():
  hessian = jnp.diag(jnp.array([3.0, 0.5, 2.0]))
  loss = lambda p: 0.5 * p["w"] @ hessian @ p["w"]
  params = {"w": jnp.array([1.0, -2.0, 0.3])}
  assert relaxation.rayleigh_quotient(loss, params, {"w": jnp.array([0.0, 2.0, 0.0])}) == (
      pytest.approx(0.5))
  mixed = relaxation.rayleigh_quotient(loss, params, {"w": jnp.array([1.0, 1.0, 0.0])})
  assert mixed == pytest.approx((3.0 + 0.5) / 2)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_heavy_ball_relaxes_a_quadratic_in_the_predicted_time(momentum):
  """x <- x - eta v, v <- beta v + lambda x on R = lambda x^2 / 2: once the start's transient
  has passed, the distance falls by e every `relaxation_time` steps, (1 - beta) / (eta lambda)
  to first order."""
  eta, curvature = 1e-3, 0.5
  x, velocity, path = 1.0, 0.0, []
  for _ in range(40000):
    velocity = momentum * velocity + curvature * x
    x -= eta * velocity
    path.append(x)
  predicted = relaxation.relaxation_time(curvature, eta, momentum)
  measured = 10000 / np.log(path[20000] / path[30000])
  assert measured == pytest.approx(predicted, rel=1e-3)
  assert predicted == pytest.approx((1 - momentum) / (eta * curvature), rel=0.06)
  assert relaxation.relaxation_time(-1.0, eta, momentum) == float("inf")


def test_the_common_mode_of_equal_layers_is_one_layer_model_flattened_by_depth():
  """Layers equal: the depth-L model along its temperature direction is the one-layer model
  along its own, with |v|^2 L times larger: q_L = q_1 / L. Layers apart: no longer."""
  batch = PROBLEM.sample(jax.random.key(0), 64, 0.0, 0.0)
  grid = init_grid(jax.random.key(1), GridLayout((4,)), (0,), d=4, N=8,
                   scales=InitScales(qk_init="random", qk_init_scale=0.8))
  model = jax.tree.map(lambda x: x[0, 0], grid["model"])
  first_layer = jax.tree.map(lambda x: x[0, :1], grid["layer"])
  curvature = lambda depth, layer: relaxation.predicted_times(
      "softmax", depth, dict(model=model, layer=layer), batch, learning_rate=1e-3,
      momentum=0.9)["temperature"]["curvature"]
  one_layer = curvature(1, first_layer)
  assert one_layer > 0
  equal_layers = jax.tree.map(lambda x: jnp.repeat(x, 4, axis=0), first_layer)
  assert curvature(4, equal_layers) == pytest.approx(one_layer / 4, rel=1e-4)
  apart = jax.tree.map(lambda x: x[0], grid["layer"])
  assert curvature(4, apart) != pytest.approx(one_layer / 4, rel=1e-2)


def test_per_depth_constant_and_steps_to_settle():
  constant, worst = relaxation.per_depth_constant([1, 2, 4], [300, 600, 1200])
  assert constant == pytest.approx(300) and worst == pytest.approx(1.0)
  _, worst = relaxation.per_depth_constant([1, 4], [300, 2400])
  assert worst == pytest.approx(np.sqrt(2))
  assert relaxation.steps_to_settle(300, 64) == pytest.approx(3 * 300 * 64)


@pytest.mark.parametrize("coupling", [0.0, 1.0])
def test_a_stiff_mode_driven_by_a_slow_one_relaxes_in_the_slow_time(coupling):
  """Heavy-ball SGD on R = q_s s^2 / 2 + q_f (f - c s)^2 / 2 from s = 1, f = 0: uncoupled
  (c = 0) f stays at its optimum; coupled, f's gap closes in the slow mode's time
  (driven_time), tens of times its own, and a fit of y_inf + a exp(-t / tau) to f's series finds
  it within 15% (trajectory.relaxation_time from the start, f's fast rise included, as the
  reports measure A - C)."""
  eta, momentum, q_slow, q_fast = 1e-3, 0.9, 0.5, 5.0
  hessian = np.array([[q_slow + q_fast * coupling ** 2, -q_fast * coupling],
                      [-q_fast * coupling, q_fast]])
  x, velocity, path = np.array([1.0, 0.0]), np.zeros(2), []
  for _ in range(4000):
    velocity = momentum * velocity + hessian @ x
    x = x - eta * velocity
    path.append(x[1])
  slowest = relaxation.relaxation_time(np.linalg.eigvalsh(hessian)[0], eta, momentum)
  own = relaxation.relaxation_time(q_fast, eta, momentum)
  if coupling == 0.0:
    assert np.max(np.abs(path)) == 0.0
    return
  predicted = relaxation.driven_time(own, slowest)
  assert predicted == slowest and predicted > 20 * own
  steps = np.arange(1, len(path) + 1, 10.0)
  fit = trajectory.relaxation_time(steps, np.asarray(path)[::10])
  assert fit["resolved"] and fit["tau"] == pytest.approx(predicted, rel=0.15)


def test_the_time_per_layer_of_depth_needs_two_depths():
  assert all(np.isnan(relaxation.per_depth_constant([4], [800.0])))


@pytest.mark.parametrize("out_dir", [
    "results/sgd_law_trajectory", "results/sgd_law_stationary/relaxation",
    "results/sgd_law_stationary/sources/stationary",
    "results/sgd_law_stationary/sources/stationary_deep"])
def test_committed_relaxation_reports_regenerate_from_their_json(out_dir, tmp_path):
  """experiments.relaxation_report without --workdir rewrites relaxation.md from the committed
  relaxation.json and config.json alone, byte for byte."""
  root = pathlib.Path(__file__).parent.parent
  for name in ("relaxation.json", "config.json"):
    shutil.copy(root / out_dir / name, tmp_path / name)
  subprocess.run([sys.executable, "-m", "experiments.relaxation_report", f"--out={tmp_path}"],
                 cwd=root, check=True, capture_output=True)
  regenerated = (tmp_path / "relaxation.md").read_text()
  assert regenerated == (root / out_dir / "relaxation.md").read_text()
