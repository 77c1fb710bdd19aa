"""Dynamic shapes: one Dynamo/AOTAutograd trace with symbolic sizes serves every size.

Each test compiles with dynamic=True (or mark_dynamic / set_dim_gears), calls with several
sizes and compares with eager; it also checks that Dynamo handed airgraph at most the expected
number of graphs (no recompile per size) and that the engine built one program per size."""
import re

import pytest
import torch
import torch.nn.functional as F

import airgraph
from airgraph import zoo
from airgraph.backend import collect_reports
from conftest import assert_close


class _Counting:
    """A backend that counts the graphs Dynamo compiles (fallback off: every node native)."""

    def __init__(self, **cfg):
        self.graphs = 0
        self.be = airgraph.get_backend(airgraph.CompilerConfig(fallback=False, **cfg))

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.be(gm, example_inputs)


def check_sizes(fn, make_inputs, sizes, max_graphs=1, dynamic=True, lowered_once=True, **cfg):
    """Compiles fn once and checks it against eager for every size; returns the symbolic graphs.
    lowered_once: every program came from the graph lowered once for every size (no per-size
    lowering of the FX graph), and every size after the first from the graph optimized once."""
    torch._dynamo.reset()
    be = _Counting(**cfg)
    c = torch.compile(fn, backend=be, dynamic=dynamic)
    with torch.no_grad(), collect_reports() as reps:
        for s in sizes:
            args = make_inputs(s)
            assert_close(c(*args), fn(*args), msg=f"{getattr(fn, '__name__', 'fn')} at size {s}")
    assert be.graphs <= max_graphs, f"Dynamo compiled {be.graphs} graphs for sizes {sizes}"
    syms = [g for r in reps for g in r.symbolic]
    if lowered_once:
        for g in syms:
            assert g.template is not None, f"graph_{g.gid} is lowered per size: {g.template_reason}"
            assert g.template_builds == len(g.build_ms), (g.template_builds, len(g.build_ms))
            # ... and optimized once: every size after the first skipped the passes
            assert g.optimized is not None, f"graph_{g.gid} runs the passes per size: {g.optimized_reason}"
            assert g.optimized_builds == len(g.build_ms) - 1, (g.optimized_builds, len(g.build_ms))
    return syms


SIZES = (5, 9, 2, 17, 9)  # 9 twice: the second call reuses its program


def _one_program_per_size(syms, n):
    assert syms, "no graph with symbolic sizes was compiled"
    assert len(syms[0].build_ms) == n, f"{len(syms[0].build_ms)} programs built for {n} sizes"


# ---------------------------------------------------------------- op families at symbolic sizes

def _mlp(x, w1, b1, w2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2).softmax(-1)


def test_linear_gelu_softmax():
    w1, b1, w2 = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)
    syms = check_sizes(lambda x: _mlp(x, w1, b1, w2), lambda n: (torch.randn(n, 16),), SIZES)
    _one_program_per_size(syms, 4)


def test_attention_block_two_symbols():
    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) + q.mean(-2, keepdim=True)

    def inputs(n):
        L, S = n, n + 3
        return (torch.randn(2, 4, L, 16), torch.randn(2, 4, S, 16), torch.randn(2, 4, S, 16),
                torch.randn(2, 1, L, S))

    check_sizes(f, inputs, SIZES)


def test_reductions_norms_and_indexing():
    ln = torch.nn.LayerNorm(12).eval()
    emb = torch.nn.Embedding(50, 12)

    def f(ids, x):
        h = emb(ids) + ln(x)
        return h.sum(1), h.amax(-1), torch.cumsum(h, 1), h.gather(1, ids.unsqueeze(-1).expand(-1, -1, 12) % h.shape[1])

    def inputs(n):
        return torch.randint(0, 50, (3, n)), torch.randn(3, n, 12)

    check_sizes(f, inputs, SIZES, max_graphs=2)  # a graph break in the gather index: two graphs, never one per size


