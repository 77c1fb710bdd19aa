"""Weights are never stale: parameters and buffers bound as engine constants are
checked on every call, and a change rebuilds what depends on it.

Written the way users change weights after compiling: default config
(`torch.compile(m, backend="airgraph")`, fusion and prepacking on), then a
reassigned parameter, load_state_dict, or an in-place update under no_grad; the
compiled model must then agree with eager.
"""
import copy
import logging
import threading

import gc

import pytest
import torch

import airgraph
import airgraph.backend as backend
from conftest import assert_close as _assert_close

nn = torch.nn


def assert_close(got, want, msg=""):
    # Random N(0, 1) weights give outputs of magnitude ~10-30 (BatchNorm folded into the conv
    # rounds differently from eager); a stale weight is off by O(1), far beyond these bounds.
    _assert_close(got, want, atol=1e-4, rtol=1e-4, msg=msg)


@pytest.fixture
def reports():
    """The CompileReports of every graph compiled during the test (engine compiles, rebuilds)."""
    with backend.collect_reports() as sink:
        yield sink


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def engine_compiles(reports):
    return sum(r.engine_graphs for r in reports), sum(r.rebuilds for r in reports)


def randomize(model, seed=1):
    """Non-trivial values in every parameter and buffer (BatchNorm's running stats included)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.dtype.is_floating_point:
                v = torch.rand(t.shape, generator=g) + 0.5 if "var" in name else torch.randn(t.shape, generator=g)
                t.copy_(v)
    return model


def eager(model, *xs):
    with torch.no_grad():
        return model(*xs)


def run(compiled, *xs):
    with torch.no_grad():
        return compiled(*xs)


class LinearLN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


class ConvBN(nn.Module):
    """Conv + BatchNorm (eval: folded into the conv's weights) + ReLU, then a Linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def conv_bn():
    return randomize(ConvBN()).eval()


def linear_ln():
    return randomize(LinearLN()).eval()


_G = torch.Generator().manual_seed(0)
X_LIN = torch.randn(4, 16, generator=_G)
X_CONV = torch.randn(2, 3, 6, 6, generator=_G)


def check_follows(model, compiled, x, change):
    """Calls once, applies `change`, and checks the compiled model follows it (and that it mattered)."""
    before = run(compiled, x)
    assert_close(before, eager(model, x), msg="before the change")
    change(model)
    want = eager(model, x)
    assert not torch.allclose(want, before, atol=1e-3), "the change must change the result"
    assert_close(run(compiled, x), want, msg="after the change")
    assert_close(run(compiled, x), want, msg="second call after the change")


# ----------------------------------------------------------------------------- reassign, load_state_dict


def test_reassigned_linear_weight():
    m = linear_ln()
    c = torch.compile(m, backend="airgraph")

    def change(m):
        m.fc1.weight = nn.Parameter(torch.randn(32, 16))

    check_follows(m, c, X_LIN, change)


def test_load_state_dict_linear_layernorm():
    m = linear_ln()
    c = torch.compile(m, backend="airgraph")
    check_follows(m, c, X_LIN, lambda m: m.load_state_dict(linear_ln_other().state_dict()))


def linear_ln_other():
    return randomize(LinearLN(), seed=7).eval()


def test_load_state_dict_conv_batchnorm(reports):
    m = conv_bn()
    c = torch.compile(m, backend="airgraph")
    run(c, X_CONV)
    # BatchNorm is folded into the convolution: its buffers are baked into constants derived from them
    text = "\n".join(g.graph_text for r in reports for g in r.graphs)
    assert 'fused="_native_batch_norm_legit_no_training' in text and ".scale: " in text, text
    other = randomize(ConvBN(), seed=7).eval()
    check_follows(m, c, X_CONV, lambda m: m.load_state_dict(other.state_dict()))


def test_storage_replaced_through_data():
    m = linear_ln()
    c = torch.compile(m, backend="airgraph")

    def change(m):
        m.fc2.weight.data = torch.randn(8, 32)  # same object, new storage, version not bumped

    check_follows(m, c, X_LIN, change)


# ----------------------------------------------------------------------------- in-place updates

INPLACE = {
    "linear weight mul_": (linear_ln, X_LIN, lambda m: m.fc1.weight.mul_(2)),
    "linear weight copy_": (linear_ln, X_LIN, lambda m: m.fc2.weight.copy_(torch.randn(8, 32))),
    "linear bias add_": (linear_ln, X_LIN, lambda m: m.fc2.bias.add_(1)),
    "layernorm weight mul_": (linear_ln, X_LIN, lambda m: m.norm.weight.mul_(-3)),
    "conv weight mul_": (conv_bn, X_CONV, lambda m: m.conv.weight.mul_(2)),
    "conv weight copy_": (conv_bn, X_CONV, lambda m: m.conv.weight.copy_(torch.randn(8, 3, 3, 3))),
    "bn running_mean add_": (conv_bn, X_CONV, lambda m: m.bn.running_mean.add_(3)),
    "bn running_var mul_": (conv_bn, X_CONV, lambda m: m.bn.running_var.mul_(4)),
    "bn weight mul_": (conv_bn, X_CONV, lambda m: m.bn.weight.mul_(-2)),
    "bn bias copy_": (conv_bn, X_CONV, lambda m: m.bn.bias.copy_(torch.randn(8) * 3)),
    "view of conv weight": (conv_bn, X_CONV, lambda m: m.conv.weight[0].zero_()),
}


@pytest.mark.parametrize("case", list(INPLACE))
def test_inplace_update(case):
    make, x, op = INPLACE[case]
    m = make()
    c = torch.compile(m, backend="airgraph")

    def change(m):
        with torch.no_grad():
            op(m)

    check_follows(m, c, x, change)


def test_repeated_inplace_updates():
    """An optimizer-like loop: each step's change is seen."""
    m = linear_ln()
    c = torch.compile(m, backend="airgraph")
    for step in range(4):
        with torch.no_grad():
            m.fc1.weight.add_(0.1 * step)
            m.norm.bias.sub_(0.2)
        assert_close(run(c, X_LIN), eager(m, X_LIN), msg=f"step {step}")


# ----------------------------------------------------------------------------- partitioned graph


class Partitioned(nn.Module):
    """Two engine regions around an op with no lowering (bessel_j0 falls back to PyTorch)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x):
        y = torch.special.bessel_j0(torch.relu(self.fc1(x)))
        return self.fc2(y + 1.0)


def test_partitioned_graph_follows_changes(reports, caplog):
    m = randomize(Partitioned()).eval()
    c = torch.compile(m, backend="airgraph")
    run(c, X_LIN)
    assert [n.target for r in reports for n in r.nodes if not n.native] == ["aten.special_bessel_j0.default"]
    graphs = [g for r in reports for g in r.graphs]
    assert len(graphs) == 2, "two engine regions expected"
    first = {g.gid for g in graphs}

    def change(m):
        with torch.no_grad():
            m.fc2.weight.mul_(-2)

    with caplog.at_level(logging.INFO, logger="airgraph"):
        check_follows(m, c, X_LIN, change)
    assert "fc2.weight was updated in place" in caplog.text, caplog.text
    after = {g.gid for r in reports for g in r.graphs}
    assert len(after) == 2 and len(after & first) == 1, "only the region that reads fc2 is rebuilt"

    check_follows(m, c, X_LIN, lambda m: setattr(m.fc1, "weight", nn.Parameter(torch.randn(16, 16))))
    check_follows(m, c, X_LIN, lambda m: m.load_state_dict(randomize(Partitioned(), seed=9).state_dict()))


# ----------------------------------------------------------------------------- other call paths


def test_dynamic_shapes_follow_changes():
    m = linear_ln()
    c = torch.compile(m, backend="airgraph", dynamic=True)
    for b in (1, 3):
        x = torch.randn(b, 16)
        assert_close(run(c, x), eager(m, x))
    with torch.no_grad():
        m.fc1.weight.mul_(2)
    for b in (1, 3, 5):
        x = torch.randn(b, 16)
        assert_close(run(c, x), eager(m, x), msg=f"batch {b}")


def test_grad_mode_follows_changes():
    m = linear_ln()
    c = torch.compile(m, backend="airgraph")
    assert_close(c(X_LIN).detach(), m(X_LIN).detach())
    with torch.no_grad():
        m.fc1.weight.mul_(2)
    assert_close(c(X_LIN).detach(), m(X_LIN).detach())


def test_batchnorm_train_mode_buffers_are_not_constants(reports):
    """The graph itself writes BatchNorm's running stats in train mode: they are read per call
    (never bound), so the stats evolve as in eager and no call triggers a rebuild."""
    m = conv_bn().train()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="airgraph")
    for i in range(3):
        x = torch.randn(2, 3, 6, 6)
        assert_close(run(c, x), eager(ref, x), msg=f"call {i}")
    assert_close(m.bn.running_mean, ref.bn.running_mean)
    assert_close(m.bn.running_var, ref.bn.running_var)
    assert m.bn.num_batches_tracked.item() == ref.bn.num_batches_tracked.item() == 3
    assert engine_compiles(reports)[1] == 0


# ----------------------------------------------------------------------------- cost: compile once


def test_unchanged_weights_compile_once(reports):
    m = conv_bn()
    c = torch.compile(m, backend="airgraph")
    for _ in range(20):
        assert_close(run(c, X_CONV), eager(m, X_CONV))
    assert engine_compiles(reports) == (1, 0)
    with torch.no_grad():
        m.conv.weight.mul_(2)
    for _ in range(5):
        assert_close(run(c, X_CONV), eager(m, X_CONV))
    assert engine_compiles(reports) == (1, 1), "one rebuild for one change"


def test_weight_guard_uses_the_fast_path():
    """The guard reads each data pointer and version count in C, without calling torch's getters."""
    if getattr(airgraph._C, "WeightGuard", None) is None:
        pytest.skip("extension built without csrc/bindings/weights.cpp (the Python guard is used)")
    assert airgraph.weights._version_layout() != (-1, -1), "the version-counter probe did not verify"
    m = linear_ln()
    ps = list(m.parameters())
    g = airgraph.weights.make_weight_guard(list(range(len(ps))), ps)
    assert g.fast and len(g) == len(ps)
    assert g.check(ps) == -1 and g.check(tuple(ps)) == -1
    assert g.check(ps[:2]) == 2, "a missing argument is a change"
    assert g.check([p.detach() for p in ps]) == -1, "an alias of the same memory at the same version is no change"
    with torch.no_grad():
        ps[3].add_(1)
    assert g.check(ps) == 3
    assert g.check(ps[:3] + [torch.zeros(3)] + ps[4:]) == 3
    assert g.check(ps[:1] + [None] + ps[2:]) == 1
    g = airgraph.weights.make_weight_guard(list(range(len(ps))), ps)
    with torch.no_grad():
        ps[2].detach()[0].mul_(3)  # through an alias's view: the shared counter moves
    assert g.check(ps) == 2
    g = airgraph.weights.make_weight_guard(list(range(len(ps))), ps)
    ps[1].data = torch.randn(ps[1].shape)  # storage replaced, version unchanged
    assert g.check(ps) == 1


def test_concurrent_first_calls_after_a_change_rebuild_once(reports):
    """Threads that all find the changed weight on their first call: one rebuild, every result right."""
    m = conv_bn()
    c = torch.compile(m, backend="airgraph")
    run(c, X_CONV)
    with torch.no_grad():
        m.conv.weight.mul_(2)
        m.fc.bias.add_(1)
    want = eager(m, X_CONV)
    results, start = [], threading.Barrier(8)

    def worker():
        start.wait()
        for _ in range(20):
            results.append(run(c, X_CONV))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 160
    for r in results:
        assert_close(r, want)
    assert engine_compiles(reports) == (1, 1)


# ----------------------------------------------------------------------------- logging


def test_change_is_logged_with_the_parameter_name(caplog):
    m = conv_bn()
    c = torch.compile(m, backend="airgraph")
    run(c, X_CONV)
    with caplog.at_level(logging.INFO, logger="airgraph"):
        with torch.no_grad():
            m.bn.running_var.mul_(2)
        run(c, X_CONV)
    assert "bn.running_var was updated in place (version" in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="airgraph"):
        m.fc.weight = nn.Parameter(torch.randn(5, 8 * 6 * 6))
        run(c, X_CONV)
    assert "fc.weight was replaced by another tensor" in caplog.text, caplog.text


