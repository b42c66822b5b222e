"""Table 3's one miss (k = 16, isotropic) trained at larger context lengths P: does the gap to
the paper's floor close as P grows? Committed: results/table3_k16_by_P/P{2048,4096,8192}.

    python -m experiments.run --config=experiments/configs/table3_k16_by_P.py:4096 \
        --workdir=runs/table3_k16_by_P/P4096

table3.py at the cpu tier (linear, d = N = 128, top-16, depths 1, 2, 4, one seed, 1200
steps) on the spectrum (0, 0) only, at P = the argument. 5, 9 and 17 min on 2 CPU cores at
P = 2048, 4096 and 8192 (theory bounds included).
"""

from experiments.configs import table3
from inverse_depth.config import ConfigError

CONTEXT_LENGTHS = ("2048", "4096", "8192")


def get_config(context_length: str = "4096"):
  if context_length not in CONTEXT_LENGTHS:
    raise ConfigError(f"table3_k16_by_P: P={context_length!r} is not one of the committed "
                      f"runs; allowed {', '.join(CONTEXT_LENGTHS)}")
  config = table3.get_config("cpu")
  config.spectra = ((0.0, 0.0),)
  config.sizes.linear.P = int(context_length)
  return config
