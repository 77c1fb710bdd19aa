"""The compile cache: a graph compiled once is kept on disk, so that the next process that
compiles the same graph (same model code, input signature, pass options, airgraph and torch
versions, CPU) skips the lowering from FX and the passes, and for a Dynamo graph that runs whole
on the engine, AOTAutograd too (see "Dynamo graphs" below; what follows is the ATen graph's entry).

Where: CompilerConfig.cache_dir, default $AIRGRAPH_CACHE_DIR, else $XDG_CACHE_HOME/airgraph, else
~/.cache/airgraph; "" (or AIRGRAPH_CACHE_DIR=0) switches it off. One airgraph file per entry
(csrc/ir/serialize.h), named by the SHA-256 of everything the lowering reads: the graph's code,
every node's target, arguments, result type and source line, the placeholders' types, which of
them are the model's parameters and buffers and their types, the bytes of tensors the traced code
created, the passes switched off and the folding limit, the airgraph version, the file format,
torch's version and the CPU's vector features.

An entry holds the parameters by name only: a hit binds the calling process's own tensors, so a
cache entry can never bring back stale weights. It holds the optimized graph, and a hit skips the
passes. Where a pass computed a constant from weights (a batch norm's scale and shift, an embedding
of constant positions, a view of a buffer), the entry holds its bytes and a BLAKE2b digest of the
weights it came from; a hit whose weights differ there (another checkpoint of the same model) is
compiled anew, lowering and passes included, and replaces the entry (a Dynamo graph's entry keeps
the lowered graph beside the optimized one for that case). When those weights exceed
DERIVED_MAX_BYTES (hashing them would cost more than the passes), the entry holds the lowered graph
and the passes run in the process that hits it. The kernels (oneDNN primitives, prepacked GEMM and
convolution weights) are always built in the calling process.

A corrupt, truncated or foreign entry is detected (checksums, format version, metadata) and
rebuilt; it never fails a compile. airgraph.cache_info() reports the counts and the folder;
airgraph.clear_cache() empties it.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import threading

import torch

from . import custom_ops
from ._core import C, EngineError
from ._version import __version__
from .config import CompilerConfig, default_cache_dir as default_dir
from .graph_types import Lowered, NodeReport, const_resolver, get_attr_tensor

log = logging.getLogger("airgraph")

FORMAT = "airgraph-compiled"
FORMAT_VERSION = 3
def _build_stamp() -> str:
    """The extension file as built (size and modification time; it holds every pass and kernel): an
    entry written by another build (a pass changed, a kernel fixed) is never reused, even at the same
    version and op list."""
    try:
        st = os.stat(C.__file__)
        return f":{st.st_size}:{st.st_mtime_ns}"
    except (AttributeError, OSError, TypeError):
        return ""


# this build's ops and passes (instruction codes, post-op formats) and the build itself: entries of
# another build never match
_ENGINE = C.engine_digest() + _build_stamp()
# what an entry holds: the graph as lowered from FX, or after the passes
LOWERED, OPTIMIZED = "lowered", "optimized"
# the most bytes of weights a cached optimized graph's derived constants may come from (each hit
# checks them: about 0.1 ms per MB here)
DERIVED_MAX_BYTES = 8 << 20
_stats = {"hits": 0, "optimized_hits": 0, "dynamo_hits": 0, "misses": 0, "writes": 0, "rebuilt": 0, "errors": 0,
          "other_weights": 0}
_lock = threading.Lock()


def _count(**counts) -> None:
    """Adds to this process's statistics (cache_info), under the lock: compiles may run in threads."""
    with _lock:
        for k, v in counts.items():
            _stats[k] += v


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
    # (and the capability torch dispatched to: it decides the layout of torch's packed int4 weights,
    # which a lowered graph names: lowering/quant.py; ATEN_CPU_CAPABILITY changes it per process)
    return ",".join(f for f in wanted if f in flags) + ";torch:" + torch.backends.cpu.get_cpu_capability()


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