# ----------------------------------------------------------------------------- frozen_parameters


def test_frozen_parameters_skips_the_checks_and_is_stale_as_documented(reports):
    """frozen_parameters=True promises the weights never change: no per-call check, and a
    reassigned parameter is not seen (the documented risk: a stale result, no error)."""
    m = linear_ln()
    c = torch.compile(m, backend="airgraph", options={"frozen_parameters": True})
    before = run(c, X_LIN)
    m.fc1.weight = nn.Parameter(torch.randn(32, 16))
    with torch.no_grad():
        m.fc2.bias.add_(5)
    stale = run(c, X_LIN)
    assert torch.equal(stale, before), "frozen_parameters: the engine keeps the weights it was built with"
    assert not torch.allclose(stale, eager(m, X_LIN), atol=1e-3)
    assert engine_compiles(reports) == (1, 0)


def test_old_option_name_is_rejected_with_the_new_name():
    m = linear_ln()
    with pytest.raises(Exception, match="use .frozen_parameters."):
        run(torch.compile(m, backend="airgraph", options={"freeze_parameters": True}), X_LIN)
    with pytest.raises(TypeError, match="use .frozen_parameters."):
        airgraph.CompilerConfig(freeze_parameters=False)
    with pytest.raises(ValueError, match="use .frozen_parameters."):
        airgraph.CompilerConfig.from_options({"freeze_parameters": True})
    assert airgraph.CompilerConfig().frozen_parameters is False
    assert airgraph.CompilerConfig.from_options({"frozen_parameters": True}).frozen_parameters is True


