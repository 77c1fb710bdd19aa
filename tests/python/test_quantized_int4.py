"""int4 weight-only linear layers (torchao's PrototypeInt4WeightOnlyConfig on CPU, which calls
torch's `_weight_int4pack_mm_for_cpu`) run on the engine's linear_int4 kernel, reading torch's
packed weight where it lies: the op against torch's own on several shapes, group sizes and dtypes;
a torchao-quantized MLP against torchao's eager answer, with no float copy of a weight in the
engine graph; torch's AVX2 and scalar packed layouts (another CPU capability, in a subprocess);
weights changed in place after compiling.

torchao's op has no derivative, so a quantized model with a trainable bias compiles only under
torch.no_grad() (AOTAutograd traces the backward otherwise; eager never does): the tests call it so.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import airgraph
import airgraph.backend as backend
from airgraph.lowering.quant import packed_layout, unpack_int4
from conftest import assert_close, compile_native

torchao = pytest.importorskip("torchao", reason="torchao is not installed (requirements-dev.txt installs it)")
from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig  # noqa: E402
from torchao.quantization import quantize_  # noqa: E402

int4mm = torch.ops.aten._weight_int4pack_mm_for_cpu


def packed_operands(n, k, g, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=gen)
    w = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    sz = torch.stack([torch.rand(k // g, n, generator=gen) * 0.05 + 0.005,
                      (torch.rand(k // g, n, generator=gen) - 0.5) * 0.1], dim=-1).to(dtype)
    return q, w, sz


def ops_of(graphs):
    return [op for g in graphs for _, op, _ in g.exe.instructions()]


def test_probe_finds_this_process_layout():
    layout = packed_layout()
    cap = torch.backends.cpu.get_cpu_capability()
    assert layout == {"AVX512": "avx512", "AVX2": "avx2", "DEFAULT": "pairs"}.get(cap), (cap, layout)
    # the probe's decoder reads a packed weight back (a partial last block included)
    q, w, _ = packed_operands(176, 64, 32, torch.float32)
    assert torch.equal(unpack_int4(w, 176, 64, layout), q)


class Int4Mm(torch.nn.Module):
    """The op with its packed weight and scales as buffers (bound as engine constants)."""

    def __init__(self, w, g, sz):
        super().__init__()
        self.g = g
        self.register_buffer("w", w)
        self.register_buffer("sz", sz)

    def forward(self, x):
        return int4mm(x, self.w, self.g, self.sz)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,k,n,g", [(1, 256, 176, 64), (3, 128, 64, 32), (4, 512, 192, 256), (17, 256, 112, 128),
                                     (1, 896, 640, 128)])
def test_op_matches_torch(dtype, m, k, n, g, engine_graphs):
    """The exact path (int8_activations="off") against torch's op."""
    _, w, sz = packed_operands(n, k, g, dtype, seed=m + k + n)
    x = torch.randn(m, k).to(dtype)
    mod = Int4Mm(w, g, sz)
    with torch.no_grad():
        got = compile_native(mod, int8_activations="off")(x)
    assert_close(got, int4mm(x, w, g, sz))
    assert ops_of(engine_graphs) == ["linear_int4"], ops_of(engine_graphs)


