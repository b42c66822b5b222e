"""`make bench`: speed, utilisation, scaling, memory and compile time of the grid step.

    python -m bench.run [--size=quick|default|full|gpu] [--figures=a,b] [--out=FILE]

Prints a table and writes bench/results.json. Ratios (grid / loop, padding,
utilisation against a matmul measured in the same run) are the meaningful
figures on a shared machine; absolute numbers carry `machine` with them.
"""

import argparse
import dataclasses
import importlib
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from bench import before, flops, harness
from inverse_depth import config as config_lib
from inverse_depth import experiment
from inverse_depth.models import MODELS
from inverse_depth.train import block_size

# The grids the science trains (`science` figure): name -> (config file under
# experiments/configs, its argument, the model kind whose grid is timed).
SCIENCE_GRIDS = {
    "law": ("sgd_law", "cpu", "softmax"),  # 3 seeds x depths 1..64
    "tables_short": ("sgd_table1", "short", "softmax"),  # 7 spectra x depths 1..32
    "c3_short16": ("sgd_generalized", "context_updates,short16", "context_updates"),
    "c3_short": ("sgd_generalized", "context_updates,short", "context_updates"),
}
# Sizes per --size. `base`: the CPU-scale grid of the issue 3 benchmarks (the quick.py sizes of then).
# `paper`: the paper-sized softmax grid of the `paper` figure (tiny off the accelerator sizes).
# The grid of experiments/configs/generalized.py at C.3's batch (`kinds` figure).
GENERALIZED_GRID = dict(depths=(1, 2, 4, 8, 16, 32), num_seeds=3, d=16, P=128, N=32, batch=64)
TINY_PAPER = dict(depths=(1, 2, 4), num_seeds=1, d=8, P=16, N=16, batch=32)
SIZES = {
    "quick": dict(science_grids=("law", "c3_short16"), science_steps=1, matmul_n=1024,
                  loop_depths=tuple(range(1, 5)), loop_seeds=1,
                  padding_depths=(1, 2, 4, 8, 16), scaling_layers=(64, 128, 256),
                  scaling_doublings=1, compile_models=(2, 8), steps=5, repeats=3,
                  kinds=dict(depths=(1, 2, 4), num_seeds=1, d=16, P=32, N=32, batch=64),
                  paper=TINY_PAPER),
    "default": dict(science_grids=tuple(SCIENCE_GRIDS), science_steps=2, matmul_n=2048,
                    loop_depths=tuple(range(1, 9)), loop_seeds=1,
                    padding_depths=(1, 2, 4, 8, 16, 32, 64),
                    scaling_layers=(64, 128, 256, 512, 1024), scaling_doublings=1,
                    compile_models=(2, 8, 32), steps=10, repeats=5,
                    kinds=GENERALIZED_GRID, paper=TINY_PAPER),
    "full": dict(science_grids=tuple(SCIENCE_GRIDS), science_steps=2, matmul_n=2048,
                 loop_depths=tuple(range(1, 65)), loop_seeds=4,
                 padding_depths=(1, 2, 4, 8, 16, 32, 64),
                 scaling_layers=(64, 128, 256, 512, 1024, 2048), scaling_doublings=3,
                 compile_models=(2, 8, 32, 64), steps=10, repeats=5,
                 kinds=GENERALIZED_GRID, paper=TINY_PAPER),
    "gpu": dict(science_grids=tuple(SCIENCE_GRIDS), science_steps=10, matmul_n=8192,
                loop_depths=tuple(range(1, 9)), loop_seeds=1,
                padding_depths=(1, 2, 4, 8, 16, 32, 64),
                scaling_layers=(256, 512, 1024, 2048, 4096), scaling_doublings=2,
                compile_models=(4, 16, 64), steps=20, repeats=5, kinds=GENERALIZED_GRID,
                paper=dict(depths=tuple(2 ** i for i in range(9)), num_seeds=1, d=64, P=128,
                           N=128, batch=256)),
}
BASE = dict(d=16, P=32, N=32, batch=256, num_seeds=2, depths=(1, 2, 4, 8, 16))
FIGURES = ("science", "peak", "grid_vs_loop", "padding", "utilisation", "scaling", "compile",
           "kinds", "paper")