@pytest.mark.parametrize("pack,budget_mb", [("auto", 1024), ("auto", 0), ("always", 1024)])
def test_wide_gemms_read_the_weights_in_place(pack, budget_mb):
    """By default (pack_weights="auto") a GEMM of 16 rows or more packs its 16 MiB weight while
    pack_budget_mb holds it (the process-wide count of packed bytes and the budget's grow by its size,
    and the budget's comes back when the graph is gone), and reads the parameter's own memory with a
    budget of 0 (no packed copy: the count does not move); a GEMV of up to 8 rows reads it in place
    either way; pack_weights="always" packs every GEMM's with no budget."""
    from airgraph._core import C
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 4096).eval()
    cfg = airgraph.CompilerConfig(cache_dir="", pack_weights=pack, background_packing=False,
                                  pack_budget_mb=budget_mb)
    gc.collect()
    C.wait_background_idle()  # (what earlier tests in this process packed or free meanwhile moves the count a little)
    before, budget_before = C.packed_weight_bytes(), C.pack_budget_used()
    size = lin.weight.numel() * 4
    with torch.no_grad():
        for rows in (300, 16, 1):
            torch._dynamo.reset()
            f = torch.compile(lin, backend=airgraph.get_backend(cfg), dynamic=False)
            x = torch.randn(rows, 1024)
            with backend.collect_reports() as sink:
                torch.testing.assert_close(f(x), lin(x), rtol=1e-4, atol=1e-4)
            kernel = sink[0].graphs[0].exe.instructions()[0][2]
            grown, budget_grown = C.packed_weight_bytes() - before, C.pack_budget_used() - budget_before
            wanted = pack == "always" or budget_mb > 0
            # (oneDNN's jit sgemm, its f32 matmul on CPUs without AVX-512, has no packed layout: nothing
            # to pack even with "always"; the GEMV reads the weights as stored)
            if not wanted or rows == 1 or "gemm:jit" in kernel:
                assert abs(grown) < size // 4, (rows, grown, kernel)
                assert budget_grown == 0, (rows, budget_grown, kernel)
            else:
                assert grown >= size * 3 // 4, (rows, grown, kernel)
                # the budget counts the optional copies only ("auto"'s, from 16 rows)
                assert budget_grown == (size if pack == "auto" else 0), (rows, budget_grown, kernel)
            del f, sink
            torch._dynamo.reset()
            gc.collect()
            C.wait_background_idle()
            assert C.pack_budget_used() == budget_before, "the graph is gone: its copy no longer counts"


