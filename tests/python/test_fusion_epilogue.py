"""Epilogue fusion (fuse_epilogues pass): GEMM/conv + bias/activation/residual
patterns compiled with airgraph against eager PyTorch, in float32 and
bfloat16; the same with the pass disabled must agree; and the compiled graph
must show that the fusion happened (no separate activation node left)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import airgraph
from conftest import assert_close, check, compile_native

DTYPES = [torch.float32, torch.bfloat16]


def graph_text(model, *inputs, **cfg):
    rep = airgraph.explain(model, *inputs, config=airgraph.CompilerConfig(fallback=False, **cfg))
    return rep.reports[0].graphs[0].graph_text


def check_fused(model, *inputs, absent=(), present=(), atol=None, rtol=None):
    """Fused vs eager, unfused vs eager, fused vs unfused; then graph assertions."""
    with torch.no_grad():
        want = model(*inputs)
        got = compile_native(model)(*inputs)
        unfused = compile_native(model, disable_passes=["fuse_epilogues"])(*inputs)
    assert_close(got, want, atol, rtol, msg="fused vs eager")
    assert_close(unfused, want, atol, rtol, msg="unfused vs eager")
    assert_close(got, unfused, atol, rtol, msg="fused vs unfused")
    text = graph_text(model, *inputs)
    for a in absent:
        assert f"= {a}(" not in text, f"{a} node left unfused:\n{text}"
    for p in present:
        assert p in text, f"{p!r} not in\n{text}"
    return text


class LinearAct(nn.Module):
    def __init__(self, k, n, act):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


ACTS = {
    "relu": (nn.ReLU(), "relu"),
    "gelu": (nn.GELU(), "gelu"),
    "gelu_tanh": (nn.GELU(approximate="tanh"), "gelu"),
    "silu": (nn.SiLU(), "silu"),
    "tanh": (nn.Tanh(), "tanh"),
    "sigmoid": (nn.Sigmoid(), "sigmoid"),
    "hardtanh": (nn.Hardtanh(-0.5, 0.75), "clamp"),
    "leaky_relu": (nn.LeakyReLU(0.2), "leaky_relu"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("xshape", [(1, 48), (2, 5, 48)])  # GEMV path, oneDNN path
def test_linear_activation(dtype, act, xshape):
    torch.manual_seed(0)
    mod, op = ACTS[act]
    m = LinearAct(48, 40, mod).to(dtype)
    check_fused(m, torch.randn(*xshape, dtype=dtype), absent=[op], present=["post_ops="])


class SwiGLU(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape", [(1, 32), (2, 3, 32)])
def test_swiglu_ffn_with_residual(dtype, xshape):
    torch.manual_seed(0)
    m = SwiGLU(32, 64).to(dtype)
    check_fused(m, torch.randn(*xshape, dtype=dtype), absent=["silu", "mul", "add"])


class GeluFFN(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x))) * 0.5


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_ffn_scaled_residual(dtype):
    torch.manual_seed(0)
    m = GeluFFN(32, 96).to(dtype)
    check_fused(m, torch.randn(2, 7, 32, dtype=dtype), absent=["gelu", "mul", "add"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_bias_add_and_division(dtype):
    def f(x, w, b, r):
        return torch.sigmoid((x @ w + b) / 4.0 - r)
    x, w = torch.randn(6, 16, dtype=dtype), torch.randn(16, 12, dtype=dtype)
    b, r = torch.randn(12, dtype=dtype), torch.randn(6, 12, dtype=dtype)
    check_fused(f, x, w, b, r, absent=["sigmoid", "div", "sub", "add"])


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu, conv-bn, + identity, relu."""

    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 8, 6, 6), (2, 16, 9, 7)])
def test_resnet_basic_block(dtype, shape):
    torch.manual_seed(0)
    m = BasicBlock(shape[1]).eval().to(dtype)
    text = check_fused(m, torch.randn(*shape, dtype=dtype), absent=["batch_norm", "relu", "add"])
    assert text.count("= conv(") == 2


class ConvAddRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.proj = nn.Conv2d(4, 8, 1)

    def forward(self, x):
        return F.relu6(self.conv(x) + self.proj(x)) * 2.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_plus_conv_relu6(dtype):
    torch.manual_seed(0)
    m = ConvAddRelu().to(dtype)
    check_fused(m, torch.randn(2, 4, 10, 10, dtype=dtype), absent=["add", "clamp", "mul"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d_channel_scale(dtype):
    conv = nn.Conv1d(3, 6, 3).to(dtype)
    s = torch.randn(6, 1, dtype=dtype)

    def f(x):
        return torch.tanh(conv(x) * s)
    check_fused(f, torch.randn(2, 3, 11, dtype=dtype), absent=["tanh", "mul"])


def test_not_fused_multi_use_and_broadcasting():
    lin = nn.Linear(16, 8)

    def multi(x):
        y = lin(x)
        return torch.relu(y), y  # the GEMM result is also an output

    def grow(x, r):
        return lin(x) + r  # [3, 8] + [2, 3, 8]: the add changes the shape

    def per_row(x, r):
        return lin(x) * r  # [3, 8] * [3, 1]: a broadcast the GEMM epilogue does not take
    x = torch.randn(3, 16)
    t = check_fused(multi, x, present=["= relu("])
    assert "post_ops" not in t
    t = check_fused(grow, x, torch.randn(2, 3, 8), present=["= add("])
    assert "post_ops" not in t
    t = check_fused(per_row, x, torch.randn(3, 1), present=["= mul("])
    assert "post_ops" not in t


def test_noncontiguous_and_zero_size():
    lin = nn.Linear(16, 8)
    check(lambda x, r: F.gelu(lin(x)) + r, torch.randn(16, 6).t(), torch.randn(8, 12)[:, ::2].t())
    check(lambda x, r: F.gelu(lin(x)) + r, torch.randn(0, 16), torch.randn(0, 8))


def test_fused_names_kept_for_debugging():
    m = LinearAct(16, 8, nn.GELU())
    text = graph_text(m, torch.randn(2, 16))
    assert 'fused="gelu"' in text


def test_fallback_with_default_config():
    # an op the engine does not lower (cummax) between GEMMs: default config falls back, result equals eager
    lin = nn.Linear(8, 8)

    def f(x):
        y = torch.relu(lin(x))
        return torch.cummax(y, dim=1).values + lin(y)
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    got = torch.compile(f, backend="airgraph", dynamic=False)(x)
    with torch.no_grad():
        assert_close(got, f(x))


@pytest.mark.parametrize("act", [nn.ReLU(), nn.Hardtanh(), nn.ReLU6(), nn.LeakyReLU(0.1), nn.GELU(), nn.SiLU(),
                                 nn.Sigmoid(), nn.Tanh()], ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("gemm", ["conv", "linear"])
def test_fused_activation_keeps_nan_and_inf_like_eager(act, gemm):
    # The reported case: nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()) on an input with one NaN gave 0
    # NaN outputs (oneDNN's fused ReLU/clip post-op turns NaN into 0) where eager gives 72.
    torch.manual_seed(0)
    # (eager's exact GELU gives NaN at +inf where the limit, and airgraph, give +inf: no inf for it)
    inf = float("nan") if isinstance(act, nn.GELU) else float("inf")
    if gemm == "conv":
        m = nn.Sequential(nn.Conv2d(3, 8, 3), act).eval()
        x = torch.randn(1, 3, 12, 12)
        x[0, 1, 5, 7] = float("nan")
        x[0, 2, 1, 1] = inf
    else:
        m = nn.Sequential(nn.Linear(16, 24), act).eval()
        x = torch.randn(6, 16)
        x[1, 3] = float("nan")
        x[4, 0] = inf
    want = m(x)
    got = check(m, x)  # NaN where eager has NaN (assert_close with equal_nan), everything else close
    assert int(torch.isnan(want).sum()) > 0
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))


class ConcatHead(nn.Module):
    """An FPN head (UperNet's bottleneck): four levels made by 1x1 convolutions, concatenated on channels, a 3x3
    convolution of all of them, BatchNorm, ReLU."""

    def __init__(self, part, bias):
        super().__init__()
        self.pre = nn.ModuleList(nn.Conv2d(8, part, 1) for _ in range(4))
        self.conv = nn.Conv2d(4 * part, 32, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(32)
        with torch.no_grad():
            self.bn.running_mean.normal_(), self.bn.running_var.uniform_(0.5, 2), self.bn.weight.normal_()

    def forward(self, x):
        return F.relu(self.bn(self.conv(torch.cat([p(x) for p in self.pre], 1))))


@pytest.mark.parametrize("part,bias,hw,split", [(256, False, 48, True), (256, True, 46, True), (512, True, 9, False),
                                                (128, True, 48, False)])
def test_conv_over_a_concatenation_runs_per_part(part, bias, hw, split, engine_graphs):
    """split_concat_convs: a convolution of 1024 or more concatenated channels over 2048 or more output pixels runs
    as one convolution per part, the parts' sums as residual-add epilogues and the BatchNorm and ReLU after the
    last; eager's result, with the pass and without; fewer channels or pixels keep the concatenation. A weight
    changed in place afterwards reaches the parts (each part's weights are derived from the whole)."""
    torch.manual_seed(0)
    m = ConcatHead(part, bias).eval()
    x = torch.randn(1, 8, hw, hw)
    with torch.no_grad():
        want = m(x)
        compiled = compile_native(m)
        got = compiled(x)
        off = compile_native(m, disable_passes=["split_concat_convs"])(x)
    assert_close(got, want, msg="per part vs eager")
    assert_close(off, want, msg="whole vs eager")
    kernels = [k for g in engine_graphs[:1] for _, _, k in g.exe.instructions()]
    three = [k for k in kernels if k.startswith("onednn_conv") and "nhwc_in" in k]
    assert len(three) == (4 if split else 1), kernels
    assert any(k.startswith("cat") for k in kernels) != split, kernels
    if split:
        assert sum("+ add" in k for k in three) == 3, three
        assert "by hand: relu" in three[-1] or "relu in the primitive on checked inputs" in three[-1], three
        with torch.no_grad():
            m.conv.weight[:, part:2 * part].mul_(-2.0)  # the second part's channels
            assert_close(compiled(x), m(x), msg="after a weight change")


class Bottleneck(nn.Module):
    """ResNet's bottleneck: 1x1 reduce, 3x3, 1x1 expand + BatchNorm, the residual (identity or a projection) added
    before the last ReLU, then the next block's first convolution. `keep` also returns a convolution of the residual
    (read after the block's last convolution)."""

    def __init__(self, c, mid, project, keep):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(c, mid, 1, bias=False), nn.Conv2d(mid, mid, 3, padding=1), nn.Conv2d(mid, c, 1)
        self.b3 = nn.BatchNorm2d(c)
        self.proj = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)) if project else None
        self.keep, self.post, self.post2 = keep, nn.Conv2d(c, c, 1), nn.Conv2d(c, 4, 1)
        with torch.no_grad():
            self.b3.running_mean.uniform_(-0.5, 0.5), self.b3.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = F.relu(self.pre(x)) if hasattr(self, "pre") else x
        y = self.c3(F.relu(self.c2(F.relu(self.c1(x)))))
        r = self.proj(x) if self.proj is not None else x
        out = self.post(F.relu(self.b3(y) + r))  # (the next block's convolution: the sum's result stays NHWC)
        return (out, self.post2(r)) if self.keep else out


