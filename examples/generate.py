"""Text generation with transformers' generate() on airgraph.

    python examples/generate.py [--new 32] [--prompts 12,20] [--cache dynamic|static] [--cache-compile DIR]

Builds a small LLaMA-style decoder from its config (random weights: nothing is downloaded), compiles
its forward with torch.compile(backend="airgraph"), generates greedily with transformers' default
DynamicCache (or the static cache) for prompts of several lengths, and checks every token against
eager PyTorch. Prints the time of each generate() and, per compiled graph, how many programs the
engine built (one per new KV length, each in about a millisecond) and how many nodes ran in PyTorch.

With --cache-compile DIR the forward is airgraph.cache_compile'd instead, its entries kept in DIR:
the first process traces and saves, a second one run the same way replays them (it prints how many
frames Dynamo traced: 0).
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import airgraph  # noqa: E402
from airgraph.backend import collect_reports  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=int, default=32, help="new tokens per generate()")
    ap.add_argument("--prompts", default="12,20", help="prompt lengths, one generate() each")
    ap.add_argument("--cache", default="dynamic", choices=("dynamic", "static"))
    ap.add_argument("--cache-compile", default="", metavar="DIR",
                    help="airgraph.cache_compile the forward, entries in DIR (run twice: the second process replays)")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = LlamaForCausalLM(cfg).eval()
    kw = dict(max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, pad_token_id=0)
    if a.cache == "static":
        kw["cache_implementation"] = "static"
    prompts = [torch.randint(3, cfg.vocab_size, (1, int(n))) for n in a.prompts.split(",")]
    with torch.no_grad():
        want = [model.generate(p, **kw) for p in prompts]

        eager_forward = model.forward
        # the only change to the model; dynamic=True traces the prompt and cache lengths as symbols
        # from the first call: one prefill graph and one decode graph for any number of generate()s
        if a.cache_compile:
            # traced once (in the first process that has no entry), then replayed: no Dynamo
            model.forward = airgraph.cache_compile(model.forward, cache_dir=a.cache_compile)
        else:
            model.forward = torch.compile(model.forward, backend="airgraph", dynamic=True)
        with collect_reports() as reports:
            for p, w in zip(prompts, want):
                t0 = time.perf_counter()
                got = model.generate(p, **kw)
                ms = (time.perf_counter() - t0) * 1000
                same = torch.equal(got, w)
                print(f"prompt of {p.shape[1]} tokens: {a.new} new tokens in {ms:.0f} ms "
                      f"(compiles included on the first); tokens equal eager's: {same}")
                assert same, f"airgraph generated {got[0, -a.new:].tolist()}, eager {w[0, -a.new:].tolist()}"
        compiled, model.forward = model.forward, eager_forward
    if a.cache_compile:
        from torch._dynamo.utils import counters

        print(f"  {compiled!r}\n  frames Dynamo traced in this process: {counters['frames']['total']}")
    print(f"  {len(reports)} Dynamo graphs for {len(prompts)} generate() calls")
    for r in reports:
        fallback = sum(1 for n in r.nodes if not n.native)
        built = sum(len(g.build_ms) for g in r.symbolic)
        kind = f"symbolic sizes, {built} engine programs built" if r.symbolic else "static"
        print(f"  graph: {len(r.nodes)} ATen nodes, {fallback} in PyTorch, {kind}")
    print("OK")


if __name__ == "__main__":
    main()