def graph_key(gm: torch.fx.GraphModule, consts: dict[int, torch.Tensor], passes=()) -> str:
    """The SHA-256 of everything lower_graph reads from `gm` and `consts`, and of `passes` (what the
    passes are told: switched-off passes, folding limit; see the module text)."""
    global _CPU
    if _CPU is None:
        _CPU = _cpu_features()
    h = _KeyHash()
    put = h.put
    put(FORMAT, FORMAT_VERSION, __version__, _ENGINE, torch.__version__, _CPU, custom_ops.key_text(), *passes)
    # every node's kind, target and arguments (not gm.code: a lazy graph module would generate its
    # Python code just for this); with the placeholders' types the other nodes' types follow (a
    # static graph), and the source lines are added for the messages that name them
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(phs):
        c = consts.get(i)
        put("ph", i, n.name, len(n.users), _meta_text(n.meta.get("val")),
            "input" if c is None else f"const {c.dtype} {tuple(c.shape)}")
    _put_nodes(h, gm, str)  # (an OpOverload's text is its qualified name)
    put("writes", gm.meta.get("airgraph_input_writes", ()))
    return h.hexdigest()


class _KeyHash:
    """SHA-256 of text parts, each followed by a NUL, and of raw bytes; the parts are joined and
    hashed at once (a graph of a few hundred nodes puts thousands of them)."""

    def __init__(self):
        self._h = hashlib.sha256()
        self._parts: list[str] = []

    def put(self, *parts):
        self._parts.extend(map(str, parts))

    def raw(self, b: bytes):
        self._flush()
        self._h.update(b)

    def _flush(self):
        if self._parts:
            self._parts.append("")
            self._h.update("\x00".join(self._parts).encode())
            self._parts = []

    def hexdigest(self) -> str:
        self._flush()
        return self._h.hexdigest()


def _put_nodes(h: _KeyHash, gm, target_text) -> bool:
    """Hashes every call's kind, target, arguments and source line, the bytes of tensors the traced
    code created, and the outputs; False for what no key can name (a module call, an attribute
    that is not a tensor)."""
    put, names = h.put, {}
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method"):
            t = names.get(n.target)
            if t is None:
                t = names[n.target] = target_text(n.target)
            put(n.op, n.name, t, _arg_text(n.args), _arg_text(n.kwargs), n.meta.get("stack_trace", ""))
        elif n.op == "get_attr":
            t = get_attr_tensor(n)
            if isinstance(t, torch.fx.GraphModule):  # a repeated block's subgraph (invoke_subgraph): its nodes
                put("subgraph", n.name, *[p.name for p in t.graph.nodes if p.op == "placeholder"])
                if not _put_nodes(h, t, target_text):
                    return False
                continue
            if not isinstance(t, torch.Tensor):
                return False
            t = t.detach().contiguous()
            put("attr", n.name, t.dtype, tuple(t.shape))
            if t.numel():
                h.raw(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
        elif n.op == "output":
            put("out", _arg_text(n.args))
        elif n.op == "call_module":
            return False
    return True


def _path(folder: str, key: str) -> str:
    return os.path.join(folder, key[:2], key + ".agraph")


def _by_name(gm, consts) -> dict:
    """The graph's weights by the name its file gives them (the placeholder's)."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {phs[i].name: t for i, t in consts.items() if i < len(phs)}


def _digest(weights: dict, names) -> str:
    """BLAKE2b of the named weights' names, dtypes, shapes and the 64-bit checksums of their bytes
    (C.checksum64: two CRC-32C lanes, several GB/s) ("" for none)."""
    if not names:
        return ""
    h = hashlib.blake2b(digest_size=20)
    for n in names:
        t = weights[n].detach()
        t = t if t.is_contiguous() else t.contiguous()
        h.update(f"{n}:{t.dtype}:{tuple(t.shape)}:{C.checksum64(t.data_ptr(), t.numel() * t.element_size()):016x}\0"
                 .encode())
    return h.hexdigest()


def _present(path: str) -> bool:
    """Whether the entry's file exists (a miss is counted when not)."""
    if os.path.exists(path):
        return True
    _count(misses=1)
    return False


def _read(path: str, key: str, weights: dict):
    """(graph, metadata) of the entry at `path`, its weights bound by name; raises when it is not a
    whole entry of this format for `key`."""
    with open(path, "rb") as f:
        g, _, text = C.load_graph_bytes(f.read(), const_resolver(weights))
    meta = json.loads(text)
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION or meta.get("key") != key:
        raise EngineError(f"not a {FORMAT} v{FORMAT_VERSION} entry for this key")
    return g, meta


def _discard(paths, e: Exception, miss: bool = True) -> None:
    """An entry that could not be used (corrupt, truncated, stale, foreign): removed and counted as
    rebuilt, with a warning; never an error."""
    log.warning("airgraph: compile cache entry %s is unusable (%s: %s); it is rebuilt", paths[0], type(e).__name__,
                str(e).splitlines()[0] if str(e) else "")
    _count(rebuilt=1, misses=miss)
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def load(folder: str, key: str, gm, consts):
    """(the cached Lowered for `key`, LOWERED or OPTIMIZED), or None: a miss, an entry made for
    other weights (see the module text), or an entry that could not be used (removed)."""
    path = _path(folder, key)
    if not _present(path):
        return None
    weights = _by_name(gm, consts)
    try:
        g, meta = _read(path, key, weights)
        stage, derived = meta.get("stage"), meta.get("derived")
        if stage not in (LOWERED, OPTIMIZED) or not isinstance(derived, dict) or \
                any(n not in weights for n in derived.get("sources", ())):
            raise EngineError("bad metadata")
        low = Lowered.from_feeding(g, meta)
    except Exception as e:  # corrupt, truncated, stale or foreign: rebuilt, never an error
        _discard([path], e)
        return None
    if _digest(weights, derived["sources"]) != derived.get("digest"):
        # its folded constants were computed from other weights than this process's
        log.info("airgraph: compile cache entry %s was made for other weights; compiled anew", path)
        _count(other_weights=1, misses=1)
        return None
    _count(hits=1, optimized_hits=stage == OPTIMIZED)
    return low, stage


def derived_sources(g, weights: dict):
    """The weights that the constants a pass computed from weights came from (sorted names), or None
    when a constant holding weights is not one of `weights` (nothing to bind it to by name)."""
    sources = set()
    for name, src in g.weight_derived_consts():
        if src != [name]:  # computed from weights (or a view of them): written with its bytes
            sources.update(src)
        elif name not in weights:
            return None
    return None if not sources <= weights.keys() else sorted(sources)


def store(folder: str, key: str, gm, consts, low, stage: str, sources: list) -> None:
    """Writes the entry (atomically: a reader sees the whole file or none): the weights by name, the
    constants computed from `sources` by value, with the digest of those weights."""
    weights = _by_name(gm, consts)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "key": key, "stage": stage,
            "derived": {"sources": sources, "digest": _digest(weights, sources)}, **low.feeding()}
    _write(folder, lambda: [(_path(folder, key), low.g.save(True, f"airgraph {__version__}", json.dumps(meta),
                                                             list(weights)))])


