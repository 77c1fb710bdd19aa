"""Repeated blocks traced once: torch.compiler.nested_compile_region's invoke_subgraph calls are
lowered natively (inlined before lowering: no fallback, the engine graph of the unmarked model), and
airgraph.cache_compile marks a model's ModuleList layers itself while tracing (repeated_blocks="auto"),
decoder layers handed a transformers DynamicCache included (through a stand-in for their own cache layer)."""
import contextlib
import json
import os
import subprocess
import sys
import types

import pytest
import torch

import airgraph
from airgraph.backend import collect_reports
from conftest import assert_close

transformers = pytest.importorskip("transformers")
import transformers.models.bert.modeling_bert as modeling_bert  # noqa: E402


def _bert(layers=3):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100, max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


@contextlib.contextmanager
def _marked(*classes):
    """The user's way: the layer class's forward as a nested_compile_region (class-level: torch 2.13's
    Dynamo stamps out an instance-level marking of plain modules with the first layer's weights)."""
    saved = [(c, vars(c)["forward"]) for c in classes]
    try:
        for c, f in saved:
            c.forward = torch.compiler.nested_compile_region(f)
        yield
    finally:
        for c, f in saved:
            c.forward = f


def _fallbacks(reports) -> int:
    return sum(not n.native for r in reports for n in r.nodes)


@pytest.mark.parametrize("dynamic", [None, True])
def test_user_marked_encoder_runs_whole_on_the_engine(dynamic):
    torch._dynamo.reset()
    model = _bert()
    compiled = torch.compile(model, backend="airgraph", dynamic=dynamic)
    g = torch.Generator().manual_seed(1)
    with _marked(modeling_bert.BertLayer), torch.no_grad(), collect_reports() as reports:
        for shape in [(1, 8), (2, 8), (3, 12)]:  # batch and length change: a symbolic graph after the first
            ids = torch.randint(0, 100, shape, generator=g)
            out = compiled(ids)
            want = model(ids)
            assert_close(out.last_hidden_state, want.last_hidden_state, atol=1e-4, rtol=1e-4)
            assert_close(out.pooler_output, want.pooler_output, atol=1e-4, rtol=1e-4)
    assert reports
    # every graph held the three layers' calls and ran whole on the engine
    assert all(r.inlined_subgraphs == 3 for r in reports), [r.inlined_subgraphs for r in reports]
    assert _fallbacks(reports) == 0
    assert all(r.engine_graphs == 1 for r in reports)


class _Inner(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x))



class _Block(torch.nn.Module):
    """Two outputs; a nested marked region called twice; optionally an op the engine cannot run."""

    def __init__(self, d, det=False):
        super().__init__()
        self.a, self.b = _Inner(d), _Inner(d)
        self.norm = torch.nn.LayerNorm(d)
        self.det = det

    def forward(self, x, skip):
        h = self.a(x)
        h = self.b(h) + skip
        y = self.norm(h)
        if self.det:
            y = y + torch.linalg.det(y[..., :4, :4]).unsqueeze(-1).unsqueeze(-1) * 1e-3
        return y, h * 0.5


class _Stack(torch.nn.Module):
    def __init__(self, n=3, d=16, det=False):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block(d, det) for _ in range(n))
        self.head = torch.nn.Linear(d, 4)

    def forward(self, x):
        skip = x * 1.0
        for blk in self.blocks:
            x, skip = blk(x, skip)
        return self.head(x), skip


@pytest.mark.parametrize("det", [False, True], ids=["native", "fallback-inside-block"])
def test_hand_written_blocks_nested_regions_and_several_outputs(det):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Stack(det=det).eval()
    x = torch.randn(2, 6, 16)
    with _marked(_Block, _Inner), torch.no_grad(), collect_reports() as reports:  # (_Inner: nested regions)
        got = torch.compile(model, backend="airgraph")(x)
        want = model(x)
    for a, b in zip(got, want):
        assert_close(a, b, atol=1e-4, rtol=1e-4)
    (r,) = reports
    assert r.inlined_subgraphs == 3 + 3 * 2  # three blocks, each with two nested calls
    if det:  # the determinant (no lowering) runs in PyTorch, alone: one per block, the rest on the engine
        bad = [n for n in r.nodes if not n.native]
        assert len(bad) == 3 and all("det" in n.target for n in bad), [(n.name, n.target) for n in bad]
        assert r.engine_graphs >= 2
    else:
        assert _fallbacks(reports) == 0 and r.engine_graphs == 1