def test_conv_pool_dynamic_batch_and_spatial():
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).eval()

    def f(x):
        return F.adaptive_avg_pool2d(F.max_pool2d(torch.relu(conv(x)), 2), 1).flatten(1)

    check_sizes(f, lambda n: (torch.randn(n % 4 + 2, 3, 2 * n, 2 * n + 2),), (4, 6, 9, 4))


def test_sort_topk_scatter():
    def f(x, idx):
        vals, ind = x.sort(dim=-1, stable=True)
        top = x.topk(2, dim=-1).values
        out = torch.zeros_like(x).scatter_add(1, idx, x)
        return vals, ind, top, out

    def inputs(n):
        return torch.randn(4, n), torch.randint(0, n, (4, n))

    check_sizes(f, inputs, SIZES)


def test_bfloat16_sizes():
    w = torch.randn(24, 16, dtype=torch.bfloat16)

    def f(x):
        return torch.relu(x @ w.t()).sum(-1)

    check_sizes(f, lambda n: (torch.randn(n, 16, dtype=torch.bfloat16),), SIZES)


# ---------------------------------------------------------------- size expressions

def test_size_expressions():
    """view to s0*s1, cat to s0 + s1, slice to s0 // 2, arange(s0 + 1), padding to (s0 + 7) // 8 * 8."""

    def f(x, y):
        a = x.reshape(x.shape[0] * x.shape[1])               # s0*s1
        b = torch.cat([x, y], 0)                              # s0 + s2
        c = x[:, : x.shape[1] // 2]                           # s1 // 2
        d = torch.arange(x.shape[0] + 1, dtype=torch.float32)  # s0 + 1
        pad = (x.shape[0] + 7) // 8 * 8 - x.shape[0]
        e = F.pad(x.t(), (0, pad))                            # (s0 + 7) // 8 * 8
        return a * 2, b.flatten(), c + 1, d, e

    def inputs(n):
        return torch.randn(n, n + 2), torch.randn(n + 1, n + 2)

    check_sizes(f, inputs, SIZES)


def test_sizes_zero_and_one_are_correct():
    """Dynamo specializes sizes 0 and 1 (a graph of their own); results still equal eager."""
    w = torch.randn(8, 6)

    def f(x):
        return (x @ w.t()).relu().sum(0) + x.shape[0]

    check_sizes(f, lambda n: (torch.randn(n, 6),), (4, 0, 1, 7), max_graphs=3)


def test_scalar_size_argument():
    """An int argument that changes per call (dynamic=True makes it a SymInt) binds a symbol too."""

    def f(x, n: int):
        return x[:, :n] * n

    torch._dynamo.reset()
    be = _Counting()
    c = torch.compile(f, backend=be, dynamic=True)
    x = torch.randn(3, 20)
    for n in (4, 7, 12, 7):
        assert_close(c(x, n), f(x, n), msg=f"n={n}")
    assert be.graphs == 1


class _Lengths:  # (a cache layer's running length, as transformers' sliding-window layers keep it)
    def __init__(self, n):
        self.length = n


@pytest.mark.parametrize("start", [10, 0])
def test_sizes_the_graph_returns(start):
    """A size computed in the graph and stored outside it (a sliding-window cache layer's
    `cumulative_length += seq_len`) is a graph output: the graph still runs whole on the engine, the
    size computed from the call's arguments; the slice bound max(0, length - window) (torch's own
    Max class) is lowered once for every size. From length 0 the first graph's slice covers the
    whole dim (lowered at one size, it is the input itself; recorded, a slice_view that canonicalize
    drops at those sizes): the two are compared after the passes, constant folding aside."""

    def f(x, lengths):
        lengths.length = lengths.length + x.shape[0]
        keep = x[max(0, lengths.length - 6):]
        # a mask from the sizes (as transformers builds attention masks): lowered at one size, the
        # passes fold it into a constant; recorded, its aranges are sizes and stay nodes
        mask = torch.arange(keep.shape[0])[:, None] >= torch.arange(3)[None, :]
        return torch.where(mask, keep * 2, keep)

    torch._dynamo.reset()
    c = torch.compile(f, backend=_Counting(), dynamic=True)
    mine, theirs = _Lengths(start), _Lengths(start)
    with torch.no_grad(), collect_reports() as reps:
        for k in (3, 4, 5, 2, 7):
            x = torch.randn(k, 3)
            assert_close(c(x, mine), f(x, theirs), msg=f"k={k}")
            assert type(mine.length) is int and mine.length == theirs.length, (mine.length, theirs.length)
    assert all(n.native for r in reps for n in r.nodes)
    assert not [r for r in reps if r.engine_graphs != 1], "a region ran in PyTorch"
    syms = [g for r in reps for g in r.symbolic]
    assert syms and all(g.template is not None for g in syms), [g.template_reason for g in syms]


def test_random_sizes_match_eager_and_plans_stay_static():
    """Property test over random sizes: every program equals eager, and each size's memory plan
    is its static plan (the arena never exceeds the naive sum of its intermediates)."""
    g = torch.Generator().manual_seed(0)
    attn = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ln = torch.nn.LayerNorm(16).eval()

    def blk(x):
        return ln(x + attn(x, x, x, need_weights=False)[0]).relu()

    sizes = [int(s) for s in torch.randint(2, 40, (8,), generator=g)]
    syms = check_sizes(blk, lambda n: (torch.randn(2, n, 16),), sizes, max_graphs=2)  # MHA: a graph break
    assert len(syms[0].build_ms) == len(set(sizes))
    arenas = {}
    for key, eg in syms[0].programs.items():
        st = eg.exe.stats()  # the EngineGraph built for that size
        assert st["arena_bytes"] <= st["naive_bytes"], (key, st)
        arenas[max(key)] = st["arena_bytes"]  # the sequence length (the batch is 2)
    small, large = min(arenas), max(arenas)
    assert arenas[small] < arenas[large], f"the arena does not follow the size: {arenas}"
    # the programs share one arena, of the largest size seen, not one each
    need = max((st["arena_bytes"] + 63) // 64 * 64 + st["scratch_bytes"]
               for st in (eg.exe.stats() for eg in syms[0].programs.values()))
    assert syms[0].shared.arena.bytes_held == need, (syms[0].shared.arena.bytes_held, need)


def test_threads_at_different_sizes():
    """Callers in several threads, each with its own sizes, share the graph (and its arena source)."""
    import threading

    w = torch.randn(32, 32)

    def f(x):
        return torch.softmax(torch.tanh(x @ w) @ w.t(), -1)

    torch._dynamo.reset()
    c = torch.compile(f, backend=_Counting(), dynamic=True)
    c(torch.randn(3, 32))  # compile once
    errors = []

    def worker(k):
        try:
            for i in range(30):
                x = torch.randn(2 + (k * 7 + i) % 23, 32)
                assert_close(c(x), f(x), msg=f"thread {k} call {i}")
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_programs_share_packed_weights():
    """Weights are packed once for every size (PrepackCache), not once per size (9-15 rows: the
    sizes whose linears pack by default; up to 8 rows run the GEMV on the weights as stored)."""
    lin = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    syms = check_sizes(lin, lambda n: (torch.randn(n, 64),), (9, 11, 13, 15))
    assert syms[0].shared.prepack_cache.hits >= 3, f"only {syms[0].shared.prepack_cache.hits} packed weights shared"


def test_size_cache_is_bounded():
    """dynamic_sizes programs are kept, least recently used out first."""
    w = torch.randn(8, 8)
    torch._dynamo.reset()
    be = _Counting(dynamic_sizes=3)
    c = torch.compile(lambda x: x @ w, backend=be, dynamic=True)
    with collect_reports() as reps:
        for n in (2, 3, 4, 2, 5, 6, 2):  # 2 is used again before 5 and 6 arrive: 3 and 4 go first
            x = torch.randn(n, 8)
            assert_close(c(x), x @ w)
    sg = [g for r in reps for g in r.symbolic][0]
    assert sorted(k[0] for k in sg.programs.keys()) == [2, 5, 6]
    assert len(sg.build_ms) == 5


# ---------------------------------------------------------------- errors

def test_inconsistent_inputs_name_the_dim():
    def f(x, m):
        return x * m

    torch._dynamo.reset()
    c = torch.compile(f, backend=_Counting(), dynamic=True)
    with collect_reports() as reps:
        c(torch.randn(3, 5), torch.randn(3, 5))
    sg = [g for r in reps for g in r.symbolic][0]
    # call the engine graph directly with x [3, 7] and m [3, 6] (Dynamo's guards would recompile)
    phs = [n.meta["val"] for n in sg.gm.graph.nodes if n.op == "placeholder"]
    x, m = torch.randn(3, 7), torch.randn(3, 6)
    metas = [v for v in phs if isinstance(v, torch.Tensor)]
    env = {s.node.expr: x.shape[d] for d, s in enumerate(metas[0].shape) if isinstance(s, torch.SymInt)}
    tensors = iter([x, m])
    args = [next(tensors) if isinstance(v, torch.Tensor) else env[v.node.expr] for v in phs]
    with pytest.raises(airgraph.EngineError, match=r"(input \d+ \(\w+\)|\w+) dim 1 is 6, but the graph needs s\d+ = 7"):
        sg.run(args)


# ---------------------------------------------------------------- gears

def test_gears_prepared_at_compile_and_other_sizes_rejected():
    w = torch.randn(16, 16)

    def f(x):
        return torch.softmax(x @ w, -1)

    torch._dynamo.reset()
    be = _Counting()
    c = torch.compile(f, backend=be)
    x = torch.randn(2, 8, 16)
    airgraph.set_dim_gears(x, {1: [8, 16, 32]})
    with collect_reports() as reps:
        assert_close(c(x), f(x))
    sg = [g for r in reps for g in r.symbolic][0]
    assert len(sg.build_ms) == 3, "every gear is built when compiling"
    for n in (16, 32, 8):
        y = torch.randn(2, n, 16)
        assert_close(c(y), f(y))
    assert len(sg.build_ms) == 3 and be.graphs == 1
    with pytest.raises(Exception, match=r"graph_\d+: x dim 1 is 12, but airgraph.set_dim_gears allows only "
                                         r"\[8, 16, 32\]"):
        c(torch.randn(2, 12, 16))


def test_gears_reject_bad_declarations():
    with pytest.raises(ValueError, match="sizes >= 2"):
        airgraph.set_dim_gears(torch.randn(2, 3), {0: [1, 2]})
    with pytest.raises(ValueError, match="out of range"):
        airgraph.set_dim_gears(torch.randn(2, 3), {2: [4]})


# ---------------------------------------------------------------- the zoo

@pytest.mark.parametrize("name", zoo.names())
def test_zoo_dynamic(name):
    kind = zoo.MODELS[name].kind
    model, args, kw = zoo.build(name, "small", batch=2 if kind == "vision" else 1)
    torch._dynamo.reset()
    be = _Counting()
    dynamic = None if name in zoo.DYNAMIC_BATCH_ONLY else True
    c = torch.compile(model, backend=be, dynamic=dynamic)
    with torch.no_grad(), collect_reports() as reps:
        for k in (0, 3, 1):
            a = zoo.resized_inputs(args, k)
            if dynamic is None:
                torch._dynamo.mark_dynamic(a[0], 0)
            assert_close(c(*a, **kw), model(*a, **kw), atol=1e-4, rtol=1e-3, msg=f"{name} +{k}")
    # qwen2: Dynamo traces a second symbol (the padded mask's cache position) only on the second
    # size, so it compiles once more; every other model compiles at most twice (sizes 1 specialized)
    assert be.graphs <= (3 if name == "qwen2" else 2), f"{be.graphs} Dynamo graphs"
    syms = [g for r in reps for g in r.symbolic]
    assert syms and all(n.native for r in reps for n in r.nodes), "fallback nodes"
    assert sum(len(g.build_ms) for g in syms) >= 2
    # every size came from the graph lowered once (no per-size lowering of the FX graph), and every
    # size after the first from the graph optimized once (no passes per size)
    assert all(g.template is not None and g.template_builds == len(g.build_ms) for g in syms), \
        [g.template_reason for g in syms]
    assert all(g.optimized is not None and g.optimized_builds == len(g.build_ms) - 1 for g in syms), \
        [g.optimized_reason for g in syms]
    assert all(re.match(r"s\d+ = \S+ dim \d", g.describe()) for g in syms), [g.describe() for g in syms]


def test_explain_names_the_symbols():
    w = torch.randn(8, 8)
    def f(x):
        return (x @ w).relu()

    r = airgraph.explain(f, torch.randn(5, 8), dynamic=True)
    assert r.fallback_nodes == 0
    assert re.search(r"graph_\d+ has symbolic sizes: s\d+ = x dim 0, s\d+ = x dim 1; "
                     r"1 size\(s\) built, .*; lowered once for every size; optimized once", str(r)), str(r)


class _RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(n) + 0.5, requires_grad=False)
        self.eps = 1e-6
        self.scale = 0.5

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(v + self.eps) * self.weight * self.scale


