"""Table 5: the gap fit L0 - C_L = c L^-alpha, softmax, the seven Table 1 spectra.

    python -m experiments.run --config=experiments/configs/table5.py --workdir=runs/table5

The softmax half of table1.py (`make reproduce` reads Table 5 from the Table 1 run instead
of training it twice). Every fit record carries `gap_fit`; paper: alpha 0.977-0.994.
"""

from experiments.configs import table1


def get_config(argument: str | None = None):
  config = table1.get_config(argument)
  config.grid.model = "softmax"
  return config
