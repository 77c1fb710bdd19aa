"""Graph dumps (text, runnable Python, Graphviz DOT/SVG) and data dumps
(.npy files or one .safetensors file, with an index.json).

A graph dump folder holds, per engine graph, one file set per stage:
`00_lowered.{txt,py,dot,svg}` then one per pass (`01_canonicalize...`), plus
`consts.pt` (every constant any stage refers to) and `inputs.pt` (the first
call's inputs), so each `.py` rebuilds the graph with the builder API, runs it
and prints or saves the outputs.

The compile pipeline (airgraph/pipeline.py) takes the dumps as observers of its stages:
`GraphDump` (every stage of every engine graph, the first call's inputs) and `DataDump` (every
value of the first call).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess

import torch

log = logging.getLogger("airgraph")


def _fmt_attrs(attrs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in attrs.items())


def graph_text(desc: dict) -> str:
    names = {}
    for v in desc["inputs"] + desc["consts"]:
        names[v["id"]] = v["name"]
    for n in desc["nodes"]:
        for o in n["outputs"]:
            names[o["id"]] = o["name"]
    lines = ["graph("]
    for v in desc["inputs"]:
        lines.append(f"    %{v['name']}: {v['dtype']}{v['shape']},")
    lines.append(") {")
    for c in desc["consts"]:
        lines.append(f"  %{c['name']}: {c['dtype']}{c['shape']} = constant")
    for n in desc["nodes"]:
        outs = ", ".join(f"%{o['name']}: {o['dtype']}{o['shape']}" for o in n["outputs"])
        ins = ", ".join(f"%{names.get(i, i)}" for i in n["inputs"])
        attrs = f" {{{_fmt_attrs(n['attrs'])}}}" if n["attrs"] else ""
        src = f"  # {n['source'].splitlines()[0]}" if n["source"] else ""
        lines.append(f"  {outs} = {n['op']}({ins}){attrs}{src}")
    lines.append("  return " + ", ".join(f"%{names.get(i, i)}" for i in desc["outputs"]))
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_python(desc: dict, title: str) -> str:
    """A script that rebuilds this graph with airgraph's builder and runs it."""
    L = [
        f'"""{title}\n\nRebuilds the engine graph with the builder API, runs it on inputs.pt (or random',
        'inputs of the right shapes) and prints the outputs; --out FILE saves them with torch.save."""',
        "import os, sys",
        "import torch",
        "import airgraph",
        "from airgraph._core import C",
        "",
        "HERE = os.path.dirname(os.path.abspath(__file__))",
        "",
        "",
        "def build():",
        "    consts = torch.load(os.path.join(HERE, 'consts.pt'))",
        "    g = C.Graph()",
        "    v = {}",
    ]
    for x in desc["inputs"]:
        L.append(f"    v[{x['id']}] = g.add_input({x['dtype']!r}, {list(x['shape'])!r}, {x['name']!r})")
    for c in desc["consts"]:
        L.append(f"    v[{c['id']}] = g.add_const(consts['v{c['id']}'], {c['name']!r})")
    for n in desc["nodes"]:
        outs = "".join(f"v[{o['id']}], " for o in n["outputs"])
        ins = "[" + ", ".join(f"v[{i}]" for i in n["inputs"]) + "]"
        L.append(f"    ({outs}) = g.add_node({n['op']!r}, {ins}, {{{_fmt_attrs_py(n['attrs'])}}}, {n['name']!r}, "
                 f"{n['source']!r})")
    L.append("    g.set_outputs([" + ", ".join(f"v[{i}]" for i in desc["outputs"]) + "])")
    L.append("    return g")
    L += [
        "",
        "",
        "def inputs():",
        "    path = os.path.join(HERE, 'inputs.pt')",
        "    if os.path.exists(path):",
        "        return torch.load(path)",
        "    return [" + ", ".join(_random_input(x) for x in desc["inputs"]) + "]",
        "",
        "",
        "if __name__ == '__main__':",
        "    g = build()",
        "    g.optimize()",
        "    outs = g.compile().run(inputs())",
        "    if '--out' in sys.argv:",
        "        torch.save(list(outs), sys.argv[sys.argv.index('--out') + 1])",
        "    else:",
        "        for o in outs:",
        "            print(o.dtype, tuple(o.shape), o.flatten()[:8])",
    ]
    return "\n".join(L) + "\n"


def _fmt_attrs_py(attrs: dict) -> str:
    return ", ".join(f"{k!r}: {v!r}" for k, v in attrs.items())


def _random_input(x: dict) -> str:
    dt = x["dtype"]
    if dt in ("float32", "float64", "float16", "bfloat16"):
        return f"torch.randn({list(x['shape'])!r}, dtype=torch.{dt})"
    if dt == "bool":
        return f"torch.zeros({list(x['shape'])!r}, dtype=torch.bool)"
    return f"torch.zeros({list(x['shape'])!r}, dtype=torch.{dt})"