def test_float_attributes_are_constants_per_program():
    """dynamic=True passes module floats (eps, scales) as 0-d tensors; the backend folds them into
    the graph as constants guarded by value, so the RMSNorm still fuses, no program is keyed on
    them, and a changed value retraces (never a stale constant)."""
    m = _RMSNorm(16).eval()
    torch._dynamo.reset()
    be = _Counting()
    c = torch.compile(m, backend=be, dynamic=True)
    with torch.no_grad(), collect_reports() as reps:
        for n in (3, 5):
            x = torch.randn(n, 16)
            assert_close(c(x), m(x))
        assert be.graphs == 1, be.graphs
        m.eps, m.scale = 0.25, 2.0  # large enough to change the result
        x = torch.randn(5, 16)
        assert_close(c(x), m(x), msg="after changing the float attributes")
    assert be.graphs == 2, f"a changed attribute should retrace once, Dynamo compiled {be.graphs} graphs"
    sg = [g for r in reps for g in r.symbolic][0]
    assert not sg.values, f"the float attributes should be constants, not value inputs: {sg.values}"
    assert len(sg.build_ms) == 2, sg.build_ms
    ops = [line for line in reps[0].graphs[0].graph_text.splitlines() if "rms_norm(" in line]
    assert ops, "RMSNorm did not fuse: " + reps[0].graphs[0].graph_text


