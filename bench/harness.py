"""What every benchmark figure needs: the machine, timers, matmul peaks, trainers.

Absolute times are only meaningful together with `machine()`; the figures that
carry a target are ratios of two timings taken side by side in one process.
"""

import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.configs import default as default_config
from inverse_depth import config as config_lib
from inverse_depth.train import GridTrainer


def machine() -> dict:
  """Where the absolute numbers come from."""
  device = jax.devices()[0]
  return dict(platform=platform.platform(), python=platform.python_version(),
              cpu_count=os.cpu_count(), jax=jax.__version__, backend=jax.default_backend(),
              device_kind=device.device_kind, device_count=jax.device_count())


def median_seconds(call, repeats: int) -> float:
  """Median wall time of `call()` (which must block until its result is ready)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def matmul_peak_flops(n: int, dtype=jnp.float32, repeats: int = 5) -> float:
  """Measured FLOP/s of one jitted n x n x n matmul (2 n^3 FLOPs), after a warm-up call."""
  keys = jax.random.split(jax.random.key(0), 2)
  a, b = (jax.random.normal(k, (n, n), dtype) for k in keys)
  matmul = jax.jit(jnp.matmul)
  matmul(a, b).block_until_ready()
  return 2.0 * n ** 3 / median_seconds(lambda: matmul(a, b).block_until_ready(), repeats)


def memory_bandwidth_bytes(num_floats: int = 2 ** 26, repeats: int = 5) -> float:
  """Measured bytes/s of main memory: a jitted triad a = b + 0.5 c over float32 arrays of
  `num_floats` each (256 MB by default, far beyond any cache), counting 3 x 4 bytes per
  element (two reads, one write)."""
  keys = jax.random.split(jax.random.key(1), 2)
  b, c = (jax.random.normal(k, (num_floats,), jnp.float32) for k in keys)
  triad = jax.jit(lambda b, c: b + 0.5 * c)
  triad(b, c).block_until_ready()
  return 12.0 * num_floats / median_seconds(lambda: triad(b, c).block_until_ready(), repeats)


def xla_cost(compiled) -> dict:
  """FLOPs and bytes accessed that XLA's cost analysis reports for a compiled function (-1
  where not reported). A loop body counts once."""
  cost = compiled.cost_analysis()
  cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
  return dict(flops=float(cost.get("flops", -1.0)),
              bytes=float(cost.get("bytes accessed", -1.0)))


def grid_config(*, model: str, depths, num_seeds: int, d: int, P: int, N: int, batch: int,
                steps_per_call: int, task: str = "topk", k: int = 2):
  """The default experiment config with the sizes of one benchmark grid."""
  config = default_config.get_config()
  config.problem.task, config.problem.k = task, k
  config.grid.model, config.grid.depths, config.grid.num_seeds = model, tuple(depths), num_seeds
  config.grid.sizes[model].update(d=d, P=P, N=N)
  config.train.batch_size = batch
  config.train.eval_every = steps_per_call
  config.train.max_steps = 10 ** 9
  return config


def make_trainer(config, seeds=None) -> GridTrainer:
  """The trainer `experiments.run` would build for this config (spectrum a = b = 0)."""
  spec = config_lib.grid_specs(config)[0]
  init, data, _, _ = jax.random.split(jax.random.key(config.seed), 4)
  return GridTrainer(spec.model, spec.problem, spec.depths,
                     spec.seeds if seeds is None else tuple(seeds), spec.train, N=spec.N,
                     init_scales=spec.init, init_key=init, data_key=data)


class ChunkTimer:
  """Seconds per training step of one grid, compile excluded.

  `train_chunk` (steps_per_call steps in one compiled call, state donated) is
  lowered and compiled explicitly (that wall time is `compile_s`), called once
  to warm up, then timed with `block_until_ready`.
  """

  def __init__(self, trainer: GridTrainer):
    self.trainer = trainer
    self.state = trainer.init_state()
    jax.block_until_ready(self.state)
    start = time.perf_counter()
    self.lowered = trainer.train_chunk.lower(self.state)
    self.compiled = self.lowered.compile()
    self.compile_s = time.perf_counter() - start
    self._call()

  def _call(self):
    self.state, losses = self.compiled(self.state)
    jax.block_until_ready((self.state, losses))

  def seconds_per_step(self, repeats: int) -> float:
    return median_seconds(self._call, repeats) / self.trainer.settings.eval_every

  def memory_bytes(self) -> dict:
    """XLA's memory analysis of the compiled chunk: arguments, outputs, temporaries."""
    stats = self.compiled.memory_analysis()
    return dict(argument=int(stats.argument_size_in_bytes),
                output=int(stats.output_size_in_bytes),
                alias=int(stats.alias_size_in_bytes),
                temp=int(stats.temp_size_in_bytes))

  def xla_flops_per_step(self) -> float:
    """XLA's own FLOP count of one step (-1 when not reported).

    XLA's cost analysis counts the body of a loop once, so the count for the
    compiled chunk (a scan over steps) is the count of one step.
    """
    return xla_flops(self.compiled)


def xla_flops(compiled) -> float:
  """FLOPs XLA's cost analysis reports for a compiled function (-1 when not reported)."""
  return xla_cost(compiled)["flops"]


def peak_bytes(memory: dict) -> int:
  """Bytes live during a step: arguments + outputs not aliased to them + temporaries."""
  return memory["argument"] + memory["output"] - memory["alias"] + memory["temp"]


def power_law_exponent(xs, ys) -> float:
  """Least-squares slope of log y against log x."""
  return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])
