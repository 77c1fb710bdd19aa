"""Norm fusion (fuse_norms pass): the decomposed RMSNorm that HF Llama/T5 write
in Python, compiled with airgraph against eager PyTorch in float32 and
bfloat16 (with and without weight); the compiled graph must hold an rms_norm
node; with the pass disabled the result must still match eager."""
import pytest
import torch
import torch.nn as nn

import airgraph
from conftest import check

SHAPES = [(2, 7, 64), (16, 48)]


class HFRMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6, weight=True, wdtype=torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, dtype=wdtype)) if weight else None
        self.eps = eps

    def forward(self, hidden):
        input_dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + self.eps)
        if self.weight is None:
            return hidden.to(input_dtype)
        return self.weight * hidden.to(input_dtype)


def graph_text(model, *inputs, **cfg):
    rep = airgraph.explain(model, *inputs, config=airgraph.CompilerConfig(fallback=False, **cfg))
    return rep.reports[0].graphs[0].graph_text


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weight", [True, False], ids=["weight", "noweight"])
def test_rms_norm_fused(shape, dtype, weight):
    torch.manual_seed(0)
    model = HFRMSNorm(shape[-1], weight=weight, wdtype=dtype).eval()
    x = torch.randn(*shape, dtype=dtype)
    check(model, x)
    check(model, x, disable_passes=["fuse_norms"])
    text = graph_text(model, x)
    assert "= rms_norm(" in text, text
    for op in ("pow_scalar", "rsqrt", "mean"):
        assert f"= {op}(" not in text, f"{op} left unfused:\n{text}"
    if dtype == torch.float32:
        assert f"has_weight={str(weight).lower()}" in text, text
    unfused = graph_text(model, x, disable_passes=["fuse_norms"])
    assert "= rms_norm(" not in unfused


def test_rms_norm_shared_intermediate_not_fused():
    class M(nn.Module):
        def forward(self, x):
            v = x.pow(2).mean(-1, keepdim=True)
            return x * torch.rsqrt(v + 1e-5), v  # the variance is also an output

    x = torch.randn(4, 32)
    check(M(), x)
    assert "= rms_norm(" not in graph_text(M(), x)


def test_pass_listed():
    assert "fuse_norms" in airgraph.pass_names()
