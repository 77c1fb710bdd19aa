// WeightGuard: the per-call check that the parameters and buffers an engine
// graph bound as constants are still the tensors it was built with.
//
// A bound tensor is unchanged when the argument at its position is the same
// memory at the same version: the same data pointer (a reassigned parameter is
// another tensor; `p.data = t` swaps the storage under the same object) and the
// same version counter (every in-place write through the tensor or any view of
// it bumps `_version`; load_state_dict copies in place under no_grad). The
// argument is normally the very object that was bound (Dynamo passes the
// module's parameters as graph inputs); an alias of the same memory is compared
// the same way. The front (python/airgraph/compiler.py) calls check() on every
// call and rebuilds what depends on a changed constant.
//
// Only the Python C API is used: this file never includes or links PyTorch.
// Reads, fastest first (BERT-base binds ~200 tensors; the budget is ~2 us):
//  - data pointer: torch's own `void* (PyObject*)` function, which torch exports
//    for Inductor's generated C++ (torch._C._dynamo.guards.
//    _torchinductor_pyobject_tensor_data_ptr), handed in as an address (~7 ns);
//  - version, bound object: one load from the tensor's version counter. torch's
//    `_version` getter costs ~40 ns (warning handler, torch-function-mode checks,
//    a virtual call, a Python int), too slow for 200 tensors per call, so the
//    front finds once where a TensorImpl keeps its counter (probe_version_layout
//    on probe tensors, verified by an in-place write) and each guard checks that
//    place against `_version` for every tensor it binds. The guard keeps a
//    detached alias of each tensor: it shares the counter and keeps it alive.
//    Where the layout is unknown or a check disagrees, the getter is used;
//  - otherwise: the `_version` getter's C function, called directly (~40 ns),
//    or the generic attribute lookup for types that customize attribute access.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "bindings/tensor_ptr.h"

namespace nb = nanobind;