ENCODER = r"""
import json, sys, torch, transformers
import airgraph
torch.manual_seed(0)
cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
                              vocab_size=100, max_position_embeddings=64)
model = transformers.BertModel(cfg).eval()
f = airgraph.cache_compile(model.forward, cache_dir=sys.argv[1],
                           config=airgraph.CompilerConfig(repeated_blocks=sys.argv[2]))
g = torch.Generator().manual_seed(1)
diffs = []
with torch.no_grad():
    for shape in [(2, 8), (3, 12), (2, 8)]:
        ids = torch.randint(0, 100, shape, generator=g)
        diffs.append((f(ids).last_hidden_state - model(ids).last_hidden_state).abs().max().item())
print("RESULT " + json.dumps({"diffs": diffs, "counts": f.counts, "unsaved": f.unsaved,
                              "restored": not hasattr(transformers.models.bert.modeling_bert.BertLayer.forward, "_airgraph_marked")}))
"""


def _run(script, *args):
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_cache_compile_marks_encoder_layers_and_replays_in_a_new_process(tmp_path, mode):
    first = _run(ENCODER, str(tmp_path), mode)
    assert max(first["diffs"]) < 1e-4, first
    assert first["restored"] and first["unsaved"] is None
    assert first["counts"]["traces"] == 1 and first["counts"]["saved"] == 1, first["counts"]
    # "auto": the traced graph held the layers as invoke_subgraph calls; "off": plain layers
    assert first["counts"]["marked"] == (1 if mode == "auto" else 0), first["counts"]
    again = _run(ENCODER, str(tmp_path), mode)  # a new process: the saved entry, no Dynamo trace
    assert max(again["diffs"]) < 1e-4, again
    assert again["counts"]["traces"] == 0 and again["counts"]["replays"] == 3, again["counts"]


def test_config_switch_and_env(monkeypatch):
    assert airgraph.CompilerConfig().repeated_blocks == "auto"
    monkeypatch.setenv("AIRGRAPH_REPEATED_BLOCKS", "off")
    assert airgraph.CompilerConfig().repeated_blocks == "off"
    with pytest.raises(ValueError, match="repeated_blocks"):
        airgraph.CompilerConfig(repeated_blocks="on")


def test_marking_is_restored_and_skips_what_it_must():
    from airgraph.repeated import marked_blocks, repeated_blocks

    model = _bert(layers=2)
    plain = _Stack(n=1)  # one block: nothing repeated
    assert repeated_blocks(plain) == []
    assert repeated_blocks(model.encoder.layer[0].forward) == []  # (a function: nothing)
    plain_forward = vars(modeling_bert.BertLayer)["forward"]
    with marked_blocks(model) as classes:
        assert classes == [modeling_bert.BertLayer]
        assert getattr(modeling_bert.BertLayer.forward, "_airgraph_marked", False)
        assert all("forward" not in vars(layer) for layer in model.encoder.layer)
    assert vars(modeling_bert.BertLayer)["forward"] is plain_forward  # restored
    # a layer with a forward of its own (the user's marking, a hook library's) is left alone
    model.encoder.layer[1].forward = types.MethodType(modeling_bert.BertLayer.forward, model.encoder.layer[1])
    assert repeated_blocks(model) == []


