"""The per-call path (issue 35, item 5): what a call does beyond the engine run, and that the thin
paths keep every behaviour of the full ones. Behaviour only, never wall-clock times (the figures
come from bench/call_overhead.py).

- torch.compile: an inference graph whose AOTAutograd runtime wrapper has nothing to do is called by
  Dynamo directly (the wrapper stays where it has work: gradients, autocast, graphs it must rebuild
  outputs for); weight changes after compiling are still seen.
- cache_compile: a plain call replays the bytecode with the graphs unwrapped (no
  torch._dynamo.disable frame per graph); inside a torch.compile'd region the wrapped replay is
  used; hooks added to or removed from any module of the tree are seen; a profiler still gets
  Dynamo's "Pregraph bytecode" marker.
"""
import importlib

import pytest
import torch

import airgraph
import airgraph.backend as be

ccm = importlib.import_module("airgraph.cache_compile")  # (the module: airgraph.cache_compile is the function)


class Chain(torch.nn.Module):
    def __init__(self, layers: int = 6, width: int = 16):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for lin in self.layers:
            x = torch.relu(lin(x))
        return x


def _compiled(model):
    """torch.compile(model) with airgraph, and the list of what the backend returned to Dynamo."""
    got = []

    def backend(gm, example_inputs, **kw):
        fn = be.airgraph_backend(gm, example_inputs, **kw)
        got.append(fn)
        return fn

    torch._dynamo.reset()
    return torch.compile(model, backend=backend), got


def _calls_aot_wrapper(fn) -> bool:
    """Whether the backend's callable goes through AOTAutograd's runtime wrapper (else: ours directly)."""
    inner = getattr(fn, "fn", fn)
    return "_aot.<locals>.<lambda>" not in getattr(inner, "__qualname__", "")


def test_inference_graph_is_called_without_aot_wrapper_and_sees_weight_changes():
    torch.manual_seed(0)
    model = Chain().eval()
    x = torch.randn(1, 16)
    c, fns = _compiled(model)
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x))
        assert len(fns) == 1 and not _calls_aot_wrapper(fns[0])
        # in-place update, reassigned parameter, load_state_dict: each seen on the next call
        model.layers[0].weight.mul_(2)
        torch.testing.assert_close(c(x), model(x))
        model.layers[1].bias = torch.nn.Parameter(torch.randn(16))
        torch.testing.assert_close(c(x), model(x))
        model.load_state_dict(Chain().state_dict())
        torch.testing.assert_close(c(x), model(x))


def test_training_and_autocast_keep_aot_wrapper():
    torch.manual_seed(0)
    model = Chain(2)
    x = torch.randn(2, 16)
    c, fns = _compiled(model)
    out = c(x)  # parameters require grad under grad mode: a backward exists, the wrapper is autograd's
    out.sum().backward()
    assert model.layers[0].weight.grad is not None
    assert fns and all(_calls_aot_wrapper(f) for f in fns)

    c, fns = _compiled(Chain(2).eval())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        c(x)
    assert fns and all(_calls_aot_wrapper(f) for f in fns)


def test_graph_writing_its_input_under_grad_mode_keeps_versions():
    """An input written in the graph: the wrapper bumps its version counter for autograd where
    autograd sees the write; without it the write must still land and be visible."""
    def step(buf, x):
        buf.add_(x)
        return buf * 2

    buf, x = torch.zeros(4), torch.ones(4)
    c = torch.compile(step, backend="airgraph")
    with torch.no_grad():
        c(buf, x)
        c(buf, x)
    torch.testing.assert_close(buf, torch.full((4,), 2.0))


def _count_disable_frames(fn, *args) -> int:
    """How many torch._dynamo.disable wrappers a call of fn enters."""
    import torch._dynamo.eval_frame as ef
    n = [0]
    orig = ef.set_eval_frame

    def counting(cb):
        n[0] += 1
        return orig(cb)

    ef.set_eval_frame = counting
    try:
        fn(*args)
    finally:
        ef.set_eval_frame = orig
    return n[0]


@pytest.mark.parametrize("loaded", [False, True])
def test_cache_compile_plain_call_skips_disable_frames(tmp_path, loaded):
    torch.manual_seed(0)
    model = Chain().eval()
    x = torch.randn(1, 16)
    with torch.no_grad():
        cc = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path))
        cc(x)
        if loaded:  # the entry from the folder, as a later process replays it
            cc = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path))
        cc(x)
        assert cc.counts["replays"] >= 1 and (not loaded or cc.counts["loaded"] == 1)
        assert _count_disable_frames(cc, x) == 0
        torch.testing.assert_close(cc(x), model(x))
        # the weights are still checked on the thin replay
        model.layers[2].weight.add_(1)
        torch.testing.assert_close(cc(x), model(x))


def test_cache_compile_under_dynamo_callback_uses_wrapped_graphs(tmp_path, monkeypatch):
    """Where Dynamo's eval-frame callback is set (a call from inside a torch.compile'd region), the
    replay calls the graphs through torch._dynamo.disable, as Dynamo installs them."""
    torch.manual_seed(0)
    model = Chain(3).eval()
    x = torch.randn(1, 16)
    cc = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        cc(x)
        cc(x)
        assert ccm._eval_frame_callback() is None  # (a plain call: no callback)
        monkeypatch.setattr(ccm, "_eval_frame_callback", lambda: object())
        n = cc.counts["replays"]
        assert _count_disable_frames(cc, x) > 0
        torch.testing.assert_close(cc(x), model(x))
        assert cc.counts["replays"] == n + 2


def test_cache_compile_sees_hooks_added_and_removed_anywhere(tmp_path):
    torch.manual_seed(0)
    model = Chain(3).eval()
    x = torch.randn(1, 16)
    calls = []
    pre = model.layers[0].register_forward_hook(lambda m, i, o: calls.append("pre-existing"))
    cc = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        cc(x)
        cc(x)
        calls.clear()
        # a hook on a module whose hook dicts were all empty when the entry was bound
        h = model.layers[2].register_forward_hook(lambda m, i, o: o * 0)
        torch.testing.assert_close(cc(x), model(x))
        assert torch.count_nonzero(cc(x)) == 0
        h.remove()
        torch.testing.assert_close(cc(x), model(x))
        assert torch.count_nonzero(cc(x)) > 0
        # the hook that was there when the entry was bound, removed
        pre.remove()
        calls.clear()
        torch.testing.assert_close(cc(x), model(x))
        assert calls == []


def test_cache_compile_replay_keeps_profiler_marker(tmp_path):
    torch.manual_seed(0)
    model = Chain(2).eval()
    x = torch.randn(1, 16)
    cc = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        cc(x)
        cc(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            cc(x)
    names = {e.name for e in prof.events()}
    assert "Pregraph bytecode" in names, sorted(names)[:20]


def test_cache_compile_entry_survives_dynamo_reset(tmp_path, monkeypatch):
    """An entry traced in this process keeps its graphs under names of its own: torch._dynamo.reset()
    (which removes the globals Dynamo installed) does not break its replay, plain or wrapped."""
    torch.manual_seed(0)
    model = Chain(3).eval()
    x = torch.randn(1, 16)
    cc = airgraph.cache_compile(model.forward, cache_dir="")
    with torch.no_grad():
        cc(x)
        torch._dynamo.reset()
        n = cc.counts["traces"]
        torch.testing.assert_close(cc(x), model(x))
        monkeypatch.setattr(ccm, "_eval_frame_callback", lambda: object())
        torch.testing.assert_close(cc(x), model(x))
        assert cc.counts["traces"] == n
