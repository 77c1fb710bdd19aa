// A torch tensor's data pointer from its Python object, without including or linking PyTorch:
// torch's own `void* (PyObject*)` function, which torch exports for Inductor's generated C++
// (torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr, handed in as an address), for
// objects of exactly `type` (the function takes any tensor; only tensors are handed to it), and
// the object's .data_ptr() otherwise. Used by the WeightGuard (weights.cpp) and the thin call path
// (Executable.run_tensors, module.cpp).
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>

namespace ag {

using DataPtrFn = void* (*)(PyObject*);

inline uintptr_t tensor_data_ptr(PyObject* t, DataPtrFn fn, PyObject* type) {
  if (fn != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(t)) == type) return reinterpret_cast<uintptr_t>(fn(t));
  PyObject* r = PyObject_CallMethod(t, "data_ptr", nullptr);
  if (r == nullptr) throw nanobind::python_error();
  void* p = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  if (p == nullptr && PyErr_Occurred()) throw nanobind::python_error();
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace ag
