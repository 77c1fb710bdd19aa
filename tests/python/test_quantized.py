"""Models users quantize with torchao (weight-only int8) compile with backend="airgraph" and give
torchao's own eager answer, with the int8 weights read as int8 by the engine (canonicalize turns
torchao's mm(x, t(w).to(float)) * scale into linear(x, w_int8) with the scale as a post-op; the
kernel widens in registers: kernels/gemv.h, kernels/linear_int8.cpp). Before, the compile cache's
key read the data pointer of torchao's tensor-subclass weights and the first call failed
(BackendCompilerFailed: invalid python storage), and then the weights were widened per call."""
import pytest
import torch

import airgraph

torchao = pytest.importorskip("torchao", reason="torchao is not installed (requirements-dev.txt installs it)")
from torchao.quantization import Int8WeightOnlyConfig, quantize_  # noqa: E402

from conftest import compile_native  # noqa: E402


def _mlp(k=64, n=96, out=32, dtype=torch.float32):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.ReLU(), torch.nn.Linear(n, out)).eval().to(dtype)
    quantize_(m, Int8WeightOnlyConfig())
    return m


def _kernels(fn, x, graphs, **cfg):
    """fn(x) compiled (fallback off) and [(fx name, engine op, kernel name)] of its engine graphs
    (`graphs`: conftest's engine_graphs fixture)."""
    with torch.no_grad():
        got = compile_native(fn, **cfg)(x)
    return got, [i for g in graphs for i in g.exe.instructions()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 4, 5, 33])
def test_int8_weights_stay_int8_in_the_engine(dtype, rows, engine_graphs):
    """With the exact path (int8_activations="off") every linear reads the int8 bytes (GEMV up to
    eight rows, per-block widening beyond), no node converts a weight per call, and the result is
    torchao's eager one. K = 100 and N = 300, 37: K and row tails of the GEMV, a bias and ReLU after
    the scale."""
    m = _mlp(100, 300, 37, dtype)
    x = torch.randn(rows, 100, dtype=dtype)
    got, ins = _kernels(m, x, engine_graphs, int8_activations="off")
    with torch.no_grad():
        want = m(x)
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    linears = [k for _, op, k in ins if op == "linear"]
    assert len(linears) == 2 and all(("gemv_int8" if rows <= 8 else "f32_int8_weights") in k for k in linears), ins
    assert not [op for _, op, _ in ins if op in ("convert", "matmul")], ins


def _int8_dot_cpu() -> bool:
    """Does this CPU have AVX-512 VNNI or AMX, where the per-row path runs (kernels/linear_widened.cpp)?"""
    flags = open("/proc/cpuinfo").read()
    return any(f in flags for f in ("avx512_vnni", "amx_int8"))


def _vnni_cpu() -> bool:
    """Does this CPU have AVX-512 VNNI, where the decode GEMV (up to eight rows) runs int8 products?"""
    flags = open("/proc/cpuinfo").read()
    return "avx512_vnni" in flags and "avx512bw" in flags


def _quantized_rows(rows: int) -> bool:
    """Whether the default int8_activations="per_row" quantizes linears of this many rows here."""
    return _vnni_cpu() if rows <= 8 else _int8_dot_cpu()


def _default_reference(m, x):
    """What the default config computes for the MLP `m`: the per-row reference where this CPU runs
    int8 products for x's rows, torchao's eager result elsewhere."""
    return _per_row_reference(m, x) if _quantized_rows(x.shape[0]) else m(x)


def _per_row_reference(m, x):
    """What int8_activations="per_row" computes, in PyTorch: each row of the linear's input rounded
    to int8 with the scale amax / 127 (half to even), integer products summed exactly, then the
    row's scale, the weight's scale and the bias; ReLU between the layers."""
    def linear(h, layer):
        h = h.float()
        amax = h.abs().amax(1, keepdim=True)
        q = torch.round(h * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax)))
        w = layer.weight
        acc = (q.double() @ w.qdata.double().t()).float()
        return acc * (amax / 127.0) * w.scale.float().reshape(1, -1) + layer.bias.float()
    return linear(torch.relu(linear(x, m[0])).to(x.dtype), m[2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 9, 33, 200])