DEFAULT_FIGURES = FIGURES[:-1]


def _timer(model, *, depths, num_seeds, d, P, N, batch, steps, seeds=None):
  config = harness.grid_config(model=model, depths=depths, num_seeds=num_seeds, d=d, P=P, N=N,
                               batch=batch, steps_per_call=steps)
  return harness.ChunkTimer(harness.make_trainer(config, seeds))


def science_spec(name: str, steps: int) -> config_lib.GridSpec:
  """The grid `name` of SCIENCE_GRIDS as its config file makes it, `steps` steps per call."""
  module, argument, model = SCIENCE_GRIDS[name]
  config = importlib.import_module(f"experiments.configs.{module}").get_config(argument)
  spec = next(s for s in config_lib.grid_specs(config) if s.model == model and not s.ensemble)
  return dataclasses.replace(spec, train=dataclasses.replace(spec.train, eval_every=steps,
                                                             max_steps=10 ** 9))


def science(size, peak_flops: float) -> dict:
  """Today's training step against main's before issue 44 (bench/before.py) on the grids the
  science trains, timed interleaved in one process, and both against one roofline per grid
  measured in this run: max(FLOPs / matmul peak, bytes / memory bandwidth), with XLA's count
  of today's step taken over the whole batch in one block (the work; XLA counts a loop body
  once, so neither the blocked step nor before's scanned context-updates layers can be
  counted directly). A step faster than the bytes' bound keeps its data in cache."""
  bandwidth = harness.memory_bandwidth_bytes()
  out = dict(memory_bandwidth=bandwidth, matmul_peak=peak_flops, grids={})
  for name in size["science_grids"]:
    spec = science_spec(name, size["science_steps"])
    now = harness.ChunkTimer(experiment.grid_trainer(spec))
    keys = experiment._root_keys(spec.root_seed)
    then = harness.ChunkTimer(before.BeforeTrainer(
        spec.model, spec.problem, spec.trained_depths, spec.seeds, spec.train, N=spec.N,
        init_scales=spec.init, init_key=keys["init"], data_key=keys["data"],
        loop_group=spec.loop_group, rate_factors=spec.rate_factors))
    one_block = dataclasses.replace(spec, train=dataclasses.replace(
        spec.train, microbatch_size=spec.train.batch_size))
    work = harness.xla_cost(harness.ChunkTimer(experiment.grid_trainer(one_block)).compiled)
    flop_s, byte_s = work["flops"] / peak_flops, work["bytes"] / bandwidth
    seconds = dict(now=[], before=[])
    for _ in range(size["repeats"]):  # interleaved, so both see the same machine load
      seconds["before"].append(then.seconds_per_step(1))
      seconds["now"].append(now.seconds_per_step(1))
    grid = dict(config=" ".join(SCIENCE_GRIDS[name]), depths=list(spec.depths),
                replicates=len(now.trainer.replicate_seed), total_layers=sum(spec.depths),
                batch=spec.train.batch_size,
                contexts_per_block=block_size(spec.train.batch_size, spec.train.microbatch_size,
                                              spec.model),
                work=dict(**work, roofline_ms=1e3 * max(flop_s, byte_s),
                          bound="memory" if byte_s > flop_s else "flops"),
                speedup=float(np.median(seconds["before"]) / np.median(seconds["now"])))
    for version, timer in (("before", then), ("now", now)):
      step_s = float(np.median(seconds[version]))
      grid[version] = dict(step_ms=1e3 * step_s, compile_s=timer.compile_s,
                           fraction_of_roofline=max(flop_s, byte_s) / step_s)
    out["grids"][name] = grid
  return out


def peak(size) -> dict:
  """Measured matmul FLOP/s (float32, and bfloat16 off CPU) on this machine, this run."""
  out = dict(n=size["matmul_n"], float32=harness.matmul_peak_flops(size["matmul_n"]))
  if jax.default_backend() != "cpu":
    out["bfloat16"] = harness.matmul_peak_flops(size["matmul_n"], jnp.bfloat16)
  return out