class _ScaledAttention(torch.nn.Module):
    """Attention with its scale and a norm eps as float attributes (transformers' layers)."""

    def __init__(self):
        super().__init__()
        self.scaling = 0.3
        self.eps = 1e-5

    def forward(self, q, k, v, t: float):
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + self.eps)
        return F.scaled_dot_product_attention(q, k, v, scale=self.scaling) * t


def test_float_attributes_do_not_restart_the_trace():
    """SDPA's scale is specialized while Dynamo traces; with dynamic=True AOTAutograd's tensorify
    pass would then throw the whole trace away and start again (the backend called twice for one
    graph). Folded, the frame is traced once; a float *argument* stays symbolic: one graph serves
    every value of t, and each call's t is used."""
    m = _ScaledAttention().eval()
    torch._dynamo.reset()
    be = _Counting()
    c = torch.compile(m, backend=be, dynamic=True)
    with torch.no_grad():
        for n, t in ((5, 0.5), (7, 1.5), (7, -2.0)):
            q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
            assert_close(c(q, k, v, t), m(q, k, v, t), msg=f"n={n}, t={t}")
        assert be.graphs == 1, f"Dynamo called the backend {be.graphs} times for one frame (a restart)"
        m.scaling = 0.7
        assert_close(c(q, k, v, 1.0), m(q, k, v, 1.0), msg="after changing the scale attribute")
    assert be.graphs == 2, be.graphs
    from torch._dynamo.symbolic_convert import TensorifyState

    # (the marks that keep tensorify from restarting are dropped once compiled: another frame's float
    # with the same symbol name stays symbolic)
    assert TensorifyState.empty(), TensorifyState.force_specializations


