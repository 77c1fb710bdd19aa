"""The compile cache (airgraph/cache.py): a second compile of the same graph, in this process or a
new one, loads the optimized graph from the cache folder instead of lowering it and running the
passes; the weights are always the calling process's own (changed weights give the new answer,
never a stale one), including the constants a pass computed from weights (a batch norm folded into
a convolution, a buffer folded into a constant); a corrupt, truncated or foreign entry is rebuilt
without an error; other shapes, dtypes or code get their own entries; cache_dir="" writes nothing;
cache_info and clear_cache report and empty it."""
import os
import re
import subprocess
import sys

import pytest
import torch

import airgraph
from airgraph import cache
from airgraph.backend import collect_reports


class Net(torch.nn.Module):
    # `shift * tensor` is folded into one constant by the passes: computed from a buffer
    def __init__(self, seed=0, shift_seed=None):
        super().__init__()
        torch.manual_seed(seed)
        self.l1, self.l2 = torch.nn.Linear(12, 24), torch.nn.Linear(24, 6)
        self.register_buffer("shift", torch.randn(6, generator=torch.Generator().manual_seed(
            seed if shift_seed is None else shift_seed)))

    def forward(self, x):
        return torch.tanh(self.l2(torch.relu(self.l1(x)))) + self.shift * torch.tensor([1.0, 2, 3, 4, 5, 6])


class ConvBN(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)
        with torch.no_grad():  # statistics that are not the identity, so that a stale fold shows
            self.bn.running_mean.normal_()
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.normal_()
            self.bn.bias.normal_()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def run(model, x, folder, reports=None):
    torch._dynamo.reset()
    f = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(folder))),
                      dynamic=False)
    with torch.no_grad(), collect_reports() as sink:
        got = f(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)
    if reports is not None:
        reports.extend(sink)
    return got


def stats(folder):
    return airgraph.cache_info(str(folder))


def test_second_compile_hits_and_weights_are_the_callers(tmp_path):
    x = torch.randn(5, 12)
    before = stats(tmp_path)
    first, second = [], []
    run(Net(0).eval(), x, tmp_path, first)
    after1 = stats(tmp_path)
    assert after1["entries"] == 1 and after1["misses"] == before["misses"] + 1 and after1["writes"] == before["writes"] + 1
    # the same code and types with other weights where no pass folded them: a hit on the Dynamo
    # graph's entry (no AOTAutograd, no lowering, no passes), computed with these weights
    run(Net(1, shift_seed=0).eval(), x, tmp_path, second)
    after2 = stats(tmp_path)
    assert after2["hits"] == after1["hits"] + 1 and after2["optimized_hits"] == after1["optimized_hits"] + 1
    assert after2["dynamo_hits"] == after1["dynamo_hits"] + 1 and after2["entries"] == 1
    assert [p[0] for p in first[0].pass_stats[0]][:2] == ["canonicalize", "fold_constants"]
    # the same optimized graph, but for the weights' names (the entry names them by argument position)
    assert second[0].graphs[0].graph_text == re.sub(r"%arg(\d+)_1\b", lambda m: f"%w{m[1]}" if f"%w{m[1]}" in
                                                    second[0].graphs[0].graph_text else m[0],
                                                    first[0].graphs[0].graph_text)
    assert [n.target for n in second[0].nodes] == [n.target for n in first[0].nodes]  # (the report's nodes)
    # the folded buffer differs: the entry's folded constant was made from other weights, so its
    # lowered graph is optimized again with these (the answer is this model's: run() compares it
    # with eager); the entry stays
    run(Net(1, shift_seed=5).eval(), x, tmp_path)
    after3 = stats(tmp_path)
    assert after3["hits"] == after2["hits"] + 1 and after3["other_weights"] == after2["other_weights"] + 1
    assert after3["optimized_hits"] == after2["optimized_hits"] and after3["writes"] == after2["writes"]
    run(Net(2, shift_seed=0).eval(), x, tmp_path)
    assert stats(tmp_path)["optimized_hits"] == after3["optimized_hits"] + 1
    # weights changed in place after compiling are still seen (the cache holds none)
    m = Net(2).eval()
    torch._dynamo.reset()
    f = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(tmp_path))))
    with torch.no_grad():
        f(x)
        m.l1.weight.mul_(2)
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-6)


