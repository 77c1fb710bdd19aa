"""Lowerings: attention ops (see lowering/__init__.py for the API).

Engine op "sdpa"(q, k, v[, mask]){scale, is_causal, has_mask}: q [B, H, L, E],
k [B, Hk, S, E], v [B, Hk, S, Ev] with H % Hk == 0 (grouped-query heads repeat
like enable_gqa), mask bool (True = keep) or additive float, broadcastable to
[B, H, L, S]; is_causal keeps key j <= query i (top-left aligned). Rows with
every key masked give 0, as PyTorch's CPU kernels do.
"""
import math

from . import Unsupported, aten, lowering

_FLOAT = ("float32", "bfloat16", "float16")


def _emit_sdpa(ctx, q, k, v, mask, dropout_p, is_causal, scale, bool_mask_ok=True):
    if dropout_p:
        raise Unsupported(f"attention dropout_p={dropout_p}")
    vq, vk, vv = ctx.value(q), ctx.value(k), ctx.value(v)
    dts = {ctx.dtype(x) for x in (vq, vk, vv)}
    if len(dts) != 1 or next(iter(dts)) not in _FLOAT:
        raise Unsupported(f"attention dtypes {sorted(dts)}")
    if any(ctx.rank(x) != 4 for x in (vq, vk, vv)):
        raise Unsupported("attention on inputs that are not [B, H, L, E]")
    sq, sk = ctx.shape(vq), ctx.shape(vk)
    if sk[1] == 0 or sq[1] % sk[1] != 0:
        raise Unsupported(f"query heads {sq[1]} are not a multiple of key heads {sk[1]}")
    if scale is None and sq[3] == 0:
        raise Unsupported("head dim 0")
    inputs = [vq, vk, vv]
    if mask is not None:
        vm = ctx.value(mask)
        mdt = ctx.dtype(vm)
        if mdt == "bool":
            if not bool_mask_ok:
                raise Unsupported("boolean mask passed to an internal attention op")
        elif mdt not in _FLOAT:
            raise Unsupported(f"attention mask dtype {mdt}")
        inputs.append(vm)
    attrs = {"is_causal": bool(is_causal), "has_mask": mask is not None}
    if scale is not None:  # else the kernel's default, 1/sqrt(head dim) (a size, maybe symbolic)
        attrs["scale"] = float(scale)
    res = ctx.emit("sdpa", inputs, attrs)
    return res


@lowering(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_cpu(ctx, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    # outputs: (out, logsumexp); logsumexp is not computed, so a use of it falls back.
    return [_emit_sdpa(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale), None]


@lowering(aten.scaled_dot_product_attention.default)
def _sdpa(ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if not enable_gqa and ctx.shape(ctx.value(q))[1] != ctx.shape(ctx.value(k))[1]:
        raise Unsupported("different head counts without enable_gqa")
    return _emit_sdpa(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale)


@lowering(aten._scaled_dot_product_attention_math.default)
def _sdpa_math(ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *,
               scale=None, enable_gqa=False):
    # Internal op: a boolean mask here is added as 0/1, not used to keep/drop keys.
    if dropout_mask is not None:
        raise Unsupported("attention with a dropout mask")
    if not enable_gqa and ctx.shape(ctx.value(q))[1] != ctx.shape(ctx.value(k))[1]:
        raise Unsupported("different head counts without enable_gqa")
    return [_emit_sdpa(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale, bool_mask_ok=False), None]


@lowering(aten._scaled_dot_product_efficient_attention.default)
def _sdpa_efficient(ctx, node, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *,
                    scale=None):
    if ctx.shape(ctx.value(q))[1] != ctx.shape(ctx.value(k))[1]:
        raise Unsupported("different head counts")
    return [_emit_sdpa(ctx, q, k, v, attn_bias, dropout_p, is_causal, scale, bool_mask_ok=False),
            None, None, None]
