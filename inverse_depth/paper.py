"""The paper's published numbers (SPEC section 4): references to compare with, never
used to produce a result."""

# Table 1: fitted floor L0 on the top-2 task, by (a, b).
TABLE1_L0 = {
    "softmax": {(0.0, 0.0): 2.007, (0.0, 0.25): 1.268, (0.0, 0.5): 0.836, (0.0, 1.0): 0.424,
                (0.25, 0.0): 1.255, (0.5, 0.0): 0.798, (1.0, 0.0): 0.341},
    "linear": {(0.0, 0.0): 59.853, (0.0, 0.25): 23.055, (0.0, 0.5): 9.766, (0.0, 1.0): 2.504,
               (0.25, 0.0): 22.962, (0.5, 0.0): 9.501, (1.0, 0.0): 2.120},
}


def table1_floor(model: str, task: str, k: int, a: float, b: float) -> float | None:
  """The paper's fitted L0 for this grid, or None where Table 1 has no entry."""
  if task != "topk" or k != 2:
    return None
  return TABLE1_L0.get(model.split("-")[0], {}).get((float(a), float(b)))
