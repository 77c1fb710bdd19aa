"""The decomposition table AOTAutograd applies before lowering.

We keep ops the engine runs well as one kernel (linear/addmm, convolution,
layer norm, softmax, gelu, embedding, SDPA) and decompose composite ops that
are cheaper to support through their parts (_DECOMPOSE). Every other op with
no lowering of its own is decomposed into core ATen ops where PyTorch has a
decomposition for it (the table Inductor and torch.export use), so an op the
engine lacks runs through its parts on the engine instead of falling back;
an op gains a lowering, and its decomposition drops out of the table.
"""
import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from .lowering import LOWERINGS, families  # noqa: F401  (families: every op's table row registers)

aten = torch.ops.aten

_DECOMPOSE = [
    aten.std,
    aten.std_mean,
    aten.var_mean,
    aten.hardswish,
    aten.hardsigmoid,
    aten.softplus,
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
    # in PyTorch's full table but not its core one; their parts run on the engine
    aten._native_batch_norm_legit_functional,  # training-mode batch norm and instance norm
    aten.round.decimals,
    aten.grid_sampler_2d,
    # F.interpolate's .vec overloads decompose while Dynamo traces, but torch.export keeps them
    aten.upsample_bilinear2d,
    aten.upsample_nearest2d,
]


@functools.cache
def decomposition_table():
    table = get_decompositions(_DECOMPOSE)
    for op, fn in core_aten_decompositions().items():
        if op not in LOWERINGS:
            table.setdefault(op, fn)
    return table
