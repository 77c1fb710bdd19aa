"""The runtimes CPU users deploy with, run as they run them (issue 35): ONNX Runtime and OpenVINO.

    fn = runtimes.prepare("onnxruntime", model, args, kwargs)   # export / convert + compile; raises Unavailable
    out = fn(*args, **kwargs)                                    # torch tensors, shaped like model(*args, **kwargs)
    fn, reason = runtimes.try_prepare("openvino", model, args, kwargs, want=model(*args, **kwargs))

- onnxruntime: `torch.onnx.export` of the eager model (torch's default exporter, torch.export based) ->
  `onnxruntime.InferenceSession` on the CPU provider, `intra_op_num_threads` THREADS, `inter_op_num_threads` 1,
  graph optimizations ORT_ENABLE_ALL; called with `session.run(None, {name: array})`.
- openvino: `openvino.convert_model(model, example_input=...)` -> `Core().compile_model(m, "CPU", {...})` with
  INFERENCE_PRECISION_HINT f32, PERFORMANCE_HINT LATENCY and INFERENCE_NUM_THREADS THREADS; called with
  `compiled(inputs)` (OpenVINO's own torch.compile backend is bench/run.py's `openvino-tc`, not this).
- openvino-default: the same without the precision hint: OpenVINO's default precision, bf16 on CPUs with native
  bf16 (AVX512_BF16 / AMX), f32 elsewhere.

Inputs: the model's positional arguments and keyword arguments (tensors) are flattened in that order into one
list, named `input_<i>` for the i-th positional one and by their keyword (`attention_mask`) for the others; the
exported / converted graph takes them in that order under those names, and a call maps its arguments the same
way (by name for ONNX Runtime: an input the exporter dropped as unused is not fed). Outputs: the eager output's
tensors in pytree order, put back into its structure (a tensor, a tuple of tensors, ...).

A runtime that cannot take a model (export or conversion fails, or its first result differs from eager's by more
than TOLERANCE[name], relative to max(1, |eager| max)) raises Unavailable with a one-line reason; try_prepare
returns it instead of raising, so that a benchmark cell records it and the other backends go on.
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile

THREADS = 2
RUNTIMES = ("onnxruntime", "openvino", "openvino-default")
# largest accepted |runtime - eager| over all outputs, relative to max(1, |eager| max) (zoo.max_diff's measure);
# f32 runtimes reassociate sums and fuse GELU / layer norm / attention (1e-6..1e-4 relative on the zoo), bf16 is
# 8 mantissa bits
TOLERANCE = {"onnxruntime": 1e-3, "openvino": 1e-3, "openvino-default": 1e-1}


class Unavailable(Exception):
    """The runtime cannot take this model; str() is the one-line reason."""


def versions() -> dict:
    """The installed runtimes' versions (None where one is not installed); OpenVINO's without its build tail
    ("2026.4.1", not "2026.4.1-22982-e213a147257-releases/2026/4")."""
    out = {}
    for mod in ("onnxruntime", "openvino"):
        try:
            out[mod] = __import__(mod).__version__.split("-")[0]
        except Exception:
            out[mod] = None
    return out


def native_bf16(flags: list[str] | None = None) -> bool:
    """Whether the CPU computes bf16 natively (AVX512_BF16 or AMX-BF16): where OpenVINO's default precision is bf16."""
    if flags is None:
        flags = []
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = line.split(":", 1)[1].split()
                        break
        except OSError:
            pass
    return "avx512_bf16" in flags or "amx_bf16" in flags


def reason(e: BaseException, stage: str) -> str:
    """One line: the stage, and the innermost cause's type and first line (exporters wrap the real error)."""
    inner = e
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    lines = [l.strip() for l in str(inner).strip().splitlines() if l.strip()]
    if "Summary:" in lines:  # OpenVINO's conversion report: its summary names the operations it could not take
        lines = ["; ".join(l.lstrip("- ") for l in lines[lines.index("Summary:") + 1:])]
    return (f"{stage}: {type(inner).__name__}" + (f": {lines[0]}" if lines else ""))[:200]


def _flat_inputs(args: tuple, kwargs: dict) -> tuple[list[str], tuple]:
    import torch

    names = [f"input_{i}" for i in range(len(args))] + list(kwargs)
    values = tuple(args) + tuple(kwargs.values())
    bad = [n for n, v in zip(names, values) if not isinstance(v, torch.Tensor)]
    if bad:
        raise Unavailable(f"inputs: not a tensor: {', '.join(bad)}")
    return names, values


def _flat_module(model, n_args: int, keys: list[str]):
    """The model as a module of positional tensor inputs (args, then kwargs' values) and a tuple of tensor outputs."""
    import torch
    from torch.utils import _pytree as pytree

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *flat):
            out = self.model(*flat[:n_args], **dict(zip(keys, flat[n_args:])))
            return tuple(pytree.tree_leaves(out))

    return Flat().eval()


