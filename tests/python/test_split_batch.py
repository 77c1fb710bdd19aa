"""split_batch: a convolution net's early layers at a large batch run a group of images at a time, the groups'
results concatenated where those layers end (csrc/passes/split_batch.cpp). Each test checks eager's result and
which nodes ran per group (their FX name repeated once per group) and which on the whole batch."""
import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import airgraph
from conftest import assert_close, compile_native


class Stem(nn.Module):
    """MobileNetV2's first layers at 112 x 112 (64 channels: 25.7 MB at batch 8, above the pass's 24 MB), an
    inverted residual block, then a pooled classifier. `tail` adds, after a pool to 28 x 28, a 1x1 convolution
    to 256 channels read by a flatten (a node of the whole batch): it leaves the region, whose end is then its
    16-channel input. `mix` subtracts the batch's mean of the block's result (a node across images). `features`
    also returns the block's result."""

    def __init__(self, tail=False, mix=False, features=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(64, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.expand = nn.Sequential(nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.project2 = nn.Sequential(nn.Conv2d(64, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.tail = nn.Conv2d(16, 256, 1) if tail else None
        self.mix, self.features = mix, features
        self.fc = nn.Linear(256 * 28 * 28 if tail else 16, 10)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.2, 0.2), m.running_var.uniform_(0.5, 2.0), m.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.project(self.dw(self.stem(x)))
        y = y + self.project2(self.expand(y))
        if self.mix:
            y = y - y.mean(0, keepdim=True)
        if self.tail is not None:
            return self.fc(self.tail(F.avg_pool2d(y, 4)).flatten(1))
        logits = self.fc(y.mean((2, 3)))
        return (y, logits) if self.features else logits


def runs(graphs):
    """FX name -> how many instructions carry it, over the engine graphs compiled."""
    return collections.Counter(nm for g in graphs for nm, _, _ in g.exe.instructions())


def kernels(graphs, op):
    return [k for g in graphs for _, o, k in g.exe.instructions() if o == op]


def run_at_batch_8(m, engine_graphs):
    """The model compiled (all nodes native) and called at batch 8, checked against eager; its input and the
    FX name -> instruction count of what it ran."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, 224, 224)
    with torch.no_grad():
        want = m.eval()(x)
        got = compile_native(m)(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert_close(g, w)
    return x, runs(engine_graphs)


@pytest.mark.parametrize("batch,groups", [(8, 4), (12, 6), (2, 1)])
def test_early_layers_run_per_image_at_a_large_batch(batch, groups, engine_graphs):
    """At batch 8 and 12 the layers up to the spatial mean run two images at a time (the largest value, 64 x 112 x
    112 floats an image, fits twice in a group's 8 MB), the pooled results concatenated once, the classifier on
    the whole batch; at batch 2 (6.4 MB in all) nothing is split. Eager's result; the same numbers with the pass
    switched off."""
    torch.manual_seed(0)
    m = Stem().eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        want = m(x)
        got = compile_native(m)(x)
        split = runs(engine_graphs)
        n = len(engine_graphs)
        off = compile_native(m, disable_passes=["split_batch"])(x)
        whole = runs(engine_graphs[n:])
    assert_close(got, want, msg="split vs eager")
    assert_close(off, want, msg="whole vs eager")
    assert_close(got, off, atol=1e-6, rtol=1e-6, msg="split vs whole")
    convs = [nm for nm in whole if nm.startswith("convolution")]
    assert len(convs) == 5, whole
    for nm in convs:
        assert split[nm] == groups, (nm, split)
        assert whole[nm] == 1, (nm, whole)
    assert len(kernels(engine_graphs[:n], "cat")) == (1 if groups > 1 else 0), split
    assert len(kernels(engine_graphs[:n], "slice_view")) == (groups if groups > 1 else 0), split


def test_a_layer_that_widens_its_input_at_the_end_runs_on_the_whole_batch(engine_graphs):
    """The region's results are concatenated where it ends: a 1x1 convolution to 256 channels whose result is read
    by a node of the whole batch (the flatten) leaves the region, so that the 16-channel pooled value is the one
    copied; every layer before it runs per image."""
    torch.manual_seed(0)
    m = Stem(tail=True)
    x, split = run_at_batch_8(m, engine_graphs)
    assert [split[f"convolution{s}"] for s in ("", "_1", "_2", "_3", "_4", "_5")] == [4, 4, 4, 4, 4, 1], split
    assert split["avg_pool2d"] == 4 + 1, split  # (the concatenation after it carries its name)
    assert len(kernels(engine_graphs, "avg_pool2d")) == 4 and len(kernels(engine_graphs, "cat")) == 1, split


def test_a_node_across_images_ends_the_region(engine_graphs):
    """y - y.mean(0) reads every image: the region ends before it (the mean over the batch runs on the
    concatenated result) and the result is eager's."""
    torch.manual_seed(0)
    m = Stem(mix=True)
    x, split = run_at_batch_8(m, engine_graphs)
    assert all(split[nm] == 4 for nm in split if nm.startswith("convolution")), split
    assert split["mean"] == 1 and split["sub"] == 1, split


def test_a_region_value_returned_as_an_output(engine_graphs):
    """The block's result is also a graph output: its groups' parts are concatenated for it (a channels-last
    value, handed back as the output eager gives), and the spatial mean, which now would add a second
    concatenation, reads that one on the whole batch. Data dumps attribute the concatenation to the FX node whose
    whole result it is (airgraph.debug.compare reads them)."""
    torch.manual_seed(0)
    m = Stem(features=True)
    x, split = run_at_batch_8(m, engine_graphs)
    assert split["convolution"] == 4 and len(kernels(engine_graphs, "cat")) == 1 and split["mean"] == 1, split
    rep = airgraph.debug.compare(m, x)
    assert rep.first is None and rep.compared >= 1, rep


def test_split_graph_the_way_users_run_it(engine_graphs, tmp_path):
    """torch.compile with the backend's name, a channels-last input, a weight changed in place afterwards (every
    group reads the same weight), and the exported file loaded back."""
    torch.manual_seed(0)
    m = Stem().eval()
    x = torch.randn(8, 3, 224, 224).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(m, backend="airgraph")
        assert_close(compiled(x), m(x), msg="channels-last input")
        assert runs(engine_graphs)["convolution"] == 4
        m.stem[0].weight.mul_(-0.5)
        assert_close(compiled(x), m(x), msg="after a weight change")
        path = str(tmp_path / "stem.agraph")
        airgraph.export(m, (x.contiguous(),), path)
        assert_close(airgraph.load(path)(x), m(x), msg="exported and loaded")


def test_dynamic_batch(engine_graphs):
    """A graph whose batch is a symbol: the symbolic graph is not split (its sizes are the symbol's); the sizes it
    runs at are static graphs, split where they are large enough (the check that the passes decide alike at
    every size then has each size run the passes). Each size's result is eager's."""
    torch.manual_seed(0)
    m = Stem().eval()
    torch._dynamo.reset()
    compiled = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)), dynamic=True)
    with torch.no_grad():
        for b in (8, 9, 2):
            x = torch.randn(b, 3, 224, 224)
            assert_close(compiled(x), m(x), msg=f"batch {b}")
