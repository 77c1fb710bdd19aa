"""RoPE fusion (fuse_rope pass): transformers' rotate-half rotary embedding
(slice, slice, neg, cat, mul, mul, add) against eager PyTorch, in float32,
bfloat16 and float16, with cos/sin broadcast over heads (LLaMA's unsqueeze(1))
and over batch, symbolic sequence lengths, and the transformers functions
themselves (LLaMA's apply_rotary_pos_emb, Qwen2's); the compiled graph must
hold one rope node per rotated tensor; look-alikes that are not a rotation
must stay unfused and still match eager."""
import pytest
import torch
import torch.nn as nn

import airgraph
from conftest import check


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rope(nn.Module):
    def forward(self, q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def graph_text(model, *inputs, **cfg):
    rep = airgraph.explain(model, *inputs, config=airgraph.CompilerConfig(fallback=False, **cfg))
    return "\n".join(g.graph_text for r in rep.reports for g in r.graphs)


def inputs(b, h, hk, l, d, dtype):
    q = torch.randn(b, h, l, d, dtype=dtype)
    k = torch.randn(b, hk, l, d, dtype=dtype)
    ang = torch.randn(b, l, d // 2).repeat(1, 1, 2)
    return q, k, ang.cos().to(dtype), ang.sin().to(dtype)


@pytest.mark.parametrize("shape", [(1, 4, 2, 1, 32), (2, 8, 2, 7, 64), (3, 2, 1, 5, 8)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_rope_fused(shape, dtype):
    torch.manual_seed(0)
    args = inputs(*shape, dtype)
    check(Rope(), *args)
    check(Rope(), *args, disable_passes=["fuse_rope"])
    text = graph_text(Rope(), *args)
    assert text.count("= rope(") == 2, text
    for op in ("neg", "cat", "slice"):
        assert f"= {op}(" not in text, f"{op} left unfused:\n{text}"
    assert "= rope(" not in graph_text(Rope(), *args, disable_passes=["fuse_rope"])


def test_rope_symbolic_sequence_length():
    torch.manual_seed(0)
    f = torch.compile(Rope(), backend="airgraph", dynamic=True)
    for l in (3, 9, 17):
        args = inputs(2, 4, 2, l, 16, torch.float32)
        want = Rope()(*args)
        got = f(*args)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_transformers_apply_rotary_pos_emb(family):
    mod = pytest.importorskip(f"transformers.models.{family}.modeling_{family}")
    torch.manual_seed(0)
    q, k, cos, sin = inputs(2, 4, 2, 6, 32, torch.float32)
    model = lambda q, k, c, s: mod.apply_rotary_pos_emb(q, k, c, s)  # noqa: E731
    check(model, q, k, cos, sin)
    assert graph_text(model, q, k, cos, sin).count("= rope(") == 2


class NotRotation(nn.Module):
    # cat in the other order (x1, -x2), a slice that is not the half, an intermediate that is also an output
    def forward(self, x, cos, sin):
        h = x.shape[-1] // 2
        a = x * cos + torch.cat((x[..., :h], -x[..., h:]), dim=-1) * sin
        b = x * cos + torch.cat((-x[..., h + 1 :], x[..., : h + 1]), dim=-1) * sin
        r = rotate_half(x)
        c = x * cos + r * sin
        return a, b, c, r


def test_look_alikes_stay_unfused():
    torch.manual_seed(0)
    x, cos, sin = torch.randn(2, 3, 4, 16), torch.randn(3, 4, 16), torch.randn(3, 4, 16)
    check(NotRotation(), x, cos, sin)
    assert "= rope(" not in graph_text(NotRotation(), x, cos, sin)


def test_pass_listed():
    assert "fuse_rope" in airgraph.pass_names()
    assert "rope" in airgraph.ops()