namespace {

using ag::DataPtrFn;

PyObject* g_version_name = nullptr;   // interned "_version"
PyObject* g_cdata_name = nullptr;     // interned "_cdata": a tensor's TensorImpl address
PyObject* g_detach_name = nullptr;    // interned "detach"

// Where a TensorImpl keeps its version: the counter object's pointer at
// `impl_off` in the TensorImpl, the uint32 count at `count_off` in the counter.
struct VersionLayout {
  Py_ssize_t impl_off = -1;
  Py_ssize_t count_off = -1;
  bool known() const { return impl_off >= 0 && count_off >= 0; }
  const uint32_t* count_of(uintptr_t impl) const {
    const void* counter = *reinterpret_cast<void* const*>(impl + impl_off);
    return counter ? reinterpret_cast<const uint32_t*>(static_cast<const char*>(counter) + count_off) : nullptr;
  }
};

uint32_t load_count(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

// Probe: `a` and `b` are TensorImpl addresses of a tensor and its detached alias
// (one shared counter), `c` of an unrelated tensor of the same shape and dtype;
// their versions were set to the distinct values va and vc. The counter pointer
// is a word equal in a and b but not in c whose pointee holds va (and vc in c's).
// Scans only the first 128 bytes of a TensorImpl (it is larger) and the first
// 24 bytes of a counter (a vtable, a reference count and the count).
std::optional<std::pair<Py_ssize_t, Py_ssize_t>> probe_version_layout(uintptr_t a, uintptr_t b, uintptr_t c,
                                                                      uint32_t va, uint32_t vc) {
  if (a == 0 || b == 0 || c == 0 || a == b || va == vc) return std::nullopt;
  std::optional<std::pair<Py_ssize_t, Py_ssize_t>> found;
  for (Py_ssize_t off = 0; off < 128; off += static_cast<Py_ssize_t>(sizeof(void*))) {
    auto word = [off](uintptr_t impl) { return *reinterpret_cast<const uintptr_t*>(impl + off); };
    uintptr_t pa = word(a), pc = word(c);
    auto heap_like = [](uintptr_t p) { return p >= 0x10000 && p < (uintptr_t(1) << 47) && p % alignof(void*) == 0; };
    if (pa != word(b) || pa == pc || !heap_like(pa) || !heap_like(pc)) continue;
    for (Py_ssize_t cnt = 8; cnt + 4 <= 24; cnt += 4) {
      if (*reinterpret_cast<const uint32_t*>(pa + cnt) == va && *reinterpret_cast<const uint32_t*>(pc + cnt) == vc) {
        if (found) return std::nullopt;  // ambiguous: refuse
        found = std::make_pair(off, cnt);
      }
    }
  }
  return found;
}

// The count at a probed layout, for the front's verification of the probe.
int64_t read_version_at(uintptr_t impl, Py_ssize_t impl_off, Py_ssize_t count_off) {
  VersionLayout lay{impl_off, count_off};
  if (impl == 0 || !lay.known()) throw nb::value_error("read_version_at: bad layout");
  const uint32_t* p = lay.count_of(impl);
  return p ? static_cast<int64_t>(load_count(p)) : -1;
}

struct Bound {
  Py_ssize_t pos = 0;           // index in the call's argument list
  PyObject* obj = nullptr;      // strong: keeps the tensor and its memory alive
  PyObject* type = nullptr;     // strong: Py_TYPE(obj) when bound
  PyObject* alias = nullptr;    // strong: a detached alias keeping `count` alive, or null
  const uint32_t* count = nullptr;  // obj's version count, read directly; null: use the getter
  getter version_get = nullptr;     // C getter of `_version` on `type`, or null
  void* version_closure = nullptr;
  uintptr_t data_ptr = 0;
  long long version = 0;
};

uintptr_t impl_address(PyObject* t) {
  PyObject* r = PyObject_GetAttr(t, g_cdata_name);
  if (r == nullptr) {
    PyErr_Clear();
    return 0;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return static_cast<uintptr_t>(v);
}

class WeightGuard {
 public:
  WeightGuard(const std::vector<int64_t>& positions, nb::sequence tensors, uintptr_t data_ptr_fn,
              std::pair<Py_ssize_t, Py_ssize_t> version_layout)
      : data_ptr_fn_(reinterpret_cast<DataPtrFn>(data_ptr_fn)),
        layout_{version_layout.first, version_layout.second} {
    if (static_cast<size_t>(nb::len(tensors)) != positions.size())
      throw nb::value_error("WeightGuard: one tensor per position expected");
    bound_.reserve(positions.size());
    size_t k = 0;
    for (nb::handle t : tensors) {
      if (positions[k] < 0) throw nb::value_error("WeightGuard: negative position");
      bound_.emplace_back();  // owned from here on: the destructor releases what it holds
      Bound& b = bound_.back();
      b.pos = static_cast<Py_ssize_t>(positions[k++]);
      b.obj = t.ptr();
      Py_INCREF(b.obj);
      b.type = reinterpret_cast<PyObject*>(Py_TYPE(b.obj));
      Py_INCREF(b.type);
      find_version_getter(b);
      b.data_ptr = read_data_ptr(b.obj, b);
      b.version = read_version(b.obj, b);
      find_version_count(b);
      if (b.pos > max_pos_) max_pos_ = b.pos;
    }
  }

  WeightGuard(const WeightGuard&) = delete;
  WeightGuard& operator=(const WeightGuard&) = delete;

  ~WeightGuard() {  // nanobind destroys instances with the GIL held
    for (Bound& b : bound_) {
      Py_XDECREF(b.obj);
      Py_XDECREF(b.type);
      Py_XDECREF(b.alias);
    }
  }

  // Index (into the bound list) of the first bound tensor that changed, or -1.
  // `args` is the call's argument list or tuple.
  Py_ssize_t check(nb::handle args) const {
    PyObject* seq = args.ptr();
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) throw nb::type_error("WeightGuard.check: list or tuple expected");
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    const Py_ssize_t m = static_cast<Py_ssize_t>(bound_.size());
    if (m > 0 && max_pos_ >= n) {  // fewer arguments than compiled for
      for (Py_ssize_t k = 0; k < m; ++k)
        if (bound_[k].pos >= n) return k;
    }
    for (Py_ssize_t k = 0; k < m; ++k) {
      const Bound& b = bound_[k];
      PyObject* a = items[b.pos];
      if (a == b.obj) {
        if (read_data_ptr(a, b) != b.data_ptr) return k;
        if (b.count ? load_count(b.count) != static_cast<uint32_t>(b.version) : read_version(a, b) != b.version)
          return k;
        continue;
      }
      // Another object: an alias of the bound memory is no change. Generic lookups;
      // an object without them is certainly not the bound memory.
      try {
        if (read_data_ptr(a, b) != b.data_ptr || read_version(a, b) != b.version) return k;
      } catch (nb::python_error&) {
        return k;
      }
    }
    return -1;
  }

  size_t size() const { return bound_.size(); }
  // Whether every bound tensor is checked without a call into Python or torch's getters.
  bool fast() const {
    if (data_ptr_fn_ == nullptr) return false;
    for (const Bound& b : bound_)
      if (b.count == nullptr) return false;
    return true;
  }
  std::vector<long long> versions() const {
    std::vector<long long> v;
    for (const Bound& b : bound_) v.push_back(b.version);
    return v;
  }
  std::vector<uintptr_t> data_ptrs() const {
    std::vector<uintptr_t> v;
    for (const Bound& b : bound_) v.push_back(b.data_ptr);
    return v;
  }

 private:
  // The `_version` getset descriptor's C getter, when attribute access on the
  // type is the generic one (a subclass overriding __getattribute__/__getattr__,
  // or `_version` with a property, keeps the generic lookup).
  static void find_version_getter(Bound& b) {
    PyTypeObject* tp = Py_TYPE(b.obj);
    if (tp->tp_getattro != PyObject_GenericGetAttr) return;
    PyObject* d = PyObject_GetAttr(reinterpret_cast<PyObject*>(tp), g_version_name);
    if (d == nullptr) {
      PyErr_Clear();
      return;
    }
    if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
      auto* gd = reinterpret_cast<PyGetSetDescrObject*>(d);
      if (gd->d_getset != nullptr && gd->d_getset->get != nullptr) {
        b.version_get = gd->d_getset->get;
        b.version_closure = gd->d_getset->closure;
      }
    }
    Py_DECREF(d);  // the type keeps the descriptor alive, and we hold the type
  }

  // The direct read of b.obj's version count, when the layout is known and the
  // count there equals what the getter said; a detached alias (same counter)
  // keeps the counter alive whatever happens to b.obj.
  void find_version_count(Bound& b) const {
    if (!layout_.known()) return;
    uintptr_t impl = impl_address(b.obj);
    if (impl == 0) return;
    PyObject* alias = PyObject_CallMethodNoArgs(b.obj, g_detach_name);
    if (alias == nullptr) {
      PyErr_Clear();
      return;
    }
    uintptr_t alias_impl = impl_address(alias);
    const uint32_t* count = alias_impl ? layout_.count_of(alias_impl) : nullptr;
    if (count != nullptr && count == layout_.count_of(impl) &&
        load_count(count) == static_cast<uint32_t>(b.version) && b.version >= 0 && b.version <= UINT32_MAX) {
      b.alias = alias;
      b.count = count;
    } else {
      Py_DECREF(alias);
    }
  }

  long long read_version(PyObject* a, const Bound& b) const {
    PyObject* v = (b.version_get != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(a)) == b.type)
                      ? b.version_get(a, b.version_closure)
                      : PyObject_GetAttr(a, g_version_name);
    if (v == nullptr) throw nb::python_error();
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) throw nb::python_error();
    return x;
  }

  uintptr_t read_data_ptr(PyObject* a, const Bound& b) const {
    return ag::tensor_data_ptr(a, data_ptr_fn_, b.type);  // torch's function only for the bound tensor's type
  }

  std::vector<Bound> bound_;
  Py_ssize_t max_pos_ = -1;
  DataPtrFn data_ptr_fn_;
  VersionLayout layout_;
};

}  // namespace