def test_batch_norm_folded_into_a_convolution_is_never_stale(tmp_path):
    # the passes fold the batch norm's statistics into a scale and shift: the entry keeps them with
    # the digest of the statistics; a model with other statistics is compiled anew, never served
    # the first model's scale and shift
    x = torch.randn(2, 3, 10, 10)
    for k, seed in enumerate((0, 0, 1, 2, 0)):
        before = stats(tmp_path)
        run(ConvBN(seed).eval(), x, tmp_path)  # (compared with eager inside)
        after = stats(tmp_path)
        assert after["hits"] == before["hits"] + (k > 0), seed
        assert after["optimized_hits"] == before["optimized_hits"] + (k > 0 and seed == 0), seed
        assert after["other_weights"] == before["other_weights"] + (seed != 0), seed
    # statistics changed in place after a hit: the graph is rebuilt from the entry's lowered graph
    m = ConvBN(0).eval()
    torch._dynamo.reset()
    f = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(tmp_path))))
    before = stats(tmp_path)
    with torch.no_grad():
        f(x)
        after = stats(tmp_path)
        assert after["dynamo_hits"] == before["dynamo_hits"] + 1 and after["optimized_hits"] == before["optimized_hits"] + 1
        m.bn.running_var.mul_(3)
        torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-6)
    assert stats(tmp_path)["other_weights"] == after["other_weights"] + 1  # (the rebuild saw other statistics)


def test_derived_constants_from_large_weights_keep_the_lowered_graph(tmp_path, monkeypatch):
    # when the weights a folded constant came from are too large to hash on every hit, the entry
    # holds the lowered graph: a hit skips the lowering and runs the passes on this process's weights
    monkeypatch.setattr(cache, "DERIVED_MAX_BYTES", 8)
    x = torch.randn(2, 3, 10, 10)
    run(ConvBN(0).eval(), x, tmp_path)
    reports = []
    before = stats(tmp_path)
    run(ConvBN(1).eval(), x, tmp_path, reports)
    after = stats(tmp_path)
    assert after["hits"] == before["hits"] + 1 and after["optimized_hits"] == before["optimized_hits"]
    assert "fold_constants" in [p[0] for p in reports[0].pass_stats[0]]