# ---------------------------------------------------------------- lowered once for every size

def _syms():
    import sympy

    return sympy.symbols("s0 s1", positive=True, integer=True)


def test_sym_size_keeps_expressions_and_records_guards():
    """While recording, a size carries its expression; decisions record guards; anything that
    would turn it into a plain number refuses (so no size can leave the recording unnoticed)."""
    from airgraph.lowering.sizes import NotSymbolic, Recorder, SymSize, recording

    s0, s1 = _syms()
    rec = Recorder([s0, s1], [6, 4])
    with recording(rec):
        a, b = rec.size(s0), rec.size(s1)
        c = (a * 2 + b) // 4 - 1
        assert isinstance(c, SymSize) and c.hint == (6 * 2 + 4) // 4 - 1
        assert type(a - a) is int and a - a == 0  # a constant expression is a plain int
        assert not rec.guards
        assert max(a, b) is a  # a decision: records s1 > s0 is False
        assert len(rec.guards) == 1
        for use in (int, float, hash, range, lambda x: x / 2, lambda x: [0, 1][x]):
            with pytest.raises(NotSymbolic):
                use(a)
    from airgraph._core import C

    g = C.Graph()
    g.add_symbol("s0")
    g.add_symbol("s1")
    rec.compile_guards(g)  # the guards as engine expressions
    assert rec.holds_at([9, 3]) and rec.holds_at([5, 5]) and not rec.holds_at([3, 9])