def _write(folder: str, files) -> None:
    """Writes files() -> [(path, bytes)], each atomically (a reader sees a whole file or none), in
    order, as one entry; a failure (a full or read-only disk) is a warning, never a failed compile."""
    try:
        for path, data in files():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        _count(writes=1)
    except Exception as e:
        _count(errors=1)
        log.warning("airgraph: could not write the compile cache entry in %s: %s: %s", folder, type(e).__name__, e)


_deferred = threading.local()


@contextlib.contextmanager
def deferring_stores():
    """Inside the block, the ATen-level entries are not written but collected (callables) in the
    yielded list: the backend writes them only when the Dynamo-level entry is not written."""
    _deferred.stores = []
    try:
        yield _deferred.stores
    finally:
        _deferred.stores = None


def _store_later(fn):
    stores = getattr(_deferred, "stores", None)
    if stores is None:
        fn()
    else:
        stores.append(fn)


def usable(config: CompilerConfig) -> bool:
    """May a compile with `config` use the compile cache? (The one place that says so.) Not without
    a folder, and not while dumping, injecting faults or running eagerly: those watch every stage."""
    return bool(config.cache_dir) and not (config.watches_stages or config.run_eagerly)


def aten_key(gm, consts, config: CompilerConfig) -> str:
    """The key of an ATen graph's entry (see graph_key)."""
    return graph_key(gm, consts, (sorted(config.disable_passes), config.fold_max_bytes))


def lookup(gm, consts, config: CompilerConfig):
    """(key, the cached Lowered or None, its stage) for the ATen graph `gm` with weights `consts`."""
    key = aten_key(gm, consts, config)
    hit = load(config.cache_dir, key, gm, consts)
    return (key, None, None) if hit is None else (key, *hit)