DECODER = r"""
import json, logging, re, sys, torch, transformers, airgraph
cache_dir, variant = sys.argv[1], sys.argv[2]
calls = []  # per trace, how many layer calls ran as repeated-block regions (cache_compile's INFO line)
class Calls(logging.Handler):
    def emit(self, r):
        m = re.search(r"traced once for (\d+) calls", r.getMessage())
        calls.append(int(m.group(1)) if m else 0) if "traced" in r.getMessage() else None
logging.getLogger("airgraph").addHandler(Calls())
logging.getLogger("airgraph").setLevel(logging.INFO)
torch.manual_seed(0)
kw = dict(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
          num_key_value_heads=2, max_position_embeddings=128)
if variant == "sliding":  # a DynamicCache of DynamicSlidingWindowLayers and DynamicLayers, prompts past the window
    kw.update(use_sliding_window=True, sliding_window=6, max_window_layers=1, num_hidden_layers=4,
              layer_types=["full_attention", "sliding_attention"] * 2)
model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw)).eval()
gen = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
if variant == "static":  # a StaticCache (updated in place): not a DynamicCache, its layers run unmarked
    gen["cache_implementation"] = "static"
prompts = [torch.randint(3, 200, (1, n), generator=torch.Generator().manual_seed(n)) for n in (9, 12)]
with torch.no_grad():
    want = [model.generate(input_ids=p, attention_mask=torch.ones_like(p), **gen).tolist() for p in prompts]
    model.forward = airgraph.cache_compile(model.forward, cache_dir=cache_dir, dynamic=True)
    got = [model.generate(input_ids=p, attention_mask=torch.ones_like(p), **gen).tolist() for p in prompts]
print("RESULT " + json.dumps({"equal": got == want, "got": got, "want": want, "counts": model.forward.counts, "calls": calls,
                              "unsaved": model.forward.unsaved,
                              "restored": not hasattr(transformers.models.qwen2.modeling_qwen2.Qwen2DecoderLayer.forward,
                                                      "_airgraph_marked")}))
"""


@pytest.mark.parametrize("variant", ["dynamic", "sliding", "static"])
def test_generate_with_a_kv_cache_marks_decoder_layers_and_replays(tmp_path, variant):
    """generate() hands every layer the DynamicCache: a marked layer gets a stand-in for its own cache
    layer (its keys and values in and out of the region as tensors), so the 3 layers are traced once,
    prefill and decode; tokens equal eager's for two prompt lengths, and a new process replays the
    saved entries without Dynamo. Caches it cannot serve (sliding-window layers, a StaticCache) run
    those layers unmarked, with the same tokens; their graphs are saved too (a sliding-window layer's
    `cumulative_length`, a size the graph returns, is computed from the call's sizes) and replayed."""
    first = _run(DECODER, str(tmp_path), variant)
    assert first["equal"], first
    assert first["restored"], first
    c = first["counts"]
    if variant == "dynamic":
        assert c["marked"] == c["traces"] == 2, c  # prefill and decode: each graph held the layers as regions
        assert first["calls"] == [3, 3], first["calls"]  # all 3 layers
    if variant == "sliding":
        # the full-attention layers are regions, the sliding-window ones run unmarked (inlined)
        assert first["calls"] == [2] * c["traces"], first["calls"]
    if variant == "static":
        assert c["marked"] == 0, c  # a StaticCache: every layer ran unmarked (inlined)
    assert first["unsaved"] is None and c["traces"] >= 1 and c["saved"] == c["traces"], c
    again = _run(DECODER, str(tmp_path), variant)
    assert again["equal"], again
    assert again["counts"]["traces"] == 0 and again["counts"]["replays"] >= 10, again["counts"]


_DECODER_KW = dict(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=128)


def _tiny_decoder(family):
    torch.manual_seed(0)
    if family == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=200, n_embd=64, n_layer=3, n_head=4,
                                                                    n_positions=128)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_DECODER_KW)).eval()