def test_other_shapes_dtypes_and_code_get_their_own_entries(tmp_path):
    class Other(Net):
        def forward(self, x):
            return torch.sigmoid(self.l2(torch.relu(self.l1(x))))

    cases = [(Net().eval(), torch.randn(5, 12)), (Net().eval(), torch.randn(7, 12)),
             (Net().eval().double(), torch.randn(5, 12, dtype=torch.float64)), (Other().eval(), torch.randn(5, 12))]
    for model, x in cases:
        before = stats(tmp_path)
        run(model, x, tmp_path)
        after = stats(tmp_path)
        assert after["entries"] > before["entries"] and after["hits"] == before["hits"], (x.shape, x.dtype)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_entry_is_rebuilt(tmp_path, damage):
    x = torch.randn(5, 12)
    run(Net().eval(), x, tmp_path)
    (path,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs
               if f.endswith(".agraph") and not f.endswith(".lowered.agraph")]
    data = open(path, "rb").read()
    data = {"truncate": data[: len(data) // 3], "flip": data[:200] + bytes([data[200] ^ 16]) + data[201:],
            "garbage": os.urandom(len(data)), "empty": b""}[damage]
    with open(path, "wb") as f:
        f.write(data)
    before = stats(tmp_path)
    run(Net().eval(), x, tmp_path)  # no error, the right answer
    after = stats(tmp_path)
    assert after["rebuilt"] == before["rebuilt"] + 1 and after["writes"] == before["writes"] + 1
    run(Net().eval(), x, tmp_path)
    assert stats(tmp_path)["hits"] == after["hits"] + 1  # the rebuilt entry serves again


def test_off_writes_nothing(tmp_path):
    run(Net().eval(), torch.randn(5, 12), "")
    assert not any(files for _, _, files in os.walk(tmp_path))


def test_clear_cache(tmp_path):
    run(Net().eval(), torch.randn(5, 12), tmp_path)
    run(Net().eval(), torch.randn(3, 12), tmp_path)
    assert airgraph.clear_cache(str(tmp_path)) == 2
    assert stats(tmp_path)["entries"] == 0


def test_a_new_process_hits_the_entry_of_the_last(tmp_path):
    code = (
        "import torch, airgraph\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()\n"
        "x = torch.randn(3, 8)\n"
        "with torch.no_grad():\n"
        "    got = torch.compile(m, backend='airgraph')(x)\n"
        "    torch.testing.assert_close(got, m(x), rtol=1e-5, atol=1e-6)\n"
        "i = airgraph.cache_info()\n"
        "print('hits', i['hits'], 'misses', i['misses'], 'dynamo_hits', i['dynamo_hits'])\n")
    env = {**os.environ, "AIRGRAPH_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    for r in outs:
        assert r.returncode == 0, r.stderr
    assert "hits 0 misses 1" in outs[0].stdout, outs[0].stdout
    assert "hits 1 misses 0 dynamo_hits 1" in outs[1].stdout, outs[1].stdout  # (AOTAutograd skipped too)


def test_key_covers_tensors_the_code_creates(tmp_path):
    # two graphs alike but for a tensor the traced code created: separate entries, each right
    for scale in (1.0, 3.0):
        class Scaled(torch.nn.Module):
            def forward(self, x):
                return x * torch.tensor([scale, scale + 1])

        run(Scaled(), torch.randn(4, 2), tmp_path)
    assert stats(tmp_path)["entries"] == 2
    assert cache.FORMAT_VERSION >= 1


def test_a_hit_makes_the_graphs_input_writes(tmp_path):
    # a static KV cache's index_copy_ stays in the graph (an input write the engine makes): a process
    # served by the Dynamo graph's entry updates the caller's tensor as the first one did
    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, kv, pos, x):
            kv.index_copy_(0, pos, self.proj(x))
            return kv.sum(0) * 2

    before = stats(tmp_path)["dynamo_hits"]
    for k in range(2):
        torch._dynamo.reset()
        torch.manual_seed(k)
        m = Step().eval()
        f = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(tmp_path))))
        with torch.no_grad():
            kv, want_kv = torch.zeros(6, 4), torch.zeros(6, 4)
            for step in range(3):
                pos, x = torch.tensor([step]), torch.randn(1, 4)
                torch.testing.assert_close(f(kv, pos, x), m(want_kv, pos, x))
                torch.testing.assert_close(kv, want_kv)
        assert stats(tmp_path)["dynamo_hits"] == before + k  # (the second compile is a hit)


class Dyn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = torch.nn.Linear(12, 24), torch.nn.Linear(24, 6)

    def forward(self, x):
        h = torch.relu(self.l1(x))  # [s0, s1, 24]
        return self.l2(h).softmax(-1) + h.mean(1, keepdim=True)[..., :6]


def run_dynamic(model, shapes, folder):
    """Compiles `model` with symbolic sizes and checks it against eager at each shape; the report."""
    torch._dynamo.reset()
    f = torch.compile(model, backend=airgraph.get_backend(airgraph.CompilerConfig(cache_dir=str(folder))),
                      dynamic=True)
    with torch.no_grad(), collect_reports() as sink:
        for shape in shapes:
            x = torch.randn(*shape)
            torch.testing.assert_close(f(x), model(x), rtol=1e-5, atol=1e-5)
    (report,) = [r for r in sink if r.symbolic]
    return report.symbolic[0]


def test_a_symbolic_graph_hits_its_template_and_passes(tmp_path):
    # dynamic=True: the graph lowered once for every size, checked, and optimized once, is kept;
    # a second compile (sizes it was not traced at first) takes it from the cache
    before = stats(tmp_path)
    seg = run_dynamic(Dyn().eval(), [(3, 5, 12), (4, 7, 12), (2, 9, 12)], tmp_path)
    after1 = stats(tmp_path)
    assert not seg.from_cache and seg.template is not None and seg.optimized is not None, seg.optimized_reason
    assert after1["writes"] == before["writes"] + 1 and after1["entries"] == 1
    seg2 = run_dynamic(Dyn().eval(), [(5, 6, 12), (2, 3, 12), (3, 5, 12)], tmp_path)
    after2 = stats(tmp_path)
    assert seg2.from_cache and after2["hits"] == after1["hits"] + 1
    assert after2["optimized_hits"] == after1["optimized_hits"] + 1 and after2["writes"] == after1["writes"]
    # every size is an instance of the cached optimized template: no lowering, no passes
    assert seg2.optimized_builds == 3 == len(seg2.build_ms), (seg2.optimized_builds, seg2.build_ms)
    assert str(seg2.template.g) == str(seg.template.g)


