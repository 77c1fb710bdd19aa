"""Offline export (airgraph.export / airgraph.load): a model exported to an airgraph file and
loaded gives eager's answer, static and with symbolic sizes (several sizes per file), with
keyword inputs and nested outputs; a new process loads and runs the file with no Dynamo frame
compiled; a corrupt, truncated or foreign file is refused with a clear error; models the engine
cannot run whole are refused at export; zoo models round-trip."""
import json
import os
import subprocess
import sys

import pytest
import torch

import airgraph
from airgraph import zoo

pytest.importorskip("transformers")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x))).softmax(-1)


class Nested(torch.nn.Module):
    def forward(self, x, scale=None):
        y = x * scale
        return {"sum": y.sum(-1), "parts": (y, x.exp())}


def test_static_export_round_trip(tmp_path):
    torch.manual_seed(0)
    m, x = MLP().eval(), torch.randn(4, 16)
    path = tmp_path / "mlp.agraph"
    meta = airgraph.export(m, (x,), path)
    assert meta["symbols"] == [] and meta["num_outputs"] == 1
    lm = airgraph.load(path)
    with torch.no_grad():
        torch.testing.assert_close(lm(x), m(x), rtol=1e-5, atol=1e-6)
        with pytest.raises(airgraph.EngineError):
            lm(torch.randn(5, 16))  # exported for [4, 16] only


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dynamic_batch_export(tmp_path, dtype):
    torch.manual_seed(0)
    m, x = MLP().eval().to(dtype), torch.randn(4, 16, dtype=dtype)
    batch = torch.export.Dim("batch", min=1, max=512)
    path = tmp_path / "mlp_dyn.agraph"
    meta = airgraph.export(m, (x,), path, dynamic_shapes={"x": {0: batch}}, atol=1e-2, rtol=1e-2)
    assert len(meta["symbols"]) == 1 and meta["getters"] == [[0, 0]]
    lm = airgraph.load(path)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        for b in (1, 3, 4, 37):
            xb = torch.randn(b, 16, dtype=dtype)
            torch.testing.assert_close(lm(xb), m(xb), **tol)
    assert len(lm.compiled.programs) == 4  # one engine program per size


class Positions(torch.nn.Module):
    # a table of 32 positions sliced to the sequence's length: torch.export refines seq <= 32
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.pos = torch.nn.Parameter(torch.randn(32, 8))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):  # [batch, seq, 8]
        return self.proj(x + self.pos[: x.shape[1]]).softmax(-1)


def test_symbolic_export_keeps_dim_names_and_ranges(tmp_path):
    m, x = Positions().eval(), torch.randn(2, 5, 8)
    batch, seq = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("seq", min=2, max=32)
    path = tmp_path / "pos.agraph"
    meta = airgraph.export(m, (x,), path, dynamic_shapes={"x": {0: batch, 1: seq}})
    assert meta["symbols"] == ["batch", "seq"], meta["symbols"]
    lm = airgraph.load(path)
    guards = dict(lm.graph.guards())
    assert guards.get("batch <= 16") is True and guards.get("seq <= 32") is True, guards
    with torch.no_grad():
        for b, s in [(1, 2), (3, 32), (16, 7)]:  # the ends of the ranges
            xb = torch.randn(b, s, 8)
            torch.testing.assert_close(lm(xb), m(xb), rtol=1e-5, atol=1e-6)
        # outside them: a clear error naming the user's dims, never an answer from a graph made for
        # other sizes (the table has 32 positions)
        with pytest.raises(airgraph.EngineError, match=r"batch=2, seq=33: .* needs seq (> 32 to be false|<= 32 to be true)"):
            lm(torch.randn(2, 33, 8))
        with pytest.raises(airgraph.EngineError, match=r"batch=17, seq=4: .* needs batch <= 16 to be true"):
            lm(torch.randn(17, 4, 8))


class Sliced(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x[:, 1:]) * 3


def test_sizes_where_a_lowering_decision_differs_are_refused_with_a_warning(tmp_path, monkeypatch):
    # a lowering that asks whether the dims before a slice's are 1 (a contiguous slice): a decision
    # that differs at batch 1 (the shipped lowering takes the general slice without asking)
    from airgraph.lowering import shape

    monkeypatch.setattr(shape, "known_one", lambda d: d == 1)
    batch = torch.export.Dim("batch", min=1, max=64)
    path = tmp_path / "sliced.agraph"
    with pytest.warns(UserWarning, match=r"refuses batch=1 \(it needs Eq\(batch, 1\) is false\)"):
        airgraph.export(Sliced(), (torch.randn(4, 6),), path, dynamic_shapes={"x": {0: batch}})
    lm = airgraph.load(path)
    x = torch.randn(5, 6)
    torch.testing.assert_close(lm(x), Sliced()(x))
    with pytest.raises(airgraph.EngineError, match=r"batch=1: .* needs Eq\(batch, 1\) to be false"):
        lm(torch.randn(1, 6))


