"""Offline export: a model written to one airgraph file, run without Dynamo (Python) and without
Python at all (the C++ CLI airgraph-run).

    python examples/export.py [--out export_demo]

Builds a small BERT from its config (random weights: nothing is downloaded), exports it with a
symbolic batch size (airgraph.export: torch.export, lowered once, weights inline, checked against
the model before the file is written), loads the file back (airgraph.load: no tracing) and checks
two batch sizes against eager, and writes example inputs as .npy files for airgraph-run:

    airgraph-run export_demo/model.agraph --info
    airgraph-run export_demo/model.agraph --input export_demo/ids.npy --input export_demo/mask.npy --bench 100
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

import airgraph  # noqa: E402


class Encoder(torch.nn.Module):
    """BERT's last hidden state (a tensor, not transformers' output object)."""

    def __init__(self, cfg):
        super().__init__()
        self.bert = BertModel(cfg)

    def forward(self, ids, mask):
        return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="export_demo", help="folder for model.agraph and the .npy inputs")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=64)
    model = Encoder(cfg).eval()
    ids, mask = torch.randint(0, 1000, (2, 16)), torch.ones(2, 16, dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=64)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "model.agraph")
    t0 = time.perf_counter()
    airgraph.export(model, (ids, mask), path, dynamic_shapes={"ids": {0: batch}, "mask": {0: batch}})
    print(f"exported to {path} ({os.path.getsize(path) / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    loaded = airgraph.load(path)
    print(f"loaded in {(time.perf_counter() - t0) * 1000:.0f} ms: {loaded}")
    with torch.no_grad():
        for b in (1, 5):
            x, m = torch.randint(0, 1000, (b, 16)), torch.ones(b, 16, dtype=torch.int64)
            diff = (loaded(x, m) - model(x, m)).abs().max().item()
            print(f"batch {b}: max abs difference to eager {diff:.2e}")
            assert diff < 1e-4, diff
    np.save(os.path.join(a.out, "ids.npy"), ids.numpy())
    np.save(os.path.join(a.out, "mask.npy"), mask.numpy())
    print(f"inputs for airgraph-run: {a.out}/ids.npy, {a.out}/mask.npy")
    print("OK")


if __name__ == "__main__":
    main()