def test_int8_activations_per_row(dtype, rows, engine_graphs):
    """The default int8_activations="per_row": linears with int8 weights quantize each input row to
    int8 at run time and multiply int8 by int8, reading the weights in place: more than eight rows
    with oneDNN (VNNI/AMX), up to eight (decode) with the GEMV's AVX-512 VNNI loop. The result is the
    per-row quantized product computed in PyTorch (to f32 rounding), and within the rounding of 8-bit
    activations of torchao's eager answer. K = 100: no multiple of the kernels' vector width."""
    m = _mlp(100, 300, 37, dtype)
    torch.manual_seed(rows)
    x = torch.randn(rows, 100, dtype=dtype)
    got, ins = _kernels(m, x, engine_graphs)
    linears = [k for _, op, k in ins if op == "linear"]
    assert len(linears) == 2, ins
    with torch.no_grad():
        eager = m(x).float()
        emulated = _per_row_reference(m, x)
    if not _quantized_rows(rows):
        print(f"this CPU has no {'AVX-512 VNNI' if rows <= 8 else 'AVX-512 VNNI or AMX'}: the exact path runs",
              linears)
        assert all(("gemv_int8" if rows <= 8 else "f32_int8_weights") in k and "quantized" not in k
                   for k in linears), ins
        torch.testing.assert_close(got.float(), eager, rtol=2e-2, atol=2e-2)
        return
    kind = "VNNI u8s8" if rows <= 8 else "s8s8_int8_weights"
    assert all(kind in k and "quantized per row" in k for k in linears), ins
    tol = 1e-4 if dtype == torch.float32 else 2e-2  # (bf16: the first layer's output is rounded to bf16)
    torch.testing.assert_close(got.float(), emulated, rtol=tol, atol=tol)
    # against torchao: 8-bit rounding of each input, |error| <= amax / 254 * sum |w| per output
    err = (got.float() - eager).abs().max().item()
    assert err < 0.05 * eager.abs().max().item(), err


def test_int8_activations_rows_with_inf_or_nan_are_exact(engine_graphs):
    """A row holding inf or nan has no int8 scale: it is computed exactly (the same inf and nan as
    eager), and the other rows of the call are still quantized."""
    m = torch.nn.Linear(64, 48).eval()
    quantize_(m, Int8WeightOnlyConfig())
    x = torch.randn(16, 64)
    x[3, 5] = float("inf")
    x[7, 0] = float("nan")
    x[11, 9] = -float("inf")
    got, ins = _kernels(m, x, engine_graphs)
    with torch.no_grad():
        want = m(x)
    bad = [3, 7, 11]
    torch.testing.assert_close(got[bad], want[bad], rtol=1e-4, atol=1e-4, equal_nan=True)
    good = [i for i in range(16) if i not in bad]
    torch.testing.assert_close(got[good], want[good], rtol=0.05, atol=0.05)
    assert torch.isfinite(got[good]).all()


def test_int8_activations_option():
    """int8_activations takes "per_row" or "off" (AIRGRAPH_INT8_ACTIVATIONS); anything else is refused."""
    assert airgraph.CompilerConfig().int8_activations == "per_row"
    assert airgraph.CompilerConfig(int8_activations="off").int8_activations == "off"
    with pytest.raises(ValueError, match="int8_activations='per_channel'"):
        airgraph.CompilerConfig(int8_activations="per_channel")


def test_weight_int8pack_mm_lowered(engine_graphs):
    """torch's fused weight-only int8 op (gpt-fast): with constant weights it reads them as int8;
    with the weights passed as an input it runs as written (a convert and a matmul)."""
    torch.manual_seed(0)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.randint(-128, 128, (70, 45), dtype=torch.int8))
            self.register_buffer("s", torch.rand(70) / 50)

        def forward(self, x):
            return torch.ops.aten._weight_int8pack_mm(x, self.w, self.s)

    m = M()
    for rows in (2, 9):
        x = torch.randn(rows, 45)
        got, ins = _kernels(m, x, engine_graphs, int8_activations="off")
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-4)
        assert [k for _, op, k in ins if op == "linear"] and "int8_weights" in ins[0][2], ins
    fn = lambda x, w, s: torch.ops.aten._weight_int8pack_mm(x, w, s)  # noqa: E731
    x = torch.randn(3, 45)
    with torch.no_grad():
        torch.testing.assert_close(compile_native(fn)(x, m.w, m.s), fn(x, m.w, m.s), rtol=1e-4, atol=1e-4)


