"""Scatters (scatter, scatter_add, scatter_reduce, index_add/copy/fill/reduce,
put, take) against eager."""
import pytest
import torch
from conftest import check, compile_native

DTYPES = [torch.float32, torch.bfloat16, torch.int64]


def rnd(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-9, 9, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter(dtype):
    x = rnd(5, 6, 3, dtype=dtype)
    src = rnd(4, 6, 3, dtype=dtype)
    i0 = torch.randint(0, 5, (3, 4, 2))  # repeats: the last write wins, like eager
    i2 = torch.randint(0, 3, (5, 6, 2))

    def f(x, src, i0, i2):
        return (torch.scatter(x, 0, i0, src), torch.scatter(x, -1, i2, src[:1].expand(5, 6, 3)),
                torch.scatter(x, 0, i0, 2.0 if x.dtype.is_floating_point else 2),
                torch.scatter(x, 2, i2.int(), x.flip(1).transpose(0, 1).transpose(0, 1)),
                torch.scatter(x, 0, i0[:, :0], src))

    check(f, x, src, i0, i2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    x = rnd(5, 7, dtype=dtype)
    src = rnd(6, 7, dtype=dtype)
    i = torch.randint(0, 5, (6, 7))
    j = torch.randint(0, 7, (5, 3))

    def f(x, src, i, j):
        return (x.scatter_reduce(0, i, src, reduce, include_self=include_self),
                x.scatter_reduce(1, j, src[:5], reduce, include_self=include_self))

    check(f, x, src, i, j, atol=0.05 if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_add_and_old_reduce(dtype):
    x = rnd(4, 5, dtype=dtype)
    src = rnd(4, 5, dtype=dtype)
    i = torch.randint(0, 4, (3, 5))

    def f(x, src, i):
        return (torch.scatter_add(x, 0, i, src), x.scatter(0, i, src, reduce="add"),
                x.scatter(0, i, src, reduce="multiply"), x.scatter(0, i, 3, reduce="add"))

    check(f, x, src, i)


def test_scatter_nan_amax():
    x = torch.tensor([1.0, float("nan"), 3.0, 0.0])
    src = torch.tensor([float("nan"), 2.0, 5.0, 1.0, -1.0])
    i = torch.tensor([0, 1, 2, 2, 3])

    def f(x, src, i):
        return x.scatter_reduce(0, i, src, "amax"), x.scatter_reduce(0, i, src, "amin", include_self=False)

    check(f, x, src, i)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_family(dtype):
    x = rnd(5, 4, 3, dtype=dtype)
    src = rnd(5, 6, 3, dtype=dtype)
    i = torch.tensor([3, 0, 3, 1, 2, 0])

    def f(x, src, i):
        return (x.index_add(1, i[:4], src[:, :4]), x.index_add(0, i[:2], src[:2, :4], alpha=2),
                x.index_copy(1, torch.tensor([2, 0, 1, 3]), src[:, :4]),
                x.index_fill(2, i[:2] % 3, 7), x.index_fill(0, i, -1),
                x.index_reduce(1, i, src, "prod"), x.index_reduce(1, i, src, "amax", include_self=False),
                x.index_reduce(1, i, src, "mean"), x.index_reduce(1, i, src, "amin"))

    check(f, x, src, i, atol=0.05 if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_put_take(dtype):
    x = rnd(3, 5, dtype=dtype)
    src = rnd(2, 3, dtype=dtype)
    i = torch.tensor([[0, -1, 7], [14, 3, 7]])

    def f(x, src, i):
        return torch.take(x, i), x.put(i, src, accumulate=True), x.put(i[:, :2], src[:, :2]), torch.take(x, i[0])

    check(f, x, src, i)


def test_scatter_out_of_range():
    fn = compile_native(lambda x, i, s: x.scatter_add(0, i, s) * 2)
    x, s = torch.zeros(4, 2), torch.ones(2, 2)
    torch.testing.assert_close(fn(x, torch.tensor([[0, 1], [3, 3]]), s), x.scatter_add(0, torch.tensor([[0, 1], [3, 3]]), s) * 2)
    with pytest.raises(Exception, match="index 4 out of range for dimension 0 with size 4"):
        fn(x, torch.tensor([[0, 1], [4, 0]]), s)
    with pytest.raises(Exception, match="out of range"):
        fn(x, torch.tensor([[0, -1], [1, 0]]), s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_scatter(dtype):
    x, src = rnd(4, 5, dtype=dtype), rnd(30, dtype=dtype)
    m = torch.rand(4, 5) > 0.5

    def f(x, m, src):
        return x.masked_scatter(m, src), x.masked_scatter(m[:1], src[:25].view(5, 5)), x[:1].masked_scatter(m, src)

    check(f, x, m, src)


def test_index_family_0d():
    x, s = torch.tensor(1.5), torch.tensor(-2.0)
    i = torch.tensor([0])

    def f(x, s, i):
        return (x.index_add(0, i, s, alpha=2), x.index_copy(0, i, s), x.index_fill(0, i, 3.0),
                x.index_reduce(0, i, s, "amax", include_self=False), x.index_reduce(0, i, s, "mean"))

    check(f, x, s, i)