@pytest.mark.parametrize("project,keep,stem", [(False, False, True), (True, False, False), (False, True, True),
                                               (True, True, False), (False, False, False)])
def test_residual_add_as_sum_over_the_residual(project, keep, stem, engine_graphs):
    """A convolution's residual add runs as oneDNN's sum post-op (conv_sum_operand): where the residual dies at the
    convolution, its result is computed over the residual's bytes (the memory plan's in place); where the residual
    is read again (`keep`), the convolution copies it first and leaves it intact. Eager's result; the same bits
    without the in-place plan; the input unchanged."""
    torch.manual_seed(0)
    m = Bottleneck(256, 16, project, keep).eval()  # (the sum from 256 output channels: kSumMinChannels)
    if stem:
        m.pre = nn.Conv2d(256, 256, 1)
    x = torch.randn(2, 256, 5, 6)
    x0 = x.clone()
    with torch.no_grad():
        want = m(x)
        got = compile_native(m)(x)
        graphs = list(engine_graphs)
        plain = compile_native(m, allow_inplace=False)(x)
    assert_close(got, want, msg="vs eager")
    assert torch.equal(x, x0), "the input was written"
    narrow = Bottleneck(128, 16, project, keep).eval()  # (fewer channels: the binary post-op)
    if stem:
        narrow.pre = nn.Conv2d(128, 128, 1)
    before = len(engine_graphs)
    with torch.no_grad():
        assert_close(compile_native(narrow)(x[:, :128]), narrow(x[:, :128]), msg="128 channels vs eager")
    graphs_narrow = list(engine_graphs)[before:]
    assert graphs_narrow
    for a, b in zip(got if keep else [got], plain if keep else [plain]):
        assert torch.equal(a, b), "in place vs copied: other bits"
    kernels = [k for g in graphs for _, _, k in g.exe.instructions()]
    summed = [k for k in kernels if "(add as sum)" in k]
    # (the residual the graph's input itself: row-major bytes, the add stays a binary post-op reading them)
    assert len(summed) == (1 if stem or project else 0), kernels
    assert all("by hand: relu" in k or "relu in the primitive on checked inputs" in k for k in summed), kernels
    assert not any("(add as sum)" in k for g in graphs_narrow for _, _, k in g.exe.instructions())
    inplace = sum(g.exe.stats()["inplace"] for g in graphs)
    if stem and not keep:  # (the residual, the stem's result, dies at the last convolution)
        assert inplace >= 1, kernels


