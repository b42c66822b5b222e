"""Best averages of L cosine-attention layers at the paper's softmax size (theory, no training).

    python -m experiments.cosine_mixtures [--workdir=results/cosine_mixtures]
                                          [--num_samples=200000] [--max_layers=4]

For the seven Table 1 spectra at d = 16, P = 128, top-2 (docs/sizes.md): the best single
layer that weights the context by softmax(temperature x cosine) (the paper's floors), by
depth L = 2..max_layers the best equal-weight average of L such layers with one gain (the
controlled model with cosine-scoring layers) and the best mixture of at most L with free
gains, and the best mixture over the whole temperature grid (`theory.softmax_bound`). If the
paper's depth law were the optimum of L cosine-ranking layers approaching its floor, these
would fall like 1/L; at these sizes they drop once, at L = 2, and are within 0.1% of the full
mixture from L = 3 (BUILD_NOTES "Where the law appears" (docs/notes/annealed_adam.md)). Writes results.json and report.md
(`run_report.write_cosine_mixture_report`); about 2 minutes on 2 CPU cores.
"""

import os
import time

import jax
from absl import app, flags

from experiments.configs import tables
from inverse_depth import theory
from inverse_depth.report import run_report
from inverse_depth.files import write_json_atomic

SIZES = dict(d=16, P=128, k=2)  # the paper's softmax size (docs/sizes.md)

_WORKDIR = flags.DEFINE_string("workdir", "results/cosine_mixtures", "Output directory.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 200_000, "Monte Carlo contexts per spectrum.",
                                    lower_bound=2)
_MAX_LAYERS = flags.DEFINE_integer("max_layers", 4, "Deepest L of the depth-L optima "
                                   "(exhaustive: C(48 + L - 1, L) multisets of temperatures).",
                                   lower_bound=2, upper_bound=4)
_SEED = flags.DEFINE_integer("seed", 0, "Monte Carlo seed; spectrum i uses fold_in(key, i).")


def main(argv):
  del argv
  start = time.time()
  key = jax.random.key(_SEED.value)
  bounds = []
  for i, (a, b) in enumerate(tables.TABLE1_SPECTRA):
    bound = theory.softmax_bound(jax.random.fold_in(key, i), **SIZES, a=a, b=b,
                                 num_samples=_NUM_SAMPLES.value,
                                 max_layers=_MAX_LAYERS.value)
    bounds.append(dict(a=a, b=b, **bound))
    print(f"({a:g}, {b:g}): single {bound['single']:.4f}, average of L = 2 "
          f"{bound['average_by_layers'][1]['loss']:.4f}, mixture {bound['mixture']:.4f}",
          flush=True)
  os.makedirs(_WORKDIR.value, exist_ok=True)
  results = dict(sizes=SIZES, num_samples=_NUM_SAMPLES.value, seed=_SEED.value,
                 wall_time_s=time.time() - start, bounds=bounds)
  write_json_atomic(os.path.join(_WORKDIR.value, "results.json"), results)
  print(f"Report: {run_report.write_cosine_mixture_report(_WORKDIR.value)}")


if __name__ == "__main__":
  app.run(main)
