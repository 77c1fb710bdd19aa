"""Lowerings: quantized weight ops (see lowering/__init__.py for the API).

Engine op: "linear_int4"(x, w, scale_and_zero){group_size, layout} is torch's
`_weight_int4pack_mm_for_cpu` (torchao's PrototypeInt4WeightOnlyConfig on CPU), reading the
packed uint8 weight in place. torch's packed layout depends on the CPU capability its kernels were
dispatched to in this process (AVX-512: blocks of 64 columns, AVX2: 32, else byte pairs), so the
layout is found once per process by packing a known weight with torch's own
`_convert_weight_to_int4pack_for_cpu` and decoding it (`packed_layout`): a layout the kernel does
not know makes the op fall back to PyTorch. The weight and scales may be constants (bound
parameters) or graph inputs (AOTAutograd passes a tensor subclass's parts per call): the kernel
reads either where it lies.
"""
from __future__ import annotations

import functools

import torch

from . import Unsupported, aten, lowering

_FLOAT = ("float32", "bfloat16", "float16")
# name -> (block of columns, a full block's high nibble holds column j + block / 2 (else 2j + 1))
_LAYOUTS = {"avx512": (64, True), "avx2": (32, True), "pairs": (32, False)}


def unpack_int4(packed: torch.Tensor, n: int, k: int, layout: str) -> torch.Tensor:
    """The [n, k] values 0..15 of torch's packed int4 bytes [n, k / 2] in `layout`."""
    block, split = _LAYOUTS[layout]
    flat = packed.reshape(-1).to(torch.int32)
    out = torch.empty(n, k, dtype=torch.int32)
    for n0 in range(0, n, block):
        nb = min(block, n - n0)
        rows = flat[n0 * k // 2:(n0 + nb) * k // 2].reshape(k, nb // 2)
        lo, hi = (rows & 15).t(), (rows >> 4).t()
        if nb == block and split:
            out[n0:n0 + nb // 2], out[n0 + nb // 2:n0 + nb] = lo, hi
        else:
            out[n0:n0 + nb:2], out[n0 + 1:n0 + nb:2] = lo, hi
    return out


@functools.cache
def packed_layout() -> str | None:
    """The layout this process's torch packs int4 weights in (None: none the kernel knows). The
    probe's 112 columns make a partial last block in every layout (64 + 48, 3 * 32 + 16)."""
    n, k = 112, 8
    q = (torch.arange(n * k, dtype=torch.int32).reshape(n, k) * 7 + torch.arange(n, dtype=torch.int32)[:, None]) % 16
    try:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    except (RuntimeError, AttributeError):
        return None
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (n, k // 2):
        return None
    found = [name for name in _LAYOUTS if torch.equal(unpack_int4(packed, n, k, name), q)]
    return found[0] if len(found) == 1 else None


@lowering(aten._weight_int4pack_mm_for_cpu.default)
def _weight_int4pack_mm_for_cpu(ctx, node, x, w, group_size, scale_and_zero):
    vx, vw, vs = ctx.value(x), ctx.value(w), ctx.value(scale_and_zero)
    dt = ctx.dtype(vx)
    if dt not in _FLOAT:
        raise Unsupported(f"int4 linear of a {dt} input (float32, bfloat16, float16)")
    if ctx.dtype(vw) != "uint8" or ctx.rank(vw) != 2:
        raise Unsupported(f"int4 linear: packed weight is {ctx.dtype(vw)}{ctx.shape(vw)}, not uint8 [N, K / 2]")
    if ctx.dtype(vs) != dt:
        raise Unsupported(f"int4 linear: scale_and_zero is {ctx.dtype(vs)}, the input {dt}")
    if ctx.rank(vx) != 2:
        raise Unsupported(f"int4 linear of a rank-{ctx.rank(vx)} input (torch takes [M, K])")
    if not isinstance(group_size, int) or group_size not in (32, 64, 128, 256):
        raise Unsupported(f"int4 linear: group size {group_size!r} (32, 64, 128, 256)")
    layout = packed_layout()
    if layout is None:
        raise Unsupported("int4 linear: torch packs int4 weights in a layout the engine does not know here "
                          f"(CPU capability {torch.backends.cpu.get_cpu_capability()})")
    return ctx.emit("linear_int4", [vx, vw, vs], {"group_size": group_size, "layout": layout})
