"""Sorting, selection and scans (sort, topk, kthvalue, median, nanmedian,
cumprod, cummax, cummin, logcumsumexp) against eager."""
import pytest
import torch
from conftest import check

DTYPES = [torch.float32, torch.bfloat16, torch.int64]


def rnd(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-5, 5, shape, dtype=dtype)  # many ties


def with_nans(x):
    x = x.clone()
    if x.dtype.is_floating_point:
        x.view(-1)[::7] = float("nan")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort(dtype):
    x = rnd(5, 7, 3, dtype=dtype)

    def f(x):
        return (torch.sort(x, stable=True), torch.sort(x, dim=1, descending=True, stable=True),
                torch.sort(x.transpose(0, 2), dim=0, stable=True), torch.sort(x[:, :1], dim=1),
                torch.argsort(x, dim=0, stable=True), torch.msort(x), torch.sort(x[0, 0, 0]))

    check(f, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_sort_nan_unstable_16bit(dtype):
    # NaN is the largest; bf16 unstable sort uses std::sort like eager (same tie order)
    x = with_nans(rnd(4, 33, dtype=dtype).round())

    def f(x):
        return torch.sort(x, stable=True), torch.sort(x, descending=True, stable=True), torch.sort(x, dim=0)[0]

    check(f, x)
    if dtype == torch.bfloat16:
        check(lambda x: torch.sort(x), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk(dtype):
    x = rnd(6, 130, dtype=dtype)
    if dtype.is_floating_point:
        x = with_nans(x.round())  # ties and NaN

    def f(x):
        return (torch.topk(x, 3), torch.topk(x, 2, largest=False), torch.topk(x, 100, dim=1),
                torch.topk(x, 4, dim=0, largest=False), torch.topk(x[:, :5], 5, sorted=True), torch.topk(x, 0))

    check(f, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kthvalue_median(dtype):
    x = rnd(5, 9, 4, dtype=dtype)
    if dtype.is_floating_point:
        x = x.round()  # ties

    def f(x):
        return (torch.kthvalue(x, 3, dim=1), torch.kthvalue(x, 1, 0, keepdim=True), torch.kthvalue(x, 4),
                torch.median(x, 1), torch.median(x, -1, keepdim=True), torch.median(x),
                torch.nanmedian(x, 0), torch.nanmedian(x), torch.median(x[0, :1], 0))

    check(f, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_median_nan(dtype):
    x = with_nans(rnd(4, 10, dtype=dtype))
    x[2] = float("nan")

    def f(x):
        return torch.median(x, 1), torch.nanmedian(x, 1), torch.median(x), torch.nanmedian(x), torch.nanmedian(x[:, 1:])

    check(f, x)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int32])
def test_cumulative(dtype):
    x = rnd(4, 6, 5, dtype=dtype)
    if dtype.is_floating_point:
        x = with_nans(x.round())

    def f(x):
        out = (torch.cumprod(x, 1), torch.cummax(x, 0), torch.cummin(x, 2), torch.cummax(x.transpose(0, 1), 2),
               torch.cumprod(x[0, 0], 0))
        if x.dtype.is_floating_point:
            out += (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0))
        else:
            out += (torch.cumprod(x, -1, dtype=torch.float32),)
        return out

    check(f, x)


def test_logcumsumexp_infinities():
    x = torch.tensor([[float("-inf"), float("-inf"), 1.0, float("inf"), 2.0, float("inf"), float("nan"), 3.0]])
    check(lambda x: torch.logcumsumexp(x, 1), x)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_mode(dtype):
    x = torch.randint(0, 3, (4, 9, 5)).to(dtype)

    def f(x):
        return torch.mode(x, 1), torch.mode(x, 0, keepdim=True), torch.mode(x), torch.mode(x[:, :1], 1)

    check(f, x)