class EntryWriter:
    """Pipeline observer of a graph compiled through the compile cache: keeps the graph as lowered
    and after the passes in report.cache_graphs (for the Dynamo-level entry, which the backend
    writes or not) and, after a miss (`store`), writes the ATen-level entry: the optimized graph,
    or the lowered one when the weights its folded constants came from exceed DERIVED_MAX_BYTES."""

    def __init__(self, folder: str, key: str, gm, consts, report, store: bool):
        self.folder, self.key, self.gm, self.consts, self.report, self.store = folder, key, gm, consts, report, store
        self.kept = None

    def lowered(self, gid, low):
        self.kept = low.g.clone()  # the lowered graph, in case the optimized one is not the one kept

    def optimized(self, gid, low, stats):
        self.report.cache_graphs.append((self.kept, low.g))
        if not self.store:
            return
        folder, key, gm, consts, kept = self.folder, self.key, self.gm, self.consts, self.kept
        weights = _by_name(gm, consts)
        sources = derived_sources(low.g, weights)
        if sources is not None and sum(weights[n].numel() * weights[n].element_size() for n in sources) \
                <= DERIVED_MAX_BYTES:
            # (value ids change in the passes: the FX names of values are for dumps, which skip the cache)
            _store_later(lambda: store(folder, key, gm, consts, dataclasses.replace(low, fx_names={}), OPTIMIZED,
                                       sources))
        elif derived_sources(kept, weights) == []:
            log.debug("airgraph: the compile cache keeps the lowered graph: its folded constants come from "
                      "%s of weights", "too many bytes" if sources else "unnamed")
            _store_later(lambda: store(folder, key, gm, consts, dataclasses.replace(low, g=kept), LOWERED, []))


# ----------------------------------------------------------------------------- symbolic graphs
# A graph with symbolic sizes (dynamic=True, a second size, gears) is lowered once for every size
# (compiler.SymbolicEngineGraph): the entry, under the ATen graph's key and its value inputs, holds
# that template with its guards (the sizes where the lowering's decisions hold), the sizes it was
# checked at, and the template after the passes (<key>.optimized.agraph; derived constants as in
# an ATen entry). A hit skips the lowering, its check and the passes; a process whose first sizes
# fail a guard, or whose folded weights differ, records the template again and replaces the entry.

SYMBOLIC = "symbolic"


def _optimized_path(path: str) -> str:
    return path[:-len(".agraph")] + ".optimized.agraph"


def load_symbolic(folder: str, key: str, gm, consts, hint: list, vals: list):
    """(the template Lowered, its optimized graph or None, the probe sizes) for `key` at this
    process's first sizes `hint` and value inputs `vals`, or None (a miss)."""
    path = _path(folder, key)
    if not _present(path):
        return None
    weights = _by_name(gm, consts)
    try:
        g, meta = _read(path, key, weights)
        derived, probe = meta["derived"], [int(x) for x in meta["probe"]]
        if meta.get("stage") != SYMBOLIC or len(probe) != len(hint) or len(g.symbols()) != len(hint):
            raise EngineError("bad metadata")
        low = Lowered.from_feeding(g, meta)
        opt = None
        if meta["optimized"] and _digest(weights, derived["sources"]) == derived["digest"]:
            with open(_optimized_path(path), "rb") as f:
                opt, _, _ = C.load_graph_bytes(f.read(), const_resolver(weights))
        elif meta["optimized"]:
            _count(other_weights=1)
    except Exception as e:  # corrupt, truncated, stale or foreign: rebuilt, never an error
        _discard([path, _optimized_path(path)], e)
        return None
    if meta.get("values") != list(vals) or low.g.failed_guard(list(hint)) is not None:
        _count(misses=1)  # (recorded for other value inputs, or at sizes whose decisions differ from these)
        return None
    _count(hits=1, optimized_hits=opt is not None)
    return low, opt, probe


def store_symbolic(folder: str, key: str, gm, consts, template, opt, probe: list, vals: list) -> None:
    """Writes the entry of a template (and its optimized graph, or None) recorded for `key`."""
    weights = _by_name(gm, consts)
    sources = derived_sources(opt, weights) if opt is not None else None
    if sources is None or sum(weights[n].numel() * weights[n].element_size() for n in sources) > DERIVED_MAX_BYTES:
        opt, sources = None, []
    if derived_sources(template.g, weights) != []:
        return  # (a constant made of weights in the lowered graph: nothing to bind it to by name)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "key": key, "stage": SYMBOLIC,
            "derived": {"sources": sources, "digest": _digest(weights, sources)}, "optimized": opt is not None,
            "probe": [int(x) for x in probe], "values": list(vals), **template.feeding(), "fx_names": {}}
    path = _path(folder, key)
    producer = f"airgraph {__version__}"

    def files():
        out = [(path, template.g.save(True, producer, json.dumps(meta), list(weights)))]
        if opt is not None:  # (first: the main file completes the entry)
            out.insert(0, (_optimized_path(path), opt.save(True, producer, json.dumps({"key": key}), list(weights))))
        return out

    _store_later(lambda: _write(folder, files))


