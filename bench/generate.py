"""Text generation: transformers' generate() with the model's forward compiled by each backend.

For every backend, KV cache (transformers' default DynamicCache, and the static cache) and batch size,
one worker process builds the same model (random weights from a config, the same seed), compiles
`model.forward`, and measures (the backends: eager, inductor, inductor-warm, airgraph, cache_compile-cold,
cache_compile-warm, openvino-tc = OpenVINO's torch.compile backend, and openvino, below):

  first     the first generate() of NEW tokens, compiles included (ms)
  prefill   from the start of generate() to its first new token: the prompt's forward and one token
            (median over the repeats, ms)
  decode    the time between two successive new tokens (ms per token; the median of every interval of
            every repeat: (NEW - 1) x repeats intervals, so one slow step cannot move it)

Both are read from a stopping criterion that only records the time: generate() calls it once per new
token, the same way for every backend.

Greedy tokens are compared with eager's at the same weights (the first generate() and every repeat;
where they differ, how many leading tokens agree, the fewest over the calls and the batch's rows), and
every row with other weights than fp32 also with eager fp32's (when fp32 is in --weights). Beside each
decode figure: the memory-bandwidth floor for one decode step, bytes read per token (every weight once
in torchao's storage, the KV cache at the middle length) divided by the read bandwidth measured here.

openvino is OpenVINO as a CPU user serves an LLM with it: optimum-intel's OVModelForCausalLM (a stateful
OpenVINO model, the KV cache inside it, so one row with the dynamic cache and none with the static one).
The main process saves the fp32 model once (save_pretrained, the same seed), and a worker in .venv-ov
(optimum-intel pins an older transformers; make it with `bash scripts/openvino-llm-env.sh`; without it the
row says so) exports it with from_pretrained(export=True): fp32 and int8/int4 with PERFORMANCE_HINT
LATENCY, INFERENCE_NUM_THREADS 2, INFERENCE_PRECISION_HINT f32 and an f32 KV cache; int8 = NNCF 8-bit
symmetric per channel, int4 = NNCF 4-bit asymmetric in groups of 128 (torchao's int4 has zero points too;
NNCF keeps the embedding, tied to lm_head, in 8 bits); bf16 = the fp32 weights at OpenVINO's default
precision (no hint: bf16 where the CPU has it), beside airgraph's bf16. Its "first generate()" comes after
from_pretrained, whose time (export, compression, compile) is in the notes. That worker imports neither
airgraph nor torchao. AIRGRAPH_BENCH_OV_CONFIG='{"ENABLE_CPU_PINNING": "NO"}' (JSON) adds or replaces
OpenVINO properties, for experiments.

  .venv/bin/python bench/generate.py                      # zoo decoder (small), batch 1 and 4
  .venv/bin/python bench/generate.py --model 0.5b --batches 1
  .venv/bin/python bench/generate.py --model 0.5b --weights fp32,bf16,int8,int4 --caches static --batches 1
  .venv/bin/python bench/generate.py --overhead          # one decode call's fixed cost, layer by layer
  .venv/bin/python bench/generate.py --model 0.5b --backends eager,airgraph,openvino --caches dynamic \
      --batches 1 --weights fp32,int8,int4 --prompt 64           # against optimum-intel (.venv-ov)

Models: small = the zoo's LLaMA-style decoder, small config, with its KV cache on; full = the zoo's
LLaMA-style decoder, full config (110M parameters); 0.5b = a Qwen2-0.5B-style config (LLaMA-style, 24
layers of 896, GQA 14/2, 151936-token vocabulary: 494M parameters).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
THREADS = 2
BACKENDS = ("eager", "inductor", "inductor-warm", "airgraph", "cache_compile-cold", "cache_compile-warm",
            "openvino-tc", "openvino")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OV_ENV_SCRIPT = "scripts/openvino-llm-env.sh"


def build_model(name: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if name == "small":
        cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        model = LlamaForCausalLM(cfg)
    elif name == "full":
        cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                          num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg)
    elif name == "0.5b":
        cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True)
        model = Qwen2ForCausalLM(cfg)
    else:
        raise SystemExit(f"unknown model {name!r} (small, full, 0.5b)")
    cfg._attn_implementation = "sdpa"
    return model.eval()


WEIGHTS = ("fp32", "bf16", "int8", "int4")


def apply_weights(model, weights: str):
    """The model with its weights as users make them: fp32 as built; bf16 (`model.to(torch.bfloat16)`);
    int8 (torchao's Int8WeightOnlyConfig: per-channel int8, fp32 activations); int4 (bf16, then
    torchao's int4 weight-only for CPU, group size 128: aten._weight_int4pack_mm_for_cpu)."""
    import torch

    if weights == "fp32":
        return model
    if weights == "bf16":
        return model.to(torch.bfloat16)
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    if weights == "int8":
        quantize_(model, Int8WeightOnlyConfig())
        return model
    if weights == "int4":
        from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

        model = model.to(torch.bfloat16)
        quantize_(model, PrototypeInt4WeightOnlyConfig(group_size=128))
        return model
    raise SystemExit(f"unknown weights {weights!r} ({', '.join(WEIGHTS)})")


def _status_mb(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike getrusage's ru_maxrss, not carried over
    from the process that started it). Building a model from a config peaks above what it then
    holds (random initialization), so this is often the build's peak for every backend."""
    return _status_mb("VmHWM:")


def rss_mb() -> float:
    """What this process holds now (VmRSS): after the timed generate() calls, the weights, their
    packed copies, KV caches, arenas and compiled code."""
    return _status_mb("VmRSS:")


def tensor_bytes(t) -> int:
    """Bytes of a tensor, through a tensor subclass's inner tensors (torchao's qdata, scale, ...)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        return sum(tensor_bytes(getattr(t, n)) for n in t.__tensor_flatten__()[0])
    return t.numel() * t.element_size()


def _compile(model, backend: str):
    import torch

    if backend == "eager":
        return
    if backend in ("inductor", "inductor-warm"):  # (-warm: the next process on the same Inductor caches)
        model.forward = torch.compile(model.forward)
    elif backend == "airgraph":
        import airgraph  # noqa: F401  (registers the backend; by name works too)

        # dynamic=True: the prompt and KV-cache lengths are symbolic from the first call, so one
        # generate() or many make two Dynamo graphs (prefill, decode); with the default, Dynamo
        # first specializes on the first lengths and recompiles when they change
        model.forward = torch.compile(model.forward, backend="airgraph", dynamic=True)
    elif backend.startswith("cache_compile"):
        import airgraph

        # the cold process writes the entries into a fresh folder, the warm one (run next) loads them
        model.forward = airgraph.cache_compile(model.forward, cache_dir=os.environ["AIRGRAPH_BENCH_CC_DIR"])
    elif backend == "openvino-tc":  # OpenVINO's torch.compile backend
        import openvino.torch  # noqa: F401  (registers the backend)

        model.forward = torch.compile(model.forward, backend="openvino")
    else:
        raise SystemExit(f"unknown backend {backend!r}")


def ov_python() -> str:
    """The Python of optimum-intel's environment (AIRGRAPH_BENCH_OV_PYTHON, else .venv-ov's)."""
    return os.environ.get("AIRGRAPH_BENCH_OV_PYTHON") or os.path.join(ROOT, ".venv-ov", "bin", "python")


def ov_unavailable(cache: str) -> str | None:
    """Why an openvino cell cannot run, or None."""
    if cache != "dynamic":
        return "n/a: OVModelForCausalLM keeps its KV cache inside the model (its row is the dynamic cache's)"
    py = ov_python()
    if not os.access(py, os.X_OK):
        return f"no {os.path.relpath(py, ROOT)} (optimum-intel's environment): make it with `bash {OV_ENV_SCRIPT}`"
    return None


def save_model(name: str, path: str) -> str:
    """The fp32 model of build_model(name) saved with save_pretrained (what the openvino workers load)."""
    build_model(name).save_pretrained(path)
    return path


OV_PROPERTIES = ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "INFERENCE_NUM_THREADS", "PERFORMANCE_HINT",
                 "DYNAMIC_QUANTIZATION_GROUP_SIZE", "ENABLE_CPU_PINNING")


def ov_config(weights: str) -> dict:
    """The OpenVINO CPU plugin's properties for these weights: f32 compute and KV cache, except for bf16,
    which stands for OpenVINO's default precision (no hint). AIRGRAPH_BENCH_OV_CONFIG (a JSON object)
    adds or replaces properties, for experiments (e.g. {"ENABLE_CPU_PINNING": "NO"})."""
    cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": str(THREADS)}
    if weights != "bf16":
        cfg.update(INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
    cfg.update(json.loads(os.environ.get("AIRGRAPH_BENCH_OV_CONFIG") or "{}"))
    return cfg


def ov_quantization(weights: str):
    """NNCF weight compression through optimum-intel for these weights (None: the weights as saved)."""
    if weights in ("fp32", "bf16"):
        return None
    from optimum.intel import OVWeightQuantizationConfig

    if weights == "int8":
        return OVWeightQuantizationConfig(bits=8, sym=True, group_size=-1)  # per output channel
    if weights == "int4":
        return OVWeightQuantizationConfig(bits=4, group_size=128)  # asymmetric, ratio 1.0 (every linear)
    raise SystemExit(f"unknown weights {weights!r} ({', '.join(WEIGHTS)})")


def ov_model(a):
    """optimum-intel's OVModelForCausalLM exported from the saved model at a.ov_dir (runs in .venv-ov),
    and what to say about it: from_pretrained's time and the compiled model's properties."""
    from optimum.intel import OVModelForCausalLM

    t0 = time.perf_counter()
    try:
        model = OVModelForCausalLM.from_pretrained(a.ov_dir, export=True, compile=True,
                                                   quantization_config=ov_quantization(a.weight),
                                                   ov_config=ov_config(a.weight))
    except Exception as e:  # one line for the row (NNCF's and OpenVINO's messages run over many)
        msg = " ".join(str(e).split())
        raise SystemExit(f"from_pretrained: {type(e).__name__}: {msg[:200]}") from e
    info = {"load_ms": (time.perf_counter() - t0) * 1000}
    try:
        compiled = model.request.get_compiled_model()
        props = {k: compiled.get_property(k) for k in OV_PROPERTIES}
        info["ov_properties"] = {k: v.to_string() if hasattr(v, "to_string") else str(v) for k, v in props.items()}
    except Exception as e:  # (the properties are notes only)
        info["ov_properties"] = {"error": str(e)[:80]}
    return model, info


def worker(a) -> dict:
    """One backend, cache and batch: times and tokens as JSON on stdout."""
    import torch

    torch.set_num_threads(THREADS)
    if a.backend == "openvino":
        model, ov_info = ov_model(a)
    else:
        model = apply_weights(build_model(a.model), a.weight)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (a.batch, a.prompt), generator=g)
    mask = torch.ones_like(ids)
    kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0)
    if a.cache == "static":
        kw["cache_implementation"] = "static"
    if a.backend == "airgraph":
        from airgraph.backend import collect_reports

        sink_cm = collect_reports()
        sink = sink_cm.__enter__()
    if a.backend != "openvino":
        _compile(model, a.backend)

    from transformers import StoppingCriteria, StoppingCriteriaList

    class TokenClock(StoppingCriteria):
        """Records when each new token is ready; never stops generate()."""

        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores, **kwargs):
            self.times.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def gen(n):
        clock = TokenClock()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n,
                             stopping_criteria=StoppingCriteriaList([clock]), **kw)
        t = clock.times
        assert len(t) == n, (len(t), n)
        return (time.perf_counter() - t0) * 1000, out[:, a.prompt:], (t[0] - t0) * 1000, \
            [(t1 - t0_) * 1000 for t0_, t1 in zip(t, t[1:])]

    res = {}
    with torch.no_grad():
        res["first_ms"], toks, res["first_token_ms"], _ = gen(a.new)
        tokens = [toks.tolist()]
        pre, steps = [], []
        for _ in range(a.repeats):
            _, toks, p, s = gen(a.new)
            pre.append(p)
            steps += s
            tokens.append(toks.tolist())
    res["peak_rss_mb"] = peak_rss_mb()
    res["rss_mb"] = rss_mb()
    res["prefill_ms"] = statistics.median(pre)
    res["decode_ms"] = statistics.median(steps)
    res["tokens"] = tokens
    if a.backend == "openvino":
        res.update(ov_info)
    if a.backend.startswith("cache_compile"):
        from torch._dynamo.utils import counters

        res["dynamo_frames"] = int(counters["frames"]["total"])
        res["forward"] = repr(model.forward)
    if a.backend == "airgraph":
        sink_cm.__exit__(None, None, None)
        res["graphs"] = len(sink)
        res["fallback_nodes"] = sum(1 for r in sink for n in r.nodes if not n.native)
        syms = [s for r in sink for s in r.symbolic]
        res["programs"] = sum(len(s.build_ms) for s in syms)
        builds = [ms for s in syms for ms in s.build_ms[1:]]
        res["build_ms_median"] = statistics.median(builds) if builds else None
    return res


def overhead(a) -> dict:
    """The fixed cost of one compiled decode call, layer by layer, timed inside generate() (the
    static cache's step writes its counters and caches, so replaying one call is not the same
    call): the forward as generate() calls it (Dynamo's guards, frame and output rebuilding), the
    callable Dynamo calls (AOTAutograd's runtime wrapper), airgraph's boxed callable (weight check,
    input writes, size lookup, input check, output allocation), and the engine's run alone.
    Medians in microseconds over the decode steps of 3 generate() calls."""
    import torch

    import airgraph
    import airgraph.backend as ab
    import airgraph.compiler as ac

    torch.set_num_threads(THREADS)
    model = apply_weights(build_model(a.model), a.weight)
    ids = torch.randint(3, model.config.vocab_size, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1))
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
    if a.cache == "static":
        kw["cache_implementation"] = "static"
    times = {"call": [], "aot": [], "ours": [], "engine": []}
    ns = time.perf_counter_ns

    def timed(key, f):
        def g(*args, **kwargs):
            t0 = ns()
            try:
                return f(*args, **kwargs)
            finally:
                times[key].append((ns() - t0) / 1000)
        return g

    compile_graph = ac.compile_aten_graph

    def compile_timed(*args, **kwargs):
        g = timed("ours", compile_graph(*args, **kwargs))
        g._boxed_call = True
        return g

    ab.compile_aten_graph = compile_timed

    class TimedExe:
        def __init__(self, exe):
            self.exe = exe
            self.run_ptrs, self.run_tensors = timed("engine", exe.run_ptrs), timed("engine", exe.run_tensors)

        def __getattr__(self, k):
            return getattr(self.exe, k)

    init = ac.EngineGraph.__init__

    def init_timed(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.exe = TimedExe(self.exe)

    ac.EngineGraph.__init__ = init_timed
    be = airgraph.get_backend()
    model.forward = timed("call", torch.compile(model.forward, dynamic=True,
                                                backend=lambda gm, ex: timed("aot", be(gm, ex))))
    res = []
    with torch.no_grad():
        model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw)  # compiles, every size
        for _ in range(3):
            for v in times.values():
                v.clear()
            model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw)
            res.append({k: statistics.median(v[1:]) for k, v in times.items()})  # [0]: the prefill
    med = {k: statistics.median(r[k] for r in res) for k in times}
    return {"call_us": med["call"], "dynamo_us": med["call"] - med["aot"], "aot_us": med["aot"] - med["ours"],
            "ours_us": med["ours"] - med["engine"], "engine_us": med["engine"]}


def bandwidth_gbs() -> float:
    """Read bandwidth: bytes per second of summing a 256 MiB buffer on THREADS threads, best of 5 (what a
    decode step's GEMVs do with the weights; a copy's read-plus-written rate is lower on some CPUs)."""
    import torch

    torch.set_num_threads(THREADS)
    src = torch.ones(64 << 20)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        src.sum()
        best = min(best, time.perf_counter() - t0)
    return src.numel() * 4 / best / 1e9


def floor_ms(model_name: str, batch: int, mid_len: int, gbs: float, weights: str = "fp32") -> float:
    """Bytes one decode step reads (every weight once in the form `weights` stores it, embedding rows
    aside, and the KV cache at mid_len positions) over the read bandwidth."""
    model = apply_weights(build_model(model_name), weights)
    cfg = model.config
    emb = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is emb
    wbytes = sum(tensor_bytes(p) for p in model.parameters())
    if not tied:  # the input embedding is read a row per token, not whole
        wbytes -= tensor_bytes(emb)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * cfg.num_hidden_layers * batch * cfg.num_key_value_heads * mid_len * head_dim * (4 if weights == "fp32" else 2)
    weights = wbytes
    return (weights + kv) / (gbs * 1e9) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="small", choices=("small", "full", "0.5b"))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--caches", default="dynamic,static")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--weights", default="fp32", help=f"comma-separated, of {', '.join(WEIGHTS)}")
    ap.add_argument("--prompt", type=int, default=32, help="prompt length")
    ap.add_argument("--new", type=int, default=64, help="new tokens per generate()")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per worker")
    ap.add_argument("--out", default="", help="also write the rows as JSON here")
    ap.add_argument("--overhead", action="store_true",
                    help="instead: the fixed cost of one airgraph decode call, layer by layer, per cache and batch")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default="", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--weight", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--ov-dir", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print("RESULT " + json.dumps(overhead(a) if a.overhead else worker(a)), flush=True)
        return
    import platform

    import torch

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    if a.overhead:
        print(f"one decode call of airgraph (dynamic=True), model {a.model}, prompt {a.prompt}, {a.new} new tokens; "
              f"{cpu}, {THREADS} threads, torch {torch.__version__}; medians in us")
        print()
        print("| weights | cache | batch | forward call | Dynamo (guards, frame, outputs) | AOTAutograd wrapper | "
              "airgraph boundary | engine run |")
        print("|---|---|---|---|---|---|---|---|")
        for weights in a.weights.split(","):
            for cache in a.caches.split(","):
                for batch in [int(b) for b in a.batches.split(",")]:
                    r = _run_worker(a, "airgraph", cache, batch, ["--overhead", "--weight", weights])
                    if "error" in r:
                        print(f"| {weights} | {cache} | {batch} | {r['error']} | | | | |")
                    else:
                        print(f"| {weights} | {cache} | {batch} | {r['call_us']:.1f} | {r['dynamo_us']:.1f} | "
                              f"{r['aot_us']:.1f} | {r['ours_us']:.1f} | {r['engine_us']:.1f} |", flush=True)
        return
    gbs = bandwidth_gbs()
    print(f"generation: model {a.model}, prompt {a.prompt}, {a.new} new tokens, greedy; {cpu}, {THREADS} threads, "
          f"torch {torch.__version__}; read bandwidth {gbs:.1f} GB/s", flush=True)
    rows = measure(a, gbs, log=lambda r: print(_row(r), flush=True))
    print()
    print(TABLE_HEADER)
    for r in rows:
        print(_row(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


TABLE_HEADER = ("| weights | cache | batch | backend | first generate() (ms) | prefill (ms) | decode (ms/token) "
                "| floor (ms/token) | RSS after (MB) | peak RSS (MB) | tokens = eager | notes |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def measure(a, gbs: float, log=None) -> list[dict]:
    """Every (cache, batch, backend) cell of a.model, each in its own worker process (bench/run.py's
    generation section calls this too). `a` needs model, backends, caches, batches (comma-separated
    strings), prompt, new, repeats and timeout. A row: the worker's result (or {"error": ...}) with
    backend, cache, batch, floor_ms and, where eager's tokens are known, equal (every generate()'s
    tokens the same as eager's first) and, where they differ, lead (how many leading tokens are);
    rows of other weights than fp32 also lead_fp32 against eager fp32's tokens, where those are known.
    openvino's cells run in .venv-ov on the model saved once here (removed at the end, as the compile
    cache folders)."""
    rows, floors, ref32 = [], {}, {}
    ov_dir = None
    cc_dirs = []  # (each cell's compile cache folders: removed at the end)
    try:
        for weights in getattr(a, "weights", "fp32").split(","):
            for cache in a.caches.split(","):
                for batch in [int(b) for b in a.batches.split(",")]:
                    if (weights, batch) not in floors:  # the floor does not depend on the cache's kind
                        floors[weights, batch] = floor_ms(a.model, batch, a.prompt + a.new // 2, gbs, weights)
                    ref = None
                    cc_dir = tempfile.mkdtemp(prefix="airgraph-bench-cc-")
                    cc_dirs.append(cc_dir)
                    for backend in a.backends.split(","):
                        if backend == "openvino":
                            why = ov_unavailable(cache)
                            if why is None and ov_dir is None:
                                ov_dir = save_model(a.model, tempfile.mkdtemp(prefix="airgraph-bench-ov-"))
                            r = {"error": why} if why else _run_worker(
                                a, backend, cache, batch, ["--weight", weights, "--ov-dir", ov_dir], python=ov_python())
                        else:
                            r = _run_worker(a, backend, cache, batch, ["--weight", weights],
                                            env={"AIRGRAPH_BENCH_CC_DIR": cc_dir,
                                                 "TORCHINDUCTOR_CACHE_DIR": os.path.join(cc_dir, "inductor")})
                        if backend == "eager" and "tokens" in r:
                            ref = r["tokens"][0]
                            if weights == "fp32":
                                ref32[cache, batch] = ref
                        compare_tokens(r, ref, None if weights == "fp32" else ref32.get((cache, batch)))
                        r.update(backend=backend, cache=cache, batch=batch, weights=weights,
                                 floor_ms=floors[weights, batch])
                        rows.append(r)
                        if log:
                            log(r)
    finally:
        import shutil

        for d in cc_dirs + ([ov_dir] if ov_dir else []):
            shutil.rmtree(d, ignore_errors=True)
    return rows


def leading_equal(runs: list, ref: list) -> int:
    """How many leading tokens every run (a list of the batch's rows of tokens) shares with ref: the
    fewest over the runs and rows."""
    n = len(ref[0]) if ref else 0
    for run in runs:
        for row, want in zip(run, ref):
            n = min(n, next((i for i, (x, y) in enumerate(zip(row, want)) if x != y), min(len(row), len(want))))
    return n


def compare_tokens(r: dict, ref, ref_fp32=None):
    """Sets equal (and, where not, lead) against ref, and lead_fp32 against ref_fp32, on a row with tokens
    (and new: how many tokens each generate() made)."""
    if "tokens" not in r:
        return
    r["new"] = len(r["tokens"][0][0])
    if ref is not None:
        r["equal"] = all(t == ref for t in r["tokens"])
        if not r["equal"]:
            r["lead"] = leading_equal(r["tokens"], ref)
    if ref_fp32 is not None:
        r["lead_fp32"] = leading_equal(r["tokens"], ref_fp32)


def with_warm_rows(backends: list[str]) -> list[str]:
    """The backends plus the rows of a second process on the first one's caches: Inductor's own
    caches warm after "inductor", cache_compile's cold and warm processes after "airgraph"."""
    out = []
    for b in backends:
        out.append(b)
        if b == "inductor":
            out.append("inductor-warm")
        elif b == "airgraph":
            out += ["cache_compile-cold", "cache_compile-warm"]
    return out


def _run_worker(a, backend: str, cache: str, batch: int, extra=(), env=None, python=None) -> dict:
    """One cell in its own process (this Python, or `python`): its RESULT as a dict, or {"error": ...}."""
    cmd = [python or sys.executable, os.path.abspath(__file__), "--worker", "--model", a.model, "--backend", backend,
           "--cache", cache, "--batch", str(batch), "--prompt", str(a.prompt), "--new", str(a.new),
           "--repeats", str(a.repeats), *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {a.timeout} s"}
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        return {"error": ((p.stderr.strip().splitlines() or ["no output"])[-1])[:160]}
    return json.loads(line[7:])


def _row(r: dict) -> str:
    w = r.get("weights", "fp32")
    if "error" in r:
        return (f"| {w} | {r['cache']} | {r['batch']} | {r['backend']} | - | - | - | {r['floor_ms']:.2f} | - | - | - | "
                f"{r['error']} |")
    notes = [f"first token {r['first_token_ms']:.0f} ms"] if "first_token_ms" in r else []
    if "dynamo_frames" in r:
        notes.append(f"{r['dynamo_frames']} frames traced by Dynamo")
    if r["backend"] == "airgraph":
        notes.append(f"{r['graphs']} graphs, {r['fallback_nodes']} fallback nodes, {r['programs']} programs")
        if r.get("build_ms_median") is not None:
            notes.append(f"{r['build_ms_median']:.1f} ms per new size")
    if "load_ms" in r:
        p = r.get("ov_properties", {})
        notes.append(f"from_pretrained (export, compression, compile) {r['load_ms'] / 1000:.1f} s; "
                     f"compute {p.get('INFERENCE_PRECISION_HINT', '?')}, KV cache {p.get('KV_CACHE_PRECISION', '?')}, "
                     f"{p.get('INFERENCE_NUM_THREADS', '?')} threads, dynamic quantization group "
                     f"{p.get('DYNAMIC_QUANTIZATION_GROUP_SIZE', '?')}, CPU pinning {p.get('ENABLE_CPU_PINNING', '?')}")
    n = r.get("new", "?")
    if "lead_fp32" in r:
        notes.append(f"{r['lead_fp32']}/{n} leading tokens = eager fp32's")
    eq = {True: "yes", False: "NO"}.get(r.get("equal"), "-")
    if "lead" in r:
        eq += f" ({r['lead']}/{n} leading equal)"
    return (f"| {w} | {r['cache']} | {r['batch']} | {r['backend']} | {r['first_ms']:.0f} | {r['prefill_ms']:.2f} | "
            f"{r['decode_ms']:.2f} | {r['floor_ms']:.2f} | {r.get('rss_mb', 0):.0f} | {r.get('peak_rss_mb', 0):.0f} | {eq} | "
            f"{'; '.join(notes)} |")


if __name__ == "__main__":
    main()
