"""The compile cache: an ATen graph lowered once is kept on disk, so that the next process that
compiles the same graph (same model code, input signature, airgraph and torch versions, CPU)
skips the lowering from FX.

Where: CompilerConfig.cache_dir, default $AIRGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/airgraph, else
~/.cache/airgraph; "" (or AIRGRAPH_CACHE_DIR=0) switches it off. One airgraph file per entry
(csrc/ir/serialize.h), named by the SHA-256 of everything the lowering reads: the graph's code,
every node's target, arguments, result type and source line, the placeholders' types, which of
them are the model's parameters and buffers and their types, the bytes of tensors the traced code
created, the airgraph version, the file format, torch's version and the CPU's vector features.
The entry holds the lowered engine graph with the parameters by name only: a hit binds the calling
process's own tensors, so a cache entry can never bring back stale weights. What a hit still does:
the passes and the kernels, which depend on the weights' values (constant folding, prepacked
GEMM/convolution weights), run in this process.

A corrupt, truncated or foreign entry is detected (checksums, format version, metadata) and
rebuilt; it never fails a compile. airgraph.cache_info() reports the counts and the folder;
airgraph.clear_cache() empties it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import tempfile
import threading

import torch

from ._core import C, EngineError

log = logging.getLogger("airgraph")

FORMAT = "airgraph-lowered"
FORMAT_VERSION = 1
_stats = {"hits": 0, "misses": 0, "writes": 0, "rebuilt": 0, "errors": 0}
_lock = threading.Lock()


from .config import default_cache_dir as default_dir  # noqa: E402


def _cpu_features() -> str:
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "amx_tile",
              "amx_bf16")
    return ",".join(f for f in wanted if f in flags)


_CPU = None


def _meta_text(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"T({v.dtype},{tuple(v.shape)},{tuple(v.stride()) if v.layout == torch.strided else ''})"
    if isinstance(v, (list, tuple)):
        return "(" + ",".join(_meta_text(x) for x in v) + ")"
    return repr(type(v).__name__) + ":" + str(v)


def _arg_text(a) -> str:
    if isinstance(a, torch.fx.Node):
        return "%" + a.name
    if isinstance(a, (list, tuple)):
        return "[" + ",".join(_arg_text(x) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ",".join(f"{k}:{_arg_text(v)}" for k, v in a.items()) + "}"
    return repr(a)


def graph_key(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor]) -> str:
    """The SHA-256 of everything lower_graph reads from `gm` and `consts` (see the module text)."""
    from . import __version__
    from .compiler import get_attr_tensor

    global _CPU
    if _CPU is None:
        _CPU = _cpu_features()
    h = hashlib.sha256()

    def put(*parts):
        for p in parts:
            h.update(str(p).encode())
            h.update(b"\x00")

    put(FORMAT, FORMAT_VERSION, __version__, torch.__version__, _CPU)
    # every node's kind, target and arguments (not gm.code: a lazy graph module would generate its
    # Python code just for this); with the placeholders' types the other nodes' types follow (a
    # static graph), and the source lines are added for the messages that name them
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(phs):
        c = consts.get(i)
        put("ph", i, n.name, len(n.users), _meta_text(n.meta.get("val")),
            "input" if c is None else f"const {c.dtype} {tuple(c.shape)}")
    for n in gm.graph.nodes:
        if n.op == "call_function":
            put(n.name, n.target, _arg_text(n.args), _arg_text(n.kwargs))
            h.update(n.meta.get("stack_trace", "").encode())
        elif n.op == "get_attr":
            t = get_attr_tensor(n)
            if isinstance(t, torch.Tensor):
                t = t.detach().contiguous()
                put("attr", n.name, t.dtype, tuple(t.shape))
                if t.numel():
                    h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
        elif n.op == "output":
            put("out", _arg_text(n.args))
    put("writes", gm.meta.get("airgraph_input_writes", ()))
    return h.hexdigest()


def _path(folder: str, key: str) -> str:
    return os.path.join(folder, key[:2], key + ".agraph")


def load(folder: str, key: str, gm, consts):
    """The cached Lowered for `key`, or None (a miss, or an entry that could not be used: removed)."""
    from .compiler import Lowered, const_resolver

    path = _path(folder, key)
    if not os.path.exists(path):
        with _lock:
            _stats["misses"] += 1
        return None
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    resolve = const_resolver({phs[i].name: t for i, t in consts.items() if i < len(phs)})

    try:
        with open(path, "rb") as f:
            data = f.read()
        g, _, text = C.load_graph_bytes(data, resolve)
        meta = json.loads(text)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION or meta.get("key") != key:
            raise EngineError(f"not a {FORMAT} v{FORMAT_VERSION} entry for this key")
        low = Lowered.from_feeding(g, meta)
    except Exception as e:  # corrupt, truncated, stale or foreign: rebuilt, never an error
        log.warning("airgraph: compile cache entry %s is unusable (%s: %s); it is rebuilt", path, type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "")
        with _lock:
            _stats["rebuilt"] += 1
            _stats["misses"] += 1
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    with _lock:
        _stats["hits"] += 1
    return low


def store(folder: str, key: str, gm, consts, low) -> None:
    """Writes the entry (atomically: a reader sees the whole file or none)."""
    from . import __version__

    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "key": key, **low.feeding()}
    try:
        data = low.g.save(True, f"airgraph {__version__}", json.dumps(meta),
                          [phs[i].name for i in consts if i < len(phs)])
        path = _path(folder, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        with _lock:
            _stats["writes"] += 1
    except Exception as e:  # a full or read-only disk must not fail the compile
        with _lock:
            _stats["errors"] += 1
        log.warning("airgraph: could not write the compile cache entry in %s: %s: %s", folder, type(e).__name__, e)


def lowered(gm, consts, folder: str, lower):
    """lower() through the cache in `folder` ("" = off)."""
    if not folder:
        return lower()
    key = graph_key(gm, consts)
    low = load(folder, key, gm, consts)
    if low is None:
        low = lower()
        store(folder, key, gm, consts, low)
    return low


def cache_info(folder: str | None = None) -> dict:
    """This process's hits, misses, writes and rebuilt entries, and the folder's entries and bytes."""
    folder = default_dir() if folder is None else folder
    entries = size = 0
    if folder and os.path.isdir(folder):
        for root, _, files in os.walk(folder):
            for f in files:
                if f.endswith(".agraph"):
                    entries += 1
                    size += os.path.getsize(os.path.join(root, f))
    with _lock:
        return {"dir": folder, "entries": entries, "bytes": size, **_stats}


def clear_cache(folder: str | None = None) -> int:
    """Removes every entry; returns how many."""
    folder = default_dir() if folder is None else folder
    n = 0
    if folder and os.path.isdir(folder):
        for root, _, files in os.walk(folder):
            for f in files:
                if f.endswith(".agraph") or f.startswith(".tmp-"):
                    os.unlink(os.path.join(root, f))
                    n += f.endswith(".agraph")
    return n
