// airgraph runner: the public C++ API that runs an exported airgraph file without
// Python or libtorch (libairgraph_runtime.so). A Model loads a file (mapped, its
// constants served in place), tells its inputs and outputs, and runs it on
// caller buffers: symbolic sizes are bound from the input shapes and one compiled
// program is kept per binding, so a model serves any sizes its graph allows.
// run() may be called from several threads at once; Model is a cheap handle
// (copies share the loaded graph and its compiled programs). Every error is an
// airgraph::Error that says what is wrong (the file, the input's name, the
// expected and the actual dtype or shape).
//
// This header includes only the standard library and is stable across airgraph
// versions of the same major version; the implementation is behind a pimpl.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// ---- DLPack v0.8 ABI (https://github.com/dmlc/dlpack), declared here so that this header
// needs nothing else; the include guard is dlpack.h's own, so whichever comes first wins and
// both describe the same ABI (a program that wants dlpack.h's newer parts, such as v1.0's
// DLManagedTensorVersioned, includes dlpack.h before this header). ----------------------------
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1
extern "C" {
typedef enum : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;
}
#endif

namespace airgraph {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg);
  ~Error() override;
};

// Element types (the order is part of the ABI).
enum class DType : uint8_t { float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool_ };
const char* dtype_name(DType t);             // "float32", ..., "bfloat16", "bool"
DType dtype_from_name(const std::string& s);  // those names; throws Error on any other
size_t dtype_size(DType t);                  // bytes per element

// An input or output of the model. Dims that depend on the symbols are -1 in `shape`, and
// `dim_names` holds their size expression ("s0", "2*s0"); constant dims have "".
struct TensorInfo {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  std::vector<std::string> dim_names;
  int written_by_output = -1;  // inputs: after run() the input holds this output's value (-1: none)
  std::string str() const;     // "x: float32[s0, 4]"
};

// A caller's input: contiguous C-order data. An input the model writes (a KV cache:
// TensorInfo::written_by_output >= 0) is written through `data`.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
};

// An output: C-order data it keeps alive (copies share it). An output the model computed in the
// memory of an input it writes (written_input() >= 0) is a view of that caller buffer instead,
// valid while the buffer is.
class Tensor {
 public:
  Tensor();
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  size_t nbytes() const;
  const void* data() const { return data_; }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data_);
  }
  int written_input() const { return written_input_; }
  // A DLPack tensor that shares this tensor's data; the consumer owns it and calls its deleter.
  DLManagedTensor* to_dlpack() const;

 private:
  friend class Model;
  std::shared_ptr<void> owner_;
  const void* data_ = nullptr;
  DType dtype_ = DType::float32;
  std::vector<int64_t> shape_;
  int written_input_ = -1;
};

// Loads an op plugin (include/airgraph/op_plugin.h) into this library's op registry, so that
// models that use its ops load and run; returns the plugin's "name version". Loading the same
// plugin again is a no-op; another version of a loaded plugin, or a library that is not a
// plugin, throws Error naming the file. A model file that uses a plugin's op records the
// plugin's name and version: Model::load refuses it, naming the op, while that plugin is not
// loaded or is loaded in another version.
std::string load_plugin(const std::string& path);

class Model {
 public:
  // Maps and loads an airgraph file (checksums verified); throws Error naming the file.
  static Model load(const std::string& path);
  // From bytes in memory (copied).
  static Model load_bytes(const void* data, size_t size);

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  const std::vector<std::string>& symbols() const;
  const std::string& producer() const;  // who wrote the file
  const std::string& metadata() const;  // the writer's text

  // Runs the model. Inputs are checked (count, dtype, rank, every dim against its size) and
  // the symbols bound from their shapes. `threads` > 0 sets this thread's intra-op thread
  // count (OpenMP) first; 0 keeps it.
  std::vector<Tensor> run(const std::vector<TensorRef>& inputs, int threads = 0);
  // The same on DLPack tensors, borrowed (their deleters are not called): CPU, lanes 1,
  // contiguous C order (strides null or compact).
  std::vector<Tensor> run(const std::vector<DLManagedTensor*>& inputs, int threads = 0);
  std::vector<Tensor> run(const std::vector<const DLTensor*>& inputs, int threads = 0);

  size_t num_compiled() const;  // size bindings compiled and kept (at most 64, least recently used dropped)

  Model(const Model&);
  Model(Model&&) noexcept;
  Model& operator=(const Model&);
  Model& operator=(Model&&) noexcept;
  ~Model();

 private:
  struct Impl;
  explicit Model(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace airgraph
