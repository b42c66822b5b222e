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
mixture from L = 3 (BUILD_NOTES "Where the law appears" (docs/notes/annealed_adam.md)).
Writes results.json and report.md (`write_report`); about 2 minutes on 2 CPU cores.
"""

import json
import os
import time

import jax
from absl import app, flags

from experiments.configs import tables
from inverse_depth import checks, paper, theory
from inverse_depth.files import write_json_atomic, write_text_atomic
from inverse_depth.report.markdown import cell, pm, row, spectrum, table

SIZES = dict(d=16, P=128, k=2)  # the paper's softmax size (docs/sizes.md)

_WORKDIR = flags.DEFINE_string("workdir", "results/cosine_mixtures", "Output directory.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 200_000, "Monte Carlo contexts per spectrum.",
                                    lower_bound=2)
_MAX_LAYERS = flags.DEFINE_integer("max_layers", 4, "Deepest L of the depth-L optima "
                                   "(exhaustive: C(48 + L - 1, L) multisets of temperatures).",
                                   lower_bound=2, upper_bound=4)
_SEED = flags.DEFINE_integer("seed", 0, "Monte Carlo seed; spectrum i uses fold_in(key, i).")



def _excess_text(entry: dict) -> str:
  """An excess over the full mixture with its paired se; float round-off prints as 0."""
  if abs(entry["excess"]) < 1e-12:
    return "0"
  return pm(entry, "excess", ".2g", ".1g")


def _by_layers_table(results: dict, field: str, label: str) -> list[str]:
  """One row per spectrum: the depth-L optima in `field` of each bound (average_by_layers or
  mixture_by_layers), the full mixture, the fall from L = 1 to 2 and the excess at the
  deepest L; then a sentence, from the numbers, on the depth from which every optimum stays
  at the full mixture (checks.settled_depth)."""
  bounds = results["bounds"]
  max_layers = len(bounds[0][field])
  lines = table("(a, b)", "paper Table 1 L0",
                *(f"{label} {L}" for L in range(1, max_layers + 1)), "full mixture",
                "L = 1 -> 2", f"excess at {label} {max_layers}", "its temperatures")
  falls, settled_from = [], []
  for bound in bounds:
    by_layers = bound[field]
    falls.append(1 - by_layers[1]["loss"] / by_layers[0]["loss"])
    settled_from.append(checks.settled_depth(by_layers, bound["mixture"]))
    target = paper.table1_floor("softmax", "topk", results["sizes"]["k"], bound["a"], bound["b"])
    lines.append(row(spectrum(bound), cell(target),
                     *(f"{entry['loss']:.4f}" for entry in by_layers), pm(bound, "mixture", ".4f"),
                     f"{-100 * falls[-1]:.1f}%", _excess_text(by_layers[-1]),
                     ", ".join(f"{t:.3g}" for t in by_layers[-1]["temperatures"])))
  settled = [L for L in settled_from if L is not None]
  positive_gains = all(entry["weights"] and min(entry["weights"]) > 0
                       for bound in bounds for entry in bound[field])
  saturation = f"{100 * checks.SATURATION_FRACTION:g}% of the loss"
  summary = (f"From one layer to two the optimum falls by {100 * min(falls):.1f}-"
             f"{100 * max(falls):.1f}%. ")
  if len(settled) < len(bounds):
    summary += (f"For {len(bounds) - len(settled)} of {len(bounds)} spectra it is still above "
                f"the full mixture at L = {max_layers} (beyond 2 paired standard errors and "
                f"{saturation}): deeper optima still improve there.")
  elif positive_gains:
    summary += (f"From L = {max(settled)} on it stays at the full mixture (excess within 2 "
                f"paired standard errors or {saturation}) for every spectrum; with every gain "
                "positive no depth goes below the full mixture, so deeper optima gain at most "
                "that excess: a drop within the first layers, not a floor approached like 1/L.")
  else:
    summary += (f"From L = {max(settled)} on it stays at the full mixture for every spectrum, "
                "but some gains are negative, so the full (nonnegative) mixture does not bound "
                "deeper optima.")
  return lines + ["", summary]


def write_report(workdir: str) -> str:
  """workdir/report.md from workdir/results.json alone: per spectrum,
  the best equal-weight average of L cosine-attention layers and the best mixture of at most
  L (`theory.softmax_bound`'s average_by_layers, mixture_by_layers) beside the full mixture
  and the paper's floor; returns its path."""
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  sizes, first = results["sizes"], results["bounds"][0]
  lines = ["# The best L cosine-attention layers", "",
           f"Theory only (no training): d = {sizes['d']}, P = {sizes['P']}, top-{sizes['k']}, "
           f"{results['num_samples']} Monte Carlo contexts per spectrum, "
           f"{len(first['temperatures'])} temperatures from {min(first['temperatures']):g} to "
           f"{max(first['temperatures']):g}; {results['wall_time_s']:.0f} s. Each layer weights "
           "the context by softmax(temperature x cosine) exactly; L = 1 is the best single "
           "layer. Excess: the loss minus the full nonnegative mixture over the grid on the "
           "same contexts, with its paired standard error.", "",
           "## Equal-weight averages with one gain: the controlled model", "",
           "y_hat = g (1/L) sum_l p_l . y with every layer scoring by cosine at a grid "
           "temperature (repeats allowed), exhaustive over the temperatures. Each layer has "
           "weight 1/L, so L + 1 layers cannot always copy L (the loss can rise by a little "
           "from L to L + 1); 2L layers can always copy L.", ""]
  lines += _by_layers_table(results, "average_by_layers", "L =")
  lines += ["", "## Mixtures of at most L layers with free nonnegative gains", "",
            "sum_l w_l p_l . y with w >= 0 (a special case of per-layer value matrices, C.2, "
            "whose gains take either sign), exhaustive over supports; a lower bound on the "
            "equal-weight average of L whenever its gain is positive.", ""]
  lines += _by_layers_table(results, "mixture_by_layers", "L <=")
  path = os.path.join(workdir, "report.md")
  write_text_atomic(path, "\n".join(lines) + "\n")
  return path

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
  print(f"Report: {write_report(_WORKDIR.value)}")


if __name__ == "__main__":
  app.run(main)