# ----------------------------------------------------------------------------- Dynamo graphs
# A Dynamo graph that compiled into one engine graph with nothing for AOTAutograd's runtime wrapper
# to do (the graphs torch's aot_compile can save, airgraph/aot.py) is also kept under a key of the
# Dynamo graph itself: a hit skips AOTAutograd as well as the lowering and the passes. Its entry
# holds the optimized graph, which argument positions are the weights (by name), the input writes
# and the compile report's node list; and the lowered graph beside it (<key>.lowered.agraph), used
# when the optimized graph holds constants computed from weights that differ in this process (at the
# first call or after an in-place change; no AOTAutograd is ever needed) and saved by torch's
# aot_compile.


def _target_text(t) -> str:
    if isinstance(t, str):
        return t
    name = torch.fx.node._get_qualified_name(t)
    if "<" in name:  # a lambda or a local function: no name that stays the same in another process
        raise ValueError(name)
    return name


def dynamo_key(gm: torch.fx.GraphModule, example_inputs, params: dict, config) -> str | None:
    """The SHA-256 of a Dynamo graph, its example inputs' types and the config, or None when the
    graph is not kept at this level (a module call left in the graph, a non-tensor, tensor-subclass
    or symbolic input, gradients wanted, a target without a stable name)."""
    global _CPU
    if _CPU is None:
        _CPU = _cpu_features()
    if any(type(x) not in (torch.Tensor, torch.nn.Parameter) or x.layout != torch.strided or not x.is_cpu or
           any(isinstance(d, torch.SymInt) for d in x.shape) for x in example_inputs):
        return None  # (a tensor subclass, such as torchao's quantized weights, has no storage of its own to key)
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return None
    h = _KeyHash()
    put = h.put
    put("dynamo", FORMAT, FORMAT_VERSION, __version__, _ENGINE, torch.__version__, _CPU, custom_ops.key_text(),
        torch.is_grad_enabled(),
        *[f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
          if f.name not in ("cache_dir", "dump_dir", "background_packing", "repeated_blocks")])  # (not the graph)
    storages = {}
    for i, x in enumerate(example_inputs):
        st = x.untyped_storage().data_ptr()
        put("in", i, "param" if i in params else "input", x.dtype, tuple(x.shape), x.stride(), x.storage_offset(),
            x.requires_grad, x.is_inference(), storages.setdefault(st, i))  # (which inputs share memory)
    put("placeholders", *[n.name for n in gm.graph.nodes if n.op == "placeholder"])
    try:
        if not _put_nodes(h, gm, _target_text):
            return None
    except ValueError:  # a target without a stable name
        return None
    return h.hexdigest()


def store_dynamo(folder: str, key: str, gm, report, consts: dict, writes) -> bool:
    """Writes the Dynamo-level entry of a graph compiled whole into report.graphs[0] (see above);
    False when it cannot be kept at this level."""
    eg = report.graphs[0]
    if len(report.cache_graphs) != 1:
        return False
    lowered, g = report.cache_graphs[0]
    weights = _by_name(gm, consts)  # (by the ATen graph's names; the file names them w<argument position>)
    phs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    rename = {phs[i]: f"w{i}" for i in consts}
    if lowered is None or derived_sources(lowered, weights) != []:
        return False  # (the lowered graph serves other weights, and torch's aot_compile)
    sources = derived_sources(g, weights)
    stage = OPTIMIZED
    if sources is None or sum(weights[n].numel() * weights[n].element_size() for n in sources) > DERIVED_MAX_BYTES:
        g, lowered, sources, stage = lowered, None, [], LOWERED
    new_weights = {rename[n]: t for n, t in weights.items()}
    sources = [rename[n] for n in sources]
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "key": key, "stage": stage,
            "derived": {"sources": sources, "digest": _digest(new_weights, sources)},
            "consts": {str(i): f"w{i}" for i in consts}, "writes": [list(w) for w in writes],
            **Lowered(g, eg.input_positions, eg.scalar_inputs, eg.num_outputs, {}).feeding(),
            "nodes": [[n.name, n.target, n.native, n.reason, n.source] for n in report.nodes],
            "pass_stats": [list(p) for p in (report.pass_stats[0] if report.pass_stats else [])]}
    path = _path(folder, key)

    def files():
        out = [(path, g.with_const_names(rename).save(True, f"airgraph {__version__}", json.dumps(meta),
                                                      list(new_weights)))]
        if lowered is not None:  # the lowered graph, for other weights and torch's aot_compile
            out.insert(0, (path[:-len(".agraph")] + ".lowered.agraph",  # (first: the main file completes it)
                           lowered.with_const_names(rename).save(True, f"airgraph {__version__}",
                                                                  json.dumps({"key": key}), list(new_weights))))
        return out

    _write(folder, files)
    return True  # (written, or refused by a disk that would refuse the ATen-level entry too)


