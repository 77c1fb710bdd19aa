"""Many Python threads calling one compiled model at once, as a server's thread
pool does: every result must equal, bit for bit, what the same compiled model
returns to one thread alone (and match eager). The model holds every stateful
kernel kind: a conv with a folded BatchNorm and fused ReLU, a linear with a
fused GELU, scaled dot-product attention and fused elementwise chains.
"""
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

import airgraph
from airgraph import backend as ag_backend

from conftest import assert_close


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(64, 64)
        self.ln = nn.LayerNorm(64)

    def forward(self, x):
        b = x.shape[0]
        h = F.relu(self.bn(self.conv(x))).flatten(2)        # [B, 8, 64]
        h = F.gelu(self.fc(h))
        q = h.view(b, 8, 2, 32).transpose(1, 2)              # [B, 2 heads, 8, 32]
        a = F.scaled_dot_product_attention(q, q, q).transpose(1, 2).reshape(b, 8, 64)
        return self.ln(h + torch.tanh(a) * 0.5)


def _model():
    torch.manual_seed(0)
    m = Mixed().eval()
    with torch.no_grad():  # BatchNorm with non-trivial statistics, so the fold matters
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
    return m


def test_model_runs_natively():
    with ag_backend.collect_reports() as sink, torch.no_grad():
        torch.compile(_model(), backend="airgraph")(torch.randn(2, 3, 8, 8))
    rep = airgraph.ExplainReport(sink, 0)
    assert rep.total_nodes > 10 and rep.fallback_nodes == 0, rep


def test_threads_match_single_thread_bit_for_bit():
    model = _model()
    compiled = torch.compile(model, backend="airgraph")
    inputs = [torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    with torch.no_grad():
        want = [compiled(x) for x in inputs]  # one thread, the same compiled model
        for x, w in zip(inputs, want):
            assert_close(w, model(x), msg="compiled vs eager")
    assert not torch.equal(want[0], want[1])

    n_threads, n_calls = 8, 1000
    bad, done, errors = [0] * n_threads, [0] * n_threads, []
    start = threading.Barrier(n_threads)

    def worker(t):
        try:
            start.wait()
            with torch.no_grad():
                for c in range(n_calls):
                    i = (t + c) % len(inputs)
                    if not torch.equal(compiled(inputs[i]), want[i]):
                        bad[t] += 1
                    done[t] += 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert sum(done) == n_threads * n_calls
    assert sum(bad) == 0, f"{sum(bad)} of {sum(done)} concurrent results differ from the single-threaded ones"


def test_a_model_with_its_own_thread_count_leaves_the_callers_alone():
    # CompilerConfig(num_threads=k) applies to the engine's call only: the calling thread's torch
    # thread count (which Dynamo's guards also read) is the same after the call
    before = torch.get_num_threads()
    k = before + 3
    f = torch.compile(lambda x: x * 2 + 1, backend=airgraph.get_backend(airgraph.CompilerConfig(num_threads=k)))
    x = torch.randn(64)
    for _ in range(3):  # the checked call, then the thin path
        torch.testing.assert_close(f(x), x * 2 + 1)
        assert torch.get_num_threads() == before


def _hammer(fn, args_of, threads=4, calls=50):
    """Calls fn(*args_of(t, k)) from `threads` threads at once, `calls` times each; re-raises the
    first error a thread met."""
    errors, start = [], threading.Barrier(threads)

    def work(t):
        try:
            start.wait()
            with torch.no_grad():
                for k in range(calls):
                    fn(*args_of(t, k))
        except BaseException as e:  # noqa: BLE001 (handed to the test thread)
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def test_call_counts_are_exact_under_threads():
    """The per-call state of a compiled graph (its call counter, the thin path's guard) is safe
    under threads: no call is lost, whichever path each takes."""
    w = torch.randn(16, 16)
    with ag_backend.collect_reports() as sink:
        c = torch.compile(lambda x: torch.relu(x @ w) + 1, backend="airgraph")
        x = torch.randn(4, 16)
        with torch.no_grad():
            c(x)
        _hammer(c, lambda t, k: (x,), threads=4, calls=200)
    (eg,) = [g for r in sink for g in r.graphs]
    assert eg.calls == 1 + 4 * 200, eg.calls


def test_new_sizes_from_many_threads_build_each_program_once():
    """A graph with symbolic sizes called from several threads with sizes it has not seen: each
    size's program is built once (the per-size cache builds under its lock) and every result is
    right."""
    w = torch.randn(8, 8)
    sizes = [3, 5, 7, 9, 11, 13]
    xs = {n: torch.randn(n, 8, generator=torch.Generator().manual_seed(n)) for n in sizes}
    be = airgraph.get_backend(airgraph.CompilerConfig())
    with ag_backend.collect_reports() as sink:
        c = torch.compile(lambda x: torch.tanh(x @ w), backend=be, dynamic=True)
        with torch.no_grad():
            c(torch.randn(2, 8))  # the trace (size 2)
        results = {}

        def call(t, k):
            n = sizes[(t + k) % len(sizes)]
            return (xs[n],)

        def checked(x):
            out = c(x)
            results.setdefault(x.shape[0], []).append(out)

        _hammer(checked, call, threads=4, calls=24)
    (seg,) = [g for r in sink for g in r.symbolic]
    assert sorted(k[0] for k in seg.programs.keys()) == [2] + sizes
    assert len(seg.build_ms) == 1 + len(sizes), seg.build_ms  # the traced size, then each new one once
    assert sorted(results) == sizes
    for n, outs in results.items():
        for out in outs:
            torch.testing.assert_close(out, torch.tanh(xs[n] @ w))