def _per_row_case(dtype, m, k, n, g, engine_graphs):
    """The default path's result for x [m, k] against packed weights [n, k], torch's exact op, the
    weights dequantized by torch ([K, N]: the op on an identity), x rounded per row to int8 and
    back, the scales and zero points, and the engine's kernels."""
    _, w, sz = packed_operands(n, k, g, dtype, seed=m + k + n)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
    with torch.no_grad():
        got = compile_native(Int4Mm(w, g, sz))(x).float()
        exact = int4mm(x, w, g, sz).float()
        wd = int4mm(torch.eye(k, dtype=torch.float32), w, g, sz.float())
    xf = x.float()
    ra = xf.abs().amax(1, keepdim=True)
    xq = torch.round(xf * (127.0 / ra)) * (ra / 127.0)
    return got, exact, wd, xq, sz, [kn for g_ in engine_graphs for _, _, kn in g_.exe.instructions()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n,g", [(9, 256, 112, 128), (40, 512, 704, 32)])
def test_op_per_row_int8(dtype, m, k, n, g, engine_graphs):
    """The default int8_activations="per_row" for more than 8 rows (CPUs with AVX-512 VNNI or AMX):
    each panel of weights requantized to int8 per column from the nibbles, x per row, int8 products.
    Against that computed in PyTorch (torch's own dequantization: the op on an identity), and
    within 8-bit rounding of torch's exact op."""
    got, exact, wd, xq, sz, kernels = _per_row_case(dtype, m, k, n, g, engine_graphs)
    flags = open("/proc/cpuinfo").read()
    if not any(f in flags for f in ("avx512_vnni", "amx_int8")):
        print("this CPU has no AVX-512 VNNI or AMX: the exact path runs", kernels)
        assert "int4_dequant_panels" in kernels[0], kernels
        return assert_close(got, exact, atol=2e-2, rtol=2e-2)
    assert "int4_requant_panels_onednn_s8s8" in kernels[0], kernels
    # each column at the scale bound / 127, the bound being the largest |(q - 8) * scale + zero| any q
    # in [0, 15] gives over the column's groups
    sc, zero = sz.float()[..., 0], sz.float()[..., 1] - 8 * sz.float()[..., 0]
    ca = torch.maximum(zero.abs(), (15 * sc + zero).abs()).amax(0, keepdim=True)
    wq = torch.round(wd * (127.0 / ca)) * (ca / 127.0)
    want = (xq.double() @ wq.double()).float()
    # (a weight whose f32 dequantization lands on the other side of an int8 rounding boundary moves
    # its sums by one step, ~5e-3 here; bf16: the output's rounding)
    torch.testing.assert_close(got, want, atol=2e-2 if dtype == torch.float32 else 4e-2, rtol=1e-2)
    assert (got - exact).abs().max() < 0.05 * exact.abs().max()


def _vnni_vbmi() -> bool:
    flags = open("/proc/cpuinfo").read().split()
    return "avx512_vnni" in flags and "avx512vbmi" in flags


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n,g", [(1, 256, 176, 64), (3, 512, 192, 128), (8, 128, 64, 32)])
def test_op_per_row_int8_decode_rows(dtype, m, k, n, g, engine_graphs):
    """The default int8_activations="per_row" for 1-8 rows (the decode GEMV) on CPUs with AVX-512
    VNNI and VBMI: x quantized per row, the weights' nibbles exact, int8 products summed in int32.
    Against x as quantized times torch's dequantized weights, and within 8-bit rounding of torch's
    exact op (a partial last block of 64 columns, n = 176: the f32 code, on x as quantized). CPUs
    without VNNI and VBMI run the exact f32 GEMV."""
    got, exact, wd, xq, sz, kernels = _per_row_case(dtype, m, k, n, g, engine_graphs)
    from airgraph.lowering.quant import packed_layout
    if not (_vnni_vbmi() and packed_layout() == "avx512"):
        print("no AVX-512 VNNI and VBMI here (or torch packs another layout): the f32 GEMV runs", kernels)
        assert "int4_gemv_vnni" not in kernels[0], kernels
        return assert_close(got, exact, atol=2e-2, rtol=2e-2)
    assert "int4_gemv_vnni" in kernels[0], kernels
    want = (xq.double() @ wd.double()).float()
    # (f32: the sums' order; bf16: the output's rounding)
    torch.testing.assert_close(got, want, atol=1e-4 if dtype == torch.float32 else 4e-2, rtol=1e-4 if dtype ==
                               torch.float32 else 1e-2)
    assert (got - exact).abs().max() < 0.05 * exact.abs().max()
    assert (got - exact).abs().max() > 0  # (x was quantized: not the exact path)


def test_op_per_row_int8_decode_rows_inf_and_nan_are_exact():
    """A decode row of x holding inf or nan: every row of the call is summed exactly, term by term
    as torch's kernel does (inf * a weight of 8 - 8 = 0 plus a zero point stays inf, not nan)."""
    _, w, sz = packed_operands(128, 256, 64, torch.float32, seed=5)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(2))
    x[0, 7] = float("inf")
    x[2, 9] = float("nan")
    with torch.no_grad():
        got = compile_native(Int4Mm(w, 64, sz))(x)
        want = int4mm(x, w, 64, sz)
    assert torch.isinf(want[0]).any()
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-4, rtol=1e-4)