def test_size_expressions_evaluate_in_the_engine_as_in_python():
    import sympy
    from torch.utils._sympy.functions import FloorDiv, PythonMod

    from airgraph._core import C
    from airgraph.lowering.sizes import Recorder, SymSize

    s0, s1 = _syms()
    g = C.Graph()
    g.add_symbol("s0")
    g.add_symbol("s1")
    rec = Recorder([s0, s1], [5, 3])
    from torch.utils._sympy.functions import Max, Min  # (what torch's shape environment writes)

    exprs = [s0 * s1 + 3, FloorDiv(s0 + 7, 8) * 8, PythonMod(s0 - 3 * s1, 4), sympy.Max(s0, s1 + 2),
             sympy.Min(s0, 2 * s1) - 1, s0**2 - s1, Max(0, s0 - s1), Min(s0, s1 + 1) + 2]
    for e in exprs:
        i = rec.expr_id(g, SymSize(e, int(e.xreplace(rec.hint_env))))
        for x, y in [(2, 2), (5, 3), (17, 4), (1, 9), (0, 7)]:
            assert g.eval_expr(i, [x, y]) == int(e.xreplace({s0: x, s1: y})), (e, x, y)


def test_a_lowering_that_loses_a_size_is_caught(monkeypatch):
    """A lowering that turns a symbolic size into the traced number (a bug) must not give wrong
    results at other sizes: the recording is checked against a lowering at other sizes, and the
    graph is lowered per size instead."""
    from airgraph.lowering import LOWERINGS, aten
    from airgraph.lowering.sizes import SymSize

    orig = LOWERINGS[aten.slice.Tensor]
    leaks = []

    def leaky(ctx, node, *args, **kw):
        leaks.extend(a for a in args if isinstance(a, SymSize))
        return orig(ctx, node, *[a.hint if isinstance(a, SymSize) else a for a in args], **kw)

    monkeypatch.setitem(LOWERINGS, aten.slice.Tensor, leaky)

    def f(x):
        return x.narrow(1, x.shape[1] - 2, 2) * 2  # the last two columns: the start is a size

    syms = check_sizes(f, lambda n: (torch.randn(3, n),), SIZES, max_graphs=2, lowered_once=False)
    assert leaks, "the slice lowering never saw a symbolic size"
    # the graph with a symbolic start (Dynamo also makes one for width 2, where the start is 0)
    assert any(g.template is None and "differs from a lowering" in g.template_reason for g in syms), \
        [g.template_reason for g in syms]


