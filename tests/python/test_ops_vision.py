"""vision family: transposed convolution, interpolation, group norm and a UNet-style decoder,
each compiled with fallback disabled and compared with eager."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import airgraph
from conftest import check, compile_native

DTYPES = [torch.float32, torch.bfloat16]


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


# ----------------------------------------------------------------------------- conv_transpose
DECONVS = [  # module, kwargs, input shape
    (nn.ConvTranspose1d, dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, output_padding=1),
     (2, 4, 9)),
    (nn.ConvTranspose1d, dict(in_channels=4, out_channels=2, kernel_size=4, stride=3, groups=2, bias=False), (1, 4, 5)),
    (nn.ConvTranspose2d, dict(in_channels=4, out_channels=8, kernel_size=2, stride=2), (1, 4, 5, 7)),
    (nn.ConvTranspose2d, dict(in_channels=6, out_channels=4, kernel_size=3, stride=2, padding=1, output_padding=1,
                              groups=2), (2, 6, 5, 6)),
    # output_padding > padding: the border no input reaches is the bias
    (nn.ConvTranspose2d, dict(in_channels=3, out_channels=5, kernel_size=3, stride=(2, 3), output_padding=(1, 2),
                              dilation=(1, 2)), (1, 3, 4, 5)),
    (nn.ConvTranspose2d, dict(in_channels=3, out_channels=5, kernel_size=(1, 3), dilation=2, bias=False), (1, 3, 1, 4)),
    (nn.ConvTranspose3d, dict(in_channels=2, out_channels=3, kernel_size=3, stride=2, padding=1, output_padding=1),
     (1, 2, 3, 4, 3)),
    (nn.ConvTranspose2d, dict(in_channels=3, out_channels=4, kernel_size=3), (0, 3, 4, 4)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls,kw,shape", DECONVS)
def test_conv_transpose_module(dtype, cls, kw, shape):
    torch.manual_seed(0)
    m = cls(**kw).to(dtype)
    check(m, r(*shape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_transpose_weights_as_inputs(dtype):
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
          r(2, 4, 5, 6, dtype=dtype), r(4, 3, 3, 3, dtype=dtype), r(6, dtype=dtype))
    check(lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1), r(1, 3, 7, dtype=dtype),
          r(3, 2, 2, dtype=dtype))


def test_conv_transpose_noncontiguous_and_unbatched():
    check(lambda x, w: F.conv_transpose2d(x.permute(0, 3, 1, 2), w, stride=2), r(1, 5, 6, 3), r(3, 4, 2, 2))
    check(lambda x, w: F.conv_transpose2d(x, w, padding=1), r(3, 5, 6), r(3, 2, 3, 3))


# ----------------------------------------------------------------------------- interpolate
INTERP = [  # input shape, kwargs
    ((2, 3, 5, 6), dict(scale_factor=2, mode="nearest")),
    ((1, 2, 5, 7), dict(size=(9, 4), mode="nearest")),
    ((1, 2, 5, 7), dict(scale_factor=(1.7, 0.6), mode="nearest")),
    ((1, 2, 5, 7), dict(size=(11, 3), mode="nearest-exact")),
    ((2, 3, 11), dict(scale_factor=1.5, mode="nearest")),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 5, 6), dict(scale_factor=2, mode="bilinear")),
    ((1, 2, 5, 7), dict(size=(9, 4), mode="bilinear", align_corners=True)),
    ((1, 2, 5, 7), dict(size=(1, 13), mode="bilinear", align_corners=True)),
    ((1, 2, 6, 7), dict(scale_factor=0.7, mode="bilinear", recompute_scale_factor=True)),
    ((1, 2, 6, 7), dict(scale_factor=1.3, mode="bilinear")),
    ((2, 3, 11), dict(scale_factor=2, mode="linear")),
    ((2, 3, 11), dict(size=6, mode="linear", align_corners=True)),
    ((1, 2, 3, 4, 5), dict(size=(5, 3, 8), mode="trilinear")),
    ((1, 2, 5, 6), dict(scale_factor=2, mode="bicubic")),
    ((1, 2, 5, 6), dict(size=(7, 3), mode="bicubic", align_corners=True)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kw", INTERP)
def test_interpolate(shape, kw, dtype):
    x = r(*shape, dtype=dtype)
    check(lambda x: F.interpolate(x, **kw), x)


def test_interpolate_modules_and_noncontiguous():
    x = r(1, 6, 5, 3).permute(0, 3, 1, 2)
    check(nn.Upsample(scale_factor=2, mode="nearest"), x)
    check(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), x)
    check(nn.UpsamplingBilinear2d(scale_factor=2), r(1, 2, 3, 4))
    check(lambda x: F.interpolate(x, scale_factor=3, mode="nearest"), torch.randint(0, 255, (1, 2, 3, 4)).to(torch.uint8))


RESIZE = [  # input shape, kwargs: every case runs as one resize2d node (upscale, downscale, odd sizes)
    ((2, 3, 7, 9), dict(scale_factor=2, mode="bilinear")),
    ((1, 4, 13, 11), dict(size=(5, 4), mode="bilinear")),
    ((1, 4, 13, 11), dict(size=(5, 17), mode="bilinear", align_corners=True)),
    ((1, 2, 6, 7), dict(scale_factor=(1.7, 0.6), mode="bilinear")),  # the scales, not in/out, set the coordinates
    ((1, 2, 6, 7), dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 7, 9), dict(scale_factor=2, mode="nearest")),
    ((1, 2, 6, 7), dict(scale_factor=(1.7, 0.6), mode="nearest")),
    ((1, 2, 13, 11), dict(size=(5, 4), mode="nearest-exact")),
    ((1, 2, 5, 7), dict(scale_factor=1.5, mode="nearest-exact")),
    ((1, 2, 7, 9), dict(scale_factor=2, mode="bicubic")),
    ((1, 2, 13, 11), dict(size=(6, 4), mode="bicubic", align_corners=True)),
    ((1, 2, 5, 6), dict(scale_factor=(2.3, 1.6), mode="bicubic")),
]


def _resize_ops(graphs):
    """(engine op, kernel) of every instruction of `graphs` (a symbolic graph's: of each size's program)."""
    progs = [p for g in graphs for p in (g.programs.values() if hasattr(g, "programs") else [g])]
    return [(op, k) for p in progs for _, op, k in p.exe.instructions()]


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kw", RESIZE)
def test_interpolate_runs_native_resize(shape, kw, dtype, channels_last, engine_graphs):
    """F.interpolate's 2-D modes are one resize2d node (no gathers) and match eager, channels-last
    inputs too."""
    x = r(*shape, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    check(lambda x: F.interpolate(x, **kw), x)
    ops = _resize_ops(engine_graphs)
    assert [op for op, _ in ops] == ["resize2d"], ops


def test_interpolate_native_dynamic_and_uint8(engine_graphs):
    """Symbolic sizes (one trace, a program per size) and uint8 nearest run resize2d; float64
    bilinear keeps the decomposed gathers (resize2d does not take it) and still matches."""
    f = torch.compile(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), backend="airgraph", dynamic=True)
    with torch.no_grad():
        for shape in [(1, 3, 5, 7), (2, 3, 8, 6), (1, 1, 3, 11)]:
            x = r(*shape)
            torch.testing.assert_close(f(x), F.interpolate(x, scale_factor=2, mode="bilinear"))
    assert {op for op, _ in _resize_ops(engine_graphs)} == {"resize2d"}
    engine_graphs.clear()
    u8 = torch.randint(0, 255, (1, 3, 7, 9), dtype=torch.uint8)
    check(lambda x: F.interpolate(x, size=(11, 4), mode="nearest"), u8)
    assert [op for op, _ in _resize_ops(engine_graphs)] == ["resize2d"]
    engine_graphs.clear()
    check(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), r(1, 2, 5, 6).double())
    ops = [op for op, _ in _resize_ops(engine_graphs)]
    assert "resize2d" not in ops and "index" in ops, ops


def test_interpolate_ops_called_directly_and_exported(tmp_path, engine_graphs):
    """The ATen overloads called by name: .default (a size and its own scales) decomposes into
    gathers as before, .vec (what F.interpolate calls) runs resize2d; so does F.interpolate in an
    exported program (torch.export's .vec)."""
    x = r(2, 3, 5, 7)
    check(lambda x: torch.ops.aten.upsample_bilinear2d.default(x, [9, 15], False, 1.9, 2.2), x)
    assert "resize2d" not in {op for op, _ in _resize_ops(engine_graphs)}
    engine_graphs.clear()
    check(lambda x: torch.ops.aten.upsample_nearest2d.vec(x, None, [1.5, 2.5]), x)
    assert [op for op, _ in _resize_ops(engine_graphs)] == ["resize2d"]

    class M(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)

    path = str(tmp_path / "m.airgraph")
    airgraph.export(M(), (x,), path)
    loaded = airgraph.load(path)
    torch.testing.assert_close(loaded(x), M()(x))
    assert [op for _, op in loaded.graph.node_ops()] == ["resize2d"], loaded.graph.node_ops()


# ----------------------------------------------------------------------------- group norm
@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((1, 4, 9), 4), ((3, 8, 2, 3, 2), 1), ((2, 10, 1, 1), 5)])
def test_group_norm(shape, groups, dtype):
    torch.manual_seed(0)
    m = nn.GroupNorm(groups, shape[1]).to(dtype)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    x = r(*shape, dtype=dtype) * 3 + 1
    check(m, x)
    check(lambda x: F.group_norm(x, groups, eps=1e-3), x)