def test_int8_weight_changed_in_place_is_seen():
    """The int8 data and scale are bound in place: an in-place change of either after compiling
    reaches the next call (the weight guard rebuilds), never a stale answer."""
    m = _mlp()
    c = torch.compile(m, backend="airgraph")
    x = torch.randn(2, 64)
    with torch.no_grad():
        torch.testing.assert_close(c(x), _default_reference(m, x), rtol=1e-4, atol=1e-4)
        m[0].weight.qdata.mul_(-1)
        torch.testing.assert_close(c(x), _default_reference(m, x), rtol=1e-4, atol=1e-4)
        m[2].weight.scale.mul_(3)
        torch.testing.assert_close(c(x), _default_reference(m, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cache", [True, False])
def test_int8_weight_only_mlp_matches_its_reference(tmp_path, cache):
    m = _mlp()
    assert type(m[0].weight) is not torch.nn.Parameter  # (torchao's subclass: the case that crashed)
    cfg = airgraph.CompilerConfig(cache_dir=str(tmp_path) if cache else "")
    c = torch.compile(m, backend=airgraph.get_backend(cfg))
    with torch.no_grad():
        for batch in (3, 3, 5):
            x = torch.randn(batch, 64)
            torch.testing.assert_close(c(x), _default_reference(m, x), rtol=1e-4, atol=1e-4)


def test_int8_weight_only_through_cache_compile(tmp_path):
    m = _mlp()
    f = airgraph.cache_compile(m.forward, cache_dir=str(tmp_path))
    with torch.no_grad():
        for batch in (2, 4):
            x = torch.randn(batch, 64)
            torch.testing.assert_close(f(x), _default_reference(m, x), rtol=1e-4, atol=1e-4)


def _decoder(weights):
    """The zoo-style small LLaMA decoder (tests/python/test_generate.py's) with its weights as users
    make them: int8 with torchao, or bf16 with .to()."""
    from test_generate import _model
    m = _model("llama")
    if weights == "bf16":
        return m.to(torch.bfloat16)
    quantize_(m, Int8WeightOnlyConfig())
    return m


@pytest.mark.parametrize("cache,int8_activations", [("dynamic", "per_row"), ("static", "per_row"), ("dynamic", "off")])
def test_int8_decoder_generates_eager_tokens(cache, int8_activations):
    """generate() of the int8 decoder with its forward compiled (dynamic=True, fallback off): 32
    greedy tokens equal torchao's eager ones, batch 2; exactly so with int8_activations="off", and on
    this model also with the activations quantized per row, prefill and decode (integer sums are exact on any
    VNNI/AMX CPU, so this does not depend on the machine)."""
    m = _decoder("int8")
    ids = torch.randint(3, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    kw = dict(do_sample=False, max_new_tokens=32, min_new_tokens=32, attention_mask=torch.ones_like(ids))
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        want = m.generate(ids, **kw)
        cfg = airgraph.CompilerConfig(fallback=False, int8_activations=int8_activations)
        m.forward = torch.compile(m.forward, backend=airgraph.get_backend(cfg), dynamic=True)
        got = m.generate(ids, **kw)
    assert torch.equal(got, want), (got != want).nonzero()[:4].tolist()


def test_bf16_decoder_logits_and_tokens():
    """A bf16 decoder runs on the engine in bf16 (fallback off): the prompt's logits within bf16's
    rounding of eager's, and the first 8 greedy tokens equal. (Longer runs drift apart: the engine
    rounds a fused chain once where eager rounds after every op, and GEMMs sum in another order, so
    a near tie between two tokens can go either way; bench/generate.py reports the agreement.)"""
    m = _decoder("bf16")
    ids = torch.randint(3, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    kw = dict(do_sample=False, max_new_tokens=8, min_new_tokens=8, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        want_logits = m(ids).logits
        want = m.generate(ids, **kw)
        m.forward = torch.compile(m.forward, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)),
                                  dynamic=True)
        got_logits = m(ids).logits
        got = m.generate(ids, **kw)
    assert got_logits.dtype == torch.bfloat16
    torch.testing.assert_close(got_logits.float(), want_logits.float(), atol=5e-2, rtol=5e-2)
    assert torch.equal(got, want), (got != want).nonzero()[:4].tolist()
