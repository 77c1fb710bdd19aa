"""Indexing ops (embedding, index_select, gather, index.Tensor) against eager."""
import pytest
import torch
import torch.nn.functional as F
from conftest import check, compile_native

DTYPES = [torch.float32, torch.bfloat16]


def rnd(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_embedding(dtype, idx_dtype):
    w = rnd(10, 8, dtype=dtype)
    idx = torch.tensor([[1, 9, 0], [3, 3, 7]], dtype=idx_dtype)

    def f(w, i):
        return F.embedding(i, w), F.embedding(i[0], w.t().t()), F.embedding(i[:, :0], w)

    check(f, w, idx)


def test_embedding_module_and_out_of_range():
    emb = torch.nn.Embedding(5, 4)
    with torch.no_grad():
        check(emb, torch.tensor([[0, 4], [2, 2]]))
        fn = compile_native(emb)
        with pytest.raises(Exception, match="index 7 out of range for 5 rows"):
            fn(torch.tensor([[0, 7], [1, 2]]))
        with pytest.raises(Exception, match="out of range"):
            fn(torch.tensor([[0, -1], [1, 2]]))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int32, torch.bool])
def test_index_select(dtype):
    x = rnd(4, 5, 3, dtype=torch.float32 if dtype == torch.bool else dtype)
    if dtype == torch.bool:
        x = x > 0
    i = torch.tensor([3, 0, 0, 2])

    def f(x, i):
        return (x.index_select(0, i), x.index_select(1, i), x.index_select(-1, i[2:]),
                x.permute(2, 0, 1).index_select(2, i.int()), x.index_select(1, i[:0]))

    check(f, x, i)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
def test_gather(dtype):
    x = rnd(3, 4, 5, dtype=dtype)
    i0 = torch.randint(0, 3, (2, 4, 5))
    i2 = torch.randint(0, 5, (3, 2, 7))

    i1 = torch.randint(0, 4, (3, 4, 2))

    def f(x, i0, i1, i2):
        return (torch.gather(x, 0, i0), torch.gather(x, 2, i2), torch.gather(x, -1, i2[:, :, :0]),
                torch.gather(x.transpose(1, 2), 1, i1), torch.gather(x, 1, i1.transpose(1, 2)),
                torch.gather(x, 1, i1.int()))

    check(f, x, i0, i1, i2)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
def test_advanced_index(dtype):
    x = rnd(4, 5, 6, dtype=dtype)
    a = torch.tensor([0, -1, 2])
    b = torch.tensor([[1], [3]])

    def f(x, a, b):
        return (x[a], x[:, a], x[:, :, a], x[a, b], x[:, a, b], x[a, :, b], x[b], x[a.int()],
                x[:, b, :], x.permute(2, 0, 1)[a], x[a[:0]], x[None, a])

    check(f, x, a, b)


def test_index_out_of_range_throws():
    def f(x, i):
        return x[:, i]

    fn = compile_native(f)
    x = torch.randn(3, 4)
    assert torch.equal(fn(x, torch.tensor([1, -4])), f(x, torch.tensor([1, -4])))
    with pytest.raises(Exception, match="out of bounds for dimension 1 with size 4"):
        fn(x, torch.tensor([1, 4]))


def test_bool_mask_falls_back():
    def f(x, m):
        return x[m].flip(0)

    x, m = torch.randn(4, 3), torch.tensor([True, False, True, True])
    torch._dynamo.reset()
    got = torch.compile(f, backend="airgraph")(x, m)
    assert torch.equal(got, f(x, m))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
def test_index_put(dtype):
    x = rnd(4, 5, 6, dtype=dtype)
    a = torch.tensor([2, -1])
    v = rnd(2, 6, dtype=dtype)

    def f(x, a, v):
        y = x.clone()
        y[:, a] = v  # values broadcast over dim 0
        z = x.clone()
        z[a, :, a] = 7
        w = x.clone()
        w[a] = v[0]
        return y, z, w

    check(f, x, a, v)
    with pytest.raises(Exception, match="out of bounds"):
        compile_native(f)(x, torch.tensor([0, 5]), v)