class InvertedResidual(nn.Module):
    """MobileNetV2's block at a large size: a depthwise convolution, the 1x1 expansion + BatchNorm + `act`, a depthwise
    convolution, the 1x1 projection + BatchNorm, the residual added (`res`), the next block's depthwise convolution."""

    def __init__(self, c, mid, act, res):
        super().__init__()
        self.pre = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.expand, self.b1, self.act = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), act
        self.dw = nn.Conv2d(mid, mid, 3, padding=1, groups=mid)
        self.project, self.b2, self.res = nn.Conv2d(mid, c, 1), nn.BatchNorm2d(c), res
        self.post = nn.Conv2d(c, c, 3, padding=1, groups=c)
        with torch.no_grad():
            for b in (self.b1, self.b2):
                b.running_mean.uniform_(-0.5, 0.5), b.running_var.uniform_(0.5, 2.0), b.weight.uniform_(0.5, 2.0)

    def forward(self, x):
        h = self.pre(x)
        y = self.b2(self.project(self.dw(self.act(self.b1(self.expand(h))))))
        return self.post(y + h if self.res else y)


@pytest.mark.parametrize("c,mid,hw,act,res", [(16, 96, 112, nn.ReLU6(), False), (24, 144, 220, nn.Hardswish(), True),
                                              (13, 37, 170, nn.GELU(), True), (8, 20, 230, nn.ReLU6(), True),
                                              (16, 96, 40, nn.ReLU6(), True)])
def test_memory_bound_1x1_conv_runs_its_post_ops_per_block(c, mid, hw, act, res, engine_graphs):
    """A memory-bound 1x1 convolution that reads and writes much runs on the engine's own kernel (conv_pointwise.h),
    its folded BatchNorm, activation and residual add applied to each block of rows it writes: eager's result,
    NaN where eager has NaN (an activation never turns it into a number), the kernel named (its AVX2 and AVX-512
    variants: tests/cpp/test_conv_pointwise.cpp); at 40 x 40 (less than 4 MiB) oneDNN's."""
    torch.manual_seed(0)
    m = InvertedResidual(c, mid, act, res).eval()
    x = torch.randn(1, c, hw, hw)
    x[0, c // 2, hw // 3, hw // 2] = float("nan")
    with torch.no_grad():
        want = m(x)
        got = compile_native(m)(x)
    assert_close(got, want, msg="vs eager")
    assert torch.isnan(want).any() and torch.equal(torch.isnan(got), torch.isnan(want))
    kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
    pointwise = [k for k in kernels if k.startswith("pointwise_conv_float32")]
    # memory-bound 1x1 convolutions that read and write 4 MiB or more (kPointwiseMaxIntensity, kPointwiseMinBytes)
    def fits(k, o):
        return k * o <= 21 * (k + o) and (k + o) * hw * hw * 4 >= 4 << 20
    assert len(pointwise) == fits(c, mid) + fits(mid, c), kernels
    if res and fits(mid, c):
        assert "by hand: add" in pointwise[-1], pointwise


class ResidualFromInput(nn.Module):
    """A 1x1 convolution + BatchNorm whose residual is the graph input (row-major bytes while the convolution writes
    channels-last), then ReLU and a depthwise convolution."""

    def __init__(self, c):
        super().__init__()
        self.pre, self.post = nn.Conv2d(c, c, 3, padding=1, groups=c), nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.conv, self.bn = nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)

    def forward(self, x):
        return self.post(torch.relu(self.bn(self.conv(self.pre(x))) + x))


def test_memory_bound_1x1_conv_reorders_a_row_major_residual(engine_graphs):
    """The 1x1 kernel's residual add reads an operand in the other layout (the graph input, NCHW) through a
    reorder into the result's layout first, as the pass by hand does: eager's result."""
    torch.manual_seed(0)
    m, x = ResidualFromInput(16).eval(), torch.randn(1, 16, 200, 200)
    with torch.no_grad():
        assert_close(compile_native(m)(x), m(x), msg="vs eager")
    kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
    assert any(k.startswith("pointwise_conv_float32") and "by hand: add relu" in k for k in kernels), kernels