def test_passes_that_decide_by_the_traced_sizes_run_per_size(monkeypatch):
    """The passes run once on the recorded graph only when they decide there as they do at other
    sizes. A pipeline that behaves differently on the recorded graph (planted here: fusion off
    there only, as a decision bound to the traced sizes would) is caught by the check, and every
    size runs the passes itself, with correct results."""
    from airgraph import symbolic

    orig = symbolic.run_passes

    def planted(g, config, after_pass=None):
        if g.is_symbolic():
            return g.optimize({"fuse_elementwise"}, config.fold_max_bytes)
        return orig(g, config, after_pass)

    monkeypatch.setattr(symbolic, "run_passes", planted)

    def f(x):
        return torch.relu(x * 2 + 1).reshape(-1, 2)

    syms = check_sizes(f, lambda n: (torch.randn(n, 4),), SIZES, lowered_once=False)
    g = syms[0]
    assert g.template is not None and g.template_builds == len(g.build_ms)
    assert g.optimized is None and "passes decide differently" in g.optimized_reason, g.optimized_reason
    assert g.optimized_builds == 0


def test_lower_once_can_be_switched_off():
    def f(x):
        return x.reshape(-1, 2).softmax(-1)

    syms = check_sizes(f, lambda n: (torch.randn(n, 4),), SIZES, lowered_once=False, lower_once=False)
    assert syms[0].template is None and syms[0].template_builds == 0
    assert len(syms[0].build_ms) == 4


def test_graph_dump_shows_the_graph_lowered_once(tmp_path):
    def f(x):
        return x.reshape(x.shape[0] * 2, -1)[: x.shape[0]].relu()

    torch._dynamo.reset()
    cfg = airgraph.CompilerConfig(fallback=False, dump_graph=True, dump_dir=str(tmp_path))
    c = torch.compile(f, backend=airgraph.get_backend(cfg), dynamic=True)
    for n in (4, 6):
        x = torch.randn(n, 8)
        assert_close(c(x), f(x))
    dumps = list(tmp_path.glob("graph_*_symbolic/lowered_once.txt"))
    assert len(dumps) == 1, list(tmp_path.iterdir())
    text = dumps[0].read_text()
    assert re.search(r"# symbols: s\d+ = x dim 0, s\d+ = x dim 1", text), text
    assert re.search(r"%\S+: float32\[s\d+, s\d+\]", text), text  # the input's symbolic dims
    assert re.search(r"%relu: float32\[s\d+, \(s\d+//2\)\] = relu", text), text  # a value's shape
    assert re.search(r"sizes \{shape\[0\]=2\*s\d+", text), text  # a size attribute as an expression


def test_sizes_where_a_recorded_decision_fails_are_lowered_per_size():
    """A binding where a guard of the recording fails gets a program lowered from the FX graph."""
    import sympy

    def f(x):
        return x.reshape(-1, 2).softmax(-1) * x.shape[0]

    torch._dynamo.reset()
    be = _Counting()
    c = torch.compile(f, backend=be, dynamic=True)
    with torch.no_grad(), collect_reports() as reps:
        x = torch.randn(4, 6)
        assert_close(c(x), f(x))  # compiles, lowered once
        g = [g for r in reps for g in r.symbolic][0]
        assert g.template is not None
        s0 = g.symbols[0]
        g.template_rec.guard(sympy.Lt(s0, 7), True)  # as if the lowering had decided on s0 < 7
        g.template_rec.compile_guards(g.template.g)
        for n in (5, 9, 3, 12):
            x = torch.randn(n, 6)
            assert_close(c(x), f(x), msg=f"n={n}")
    assert be.graphs == 1
    assert g.template_builds == 3 and len(g.build_ms) == 5  # 9 and 12 were lowered per size