def load_dynamo(folder: str, key: str, example_inputs, params: dict, config, report, engine_runner):
    """(the compiled callable from the Dynamo-level entry `key`, what torch's aot_compile saves of
    it: airgraph/aot.py's artifacts), or None (a miss; an unusable entry is removed and counted as
    rebuilt). params: position -> the user's name of a weight (messages); engine_runner: makes the
    callable (compiler.engine_runner)."""
    path = _path(folder, key)
    if not os.path.exists(path):  # (the ATen graph's lookup that follows counts the miss)
        return None
    lowered_path = path[:-len(".agraph")] + ".lowered.agraph"
    try:
        with open(path, "rb") as f:
            main = f.read()
        # (the weights are named by argument position: w<i>)
        weights = {f"w{i}": t for i, t in enumerate(example_inputs)}
        first, _, text = C.load_graph_bytes(main, const_resolver(weights))
        meta = json.loads(text)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION or meta.get("key") != key:
            raise EngineError(f"not a {FORMAT} v{FORMAT_VERSION} entry for this key")
        stage, derived = meta["stage"], meta["derived"]
        names = {int(i): n for i, n in meta["consts"].items()}
        if stage not in (LOWERED, OPTIMIZED) or any(n != f"w{i}" for i, n in names.items()):
            raise EngineError("bad metadata")
        consts = {i: example_inputs[i] for i in names}
        if any(t.is_inference() for t in consts.values()):
            return None  # (such weights are read per call: the usual path decides)
        lowered = main
        if stage == OPTIMIZED:
            with open(lowered_path, "rb") as f:
                lowered = f.read()
        state = {"optimized": False, "first": first}

        def lowered_for(consts):
            weights = {names[i]: t for i, t in consts.items()}
            same = _digest(weights, derived["sources"]) == derived["digest"]
            g, state["first"] = state["first"], None  # (the graph loaded above serves the first build only)
            if not same or g is None:
                g, _, _ = C.load_graph_bytes(main if same else lowered, const_resolver(weights))
            state["optimized"] = same and stage == OPTIMIZED
            if not same:
                log.info("airgraph: compile cache entry %s was made for other weights; its lowered graph is "
                         "optimized again", path)
                _count(other_weights=1)
            return Lowered.from_feeding(g, meta), state["optimized"]

        report.nodes[:] = [NodeReport(*n) for n in meta["nodes"]]
        run = engine_runner([tuple(w) for w in meta["writes"]], consts, {i: params.get(i, n) for i, n in names.items()},
                            config, report, lowered_for)
        if state["optimized"]:
            report.pass_stats[0] = [tuple(p) for p in meta["pass_stats"]]
    except Exception as e:  # corrupt, truncated, stale or foreign: rebuilt, never an error
        report.nodes[:], report.graphs[:], report.pass_stats[:], report.exec_stats[:] = [], [], [], []
        report.engine_graphs = 0
        _discard([path, lowered_path], e, miss=False)  # (the ATen graph's lookup that follows counts the miss)
        return None
    _count(hits=1, dynamo_hits=1, optimized_hits=bool(state["optimized"]))
    return run, {"graph": lowered, "feeding": {k: meta[k] for k in ("input_positions", "scalar_inputs", "num_outputs")},
                 "consts": meta["consts"], "writes": meta["writes"]}


def _is_main(f: str) -> bool:
    """An entry's main file (not the graph kept beside it: .lowered or .optimized)."""
    return f.endswith(".agraph") and not f.endswith((".lowered.agraph", ".optimized.agraph"))


def cache_info(folder: str | None = None) -> dict:
    """This process's hits, misses, writes and rebuilt entries, and the folder's entries and bytes."""
    folder = default_dir() if folder is None else folder
    entries = size = 0
    if folder and os.path.isdir(folder):
        for root, _, files in os.walk(folder):
            for f in files:
                if f.endswith(".agraph"):
                    entries += _is_main(f)
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
                    n += _is_main(f)
    return n