class _Runtime:
    """A prepared runtime: call it like the model."""

    def __init__(self, name: str, run, names: list[str], n_args: int, spec):
        self.name, self._run, self._names, self._n_args, self._spec = name, run, names, n_args, spec

    def __call__(self, *args, **kwargs):
        from torch.utils import _pytree as pytree

        if len(args) != self._n_args or len(args) + len(kwargs) != len(self._names):
            raise TypeError(f"{self.name}: prepared for {self._n_args} positional inputs and "
                            f"{self._names[self._n_args:]}, called with {len(args)} and {list(kwargs)}")
        arrays = [a.detach().numpy() for a in args] + [kwargs[k].detach().numpy() for k in self._names[self._n_args:]]
        return pytree.tree_unflatten(self._run(arrays), self._spec)


def _onnxruntime(model, args, names, values, spec) -> _Runtime:
    import onnxruntime as ort
    import torch

    flat = _flat_module(model, len(args), names[len(args):])
    n_out = spec.num_leaves
    with tempfile.TemporaryDirectory(prefix="airgraph_bench_onnx_") as d:
        path = os.path.join(d, "model.onnx")
        try:
            with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():  # the exporter's progress lines
                torch.onnx.export(flat, values, path, input_names=names,
                                  output_names=[f"output_{i}" for i in range(n_out)], dynamo=True)
        except Exception as e:
            raise Unavailable(reason(e, "export")) from e
        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:  # (the weights are read into the session here; the folder can go)
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise Unavailable(reason(e, "session")) from e
    taken = [i.name for i in sess.get_inputs()]
    unknown = [n for n in taken if n not in names]
    if unknown:
        raise Unavailable(f"session: inputs {unknown} are none of the model's {names}")
    index = [names.index(n) for n in taken]  # the exporter drops inputs the graph does not use
    if len(sess.get_outputs()) != n_out:
        raise Unavailable(f"session: {len(sess.get_outputs())} outputs, eager has {n_out}")

    def run(arrays):
        outs = sess.run(None, {n: arrays[i] for n, i in zip(taken, index)})
        return [torch.from_numpy(o) for o in outs]

    return _Runtime("onnxruntime", run, names, len(args), spec)


_CORE = []


def _openvino(model, args, names, values, spec, precision_hint: bool) -> _Runtime:
    import openvino as ov
    import torch

    flat = _flat_module(model, len(args), names[len(args):])
    try:
        with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            m = ov.convert_model(flat, example_input=values)
    except Exception as e:
        raise Unavailable(reason(e, "convert")) from e
    if len(m.inputs) != len(names):
        raise Unavailable(f"convert: {len(m.inputs)} inputs, the model has {len(names)}")
    if len(m.outputs) != spec.num_leaves:
        raise Unavailable(f"convert: {len(m.outputs)} outputs, eager has {spec.num_leaves}")
    for port, n in zip(m.inputs, names):
        port.get_tensor().set_names({n})
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": THREADS}
    if precision_hint:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if not _CORE:
        _CORE.append(ov.Core())
    try:
        compiled = _CORE[0].compile_model(m, "CPU", config)
    except Exception as e:
        raise Unavailable(reason(e, "compile_model")) from e
    outputs = list(compiled.outputs)

    def run(arrays):
        res = compiled(arrays)
        return [torch.from_numpy(res[o]) for o in outputs]

    return _Runtime("openvino" if precision_hint else "openvino-default", run, names, len(args), spec)


def prepare(name: str, model, args: tuple, kwargs: dict, want=None):
    """`name`'s callable for `model` at these inputs (shapes are fixed at them). With `want` (eager's output), the
    first call is checked against it and a difference beyond TOLERANCE[name] makes the runtime Unavailable."""
    import torch
    from torch.utils import _pytree as pytree

    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime {name!r}; known: {', '.join(RUNTIMES)}")
    names, values = _flat_inputs(args, kwargs)
    with torch.no_grad():
        if want is None:
            want = model(*args, **kwargs)
        _, spec = pytree.tree_flatten(want)
        if name == "onnxruntime":
            fn = _onnxruntime(model, args, names, values, spec)
        else:
            fn = _openvino(model, args, names, values, spec, precision_hint=name == "openvino")
        try:
            got = fn(*args, **kwargs)
        except Exception as e:
            raise Unavailable(reason(e, "run")) from e
    diff = rel_diff(got, want)
    if not diff <= TOLERANCE[name]:
        raise Unavailable(f"wrong result: max diff {diff:.1e} vs eager (relative to max(1, |eager|)) "
                          f"> {TOLERANCE[name]:g}")
    return fn


def try_prepare(name: str, model, args: tuple, kwargs: dict, want=None):
    """(callable, None), or (None, the reason) where the runtime cannot take the model."""
    try:
        return prepare(name, model, args, kwargs, want), None
    except Unavailable as e:
        return None, str(e)
    except Exception as e:  # anything else on the way (an import, a converter's own bug) is a reason too
        return None, reason(e, name)


def rel_diff(got, want) -> float:
    """Largest |got - want| over all output tensors, relative to max(1, |want| max) per output."""
    from torch.utils import _pytree as pytree

    a, b = pytree.tree_leaves(got), pytree.tree_leaves(want)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if tuple(x.shape) != tuple(y.shape):
            return float("inf")
        if y.numel():
            scale = max(1.0, float(y.float().abs().max()))
            worst = max(worst, float((x.float() - y.float()).abs().max()) / scale)
    return worst
