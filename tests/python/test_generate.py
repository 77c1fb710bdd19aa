"""transformers generate() with the forward compiled by airgraph, as users call it:
`model.forward = torch.compile(model.forward, backend="airgraph")`, the default dynamic KV cache
and the static cache, greedy and sampling, batch 1 and a left-padded batch, prompts whose length
changes between calls. Greedy tokens must equal eager's; every node of every graph runs on the
engine (fallback off), and graphs with symbolic sizes (the decode step's growing KV cache) are
lowered once for every size. (LLM generation's issue sets the targets for Dynamo's graph count and
speed; these tests pin what holds today: at most 4 graphs with the dynamic cache, 2 with the
static one.)"""
import pytest
import torch
import transformers

import airgraph
from airgraph.backend import collect_reports

VOCAB = 256


def _families():
    t = transformers
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return {
        "llama": (t.LlamaConfig, t.LlamaForCausalLM, common),
        "qwen2": (t.Qwen2Config, t.Qwen2ForCausalLM, common),
        "mistral": (t.MistralConfig, t.MistralForCausalLM, dict(common, sliding_window=None)),
        # a window shorter than prompt + new tokens: DynamicSlidingWindowLayers, whose graphs return the
        # layer's cumulative length (a size) and slice with max(0, length - window)
        "mistral_sliding": (t.MistralConfig, t.MistralForCausalLM, dict(common, sliding_window=8)),
        # sliding and full layers alternating, an attention mask computed in the graph from the sizes
        "gemma2": (t.Gemma2Config, t.Gemma2ForCausalLM, dict(common, head_dim=16, sliding_window=6)),
        "gpt2": (t.GPT2Config, t.GPT2LMHeadModel, dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                                        n_positions=256, bos_token_id=1, eos_token_id=2)),
    }


FAMILIES = list(_families())


def _model(name):
    cfg_cls, cls, kw = _families()[name]
    torch.manual_seed(0)
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager" if name == "gemma2" else "sdpa"  # (Gemma 2 soft-caps its scores: no SDPA)
    m = cls(cfg).eval()
    m.generation_config.pad_token_id = 0
    return m


class _Counting:
    def __init__(self):
        self.graphs = 0
        self.be = airgraph.get_backend(airgraph.CompilerConfig(fallback=False))

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.be(gm, example_inputs)


def _compiled(m):
    torch._dynamo.reset()
    be = _Counting()
    eager_forward = m.forward
    m.forward = torch.compile(m.forward, backend=be)
    return be, eager_forward


def _all_native_and_lowered_once(reps):
    assert all(n.native for r in reps for n in r.nodes), [n.name for r in reps for n in r.nodes if not n.native]
    syms = [g for r in reps for g in r.symbolic]
    assert all(g.template is not None for g in syms), [g.template_reason for g in syms]


def _gen(m, ids, n, **kw):
    with torch.no_grad():
        return m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_dynamic_cache_equals_eager(name):
    m = _model(name)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, VOCAB, (1, n), generator=g) for n in (7, 11, 5)]
    want = [_gen(m, p, 12) for p in prompts]
    be, _ = _compiled(m)
    with collect_reports() as reps:
        got = [_gen(m, p, 12) for p in prompts]
    for p, a, b in zip(prompts, got, want):
        assert torch.equal(a, b), f"{name}: prompt of {p.shape[1]} tokens: {a.tolist()} vs eager {b.tolist()}"
    _all_native_and_lowered_once(reps)
    # (a sliding-window layer branches on its length against the window: Dynamo traces again below,
    # at and past it, for prefill and decode)
    assert be.graphs <= (8 if name in ("mistral_sliding", "gemma2") else 4), f"{name}: {be.graphs} Dynamo graphs"


def test_left_padded_batch_and_sampling_equal_eager():
    m = _model("llama")
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, VOCAB, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # left padding
    want = _gen(m, ids, 10, attention_mask=mask)
    torch.manual_seed(5)
    with torch.no_grad():
        want_s = m.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=True, top_k=20)
    be, _ = _compiled(m)
    with collect_reports() as reps:
        got = _gen(m, ids, 10, attention_mask=mask)
        torch.manual_seed(5)
        with torch.no_grad():
            got_s = m.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=True, top_k=20)
    assert torch.equal(got, want), (got.tolist(), want.tolist())
    assert torch.equal(got_s, want_s), (got_s.tolist(), want_s.tolist())
    _all_native_and_lowered_once(reps)


def test_static_cache_equals_eager_without_recompiles():
    m = _model("llama")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, VOCAB, (1, n), generator=g) for n in (6, 6)]
    want = [_gen(m, p, 10, cache_implementation="static") for p in prompts]
    be, _ = _compiled(m)
    with collect_reports() as reps:
        got = [_gen(m, p, 10, cache_implementation="static") for p in prompts]
    for a, b in zip(got, want):
        assert torch.equal(a, b), (a.tolist(), b.tolist())
    _all_native_and_lowered_once(reps)
    assert be.graphs <= 2, f"{be.graphs} Dynamo graphs for two generate() calls with a static cache"
