"""Separable gathers: the index kernel's separable path (every index tensor varies along one
dim of the index shape) and fuse_gathers (such a gather read inside the fused_elementwise node
it feeds). Each result is compared with eager and, exactly, with the pass switched off."""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close, compile_native
from test_fusion_elementwise import graph_text, same

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def run(fn, *inputs, gathers_fused=None):
    with torch.no_grad():
        want = fn(*inputs)
        got = compile_native(fn)(*inputs)
        off = compile_native(fn, disable_passes=["fuse_gathers"])(*inputs)
    assert_close(got, want, None, None, msg="engine vs eager")
    same(got, off, "fuse_gathers on vs off")
    if gathers_fused is not None:
        text = graph_text(fn, *inputs)
        left = text.count("= index(")
        assert ("gathers=" in text) == gathers_fused, text
        if gathers_fused:
            assert left == 0, text
    return got


# F.interpolate's 2-D modes run as one resize2d node (test_ops_vision.py); their decompositions,
# called directly, are the 2-D gathers this pass fuses (as a hand-written interpolation makes them)
_D = torch._decomp.decompositions
INTERP = [  # shape, fn
    ((2, 3, 5, 7), lambda x: _D.upsample_bilinear2d(x, [10, 14], False)),
    ((2, 3, 5, 7), lambda x: _D.upsample_bilinear2d(x, [9, 4], True)),
    ((1, 4, 6, 6), lambda x: _D.upsample_bicubic2d_default(x, [12, 12], False)),
    ((1, 2, 3, 4, 5), lambda x: F.interpolate(x, size=(5, 3, 7), mode="trilinear", align_corners=False)),
    ((2, 3, 11), lambda x: F.interpolate(x, scale_factor=1.5, mode="linear", align_corners=False)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,fn", INTERP)
def test_interpolate_gathers_fused(shape, fn, dtype):
    torch.manual_seed(0)
    run(fn, torch.randn(*shape).to(dtype), gathers_fused=True)


@pytest.mark.parametrize("dtype", DTYPES + [torch.uint8])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(7, 3)), dict(scale_factor=2, mode="nearest-exact")])
def test_nearest_separable_index(kw, dtype):
    x = torch.arange(2 * 3 * 5 * 4).reshape(2, 3, 5, 4).to(dtype)
    run(lambda x: F.interpolate(x, **kw), x, gathers_fused=False)  # one resize2d node, no gather
    x1 = torch.arange(2 * 3 * 5).reshape(2, 3, 5).to(dtype)  # 1-D nearest: one gather, nothing to fuse into
    run(lambda x: F.interpolate(x, **kw if "size" not in kw else dict(size=7)), x1, gathers_fused=False)


def test_separable_shapes():
    x = torch.randn(3, 5, 6)
    ih = torch.tensor([4, 0, -1, 2])[:, None]
    iw = torch.tensor([1, 1, 5])
    run(lambda x: x[:, ih, iw] * 2 + 1, x, gathers_fused=True)          # fused, negative indices
    run(lambda x: x[:, ih, iw], x, gathers_fused=False)                  # separable index kernel alone
    i0 = torch.tensor([2, 0, -1])[:, None]
    run(lambda x: x[i0[:, :, None], ih[None, :, 0], :2], x)                 # rest dims after the index dims
    run(lambda x: x[1:, :, iw] * 3 - 1, x, gathers_fused=True)               # one index tensor, last dim
    run(lambda x: x[:, ih, iw[None, :]] * 2 - 1, x, gathers_fused=True)      # broadcast in both
    run(lambda x: x[:, ih, ih] * 2 + 1, x, gathers_fused=True)               # two index tensors along one dim
    i2 = torch.tensor([[0, 1, 2], [2, 1, 0]])                            # varies along two dims: not separable
    run(lambda x: x[:, i2, iw] * 2 + 1, x, gathers_fused=False)
    run(lambda x: x[i0, :, iw] * 2 + 1, x, gathers_fused=False)              # not adjacent
    run(lambda x: x[:, ih] * 2 + 1, x, gathers_fused=False)                  # not on the trailing dims: index kernel
    run(lambda x: x[:, :, torch.tensor([5, 4, 3, 2, 1, 0])] * 2 + 1, x, gathers_fused=False)  # same size as x
    y = torch.randn(3, 5, 6, dtype=torch.float64)
    run(lambda y: y[:, ih, iw] * 2 + 1, y, gathers_fused=False)             # float64 is not fused


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.bool])
def test_separable_index_int_dtypes(dtype):
    x = torch.arange(4 * 5 * 6).reshape(4, 5, 6).to(dtype)
    ih = torch.tensor([4, 0, -1, 2], dtype=torch.int32)[:, None]
    iw = torch.tensor([1, 1, 5, 0, 0])
    run(lambda x: x[:, ih, iw], x, gathers_fused=False)
    run(lambda x: x[1:3, :, iw], x, gathers_fused=False)


def test_gathered_value_also_read_elsewhere():
    x = torch.randn(2, 4, 4)
    iw = torch.tensor([3, 3, 0, 1, 2, 2, 1])
    run(lambda x: (x[:, :, iw] * 2 + 1, x[:, :, iw].sum()), x)


def test_gather_index_out_of_range_still_raises():
    import airgraph
    x = torch.randn(2, 4, 4)

    def f(x, i):
        return x[:, :, i] * 2 + 1

    c = compile_native(f)
    with torch.no_grad():
        assert_close(c(x, torch.tensor([0, 3, -4])), f(x, torch.tensor([0, 3, -4])), None, None, msg="in range")
        with pytest.raises(Exception, match="out of bounds"):
            c(x, torch.tensor([0, 4, 1]))