def test_keyword_inputs_and_nested_outputs(tmp_path):
    x, s = torch.randn(3, 5), torch.randn(3, 5)
    path = tmp_path / "nested.agraph"
    airgraph.export(Nested(), (x,), path, example_kwargs={"scale": s})
    lm = airgraph.load(path)
    got, want = lm(x, scale=s), Nested()(x, scale=s)
    assert set(got) == {"sum", "parts"} and isinstance(got["parts"], tuple)
    torch.testing.assert_close(got, want)
    with pytest.raises(TypeError, match="missing keywords"):
        lm(x)


def _python(code: str, env: dict | None = None):
    """Runs `code` in a new Python process with this one's import path (and `env` added)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_a_new_process_runs_the_file_without_dynamo(tmp_path):
    torch.manual_seed(0)
    m, x = MLP().eval(), torch.randn(4, 16)
    path = tmp_path / "mlp.agraph"
    airgraph.export(m, (x,), path)
    torch.save({"x": x, "want": m(x).detach()}, tmp_path / "io.pt")
    code = (
        "import sys, torch, airgraph\n"
        "from torch._dynamo.utils import counters\n"
        f"io = torch.load({str(tmp_path / 'io.pt')!r})\n"
        f"m = airgraph.load({str(path)!r})\n"
        "got = m(io['x'])\n"
        "torch.testing.assert_close(got, io['want'], rtol=1e-5, atol=1e-6)\n"
        "assert not counters['frames'], dict(counters['frames'])\n"
        "print('ran without dynamo')\n")
    r = _python(code)
    assert r.returncode == 0 and "ran without dynamo" in r.stdout, r.stdout + r.stderr


def test_corrupt_truncated_and_foreign_files_are_refused(tmp_path):
    m, x = MLP().eval(), torch.randn(2, 16)
    path = tmp_path / "mlp.agraph"
    airgraph.export(m, (x,), path)
    good = path.read_bytes()
    cases = {
        "truncated": good[: len(good) // 2],
        "flipped weight byte": good[:-10] + bytes([good[-10] ^ 1]) + good[-9:],
        "flipped metadata byte": good[:100] + bytes([good[100] ^ 4]) + good[101:],
        "not ours": b"PK\x03\x04" + b"\0" * 200,
        "empty": b"",
    }
    for what, data in cases.items():
        bad = tmp_path / f"bad_{what.replace(' ', '_')}.agraph"
        bad.write_bytes(data)
        with pytest.raises(airgraph.EngineError, match="airgraph file") as e:
            airgraph.load(bad)
        assert str(bad) in str(e.value), (what, str(e.value))


def test_a_graph_with_unsupported_nodes_is_refused_at_export(tmp_path):
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()  # no engine kernel: it would need PyTorch at run time

    with pytest.raises(airgraph.lowering.Unsupported, match="(?s)no PyTorch fallback.*_fft_r2c.*test_export.py"):
        airgraph.export(Spectrum(), (torch.randn(3, 8),), tmp_path / "x.agraph")
    assert not (tmp_path / "x.agraph").exists()


@pytest.mark.parametrize("name", ["bert", "resnet50", "llama", "upernet"])  # (upernet: bilinear resizes)
def test_zoo_model_round_trip(tmp_path, name):
    model, args, kwargs = zoo.build(name, size="small", batch=2)
    path = tmp_path / f"{name}.agraph"
    with torch.no_grad():
        airgraph.export(model, args, path, example_kwargs=kwargs)
        lm = airgraph.load(path)
        got, want = lm(*args, **kwargs), model(*args, **kwargs)
    assert zoo.max_diff(got, want) <= 1e-4, zoo.max_diff(got, want)
    meta = json.loads(json.dumps(lm.meta))
    assert meta["format"] == "airgraph-export"


def _airgraph_run() -> str:
    """The installed CLI (on PATH in the venv), or the build folder's in a development tree."""
    import shutil

    exe = shutil.which("airgraph-run") or os.path.join(os.environ.get("AIRGRAPH_EXT_DIR", ""), "airgraph-run")
    assert os.path.exists(exe), "airgraph-run is neither on PATH nor in AIRGRAPH_EXT_DIR"
    return exe


