"""The training step of main before issue 44, kept as the benchmark's baseline.

The gradient of the grid loss taken over the whole batch at once (`train.grid_losses`), and
the context-updates model as it was then: one `lax.scan` over a model's layers, each layer
rematerialised in the backward pass and carrying all L - 1 Krylov columns
(inverse_depth/models/context_updates.py has the maths). `make bench` times this beside
today's step in one process; tests/test_train.py checks that both give the same gradient.
"""

import jax
import jax.numpy as jnp

from inverse_depth.grid import GridLayout
from inverse_depth.models import LAYER_PREDICTIONS, context_updates, linear
from inverse_depth.tasks import Batch
from inverse_depth.train import GridTrainer, grid_losses


def _context_updates_one_model(model, layers, batch: Batch, depth: int) -> jax.Array:
  """f_l of one context-updates model, layers scanned and rematerialised: [depth, B]."""
  centred_W_x_ND, _, context_BPD, test_BD = context_updates._scaled_inputs(model, batch)
  gains_J = linear.krylov_gains(model, depth)
  labels_BP = batch.y_context_BP
  coeffs_BPJ = jnp.zeros(labels_BP.shape + (depth,), labels_BP.dtype).at[..., 0].set(labels_BP)
  context_step = model["m"] / depth

  @jax.checkpoint
  def layer(coeffs_BPJ, qk):
    form_DD = (qk["W_q"] @ centred_W_x_ND).T @ (qk["W_k"] @ centred_W_x_ND)  # B_l
    keys_BPD = context_BPD @ form_DD.T
    query_row_BP = jax.nn.softmax(jnp.einsum("bd,bpd->bp", test_BD, keys_BPD), axis=-1)
    context_attention_BPP = jax.nn.softmax(jnp.einsum("bid,bjd->bij", context_BPD, keys_BPD),
                                           axis=-1)
    prediction_B = jnp.einsum("bpj,j,bp->b", coeffs_BPJ, gains_J, query_row_BP)
    pushed_BPJ = jnp.einsum("bij,bjk->bik", context_attention_BPP, coeffs_BPJ[..., :-1])
    return coeffs_BPJ.at[..., 1:].add(context_step * pushed_BPJ), prediction_B

  return jax.lax.scan(layer, coeffs_BPJ, layers)[1]


def context_updates_layer_predictions(params, batch: Batch, layout: GridLayout) -> jax.Array:
  """f_l for every packed layer of every context-updates model of one seed: [T, B]."""
  return jnp.concatenate([
      _context_updates_one_model(*layout.model_params(params, m), batch, depth)
      for m, depth in enumerate(layout.depths)])


LAYER_PREDICTIONS_BEFORE = dict(LAYER_PREDICTIONS,
                                context_updates=context_updates_layer_predictions)


class BeforeTrainer(GridTrainer):
  """A GridTrainer whose step takes the gradient as main did before issue 44."""

  def _gradient(self, params, batch_S):
    def total_loss(params):
      losses_SM = grid_losses(LAYER_PREDICTIONS_BEFORE[self.model], params, batch_S,
                              self.layout)
      return losses_SM.sum(), losses_SM

    return jax.grad(total_loss, has_aux=True)(params)
