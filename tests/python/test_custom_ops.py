"""A user's own torch.library op in the engine graph through airgraph.register_lowering
(python/airgraph/custom_ops.py): without a lowering it falls back and splits the graph; with one
the model runs as one engine graph with no fallback, equal to eager, through torch.compile,
dynamic shapes, cache_compile and airgraph.export/load; a lowering can decline a call (that node
falls back); a broken lowering fails the compile with an error naming the op, the lowering's
line and the model's line."""
import torch
import torch.nn.functional as F

import airgraph
from conftest import assert_close


# ---- the user's ops ---------------------------------------------------------------------------
@torch.library.custom_op("agtest::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return F.gelu(x, approximate="tanh") * scale


@scaled_gelu.register_fake
def _(x, scale):
    return torch.empty_like(x)


@airgraph.register_lowering(torch.ops.agtest.scaled_gelu.default)
def _lower_scaled_gelu(b, x, scale):
    if scale < 0:
        raise airgraph.Decline("a negative scale stays in PyTorch")
    return b.op("gelu", x, approximate="tanh") * scale


@torch.library.custom_op("agtest::unlowered", mutates_args=())
def unlowered(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@unlowered.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("agtest::broken", mutates_args=())
def broken(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@broken.register_fake
def _(x):
    return torch.empty_like(x)


@airgraph.register_lowering(broken)  # (the custom_op object itself)
def _lower_broken(b, x):
    return b.op("no_such_engine_op", x)  # the line the error must name


class Block(torch.nn.Module):
    def __init__(self, op=None):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        self.op = op or (lambda h: torch.ops.agtest.scaled_gelu(h, 0.5))

    def forward(self, x):
        return x + self.fc2(self.op(self.fc1(x)))


def _model(op=None):
    torch.manual_seed(0)
    return Block(op).eval()


def test_custom_op_runs_in_one_engine_graph():
    m, x = _model(), torch.randn(4, 16)
    rep = airgraph.explain(m, x)
    assert rep.fallback_nodes == 0, str(rep)
    assert len(rep.reports) == 1 and rep.reports[0].engine_graphs == 1, str(rep)
    assert rep.counts()["agtest.scaled_gelu.default"] == (1, 0)
    c = torch.compile(m, backend="airgraph")
    with torch.no_grad():
        assert_close(c(x), m(x), msg="scaled_gelu")


def test_unlowered_op_falls_back_and_splits():
    m, x = _model(lambda h: torch.ops.agtest.unlowered(h)), torch.randn(4, 16)
    rep = airgraph.explain(m, x)
    assert rep.fallback_nodes == 1 and rep.reports[0].engine_graphs == 2, str(rep)
    assert rep.fallbacks()[0].reason == "no lowering"


def test_decline_falls_back_for_that_node_only():
    m, x = _model(lambda h: torch.ops.agtest.scaled_gelu(h, -0.5)), torch.randn(4, 16)
    rep = airgraph.explain(m, x)
    fb = rep.fallbacks()
    assert [n.target for n in fb] == ["agtest.scaled_gelu.default"], str(rep)
    assert "a negative scale stays in PyTorch" in fb[0].reason
    c = torch.compile(m, backend="airgraph")
    with torch.no_grad():
        assert_close(c(x), m(x), msg="declined")


def test_broken_lowering_names_op_and_lines():
    m, x = _model(lambda h: torch.ops.agtest.broken(h)), torch.randn(4, 16)
    c = torch.compile(m, backend="airgraph")
    try:
        with torch.no_grad():
            c(x)
    except Exception as e:  # Dynamo wraps the backend's error
        text = str(e)
    else:
        raise AssertionError("a broken lowering compiled")
    assert "agtest.broken.default" in text, text
    assert "no_such_engine_op" in text, text
    assert "test_custom_ops.py" in text and "b.op(\"no_such_engine_op\", x)" in text, text
    assert "torch.ops.agtest.broken(h)" in text, text  # the model's line


def test_dynamic_shapes():
    m = _model()
    c = torch.compile(m, backend="airgraph", dynamic=True)
    with torch.no_grad():
        for n in (3, 9, 17):
            x = torch.randn(n, 16)
            assert_close(c(x), m(x), msg=f"batch {n}")


def test_cache_compile(tmp_path):
    m = _model()
    f = airgraph.cache_compile(m.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        for n in (4, 7):
            x = torch.randn(n, 16)
            assert_close(f(x), m(x), msg=f"cache_compile batch {n}")
    g = airgraph.cache_compile(m.forward, cache_dir=str(tmp_path))  # a second function: reads the entry
    with torch.no_grad():
        x = torch.randn(5, 16)
        assert_close(g(x), m(x), msg="cache_compile replay")


def test_export_and_load(tmp_path):
    m, x = _model(), torch.randn(4, 16)
    path = tmp_path / "block.agraph"
    airgraph.export(m, (x,), path)
    loaded = airgraph.load(str(path))
    with torch.no_grad():
        assert_close(loaded(x), m(x), msg="exported")


def test_key_changes_with_the_lowering():
    from airgraph import custom_ops
    before = custom_ops.key_text()
    assert "agtest.scaled_gelu.default=" in before

    @airgraph.register_lowering(torch.ops.agtest.unlowered.default)
    def _twice(b, x):
        return x * 2

    try:
        assert custom_ops.key_text() != before
    finally:
        from airgraph.lowering import LOWERINGS
        del LOWERINGS[torch.ops.agtest.unlowered.default], custom_ops._USER[torch.ops.agtest.unlowered.default]