def _budget_held():
    """Bytes held against pack_budget_mb once Dynamo's graphs are gone and background packing is done."""
    from airgraph._core import C

    torch._dynamo.reset()
    gc.collect()
    C.wait_background_idle()
    return C.pack_budget_used()


def test_the_pack_budget_is_per_process_and_per_weight(caplog):
    """pack_budget_mb bounds the packed copies of the whole process, a row count's linears all or none: with
    40 MiB, a model of two 16 MiB linears packs both weights, and the graph Dynamo compiles for a second
    size reads the same weights, so they count once; a second such model, whose 32 MiB do not fit the 8
    left, reads its weights in place, and the log says so, naming the graph and the budget. The results
    are the modules' either way."""
    from airgraph._core import C

    def model(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).eval()

    m1, m2 = model(0), model(1)
    size = 1024 * 4096 * 4
    cfg = airgraph.CompilerConfig(cache_dir="", background_packing=False, pack_budget_mb=40)
    before = _budget_held()
    f1 = torch.compile(m1, backend=airgraph.get_backend(cfg), dynamic=False)
    f2 = torch.compile(m2, backend=airgraph.get_backend(cfg), dynamic=False)
    grown = []
    with torch.no_grad(), backend.collect_reports() as sink, caplog.at_level(logging.INFO, logger="airgraph"):
        for f, m, rows in ((f1, m1, 32), (f1, m1, 48), (f2, m2, 32)):
            x = torch.randn(rows, 1024)
            torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-4)
            grown.append(C.pack_budget_used() - before)
    kernels = [k for r in sink for g in r.graphs for _, _, k in g.exe.instructions() if "matmul" in k or "panels" in k]
    assert len(kernels) == 6, kernels  # two linears in each of three static graphs
    said = [r.getMessage() for r in caplog.records if "pack_budget_mb=40" in r.getMessage()]
    if all("gemm:jit" in k for k in kernels):
        # (oneDNN's jit sgemm without AVX-512 and no panels: no packed layout, nothing held)
        assert grown == [0, 0, 0] and not said, (grown, said)
    else:
        assert grown == [2 * size] * 3, (grown, kernels)
        assert len(said) == 1 and "2 linear(s) read their weights in place" in said[0] and "their 32 MB" in said[0], said
    del f1, f2, sink
    assert _budget_held() == before