def grid_vs_loop(size) -> dict:
  """Steps/s of the same (seed, depth) models as one grid and as one trainer each."""
  depths, num_seeds = size["loop_depths"], size["loop_seeds"]
  sizes = {k: BASE[k] for k in ("d", "P", "N", "batch")}
  grid = _timer("softmax", depths=depths, num_seeds=num_seeds, steps=size["steps"], **sizes)
  grid_s = grid.seconds_per_step(size["repeats"])
  loop_s, loop_compile_s = 0.0, 0.0
  for seed in range(num_seeds):
    for depth in depths:
      one = _timer("softmax", depths=(depth,), num_seeds=1, seeds=(seed,), steps=size["steps"],
                   **sizes)
      loop_s += one.seconds_per_step(size["repeats"])
      loop_compile_s += one.compile_s
  return dict(model="softmax", depths=list(depths), num_seeds=num_seeds, **sizes,
              grid_steps_per_s=1 / grid_s, loop_steps_per_s=1 / loop_s,
              speedup=loop_s / grid_s, grid_compile_s=grid.compile_s,
              loop_compile_s=loop_compile_s)


def padding(size) -> dict:
  """Step time of a grid against one model with as many layers as the whole grid."""
  depths = size["padding_depths"]
  sizes = {k: BASE[k] for k in ("d", "P", "N", "batch")}
  grid = _timer("softmax", depths=depths, num_seeds=1, steps=size["steps"], **sizes)
  single = _timer("softmax", depths=(sum(depths),), num_seeds=1, steps=size["steps"], **sizes)
  grid_s, single_s = [], []
  for _ in range(size["repeats"]):  # interleaved, so both see the same machine load
    grid_s.append(grid.seconds_per_step(1))
    single_s.append(single.seconds_per_step(1))
  grid_s, single_s = np.median(grid_s), np.median(single_s)
  return dict(model="softmax", depths=list(depths), total_layers=sum(depths), **sizes,
              grid_ms=1e3 * grid_s, single_ms=1e3 * single_s, ratio=grid_s / single_s)


def _profile(timer: harness.ChunkTimer, repeats: int) -> dict:
  """Milliseconds of the step's parts, each jitted alone: sampler, loss + gradient, Adam."""
  trainer, state = timer.trainer, timer.state
  from inverse_depth.train import grid_losses
  sample = jax.jit(trainer.training_batch)
  batch = sample(state.step)

  def loss(params, batch):
    def layer_predictions(p, batch, layout):
      return trainer.module.apply({"params": p}, batch)
    return grid_losses(layer_predictions, params, batch, trainer.layout).sum()

  forward = jax.jit(loss)
  gradient = jax.jit(jax.grad(loss))
  grads = gradient(state.params, batch)
  adam = jax.jit(lambda grads, opt_state, params, losses_SM: trainer.optimizer.update(
      grads, opt_state, params, losses_SM=losses_SM))  # the whole optax chain, freezing included
  losses_SM = jnp.zeros(state.converged_SM.shape, jnp.float32)
  parts = dict(sampler=(sample, (state.step,)), forward=(forward, (state.params, batch)),
               loss_and_grad=(gradient, (state.params, batch)),
               adam=(adam, (grads, state.opt_state, state.params, losses_SM)))
  out = {}
  for name, (fn, args) in parts.items():
    jax.block_until_ready(fn(*args))
    out[f"{name}_ms"] = 1e3 * harness.median_seconds(
        lambda: jax.block_until_ready(fn(*args)), repeats)
  out["xla_flops_loss_and_grad"] = harness.xla_flops(gradient.lower(state.params, batch).compile())
  return out


def utilisation(size, peak_flops: float) -> dict:
  """Model FLOP/s of the default CPU-scale grid against the measured matmul peak."""
  out = {}
  for model in ("softmax", "linear"):
    timer = _timer(model, steps=size["steps"], **BASE)
    step_s = timer.seconds_per_step(size["repeats"])
    sizes = dict(B=BASE["batch"], P=BASE["P"], d=BASE["d"], N=BASE["N"])
    model_flops = flops.model_train_flops(model, depths=BASE["depths"],
                                          num_seeds=BASE["num_seeds"], **sizes)
    out[model] = dict(step_ms=1e3 * step_s, model_flops=model_flops,
                      sampler_flops=flops.sampler_flops(num_seeds=BASE["num_seeds"], B=sizes["B"],
                                                        P=sizes["P"], d=sizes["d"]),
                      model_flops_as_xla_counts=flops.model_train_flops(
                          model, depths=BASE["depths"], num_seeds=BASE["num_seeds"],
                          scan_bodies_once=True, **sizes) if model == "linear" else model_flops,
                      xla_flops_step=timer.xla_flops_per_step(),
                      model_flops_per_s=model_flops / step_s,
                      utilisation=model_flops / step_s / peak_flops,
                      compile_s=timer.compile_s, **_profile(timer, size["repeats"]))
  return out