void bind_weights(nb::module_& m) {
  g_version_name = PyUnicode_InternFromString("_version");
  g_cdata_name = PyUnicode_InternFromString("_cdata");
  g_detach_name = PyUnicode_InternFromString("detach");
  nb::class_<WeightGuard>(m, "WeightGuard",
                          "Checks on every call that the tensors bound as constants are unchanged "
                          "(same data pointer, same version counter).")
      .def(nb::init<const std::vector<int64_t>&, nb::sequence, uintptr_t, std::pair<Py_ssize_t, Py_ssize_t>>(),
           nb::arg("positions"), nb::arg("tensors"), nb::arg("data_ptr_fn") = 0,
           nb::arg("version_layout") = std::make_pair(Py_ssize_t(-1), Py_ssize_t(-1)),
           "positions: argument index of each bound tensor; tensors: the bound tensors; data_ptr_fn: address of "
           "torch's `void* (PyObject*)` data-pointer function, or 0; version_layout: probe_version_layout()'s "
           "verified result, or (-1, -1) to read `_version` through torch's getter.")
      .def("check", &WeightGuard::check, nb::arg("args"),
           "Index (into the bound tensors) of the first one whose argument changed, or -1.")
      .def("__len__", &WeightGuard::size)
      .def_prop_ro("fast", &WeightGuard::fast)
      .def_prop_ro("versions", &WeightGuard::versions)
      .def_prop_ro("data_ptrs", &WeightGuard::data_ptrs);
  m.def("probe_version_layout", &probe_version_layout, nb::arg("impl_a"), nb::arg("impl_alias"), nb::arg("impl_c"),
        nb::arg("version_a"), nb::arg("version_c"),
        "(offset of the version counter in a TensorImpl, offset of the count in the counter), found on probe "
        "tensors (see weights.cpp), or None when not found or ambiguous.");
  m.def("read_version_at", &read_version_at, nb::arg("impl"), nb::arg("impl_off"), nb::arg("count_off"),
        "The version count of the TensorImpl at `impl` under a probed layout (to verify the probe).");
}