class _TwoRowCounts(nn.Module):
    """A 64-row linear, then a 24-row one on the first rows of its result (as BART's 128-row encoder and
    32-row decoder at batch 1)."""

    def __init__(self):
        super().__init__()
        self.wide, self.narrow = nn.Linear(1024, 4096), nn.Linear(4096, 512)

    def forward(self, x):
        return self.narrow(torch.relu(self.wide(x))[:24])


def test_the_pack_budget_takes_the_fewest_rows_first(caplog):
    """Where not all of a graph's linear weights fit pack_budget_mb, the graph packs a row count at a time,
    fewest rows first (in place costs most at few rows): with 20 MiB, the 24-row linear's 8 MiB weight
    packs and the 64-row one's 16 MiB (which alone would fit) reads in place, and the log names the one left.
    The result is the module's."""
    from airgraph._core import C

    torch.manual_seed(0)
    m = _TwoRowCounts().eval()
    cfg = airgraph.CompilerConfig(cache_dir="", background_packing=False, pack_budget_mb=20)
    before = _budget_held()
    f = torch.compile(m, backend=airgraph.get_backend(cfg), dynamic=False)
    x = torch.randn(64, 1024)
    with torch.no_grad(), backend.collect_reports() as sink, caplog.at_level(logging.INFO, logger="airgraph"):
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-4)
        grown = C.pack_budget_used() - before
    kernels = [k for r in sink for g in r.graphs for _, _, k in g.exe.instructions() if "matmul" in k or "panels" in k]
    assert len(kernels) == 2, kernels
    said = [r.getMessage() for r in caplog.records if "pack_budget_mb=20" in r.getMessage()]
    if all("gemm:jit" in k for k in kernels):
        assert grown == 0 and not said, (grown, said)  # (no packed layout on oneDNN's jit sgemm)
    else:
        assert grown == 4096 * 512 * 4, (grown, kernels)
        assert len(said) == 1 and "1 linear(s) read their weights in place" in said[0] and "their 16 MB" in said[0], said
    del f, sink
    assert _budget_held() == before


