"""Functions that write their inputs (a static KV cache's index_copy_, slice assignment, in-place
arithmetic on a buffer, BatchNorm's running stats in train mode), compiled as users do. AOTAutograd
keeps an inference graph's input mutations in the graph; the engine makes them in the input's own
memory when nothing reads the old value afterwards (no copy of the whole cache per call), and
copies the new value back otherwise. Either way the inputs must end up exactly as eager leaves them."""
import pytest
import torch

import airgraph
from airgraph.backend import collect_reports


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)), dynamic=False)


def _in_place_writes(reps) -> int:
    """Outputs computed in an input's memory, over every engine program compiled."""
    return sum(1 for r in reps for g in r.graphs for root, *_ in g.exe.layout()["outputs"] if root < 0)


def _check(fn, make_args, calls=3):
    """Runs fn compiled and eagerly on equal copies of the arguments, `calls` times in a row (the
    state carries over, as a cache does), and compares the outputs and every argument after each."""
    comp = _compile(fn)
    want_args, got_args = make_args(), make_args()
    ptrs = [a.data_ptr() for a in got_args if isinstance(a, torch.Tensor)]
    with torch.no_grad(), collect_reports() as reps:
        for _ in range(calls):
            want, got = fn(*want_args), comp(*got_args)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            for i, (a, b) in enumerate(zip(got_args, want_args)):
                if isinstance(a, torch.Tensor):
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"argument {i}: {m}")
    assert [a.data_ptr() for a in got_args if isinstance(a, torch.Tensor)] == ptrs  # written where it lives
    assert all(n.native for r in reps for n in r.nodes)
    return reps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_kv_cache_index_copy_is_made_in_place(dtype):
    def step(k_cache, v_cache, pos, k, v, q):
        k_cache.index_copy_(2, pos, k)
        v_cache.index_copy_(2, pos, v)
        return torch.nn.functional.scaled_dot_product_attention(q, k_cache, v_cache)

    g = torch.Generator().manual_seed(0)

    def args():
        g.manual_seed(0)
        return (torch.zeros(1, 2, 16, 8, dtype=dtype), torch.zeros(1, 2, 16, 8, dtype=dtype), torch.tensor([5]),
                torch.randn(1, 2, 1, 8, generator=g).to(dtype), torch.randn(1, 2, 1, 8, generator=g).to(dtype),
                torch.randn(1, 2, 1, 8, generator=g).to(dtype))

    reps = _check(step, args)
    assert _in_place_writes(reps) == 2  # both caches, in their own memory


def test_slice_assignment_and_counter_in_place():
    def step(cache, count, x):
        cache[:, 3:5] = x * 2
        count.add_(1)
        return cache.sum(dim=1) + count

    def args():
        return torch.arange(24.0).reshape(4, 6), torch.zeros((), dtype=torch.float32), torch.ones(4, 2)

    reps = _check(step, args)
    assert _in_place_writes(reps) == 2


def test_non_contiguous_written_input_is_copied_back():
    def step(cache, x):
        cache.mul_(0.5).add_(x)
        return cache.sum()

    def args():
        return torch.arange(32.0).reshape(8, 4).t(), torch.ones(4, 8)  # a transposed cache

    _check(step, args)


def test_written_input_of_another_dtype():
    def step(acc, x):
        acc.copy_(x * 3)  # float64 values into a float32 buffer
        return acc + 1

    def args():
        return torch.zeros(5), torch.linspace(0, 1, 5, dtype=torch.float64)

    _check(step, args)


def test_batchnorm_train_mode_running_stats_under_no_grad():
    torch.manual_seed(0)
    bn_want = torch.nn.BatchNorm1d(6).train()
    bn_got = torch.nn.BatchNorm1d(6).train()
    comp = _compile(bn_got)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 6, generator=g)
            torch.testing.assert_close(comp(x), bn_want(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn_got.running_mean, bn_want.running_mean)
    torch.testing.assert_close(bn_got.running_var, bn_want.running_var)
    assert int(bn_got.num_batches_tracked) == 3