def test_group_norm_mixed_params_and_noncontiguous():
    torch.manual_seed(0)
    x = r(2, 8, 6, 5)
    w, b = r(8), r(8)
    check(lambda x, w, b: F.group_norm(x.transpose(2, 3), 4, w, b), x, w, b)
    check(lambda x, w: F.group_norm(x, 2, w), x, w)


# ----------------------------------------------------------------------------- a UNet-style decoder
class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.enc2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
        self.mid = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.dec1 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec2 = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU())
        self.up3 = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        m = self.mid(e2)
        d1 = self.dec1(torch.cat([self.up1(m), e2], 1))
        d2 = self.dec2(torch.cat([self.up2(d1), e1], 1))
        return self.head(self.up3(d2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_unet_decoder(dtype):
    torch.manual_seed(0)
    m = Decoder().eval().to(dtype)
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == torch.bfloat16 else {}
    check(m, r(2, 3, 16, 12, dtype=dtype), **tol)


class FpnHead(nn.Module):
    """UperNet's decoder in small: lateral 1x1 convs, top-down upsample-and-add, a 3x3 conv per
    level, every level upsampled to the finest and concatenated, a fusing conv; a ConvNeXt-style
    residual add in the backbone and a spatial mean beside the logits."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.lat = nn.ModuleList([nn.Conv2d(8, 12, 1), nn.Conv2d(16, 12, 1)])
        self.fpn = nn.ModuleList([nn.Sequential(nn.Conv2d(12, 12, 3, padding=1), nn.ReLU()) for _ in range(2)])
        self.fuse = nn.Sequential(nn.Conv2d(24, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU())
        self.head = nn.Conv2d(12, 5, 1)

    def forward(self, x):
        c1 = self.stem(x)
        c1 = c1 + self.dw(c1) * 0.5
        c2 = self.down(c1)
        l1, l2 = self.lat[0](c1), self.lat[1](c2)
        l1 = l1 + F.interpolate(l2, size=l1.shape[2:], mode="bilinear", align_corners=False)
        p1, p2 = self.fpn[0](l1), self.fpn[1](l2)
        p2 = F.interpolate(p2, size=p1.shape[2:], mode="bilinear", align_corners=False)
        f = self.fuse(torch.cat([p1, p2], 1))
        return self.head(f), f.mean((2, 3))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fpn_head_runs_channels_last(dtype, channels_last, engine_graphs):
    """The decoder's upsamplings, adds and concatenation run on the convolutions' channels-last
    bytes (their kernels say "[channels-last]"), with at most a conversion at a region's edge, and
    the model matches eager for either memory format of the input and weights."""
    torch.manual_seed(0)
    m = FpnHead().eval().to(dtype)
    with torch.no_grad():
        m.fuse[1].running_mean.uniform_(-0.5, 0.5)
        m.fuse[1].running_var.uniform_(0.5, 2.0)
    x = r(2, 3, 16, 12, dtype=dtype)
    if channels_last:  # as PyTorch's CPU performance guide has it: the model's weights and the input
        m = m.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == torch.bfloat16 else {}
    check(m, x, **tol)
    kernels = [k for _, _, k in (i for g in engine_graphs for i in g.exe.instructions())]
    clear = [k for k in kernels if k.endswith("[channels-last]")]
    assert any(k.startswith("resize2d_bilinear_nhwc") for k in clear), kernels
    assert any(k.startswith("cat") for k in clear), kernels
    assert sum("nhwc->nchw" in k or "nchw->nhwc" in k for k in kernels) <= 2, kernels


# ----------------------------------------------------------------------------- pad modes, pixel shuffle
PADS = [  # input shape, pad
    ((2, 3, 7), (2, 3)),
    ((3, 7), (0, 6)),
    ((2, 3, 5, 6), (1, 2, 3, 4)),
    ((1, 2, 5, 6), (-1, 2, 0, 1)),
    ((1, 2, 3, 4, 5), (1, 1, 2, 0, 2, 2)),
]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", PADS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_modes(shape, pad, mode, dtype):
    x = r(*shape, dtype=dtype)
    check(lambda x: F.pad(x, pad, mode=mode), x)


def test_pad_modes_int_and_noncontiguous():
    check(lambda x: F.pad(x, (2, 1, 1, 2), mode="replicate"), torch.randint(0, 9, (1, 2, 4, 5)))
    check(lambda x: F.pad(x.transpose(2, 3), (2, 1, 1, 2), mode="reflect"), r(1, 2, 4, 5))
    check(nn.ReflectionPad2d(2), r(1, 3, 4, 4))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
@pytest.mark.parametrize("shape,f", [((1, 8, 3, 5), 2), ((2, 3, 9, 2, 1), 3), ((18, 1, 4), 3)])
def test_pixel_shuffle(shape, f, dtype):
    x = (torch.randn(*shape) * 10).to(dtype)
    check(lambda x: F.pixel_shuffle(x, f), x)
    y = F.pixel_shuffle(x, f)
    check(lambda y: F.pixel_unshuffle(y, f), y)
    check(lambda y: F.pixel_unshuffle(y.transpose(-1, -2), f), y.transpose(-1, -2).contiguous())


@pytest.mark.parametrize("dtype", DTYPES)
def test_instance_norm(dtype):
    torch.manual_seed(0)
    x = r(2, 4, 5, 6, dtype=dtype) * 2 + 1
    check(nn.InstanceNorm2d(4, affine=True).to(dtype), x)
    check(lambda x: F.instance_norm(x), x)
    check(nn.InstanceNorm1d(3), r(2, 3, 7, dtype=dtype))


class PooledNet(nn.Module):
    """A classifier's tail: conv -> BN -> ReLU -> conv, a squeeze-excitation gate (x * sigmoid(fc(mean
    over H, W)), as EfficientNet's), then nn.AdaptiveAvgPool2d(1) (ATen traces a 1x1 adaptive pool as
    a mean over H and W) and a linear head."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 24, 3, stride=2, padding=1))
        self.se = nn.Conv2d(24, 24, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(24, 5)

    def forward(self, x):
        y = self.body(x)
        y = y * torch.sigmoid(self.se(y.mean((2, 3), keepdim=True)))
        return self.fc(torch.flatten(self.pool(y), 1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_spatial_means_read_channels_last(dynamic, engine_graphs):
    """A mean over H and W (the global average pool, a squeeze-excitation block's pool) reads the
    convolutions' channels-last bytes where they are ("mean_nhwc_in"): no conversion to NCHW, whether
    the sizes are static or symbolic, and eager's results at two sizes."""
    torch.manual_seed(0)
    m = PooledNet().eval()
    with torch.no_grad():
        m.body[1].running_mean.uniform_(-0.5, 0.5)
        m.body[1].running_var.uniform_(0.5, 2.0)
        torch._dynamo.reset()
        c = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)), dynamic=dynamic)
        for shape in ((2, 3, 12, 10), (1, 3, 9, 14)):
            x = r(*shape)
            torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-4)
    programs = []
    for g in engine_graphs:
        programs += list(g.programs.values()) if hasattr(g, "programs") else [g]
    assert programs
    for p in programs:
        kernels = [k for _, _, k in p.exe.instructions()]
        assert sum(k == "mean_nhwc_in" for k in kernels) == 2, kernels  # (ATen's adaptive pool to 1x1 is a mean)
        assert not any("nhwc->nchw" in k for k in kernels), kernels