def test_op_per_row_int8_inf_and_nan_are_exact():
    """On the per-row path a row of x holding inf or nan, and a column whose scale is inf, are summed
    exactly (eager's inf and nan); the rest stays within 8-bit rounding."""
    _, w, sz = packed_operands(128, 256, 64, torch.float32, seed=3)
    sz[1, 5, 0] = float("inf")
    x = torch.randn(12, 256, generator=torch.Generator().manual_seed(1))
    x[4, 7] = float("nan")
    x[9, 0] = float("inf")
    with torch.no_grad():
        got = compile_native(Int4Mm(w, 64, sz))(x)
        want = int4mm(x, w, 64, sz)
    torch.testing.assert_close(got[[4, 9]], want[[4, 9]], equal_nan=True)
    torch.testing.assert_close(got[:, 5], want[:, 5], equal_nan=True)
    rest = [i for i in range(12) if i not in (4, 9)]
    keep = [j for j in range(128) if j != 5]
    g, e = got[rest][:, keep], want[rest][:, keep]
    assert torch.isfinite(g).all() and (g - e).abs().max() < 0.05 * e.abs().max()


def test_op_with_weights_as_inputs(engine_graphs):
    """The packed weight and scales as function arguments (graph inputs, read per call)."""
    _, w, sz = packed_operands(128, 256, 64, torch.bfloat16)
    fn = compile_native(lambda x, w, sz: int4mm(x, w, 64, sz), int8_activations="off")
    for m in (1, 2, 9):
        x = torch.randn(m, 256, dtype=torch.bfloat16)
        assert_close(fn(x, w, sz), int4mm(x, w, 64, sz))
    assert "linear_int4" in ops_of(engine_graphs)


def quantized_mlp(dtype, group_size):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.SiLU(), torch.nn.Linear(256, 128, bias=False),
                            torch.nn.ReLU(), torch.nn.Linear(128, 48)).to(dtype).eval()
    quantize_(m, PrototypeInt4WeightOnlyConfig(group_size=group_size))
    return m


@pytest.mark.parametrize("dtype,group_size", [(torch.bfloat16, 64), (torch.float32, 32), (torch.bfloat16, 128)])
def test_torchao_mlp_matches_eager_with_no_float_weights(dtype, group_size, engine_graphs):
    m = quantized_mlp(dtype, group_size)
    assert type(m[0].weight).__name__ == "Int4OpaqueTensor"
    cfg = airgraph.CompilerConfig(fallback=False, int8_activations="off")  # (exact: test_op_per_row_int8)
    c = torch.compile(m, backend=airgraph.get_backend(cfg), dynamic=False)
    with torch.no_grad():
        for rows in (1, 3, 17):
            x = torch.randn(rows, 256, dtype=dtype)
            assert_close(c(x), m(x), msg=f"{rows} rows")
    assert engine_graphs
    for g in engine_graphs:
        ops = [op for _, op, _ in g.exe.instructions()]
        assert ops.count("linear_int4") == 3 and not {"linear", "matmul"} & set(ops), ops
        # no float [N, K] weight anywhere: not an input, and the constants (torchao's flattened
        # weights are bound as constants, in place: the packed nibbles, scales and zeros, biases)
        # hold between half a byte and a byte per weight
        lay = g.exe.layout()
        shapes = [(dt, list(s)) for dt, s in lay["inputs"]]
        for n, k in ((256, 256), (128, 256), (48, 128)):
            assert not any(list(s) in ([n, k], [k, n]) and dt != "uint8" for dt, s in shapes), shapes
        nk = 256 * 256 + 128 * 256 + 48 * 128
        assert nk // 2 <= g.exe.stats()["const_bytes"] < nk, g.exe.stats()
        kernels = [kn for _, op, kn in g.exe.instructions() if op == "linear_int4"]
        assert all("int4_" in kn for kn in kernels), kernels


