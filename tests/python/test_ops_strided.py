"""Strided windows (as_strided, as_strided_scatter, unfold, nn.functional.unfold)
and a windowed-attention block built on them, against eager."""
import pytest
import torch
import torch.nn.functional as F
from conftest import check

DTYPES = [torch.float32, torch.bfloat16, torch.int32]


def rnd(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_as_strided(dtype):
    x = rnd(4, 5, 3, dtype=dtype)

    def f(x):
        y = x + 1
        return (torch.as_strided(y, (3, 4), (5, 1), 2),       # overlapping rows
                torch.as_strided(y, (2, 3, 2), (1, 2, 7)),    # transposed-like
                torch.as_strided(y, (6, 5), (5, 1), 3),        # contiguous: an alias
                torch.as_strided(y, (2, 2), (0, 0), 59),      # broadcast of the last element
                torch.as_strided(y, (0, 3), (1, 1)))

    check(f, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_as_strided_scatter(dtype):
    x, s = rnd(4, 6, dtype=dtype), rnd(2, 3, dtype=dtype)
    check(lambda x, s: (torch.as_strided_scatter(x * 2, s, (2, 3), (6, 2), 1),
                        torch.as_strided_scatter(x, s.t(), (3, 2), (1, 12), 0)), x, s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unfold(dtype):
    x = rnd(3, 10, 4, dtype=dtype)

    def f(x):
        return (x.unfold(1, 3, 2), x.unfold(0, 1, 1), x.unfold(-1, 4, 1), x.unfold(1, 4, 4),
                x.transpose(0, 1).unfold(1, 2, 1), x.unfold(1, 0, 3), x[0, 0, 0].unfold(0, 1, 1))

    check(f, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_im2col(dtype):
    x = rnd(2, 3, 7, 6, dtype=dtype)

    def f(x):
        return (F.unfold(x, 3), F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(2, 1)),
                F.unfold(x[0], 2, stride=2))

    check(f, x)


class WindowAttention(torch.nn.Module):
    """Swin-style block: window partition by as_strided (or unfold), attention per window, reverse."""

    def __init__(self, dim=16, heads=2, ws=4, use_unfold=False):
        super().__init__()
        self.ws, self.heads, self.use_unfold = ws, heads, use_unfold
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x):  # x: [B, H, W, C]
        B, H, W, C = x.shape
        ws = self.ws
        y = self.norm(x)
        if self.use_unfold:
            win = y.unfold(1, ws, ws).unfold(2, ws, ws)  # [B, nh, nw, C, ws, ws]
            win = win.permute(0, 1, 2, 4, 5, 3)
        else:
            win = y.as_strided((B, H // ws, W // ws, ws, ws, C),
                               (H * W * C, ws * W * C, ws * C, W * C, C, 1))
        win = win.reshape(-1, ws * ws, C)
        q, k, v = self.qkv(win).reshape(win.shape[0], ws * ws, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5
        o = (a.softmax(-1) @ v).transpose(1, 2).reshape(-1, ws * ws, C)
        o = self.proj(o).view(B, H // ws, W // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, C)
        return x + o


@pytest.mark.parametrize("use_unfold", [False, True])
def test_window_attention_model(use_unfold):
    torch.manual_seed(0)
    m = WindowAttention(use_unfold=use_unfold).eval()
    check(m, torch.randn(2, 8, 12, 16))