def graph_dot(desc: dict, title: str) -> str:
    L = [f'digraph "{title}" {{', "  rankdir=TB;", '  node [fontname="monospace", fontsize=10];']
    for v in desc["inputs"]:
        L.append(f'  v{v["id"]} [shape=ellipse, style=filled, fillcolor="#dbeafe", '
                 f'label="{v["name"]}\\n{v["dtype"]}{v["shape"]}"];')
    for c in desc["consts"]:
        L.append(f'  v{c["id"]} [shape=note, style=filled, fillcolor="#f3f4f6", '
                 f'label="{c["name"]}\\n{c["dtype"]}{c["shape"]}"];')
    producer = {}
    for k, n in enumerate(desc["nodes"]):
        for o in n["outputs"]:
            producer[o["id"]] = f"n{k}"
        out = n["outputs"][0] if n["outputs"] else {"dtype": "", "shape": []}
        src = n["source"].split(":")[0:2]
        src = (":".join(src)).split("/")[-1] if n["source"] else ""
        label = f'{n["name"]}\\n{n["op"]}\\n{out["dtype"]}{out["shape"]}' + (f"\\n{src}" if src else "")
        L.append(f'  n{k} [shape=box, style="rounded,filled", fillcolor="#dcfce7", label="{_esc(label)}"];')
    for k, n in enumerate(desc["nodes"]):
        for i in n["inputs"]:
            L.append(f"  {producer.get(i, f'v{i}')} -> n{k};")
    for j, i in enumerate(desc["outputs"]):
        L.append(f'  out{j} [shape=ellipse, style=filled, fillcolor="#fde68a", label="output {j}"];')
        L.append(f"  {producer.get(i, f'v{i}')} -> out{j};")
    L.append("}")
    return "\n".join(L) + "\n"


def _esc(s: str) -> str:
    return s.replace('"', '\\"')


def render_svg(dot_path: str) -> str | None:
    if not shutil.which("dot"):
        return None
    svg = dot_path[:-4] + ".svg"
    try:
        subprocess.run(["dot", "-Tsvg", dot_path, "-o", svg], check=True, capture_output=True, timeout=60)
        return svg
    except Exception:
        return None


class GraphDumper:
    """Writes one engine graph's stages into `folder`."""

    def __init__(self, folder: str, pygraph):
        self.folder = folder
        self.g = pygraph
        self.stage = 0
        self.consts: dict[str, torch.Tensor] = {}
        os.makedirs(folder, exist_ok=True)

    def write_fx(self, gm: torch.fx.GraphModule, name: str = "fx_graph"):
        with open(os.path.join(self.folder, name + ".txt"), "w") as f:
            f.write(str(gm.graph))
        with open(os.path.join(self.folder, name + ".py"), "w") as f:
            f.write(gm.print_readable(print_output=False))

    def stage_dump(self, pass_name: str, desc: dict):
        for c in desc["consts"]:
            key = f"v{c['id']}"
            if key not in self.consts:
                self.consts[key] = self.g.const_array(c["id"]).clone()
        base = os.path.join(self.folder, f"{self.stage:02d}_{pass_name}")
        self.stage += 1
        title = f"engine graph after {pass_name}"
        with open(base + ".txt", "w") as f:
            f.write(graph_text(desc))
        with open(base + ".py", "w") as f:
            f.write(graph_python(desc, title))
        with open(base + ".dot", "w") as f:
            f.write(graph_dot(desc, title))
        render_svg(base + ".dot")
        torch.save(self.consts, os.path.join(self.folder, "consts.pt"))

    def save_inputs(self, inputs):
        torch.save([t.detach().clone() for t in inputs], os.path.join(self.folder, "inputs.pt"))


class GraphDump:
    """Pipeline observer: dumps each engine graph's FX graph (when there is one), its lowered graph
    and the graph after every pass into <dump_dir>/graph_<gid>, and its first call's inputs."""

    def __init__(self, dump_dir: str, gm: torch.fx.GraphModule | None):
        self.dump_dir, self.gm = dump_dir, gm
        self.dumpers: dict[int, GraphDumper] = {}
        self.current: GraphDumper | None = None  # (the pipeline runs one graph's stages at a time)

    def lowered(self, gid, low):
        self.current = self.dumpers[gid] = GraphDumper(os.path.join(self.dump_dir, f"graph_{gid}"), low.g)
        if self.gm is not None:
            self.current.write_fx(self.gm)
        self.current.stage_dump("lowered", low.g.describe())

    def after_pass(self, name, desc):
        self.current.stage_dump(name, desc)

    def template(self, gid, symbols: str, guards: dict, g):
        """A symbolic graph lowered once for every size, with its size expressions and guards."""
        folder = os.path.join(self.dump_dir, f"graph_{gid}_symbolic")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "lowered_once.txt"), "w") as f:
            f.write(f"# symbols: {symbols}\n")
            f.write("".join(f"# guard: {rel} is {out}\n" for rel, out in guards.items()))
            f.write(str(g))

    def called(self, eg, n, args, inputs, outputs):
        if n == 1 and eg.gid in self.dumpers:
            self.dumpers[eg.gid].save_inputs(inputs)


