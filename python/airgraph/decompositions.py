"""The decomposition table AOTAutograd applies before lowering.

We keep ops the engine runs well as one kernel (linear/addmm, convolution,
layer norm, softmax, gelu, embedding, SDPA) and decompose composite ops that
are cheaper to support through their parts.
"""
import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

_DECOMPOSE = [
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.std,
    aten.std_mean,
    aten.var_mean,
    aten.hardswish,
    aten.hardsigmoid,
    aten.softplus,
    aten.elu,
    aten.glu,
    aten.mish,
    aten.linspace,
    aten.logsumexp,
    aten.linalg_vector_norm,
    aten.masked_fill,
    aten.baddbmm,
    aten.addmv,
    aten.full_like,
    aten.zeros_like,
    aten.ones_like,
    aten.new_zeros,
    aten.new_ones,
    aten.new_full,
    aten.rsub,
]


def decomposition_table():
    return get_decompositions(_DECOMPOSE)