def test_other_cpu_capability_layouts(tmp_path):
    """torch packs for the capability it dispatched to: ATEN_CPU_CAPABILITY=avx2 (or default) gives
    the AVX2 (or scalar) layout on any x86 CPU; the engine must read that one then. Both processes
    share one compile cache: the second must not replay the first's graph (it names the layout)."""
    for capability, layout in (("avx2", "avx2"), ("default", "pairs")):
        script = textwrap.dedent(f"""
            import torch, airgraph
            from airgraph.lowering.quant import packed_layout
            assert packed_layout() == {layout!r}, packed_layout()
            torch.manual_seed(0)
            mm = torch.ops.aten._weight_int4pack_mm_for_cpu
            for dtype, (m, k, n, g) in [(torch.float32, (1, 256, 176, 64)), (torch.bfloat16, (3, 128, 112, 32)),
                                        (torch.float32, (12, 128, 80, 32))]:
                q = torch.randint(0, 16, (n, k), dtype=torch.int32)
                w = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
                sz = torch.stack([torch.rand(k // g, n) * 0.05 + 0.005, torch.rand(k // g, n) * 0.1 - 0.05], -1)
                sz = sz.to(dtype)
                x = torch.randn(m, k).to(dtype)
                fn = torch.compile(lambda x, w, sz: mm(x, w, g, sz),
                                   backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)), dynamic=False)
                tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1.6e-2, rtol=2e-2)
                torch.testing.assert_close(fn(x, w, sz), mm(x, w, g, sz), **tol)
                torch._dynamo.reset()
            print("ok", torch.backends.cpu.get_cpu_capability())
        """)
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, AIRGRAPH_CACHE_DIR=str(tmp_path),
                   AIRGRAPH_INT8_ACTIVATIONS="off")
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "ok" in r.stdout, f"{capability}: " + r.stdout + r.stderr


def test_torchao_weight_changed_in_place_is_seen(engine_graphs):
    """torchao's weight reaches the graph as its parts (AOTAutograd flattens the subclass), passed
    on every call: an in-place change is read on the next call, with no rebuild."""
    m = quantized_mlp(torch.bfloat16, 64)
    cfg = airgraph.CompilerConfig(fallback=False, int8_activations="off")  # (exact: eager's tolerance)
    c = torch.compile(m, backend=airgraph.get_backend(cfg), dynamic=False)
    x = torch.randn(2, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        assert_close(c(x), m(x))
        before = m(x)
        m[0].weight.scale_and_zero.mul_(1.5)
        m[2].weight.qdata.copy_(m[2].weight.qdata.flip(0))
        after = m(x)
        assert (after - before).abs().max() > 0.1  # the change matters
        assert_close(c(x), after)


def test_bound_packed_weight_changed_in_place_rebuilds():
    """Packed weight and scales as buffers are engine constants: an in-place change rebuilds."""
    _, w, sz = packed_operands(128, 256, 64, torch.float32)
    mod = Int4Mm(w, 64, sz)
    with backend.collect_reports() as reports, torch.no_grad():
        cfg = airgraph.CompilerConfig(fallback=False, int8_activations="off")  # (exact: eager's tolerance)
        c = torch.compile(mod, backend=airgraph.get_backend(cfg), dynamic=False)
        x = torch.randn(1, 256)
        assert_close(c(x), mod(x))
        mod.w.copy_(mod.w.flip(0))
        mod.sz.mul_(-1)
        assert_close(c(x), mod(x))
    assert sum(r.rebuilds for r in reports) == 1, [r.rebuilds for r in reports]
