"""The study's softmax training regimes, each defined once (BUILD_NOTES "Where the law appears",
"Training regime"). A config applies one with `config.update(regimes.NAME)` and names it in
its docstring.

SGD_LAW: where the paper's law appears (results/sgd_law/): heavy-ball SGD at a constant
  rate, every layer's W_q, W_k started at 0.73 I (logits ~ 17 cos, the temperature of the
  best single cosine layer), losses time-averaged over the last 16 evaluations.
SGD_STATIONARY: SGD_LAW with W_x held at its initial norm (`fixed_input_norm`), which changes
  no prediction but stops SGD noise from growing |W_x| and so slowly lowering its effective
  rate: constant-rate SGD then has a stationary state to reach (docs/notes/stationary.md;
  results/sgd_law_stationary/, `make demo`).
ANNEALED_ADAM: depth_law.py's (results/depth_law/): Adam 1e-3 with cosine decay to zero,
  small random query/key start. Deep models specialise there and sink below the paper's
  floor; no law.
ADAM_COSINE_IDENTITY: the study's base regime before the SGD law (the default until issue
  35): Adam 3e-3 with cosine decay to zero from the identity query/key start at scale 1. The
  tables' cpu tier, the generalised models, linear_floor.py and smoke.py start from it (their
  committed runs were made in it) and change what they name.

default.py trains in SGD_LAW, the regime the study recommends.
"""

SGD_LAW = dict(optimizer="sgd", momentum=0.9, schedule="constant", learning_rate=3e-3,
               warmup_steps=200, batch_size=256, qk_init="identity", qk_init_scale=0.73,
               eval_every=250, stationary_evals=16)

SGD_STATIONARY = dict(SGD_LAW, fixed_input_norm=True)

ANNEALED_ADAM = dict(optimizer="adam", schedule="cosine", learning_rate=1e-3, warmup_steps=200,
                     batch_size=256, qk_init="random", qk_init_scale=0.3, eval_every=250,
                     stationary_evals=1)

ADAM_COSINE_IDENTITY = dict(optimizer="adam", schedule="cosine", learning_rate=3e-3,
                            warmup_steps=200, batch_size=256, qk_init="identity",
                            qk_init_scale=1.0, eval_every=200, stationary_evals=1)