class DataDumpRecord:
    """What a data dump kept of one engine graph (airgraph.debug.compare reads it): the FX graph,
    the dumped entries and tensors of the first call, and that call's arguments."""

    def __init__(self, gm, entries):
        self.gm, self.entries = gm, entries
        self.dumped: list[tuple[dict, torch.Tensor]] = []
        self.first_args: list | None = None


class DataDump:
    """Pipeline observer: exposes every value of an engine graph after the passes (those matching
    `dump_filter`) and writes them at its first call into <dump_dir>/data_<gid>."""

    def __init__(self, dump_dir: str, dump_filter: str | None, fmt: str, gm: torch.fx.GraphModule | None):
        self.dump_dir, self.filter, self.fmt, self.gm = dump_dir, dump_filter, fmt, gm
        self.records: dict[int, DataDumpRecord] = {}

    def optimized(self, gid, low, stats):
        g, desc = low.g, low.g.describe()
        # A dumped value is attributed to an FX node only when it is provably that node's
        # result: the value the lowering produced, or the single result of a fused node
        # (the value of the last op it absorbed). Values that passes rebuilt under an
        # old name (a reshape moved behind a fused GEMM, say) are dumped unattributed.
        fx_meta = {} if self.gm is None else \
            {n.name: n.meta.get("val") for n in self.gm.graph.nodes if n.op == "call_function"}
        entries = []
        for n in desc["nodes"]:
            fused = [x for x in str(n["attrs"].get("fused", "")).split(",") if x]
            for o in n["outputs"]:
                fx = low.fx_names.get(o["id"])
                if fx is None and fused and len(n["outputs"]) == 1:
                    fx = fused[-1]
                    val = fx_meta.get(fx)  # a GEMM fused through a reshape has the pre-reshape shape
                    if not (isinstance(val, torch.Tensor) and list(val.shape) == list(o["shape"])):
                        fx = None
                entries.append(dict(name=o["name"], fx_name=fx, op=n["op"], dtype=o["dtype"], fused=fused,
                                    shape=list(o["shape"]), source=n["source"], value_id=o["id"]))
        entries = select(entries, self.filter)
        g.expose([e["value_id"] for e in entries])
        self.records[gid] = DataDumpRecord(self.gm, entries)

    def compiled(self, eg):
        eg.data_dump = self.records.get(eg.gid)  # (before its first call: airgraph.debug.compare reads it)

    def called(self, eg, n, args, inputs, outputs):
        rec = self.records.get(eg.gid)
        if n != 1 or rec is None or not rec.entries:
            return
        folder = os.path.join(self.dump_dir, f"data_{eg.gid}")
        extra = outputs[eg.num_outputs:]
        write_data(folder, rec.entries, extra, self.fmt)
        rec.dumped = list(zip(rec.entries, extra))
        rec.first_args = list(args)
        log.info("airgraph: dumped %d tensors to %s", len(rec.entries), folder)


# ----------------------------------------------------------------------------- data dumps
def select(entries: list[dict], pattern: str | None) -> list[dict]:
    if not pattern:
        return entries
    rx = re.compile(pattern)
    return [e for e in entries if rx.search(e["name"]) or rx.search(e["op"]) or rx.search(e.get("fx_name") or "")]


def write_data(folder: str, entries: list[dict], tensors: list[torch.Tensor], fmt: str = "npy"):
    """Writes tensors with an index.json: name, fx_name, op, dtype, shape, source, file."""
    os.makedirs(folder, exist_ok=True)
    index = []
    if fmt == "safetensors":
        from safetensors.torch import save_file  # (optional: only this dump format needs it)

        data = {}
        for e, t in zip(entries, tensors):
            key = e["name"]
            data[key] = t.detach().contiguous().clone()
            index.append(dict(e, file="data.safetensors", key=key))
        save_file(data, os.path.join(folder, "data.safetensors"))
    elif fmt == "npy":
        import numpy as np  # (only this dump format needs it)

        for k, (e, t) in enumerate(zip(entries, tensors)):
            fname = f"{k:04d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', e['name'])}.npy"
            t = t.detach()
            arr = (t.float() if t.dtype == torch.bfloat16 else t).contiguous().numpy()
            np.save(os.path.join(folder, fname), arr)
            index.append(dict(e, file=fname))
    else:
        raise ValueError(f"dump_format must be 'npy' or 'safetensors', got {fmt!r}")
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    return index


def read_data(folder: str) -> list[tuple[dict, torch.Tensor]]:
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    out = []
    st = None
    for e in index:
        if e["file"].endswith(".safetensors"):
            if st is None:
                from safetensors.torch import load_file  # (optional: only this dump format needs it)

                st = load_file(os.path.join(folder, e["file"]))
            out.append((e, st[e["key"]]))
        else:
            import numpy as np  # (only this dump format needs it)

            out.append((e, torch.from_numpy(np.load(os.path.join(folder, e["file"])))))
    return out
