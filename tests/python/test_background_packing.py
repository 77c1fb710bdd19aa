"""Weights packed off the first call's path (base/background.h): a static graph's GEMMs run their
first calls on the weights as stored and switch to oneDNN's packed layout once they are packed (after
the first call returned: by the background thread in idle time, or a share at the end of each later
call that left it none); every call, before, during and after the switch,
from one thread or several, gives eager's answer. background_packing=False packs while compiling."""
import threading

import pytest
import torch

import airgraph
from airgraph._core import C
from airgraph.backend import collect_reports


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 16)).eval()


def _compile(m, **cfg):
    # pack_weights="always": the GEMMs of 16 rows and more (batch 33 here) read their weights in
    # place by default (nothing to pack); these tests are about packing
    torch._dynamo.reset()
    cfg.setdefault("pack_weights", "always")
    return torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir="", **cfg)), dynamic=False)


@pytest.mark.parametrize("batch", [1, 12, 33])
def test_first_calls_run_unpacked_then_packed_alike(batch):
    m, x = _model(), torch.randn(batch, 64)
    f = _compile(m)
    with torch.no_grad(), collect_reports() as sink:
        want = m(x)
        torch.testing.assert_close(f(x), want, rtol=1e-5, atol=1e-5)  # (the weights as stored)
        exe = sink[0].graphs[0].exe
        deferred, _ = exe.background_work()
        C.wait_background_idle()
        assert exe.background_work() == (deferred, 0)
        torch.testing.assert_close(f(x), want, rtol=1e-5, atol=1e-5)  # (the packed copy)
    # the GEMMs whose preferred layout is a packed one left it for later (a GEMV of up to 8 rows, or a
    # layout oneDNN takes as stored, has nothing to pack)
    assert batch == 1 or deferred >= 2, deferred


def test_packing_while_compiling_when_asked():
    m, x = _model(1), torch.randn(8, 64)
    f = _compile(m, background_packing=False)
    with torch.no_grad(), collect_reports() as sink:
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    assert sink[0].graphs[0].exe.background_work() == (0, 0)


def test_callers_on_several_threads_while_the_weights_are_packed():
    m = _model(2)
    xs = [torch.randn(16, 64) for _ in range(4)]
    with torch.no_grad():
        wants = [m(x) for x in xs]
        f = _compile(m)
        f(xs[0])  # compiles; the packing starts when this call returns
        errors = []

        def call(k):
            try:
                for _ in range(30):
                    torch.testing.assert_close(f(xs[k]), wants[k], rtol=1e-5, atol=1e-5)
            except Exception as e:  # (reported below)
                errors.append(e)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        C.wait_background_idle()
        for x, want in zip(xs, wants):
            torch.testing.assert_close(f(x), want, rtol=1e-5, atol=1e-5)


def test_weights_changed_in_place_before_packing_are_seen():
    m, x = _model(3), torch.randn(8, 64)
    f = _compile(m)
    with torch.no_grad():
        f(x)
        m[0].weight.mul_(-1)  # (right after the first call: the packing may be under way)
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
        C.wait_background_idle()
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