class Bottleneck3x3(nn.Module):
    """ResNet's bottleneck at a small size: 1x1 + BatchNorm + ReLU, the 3x3 (`pad`) + BatchNorm (+ the 1x1's result
    where `add`: a full-size post-op operand) + ReLU, 1x1 + BatchNorm (+ the block's input where the sizes allow)."""

    def __init__(self, c, mid, pad, add):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, padding=pad, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c)
        self.add, self.res = add, pad == 1
        with torch.no_grad():
            for b in (self.b1, self.b2, self.b3):
                b.running_mean.uniform_(-0.5, 0.5), b.running_var.uniform_(0.5, 2.0), b.weight.uniform_(0.5, 2.0)
                b.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = torch.relu(self.b1(self.c1(x)))
        m = self.b2(self.c2(h))
        m = torch.relu(m + h if self.add else m)
        y = self.b3(self.c3(m))
        return torch.relu(y + x) if self.res else y


class Special3x3(nn.Module):
    """The bottleneck's 1x1 + BatchNorm + ReLU, plus `h` (an inf planted in one channel), into its 3x3 + BatchNorm,
    then a max pool of 1 (a channels-last reader: the 3x3 writes channels-last bytes)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, h):
        m = self.m
        return F.max_pool2d(m.b2(m.c2(torch.relu(m.b1(m.c1(x))) + h)), 1)


# (channels, 3x3 channels, size, batch, padding, add, Winograd): 64-96 channels and 15-32 pixels take F(2x2, 3x3)
# (at least 12 tiles a thread); 512 channels at 7 x 7 have too few tiles for their weights and stay on oneDNN's
@pytest.mark.parametrize("c,mid,hw,batch,pad,add,wino", [(64, 64, 32, 1, 1, False, True), (96, 48, 20, 2, 1, True, True),
                                                         (64, 80, 17, 1, 0, False, True), (32, 64, 15, 1, 2, False, True),
                                                         (256, 512, 7, 1, 1, False, False)])
def test_3x3_conv_by_winograd_matches_eager_and_the_direct_conv(c, mid, hw, batch, pad, add, wino, engine_graphs,
                                                                 monkeypatch):
    """A 3x3 convolution (stride 1) between channels-last values with enough output tiles runs Winograd's F(2x2, 3x3)
    (conv_winograd.h), its folded BatchNorm, residual add and ReLU applied to each block it writes: eager's result,
    NaN where eager has NaN, eager's infs for an inf input, and the direct convolution's (AIRGRAPH_WINOGRAD=0,
    oneDNN's) within the same tolerance.
    The kernel is named; odd sizes (tiles past the edge) and paddings 0-2 included (the transforms against a
    double-precision direct convolution under both instruction sets: tests/cpp/test_conv_winograd.cpp)."""
    torch.manual_seed(0)
    m = Bottleneck3x3(c, mid, pad, add).eval()
    x = torch.randn(batch, c, hw, hw)
    x[0, c // 2, hw // 3, hw // 2] = float("nan")
    monkeypatch.setenv("AIRGRAPH_WINOGRAD", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # (the tiles a thread the choice counts: the kernels are built on 2 threads)
    try:
        with torch.no_grad():
            want = m(x)
            got = compile_native(m, num_threads=2)(x)
        assert_close(got, want, msg="vs eager")
        assert torch.isnan(want).any() and torch.equal(torch.isnan(got), torch.isnan(want))
        kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
        assert sum(k.startswith("winograd_conv_float32") for k in kernels) == int(wino), kernels
        # an inf in the 3x3's input: eager's infs and NaNs, not the transforms' inf - inf (conv_winograd.h's block)
        h = torch.zeros(batch, mid, hw, hw)
        h[0, mid // 3, hw // 2, hw // 3] = float("inf")
        with torch.no_grad():
            special = Special3x3(m).eval()
            want_inf = special(x.nan_to_num(0.0), h)
            got_inf = compile_native(special, num_threads=2)(x.nan_to_num(0.0), h)
        assert torch.isinf(want_inf).any(), "the planted inf reached no output"
        assert_close(got_inf, want_inf, msg="an inf input vs eager")
        if wino:
            assert any(k.startswith("winograd_conv_float32") and ("add relu" if add else "relu") in k for k in kernels), kernels
            engine_graphs.clear()
            monkeypatch.setenv("AIRGRAPH_WINOGRAD", "0")
            with torch.no_grad():
                direct = compile_native(m, num_threads=2)(x)
            assert not any("winograd" in k for g in engine_graphs for _, _, k in g.exe.instructions())
            assert_close(got, direct, msg="vs the direct convolution")
    finally:
        torch.set_num_threads(threads)


class BoundedNet(nn.Module):
    """A MobileNetV2-style stack: stem convolution + BatchNorm + ReLU6, the inverted residual block (ReLU6), a
    ResNet-style 3x3 + BatchNorm + ReLU with a residual, max pooling, then a 1x1 + ReLU."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
        self.block = InvertedResidual(16, 64, nn.ReLU6(), True)
        self.conv, self.bn2 = nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.head = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        h = self.block(F.relu6(self.bn(self.stem(x))))
        h = F.max_pool2d(torch.relu(self.bn2(self.conv(h)) + h), 2)
        return torch.relu(self.head(h))


@pytest.mark.parametrize("how", ["compile", "export"])
def test_activation_in_the_primitive_on_checked_inputs(how, engine_graphs, tmp_path):
    """ReLU and clamp run inside oneDNN's convolution where value bounds (ir/value_bounds.h) prove its values finite
    once the call's inputs are checked finite and within 1e6: eager's result there; a call with NaN, inf or a value
    past 1e6 runs the exact primitive and gives eager's NaN and inf exactly where eager has them (oneDNN's clip would
    turn NaN into 0); the next ordinary call is fused again. Under torch.compile and an exported file."""
    torch.manual_seed(0)
    m = BoundedNet().eval()
    x = torch.randn(2, 3, 40, 40)
    with torch.no_grad():
        if how == "compile":
            f = compile_native(m)
        else:
            airgraph.export(m, (x,), str(tmp_path / "m.agraph"))
            f = airgraph.load(str(tmp_path / "m.agraph"))
        assert_close(f(x), m(x), msg="checked inputs vs eager")
        for where, value in ((5, float("nan")), (700, float("inf")), (9, -float("inf")), (33, 3e6), (40, 1e6)):
            xs = x.clone()
            xs.view(-1)[where] = value
            want, got = m(xs), f(xs)
            assert torch.equal(torch.isnan(got), torch.isnan(want)), (value, torch.isnan(want).sum())
            assert torch.equal(torch.isinf(got), torch.isinf(want)), value
            ok = torch.isfinite(want)
            assert_close(got[ok], want[ok], msg=f"finite results with {value} in the input")
            if value != value:
                assert torch.isnan(want).any()
        assert_close(f(x), m(x), msg="checked again")
    if how == "compile":
        kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
        in_prim = [k for k in kernels if "in the primitive on checked inputs" in k]
        # the stem, the block's expansion and depthwise (clamp), the 3x3 with its residual and the head (relu)
        assert sum("clamp in the primitive" in k for k in in_prim) >= 2, kernels
        assert sum("relu in the primitive" in k for k in in_prim) >= 1, kernels


def test_no_activation_in_the_primitive_without_a_bound(engine_graphs):
    """Where nothing is proven the activation stays by hand: a weight holding inf (its result may be NaN: inf - inf),
    weights so large that the bound passes 1e30, and everything after them; results as eager's, NaN included."""
    torch.manual_seed(0)
    for scale, poison in ((1.0, float("inf")), (1e28, None)):
        m = BoundedNet().eval()
        with torch.no_grad():
            m.stem.weight.mul_(scale)
            if poison is not None:
                m.stem.weight[0, 0, 1, 1] = poison  # (the centre tap: never over the zero padding, which oneDNN skips)
        engine_graphs.clear()
        x = torch.randn(1, 3, 24, 24)
        with torch.no_grad():
            want, got = m(x), compile_native(m, cache_dir="")(x)  # (compiled afresh: the graphs are seen)
        assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(torch.isinf(got), torch.isinf(want))
        ok = torch.isfinite(want)
        assert_close(got[ok], want[ok], rtol=1e-4, msg=f"scale {scale}, poison {poison}")
        kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
        stem = [k for k in kernels if k.startswith("onednn_conv") and "nhwc_in" not in k]
        assert stem and all("in the primitive" not in k for k in stem), kernels
        if poison is not None:  # (inf in the stem: no bound anywhere after it)
            assert not any("in the primitive" in k for k in kernels), kernels