def _qwen2_with_layers(layer_cls):
    """A 3-layer Qwen2 whose decoder layers are `layer_cls(config, index)`, with the plain layers' weights."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(**_DECODER_KW)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    layers = torch.nn.ModuleList(layer_cls(cfg, i) for i in range(cfg.num_hidden_layers))
    layers.load_state_dict(model.model.layers.state_dict(), strict=False)
    model.model.layers = layers.eval()
    return model


def _eager_then_cache_compiled(model, tmp_path, lengths, new_tokens=5):
    """Greedy generate() of prompts of these lengths, in eager and then with model.forward
    cache_compile'd (dynamic=True): (eager's tokens, cache_compile's tokens)."""
    torch._dynamo.reset()
    gen = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    prompts = [torch.randint(3, 200, (1, n), generator=torch.Generator().manual_seed(n)) for n in lengths]
    with torch.no_grad():
        want = [model.generate(input_ids=p, attention_mask=torch.ones_like(p), **gen).tolist() for p in prompts]
        model.forward = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path), dynamic=True)
        got = [model.generate(input_ids=p, attention_mask=torch.ones_like(p), **gen).tolist() for p in prompts]
    return want, got


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_marks_other_decoder_families(tmp_path, family):
    """GPT-2 (its keys and values are views of one tensor: the stand-in's first update copies them,
    as DynamicLayer's does, so the region's outputs do not alias) and Llama: both traces marked,
    tokens equal eager's for two prompt lengths."""
    model = _tiny_decoder(family)
    want, got = _eager_then_cache_compiled(model, tmp_path, (9, 13))
    assert got == want
    c = model.forward.counts
    assert c["marked"] == c["traces"] == c["saved"] == 2, c


def test_block_with_two_cache_layer_indices_runs_unmarked(tmp_path):
    """A block holding attentions of two layer indices (a stand-in serves one cache layer, and the
    index a block updates is not checked inside the region): its calls with a cache run unmarked."""
    from transformers.models.qwen2 import modeling_qwen2

    class TwoIndices(modeling_qwen2.Qwen2DecoderLayer):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.other = modeling_qwen2.Qwen2Attention(config, (layer_idx + 1) % config.num_hidden_layers)

    model = _qwen2_with_layers(TwoIndices)
    want, got = _eager_then_cache_compiled(model, tmp_path, (9,), new_tokens=4)
    assert got == want
    assert model.forward.counts["marked"] == 0 and model.forward.counts["traces"] >= 1, model.forward.counts


def test_stand_in_cache_refuses_what_it_cannot_serve(tmp_path, caplog):
    """A block that asks its cache for more than its own layer's update (here the whole cache's
    layers) makes the marked trace fail: the DynamicCache is put back as it was, the call is traced
    again unmarked, and the tokens still equal eager's (a wrong cache state would change them)."""
    from transformers.models.qwen2 import modeling_qwen2

    class Peeking(modeling_qwen2.Qwen2DecoderLayer):
        def forward(self, hidden_states, *args, **kwargs):
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            if cache is not None:
                hidden_states = hidden_states + 0.0 * len(cache.layers)
            return super().forward(hidden_states, *args, **kwargs)

    model = _qwen2_with_layers(Peeking)
    with caplog.at_level("INFO", logger="airgraph"):
        want, got = _eager_then_cache_compiled(model, tmp_path, (9,))
    assert got == want
    assert "Dynamo failed on the marked repeated blocks" in caplog.text, caplog.text[-3000:]
    assert model.forward.counts["marked"] == 0, model.forward.counts
    assert not hasattr(Peeking.forward, "_airgraph_marked")


@pytest.mark.parametrize("dynamic", [False, True])
def test_cache_compile_marks_plain_module_blocks_correctly(tmp_path, dynamic, caplog):
    """Plain nn.Module blocks (several outputs): each layer's own weights in the stamped-out calls
    (dynamic=False); where Dynamo fails on the marked blocks (torch 2.13, these blocks with symbolic
    sizes) the call is traced again unmarked, and says so."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Stack(n=3).eval()
    x = torch.randn(2, 6, 16)
    f = airgraph.cache_compile(model.forward, cache_dir=str(tmp_path), dynamic=dynamic)
    with torch.no_grad(), caplog.at_level("INFO", logger="airgraph"):
        want = model(x)
        for _ in range(2):
            got = f(x)
            for a, b in zip(got, want):
                assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert f.counts["traces"] == 1 and f.counts["replays"] == 1, f.counts
    failed = "Dynamo failed on the marked repeated blocks" in caplog.text
    assert f.counts["marked"] == (0 if failed else 1), (f.counts, caplog.text[-2000:])
    if not dynamic:
        assert f.counts["marked"] == 1