def scaling(size) -> dict:
  """Step time and XLA memory as total layers, batch, P, d and N double (softmax, 1 seed)."""
  steps = size["steps"]
  base = dict(d=BASE["d"], P=BASE["P"], N=BASE["N"], batch=BASE["batch"])
  out = {}

  def measure(depths, **sizes):
    timer = _timer("softmax", depths=depths, num_seeds=1, steps=steps, **sizes)
    memory = timer.memory_bytes()
    return dict(step_ms=1e3 * timer.seconds_per_step(size["repeats"]),
                peak_bytes=harness.peak_bytes(memory), **memory)

  layer_runs = []
  for total in size["scaling_layers"]:
    layer_runs.append(dict(total_layers=total, **measure((16,) * (total // 16), **base)))
  layers = [r["total_layers"] for r in layer_runs]
  step_ms = [r["step_ms"] for r in layer_runs]
  peak_b = [r["peak_bytes"] for r in layer_runs]
  slope, intercept = np.polyfit(layers, peak_b, 1)
  out["total_layers"] = dict(runs=layer_runs, time_exponent=harness.power_law_exponent(layers,
                                                                                       step_ms),
                             memory_exponent=harness.power_law_exponent(layers, peak_b),
                             bytes_per_layer=float(slope), fixed_bytes=float(intercept),
                             sizes=base, depths="16 x (total_layers / 16)")
  for name in ("batch", "P", "d", "N"):
    runs = []
    for doubling in range(size["scaling_doublings"] + 1):
      sizes = dict(base, **{name: base[name] * 2 ** doubling})
      if name == "d":
        sizes["N"] = max(sizes["N"], sizes["d"])
      runs.append(dict(value=sizes[name], **measure((16,) * 4, **sizes)))
    values = [r["value"] for r in runs]
    out[name] = dict(runs=runs, total_layers=64,
                     time_exponent=harness.power_law_exponent(values, [r["step_ms"] for r in runs]),
                     memory_exponent=harness.power_law_exponent(values,
                                                                [r["peak_bytes"] for r in runs]))
  return out


def compile_time(size) -> dict:
  """Wall time of lower + compile of the grid's train chunk as the number of models grows."""
  runs = []
  for num_models in size["compile_models"]:
    config = harness.grid_config(model="softmax", depths=tuple(range(1, num_models + 1)),
                                 num_seeds=1, d=BASE["d"], P=BASE["P"], N=BASE["N"],
                                 batch=BASE["batch"], steps_per_call=size["steps"])
    trainer = harness.make_trainer(config)
    state = trainer.init_state()
    start = time.perf_counter()
    trainer.train_chunk.lower(state).compile()
    runs.append(dict(num_models=num_models, compile_s=time.perf_counter() - start))
  models = [r["num_models"] for r in runs]
  return dict(runs=runs, depths="1..num_models, 1 seed",
              exponent=harness.power_law_exponent(models, [r["compile_s"] for r in runs]))


def kinds(size) -> dict:
  """Step time of every model kind's grid at the same sizes, as a ratio to the controlled
  softmax grid timed in the same run (context updates pay O(P^2 (d + L)) per layer)."""
  sizes = size["kinds"]
  seconds = {model: _timer(model, steps=size["steps"], **sizes).seconds_per_step(size["repeats"])
             for model in MODELS}
  return dict(**sizes, seconds_per_step=seconds,
              ratio_to_softmax={m: s / seconds["softmax"] for m, s in seconds.items()})


def paper(size, peaks: dict) -> dict:
  """Steps/s, model FLOP/s against each measured matmul peak, and device memory of the
  paper-sized softmax grid (the `paper` sizes; tiny off the accelerator)."""
  p = size["paper"]
  timer = _timer("softmax", steps=size["steps"], **p)
  step_s = timer.seconds_per_step(size["repeats"])
  model_flops = flops.model_train_flops("softmax", depths=p["depths"], num_seeds=p["num_seeds"],
                                        B=p["batch"], P=p["P"], d=p["d"], N=p["N"])
  stats = jax.devices()[0].memory_stats() or {}
  return dict(**p, total_layers=sum(p["depths"]), steps_per_s=1 / step_s,
              model_flops=model_flops, model_flops_per_s=model_flops / step_s,
              utilisation={dtype: model_flops / step_s / peak for dtype, peak in peaks.items()
                           if dtype != "n"},
              peak_bytes_in_use=stats.get("peak_bytes_in_use", -1),
              xla_peak_bytes=harness.peak_bytes(timer.memory_bytes()),
              compile_s=timer.compile_s)


def table(results: dict) -> str:
  """The figures that carry a target, one line each."""
  lines = [f"machine: {results['machine']}", "",
           f"{'figure':<46} {'value':>14}  target / note"]

  def row(name, value, note=""):
    lines.append(f"{name:<46} {value:>14}  {note}")

  figs = results["figures"]
  if "science" in figs:
    sc = figs["science"]
    row("memory bandwidth (triad, GB/s)", f"{sc['memory_bandwidth'] / 1e9:.1f}",
        "absolute, this machine")
    for name, g in sc["grids"].items():
      w = g["work"]
      row(f"{name}: step now / before (ms)",
          f"{g['now']['step_ms']:.0f} / {g['before']['step_ms']:.0f}",
          f">= 2.5x: {g['speedup']:.2f}x ({g['config']}, {g['replicates']} x "
          f"{g['total_layers']} layers, blocks of {g['contexts_per_block']})")
      row("  fraction of roofline now / before",
          f"{100 * g['now']['fraction_of_roofline']:.0f}% / "
          f"{100 * g['before']['fraction_of_roofline']:.0f}%",
          f"{w['bound']}-bound roofline {w['roofline_ms']:.0f} ms ({w['flops'] / 1e9:.2f} "
          f"GFLOP, {w['bytes'] / 1e9:.2f} GB a step)")
  if "peak" in figs:
    for dtype in ("float32", "bfloat16"):
      if dtype in figs["peak"]:
        row(f"matmul peak {dtype} n={figs['peak']['n']} (GFLOP/s)",
            f"{figs['peak'][dtype] / 1e9:.1f}", "absolute, this machine")
  if "grid_vs_loop" in figs:
    g = figs["grid_vs_loop"]
    row(f"grid vs loop ({len(g['depths'])} depths x {g['num_seeds']} seeds) speed-up",
        f"{g['speedup']:.1f}x", ">= 5x")
    row("  grid / loop steps per s", f"{g['grid_steps_per_s']:.1f} / {g['loop_steps_per_s']:.2f}",
        "absolute")
  if "padding" in figs:
    p = figs["padding"]
    row(f"padding: grid {p['depths']} / one depth-{p['total_layers']}", f"{p['ratio']:.2f}",
        f"<= 1.25 ({p['grid_ms']:.1f} ms vs {p['single_ms']:.1f} ms)")
  if "utilisation" in figs:
    for model, u in figs["utilisation"].items():
      row(f"utilisation {model} (model FLOP/s / matmul peak)", f"{100 * u['utilisation']:.1f}%",
          f">= 30%; step {u['step_ms']:.1f} ms = sampler {u['sampler_ms']:.1f} + "
          f"loss&grad {u['loss_and_grad_ms']:.1f} + adam {u['adam_ms']:.1f} ms (parts alone)")
      row(f"  {model} FLOPs analytic / XLA (loss & grad)",
          f"{u['model_flops_as_xla_counts'] / max(u['xla_flops_loss_and_grad'], 1):.2f}",
          f"{u['model_flops_as_xla_counts'] / 1e6:.0f} vs "
          f"{u['xla_flops_loss_and_grad'] / 1e6:.0f} MFLOP"
          + (" (loop bodies once, as XLA counts)" if model == "linear" else ""))
  if "scaling" in figs:
    s = figs["scaling"]
    t = s["total_layers"]
    row(f"time ~ layers^x ({t['runs'][0]['total_layers']}..{t['runs'][-1]['total_layers']})",
        f"{t['time_exponent']:.2f}", "1 = linear")
    row("memory ~ layers^x", f"{t['memory_exponent']:.2f}",
        f"{t['bytes_per_layer'] / 1e3:.1f} kB per layer + {t['fixed_bytes'] / 1e6:.2f} MB")
    for name in ("batch", "P", "d", "N"):
      row(f"time / memory ~ {name}^x", f"{s[name]['time_exponent']:.2f} / "
          f"{s[name]['memory_exponent']:.2f}", f"{[r['value'] for r in s[name]['runs']]}")
  if "compile" in figs:
    c = figs["compile"]
    row(f"compile s for {c['runs'][0]['num_models']}..{c['runs'][-1]['num_models']} models",
        " / ".join(f"{r['compile_s']:.1f}" for r in c["runs"]), f"~ models^{c['exponent']:.2f}")
  if "kinds" in figs:
    k = figs["kinds"]
    for model, ratio in k["ratio_to_softmax"].items():
      row(f"step time {model} / softmax (P={k['P']}, B={k['batch']})", f"{ratio:.2f}",
          f"{1e3 * k['seconds_per_step'][model]:.0f} ms a step")
  if "paper" in figs:
    p = figs["paper"]
    row(f"paper grid d{p['d']} P{p['P']} N{p['N']} B{p['batch']} T={p['total_layers']} steps/s",
        f"{p['steps_per_s']:.1f}", f"{p['model_flops_per_s'] / 1e9:.1f} GFLOP/s, compile "
        f"{p['compile_s']:.0f} s")
    for dtype, u in p["utilisation"].items():
      row(f"  utilisation against the {dtype} matmul peak", f"{100 * u:.1f}%", "")
    in_use = p["peak_bytes_in_use"]
    row("  peak device memory (memory_stats)",
        f"{in_use / 1e6:.1f} MB" if in_use >= 0 else "not reported",
        f"XLA memory analysis of the step: {p['xla_peak_bytes'] / 1e6:.1f} MB")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--size", choices=tuple(SIZES), default="default")
  parser.add_argument("--figures", default=",".join(DEFAULT_FIGURES),
                      help=f"comma-separated subset of {FIGURES}")
  parser.add_argument("--out", default="bench/results.json")
  parser.add_argument("--table", metavar="RESULTS_JSON",
                      help="only print the table of an existing results file")
  args = parser.parse_args()
  if args.table:
    with open(args.table) as f:
      print(table(json.load(f)))
    return
  size = SIZES[args.size]
  wanted = [f.strip() for f in args.figures.split(",") if f.strip()]
  unknown = sorted(set(wanted) - set(FIGURES))
  if unknown:
    parser.error(f"unknown figures {unknown}; allowed {FIGURES}")
  results = dict(machine=harness.machine(), size=args.size, settings=size, base=BASE, figures={})
  start = time.perf_counter()
  for name in wanted:  # in the order given; results are written after each figure
    t0 = time.perf_counter()
    if name in ("science", "utilisation", "paper") and "peak" not in results["figures"]:
      results["figures"]["peak"] = peak(size)
    if name == "peak":
      results["figures"]["peak"] = peak(size)
    elif name == "science":
      results["figures"]["science"] = science(size, results["figures"]["peak"]["float32"])
    elif name == "utilisation":
      results["figures"]["utilisation"] = utilisation(size, results["figures"]["peak"]["float32"])
    elif name == "paper":
      results["figures"]["paper"] = paper(size, results["figures"]["peak"])
    else:
      results["figures"][name] = {"grid_vs_loop": grid_vs_loop, "padding": padding,
                                  "scaling": scaling, "compile": compile_time, "kinds": kinds}[name](size)
    results["wall_s"] = time.perf_counter() - start
    with open(args.out, "w") as f:
      json.dump(results, f, indent=1)
    print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", flush=True)
  print(table(results))
  print(f"\nwall {results['wall_s']:.0f} s; written {args.out}")


if __name__ == "__main__":
  main()
