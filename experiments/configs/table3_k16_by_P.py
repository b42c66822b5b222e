"""Table 3's one miss (k = 16, isotropic) trained at larger context lengths P: does the gap to
the paper's floor close as P grows? Committed:
results/reproduce/table3_k16_by_P/P{2048,4096,8192}.

    python -m experiments.run --config=experiments/configs/table3_k16_by_P.py:4096 \
        --workdir=runs/table3_k16_by_P/P4096

table3.py at the cpu tier (linear, d = N = 128, top-16, depths 1, 2, 4, one seed, 1200
steps) on the spectrum (0, 0) only, at P = the argument (`:P=4096`, or `:4096`). 5, 9 and 17
min on 2 CPU cores at P = 2048, 4096 and 8192 (theory bounds included).
"""

from experiments.configs import arguments, table3

CONTEXT_LENGTHS = ("2048", "4096", "8192")  # the committed runs


def get_config(argument: str | None = None):
  context_length = arguments.parse(argument, P=("4096", CONTEXT_LENGTHS)).P
  config = table3.get_config()
  config.problem.spectra = ((0.0, 0.0),)
  config.grid.sizes.linear.P = int(context_length)
  return config