class Reshaped(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x.reshape(2, -1)) * 3


def test_a_cached_template_serves_only_sizes_where_its_guards_hold(tmp_path, monkeypatch):
    # a lowering that asks whether x's shape already is the reshape's (a guard: Eq(s0, 2), false
    # where it was recorded); the shipped lowering answers that without a guard (sizes.known_equal)
    from airgraph.lowering import shape

    monkeypatch.setattr(shape, "known_equal", lambda a, b: a == b)
    seg = run_dynamic(Reshaped(), [(5, 6), (7, 6)], tmp_path)
    assert [o for t, o in seg.template.g.guards() if t.startswith("Eq(")] == [False], seg.template.g.guards()
    # a compile whose first call is at batch 2, where that decision differs, finds the entry but
    # does not use it (a miss: it records the template again); at batch 9 it does
    before = stats(tmp_path)
    assert cache.load_symbolic(str(tmp_path), seg.cache_key, seg.gm, seg.consts, [2, 6], []) is None
    after = stats(tmp_path)
    assert after["misses"] == before["misses"] + 1 and after["hits"] == before["hits"]
    hit = cache.load_symbolic(str(tmp_path), seg.cache_key, seg.gm, seg.consts, [9, 6], [])
    assert hit is not None and str(hit[0].g) == str(seg.template.g) and stats(tmp_path)["hits"] == after["hits"] + 1
    # and the graph itself refuses that size (the engine's check, for any caller)
    with pytest.raises(airgraph.EngineError, match=r"s\d+=2, s\d+=6: outside the sizes .* needs Eq\(s\d+, 2\) to be false"):
        hit[0].g.instantiate([2, 6])


def test_a_damaged_symbolic_entry_is_rebuilt(tmp_path):
    run_dynamic(Dyn().eval(), [(3, 5, 12), (4, 7, 12)], tmp_path)
    for root, _, files in os.walk(tmp_path):
        for f in files:
            if f.endswith(".optimized.agraph"):
                p = os.path.join(root, f)
                data = open(p, "rb").read()
                open(p, "wb").write(data[: len(data) // 2])
    before = stats(tmp_path)
    seg = run_dynamic(Dyn().eval(), [(3, 5, 12), (2, 3, 12)], tmp_path)
    after = stats(tmp_path)
    assert not seg.from_cache and after["rebuilt"] == before["rebuilt"] + 1
    seg = run_dynamic(Dyn().eval(), [(6, 2, 12)], tmp_path)
    assert seg.from_cache and stats(tmp_path)["optimized_hits"] == after["optimized_hits"] + 1


class Scaled(torch.nn.Module):
    # under dynamic=True, Dynamo passes the float attributes as 0-d tensors: the backend folds
    # them into the graph as constants guarded by value (the entry is made for those values)
    def __init__(self, eps=1e-6, scale=0.5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16), requires_grad=False)
        self.eps, self.scale = eps, scale

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight * self.scale


def test_a_symbolic_entry_is_for_the_values_it_was_made_with(tmp_path):
    seg = run_dynamic(Scaled().eval(), [(3, 16), (5, 16)], tmp_path)
    assert not seg.values and not seg.from_cache
    seg = run_dynamic(Scaled().eval(), [(4, 16), (2, 16)], tmp_path)
    assert seg.from_cache and seg.optimized_builds == 2
    before = stats(tmp_path)
    seg = run_dynamic(Scaled(eps=0.25, scale=2.0).eval(), [(4, 16)], tmp_path)  # (right: checked with eager)
    assert not seg.from_cache and stats(tmp_path)["misses"] == before["misses"] + 1