def test_cli_runs_an_exported_zoo_model_like_eager(tmp_path):
    import numpy as np

    model, args, kwargs = zoo.build("bert", size="small", batch=2)
    path = tmp_path / "bert.agraph"
    with torch.no_grad():
        airgraph.export(model, args, path, example_kwargs=kwargs)
        want = zoo._flat(model(*args, **kwargs))
    out_dir = tmp_path / "outputs" / "bert"  # (created by airgraph-run)
    cmd = [_airgraph_run(), str(path), "--output-dir", str(out_dir), "--bench", "5"]
    for i, a in enumerate(list(args) + list(kwargs.values())):
        np.save(tmp_path / f"in{i}.npy", a.numpy())
        cmd += ["--input", str(tmp_path / f"in{i}.npy")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "median" in r.stdout, r.stdout
    for k, w in enumerate(want):
        got = torch.from_numpy(np.load(out_dir / f"out{k}.npy"))
        torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-4)
    # a wrong input is a clear error with a non-zero exit, not a crash
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), dtype=np.float32))
    bad = [_airgraph_run(), str(path)] + ["--input", str(tmp_path / "bad.npy")] * len(want)
    r = subprocess.run(bad, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "input" in r.stderr and r.stderr.count("\n") <= 5, (r.returncode, r.stderr)


class Halves(torch.nn.Module):
    def forward(self, x):  # x: [2 * n]
        return x.reshape(2, -1).sum(0) * 3


class Shifted(torch.nn.Module):
    def forward(self, x, y):  # x: [n + 1], y: [n]
        return x[1:] * 2 + y


def test_derived_dims_bind_their_symbol_in_python_and_in_the_cli(tmp_path):
    """torch.export's derived Dims (2 * n, n + 1): a size no input dim gives bare is solved from the
    dim that is a * n + b; a dim that is no such size is a clear error, in Python and in C++."""
    import numpy as np

    n = torch.export.Dim("n", min=2, max=64)
    path = tmp_path / "halves.agraph"
    airgraph.export(Halves(), (torch.randn(8),), path, dynamic_shapes={"x": {0: 2 * n}})
    lm = airgraph.load(path)
    assert lm.symbols == ["n"], lm.symbols
    for size in (4, 12, 128):
        x = torch.randn(size)
        torch.testing.assert_close(lm(x), Halves()(x))
    with pytest.raises(airgraph.EngineError, match=r"input 'x' dim 0 is 7, which is not 2\*n for any size n"):
        lm(torch.randn(7))
    x = torch.randn(20)
    np.save(tmp_path / "x.npy", x.numpy())
    r = subprocess.run([_airgraph_run(), str(path), "--input", str(tmp_path / "x.npy"), "--output-dir",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    torch.testing.assert_close(torch.from_numpy(np.load(tmp_path / "out" / "out0.npy")), Halves()(x))
    np.save(tmp_path / "odd.npy", np.zeros(9, dtype=np.float32))
    r = subprocess.run([_airgraph_run(), str(path), "--input", str(tmp_path / "odd.npy")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "is 9, which is not 2*n for any size n" in r.stderr, (r.returncode, r.stderr)

    path = tmp_path / "shifted.agraph"
    airgraph.export(Shifted(), (torch.randn(5), torch.randn(4)), path,
                    dynamic_shapes={"x": {0: n + 1}, "y": {0: n}})
    lm = airgraph.load(path)
    for size in (2, 9, 64):
        x, y = torch.randn(size + 1), torch.randn(size)
        torch.testing.assert_close(lm(x, y), Shifted()(x, y))
    with pytest.raises(airgraph.EngineError, match=r"input 'x' dim 0 is 7, but the graph needs n \+ 1 = 4 at n=3"):
        lm(torch.randn(7), torch.randn(3))  # (n = 3 from y)
    with pytest.raises(airgraph.EngineError, match=r"input 'y' is shape \[3, 1\], but the graph needs a tensor of rank 1"):
        lm(torch.randn(4), torch.randn(3, 1))
    with pytest.raises(airgraph.EngineError, match=r"input 'y' is shape \[\], but the graph needs a tensor of rank 1"):
        lm(torch.randn(4), torch.tensor(1.0))


def test_cli_links_neither_torch_nor_python():
    r = subprocess.run(["ldd", _airgraph_run()], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "libairgraph_runtime" in r.stdout and "not found" not in r.stdout, r.stdout
    assert "libtorch" not in r.stdout and "libpython" not in r.stdout and "libc10" not in r.stdout, r.stdout


class ConvHead(torch.nn.Module):
    """Weights the engine packs: a convolution (BatchNorm folded in) and a constant [K, N] operand."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(16, 64, 3, padding=1), torch.nn.BatchNorm2d(64)
        self.w = torch.nn.Parameter(torch.randn(64, 256) * 0.05)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean((2, 3)) @ self.w


def _run_loaded(tmp_path, path, x, want, env=None, then=""):
    """Loads the file at `path` in a new process, runs it twice on x, checks the model's answer `want` and prints
    the process's packed weight bytes and reuses, then runs `then`; returns the finished process."""
    torch.save({"x": x, "want": want}, tmp_path / "io.pt")
    code = (
        "import torch, airgraph\n"
        "from airgraph._core import C\n"
        f"io = torch.load({str(tmp_path / 'io.pt')!r})\n"
        f"m = airgraph.load({str(path)!r})\n"
        "for _ in range(2):\n"
        "    got = m(io['x'])\n"
        "    C.wait_background_idle()\n"
        "torch.testing.assert_close(got, io['want'], rtol=1e-5, atol=1e-5)\n"
        "print('packed', C.packed_weight_bytes(), 'reused', C.packed_weight_reuses())\n" + then)
    return _python(code, env or {})


def test_a_loaded_file_packs_its_linear_weights_with_no_second_copy(tmp_path):
    """A loaded file owns its weights (no module holds them), so pack_weights="auto" packs every GEMM's linear
    weights there (CompilerConfig.pack_weights: "auto-owned"), not only those within pack_budget_mb as under
    torch.compile: the file stores the packed forms its check run made, and a new process maps them (no packed
    copy of its own) and gives the model's answer. torch.compile of the same module (its weights the
    module's) with a budget of 0 reads them in place: no packed bytes."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).eval()
    x = torch.randn(64, 256)
    path = tmp_path / "mlp.agraph"
    airgraph.export(m, (x,), path)
    plain = sum(t.numel() * t.element_size() for t in m.state_dict().values())
    weights = (256 * 512 + 512 * 128) * 4
    assert os.path.getsize(path) > plain + weights, "the file holds the packed linear weights too"
    r = _run_loaded(tmp_path, path, x, m(x).detach(), then=(
        "before = C.packed_weight_bytes()\n"
        "with torch.no_grad():\n"
        "    c = torch.compile(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),\n"
        "                                          torch.nn.Linear(512, 128)).eval(), backend='airgraph',\n"
        "                      options={'pack_budget_mb': 0})\n"
        "    c(io['x'])\n"
        "C.wait_background_idle()\n"
        "print('compiled', C.packed_weight_bytes() - before)\n"))
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    packed, reused, compiled = int(words[1]), int(words[3]), int(words[5])
    assert packed == 0 and reused >= 2, r.stdout  # (both linears' packed forms mapped from the file)
    assert compiled == 0, r.stdout


@pytest.mark.parametrize("isa", ["native", "AVX2"])
def test_the_file_holds_packed_weights_that_a_new_process_maps(tmp_path, isa):
    """The exported file stores the weights its kernels packed beside the plain ones: a new process on
    this CPU runs the file with no packed copy of its own (packed_weight_bytes stays 0: they are read
    from the mapping); a process whose kernels want other layouts (oneDNN limited to AVX2) finds no
    match, packs its own and gives the same answer."""
    torch.manual_seed(0)
    m, x = ConvHead().eval(), torch.randn(2, 16, 8, 8)
    with torch.no_grad():
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.running_mean.normal_()
    path = tmp_path / "conv.agraph"
    airgraph.export(m, (x,), path)
    plain = sum(t.numel() * t.element_size() for t in m.state_dict().values())
    assert os.path.getsize(path) > plain + m.conv.weight.numel() * 4, "the file holds the packed conv weights too"
    r = _run_loaded(tmp_path, path, x, m(x).detach(), {} if isa == "native" else {"ONEDNN_MAX_CPU_ISA": isa})
    assert r.returncode == 0, r.stdout + r.stderr
    packed, reused = (int(v) for v in r.stdout.split()[1::2])
    if isa == "native":
        assert packed == 0 and reused >= 1, r.stdout
    elif "avx512f" in open("/proc/cpuinfo").read():  # (on an AVX2 machine AVX2 is the native layout)
        assert packed > 0, r.stdout