def test_pack_budget_option_is_checked():
    with pytest.raises(ValueError, match="pack_budget_mb=-1"):
        airgraph.CompilerConfig(pack_budget_mb=-1)
    assert airgraph.CompilerConfig.from_options({"pack_budget_mb": 3}).pack_budget() == 3 << 20
    assert airgraph.CompilerConfig(pack_weights="always").pack_budget() == 0  # (it packs them all anyway)


def test_pack_weights_option_is_checked():
    with pytest.raises(ValueError, match="pack_weights='sometimes'"):
        airgraph.CompilerConfig(pack_weights="sometimes")


class Conv1D(nn.Module):
    """GPT-2's Conv1D: x @ W + b with W stored [K, N] (a constant matmul operand the engine packs)."""

    def __init__(self, k=256, n=512):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) * 0.05)
        self.bias = nn.Parameter(torch.randn(n) * 0.05)

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


def _packed_state():
    from airgraph._core import C
    gc.collect()
    C.wait_background_idle()
    return C.packed_weight_bytes(), C.packed_weight_reuses()


@pytest.mark.parametrize("kind", ["conv1d", "conv_bn"])
def test_graphs_of_several_sizes_share_one_packed_copy(kind):
    """Packed layouts are made once per weight in the process: the static graphs Dynamo compiles for
    three sizes (prefill and decode are such graphs) hold one packed copy, not three; a weight changed
    in place is packed again for a graph compiled after the change (the registry checks the bytes'
    checksum, so the new graph never reads the old copy) and every graph follows the change."""
    model = Conv1D().eval() if kind == "conv1d" else conv_bn()
    sizes = [(8, 256), (3, 256), (32, 256)] if kind == "conv1d" else [(2, 3, 6, 6), (1, 3, 6, 6), (4, 3, 6, 6)]
    weight = model.weight if kind == "conv1d" else model.conv.weight
    size = weight.numel() * 4
    cfg = airgraph.CompilerConfig(cache_dir="", background_packing=False, pack_weights="always")
    torch._dynamo.reset()
    bytes0, reuses0 = _packed_state()
    f = torch.compile(model, backend=airgraph.get_backend(cfg), dynamic=False)
    xs = [torch.randn(*s) for s in sizes]
    grown = []
    for x in xs[:2]:
        with backend.collect_reports() as sink:
            assert_close(run(f, x), eager(model, x))
        grown.append(_packed_state()[0] - bytes0)
        kernel = sink[0].graphs[0].exe.instructions()[0][2]
        if "gemm:jit" in kernel:
            pytest.skip(f"oneDNN runs this CPU's f32 matmul as its jit sgemm ({kernel}), which reads a [K, N] "
                        "operand as stored: there is no packed copy to share")
    assert grown[0] >= size, grown  # (the first graph packed the weight: a blocked layout may pad it)
    assert abs(grown[1] - grown[0]) < size // 4, grown  # the second graph made no copy of its own
    assert _packed_state()[1] - reuses0 >= 1
    with torch.no_grad():
        weight.mul_(-1.5)
    want = eager(model, xs[2])
    assert_close(run(f, xs[2]), want, msg="a graph compiled after the in-place change")
    for x in xs[:2]:
        assert_close(run(f, x), eager(model, x), msg="a graph compiled before the change")
    del f
    torch._dynamo.reset()
