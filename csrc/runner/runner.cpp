// libairgraph_runtime: the public runner API (include/airgraph/runner.h) over the
// engine's ag::Model (model/model.h). Converts types, checks DLPack tensors,
// and turns every engine error into airgraph::Error. No Python, no libtorch.
#include "airgraph/runner.h"

#include <new>

#include "base/error.h"
#include "kernels/plugin.h"
#include "model/model.h"

namespace airgraph {

Error::Error(const std::string& msg) : std::runtime_error(msg) {}
Error::~Error() = default;

namespace {

#define AG_SAME(pub, eng) static_assert(static_cast<int>(DType::pub) == static_cast<int>(ag::DType::eng));
AG_SAME(float32, f32)
AG_SAME(float64, f64)
AG_SAME(float16, f16)
AG_SAME(bfloat16, bf16)
AG_SAME(int64, i64)
AG_SAME(int32, i32)
AG_SAME(int16, i16)
AG_SAME(int8, i8)
AG_SAME(uint8, u8)
AG_SAME(bool_, b8)
#undef AG_SAME

ag::DType to_ag(DType t) { return static_cast<ag::DType>(t); }
DType from_ag(ag::DType t) { return static_cast<DType>(t); }

// Runs f, turning every exception into airgraph::Error.
template <typename F>
auto guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error("airgraph: out of memory");
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

}  // namespace

std::string load_plugin(const std::string& path) {
  return guard([&] {
    const ag::PluginInfo& p = ag::load_plugin(path);
    return p.name + " " + p.version;
  });
}

namespace {

TensorInfo info_of(const ag::ModelTensorInfo& t) {
  TensorInfo i;
  i.name = t.name;
  i.dtype = from_ag(t.dtype);
  i.shape = t.dims;
  i.dim_names = t.dim_text;
  i.written_by_output = t.written_by_output;
  return i;
}

bool dtype_of_dl(DLDataType d, DType* out) {
  if (d.lanes != 1) return false;
  for (int k = 0; k <= static_cast<int>(DType::bool_); ++k) {
    DType t = static_cast<DType>(k);
    int bits = static_cast<int>(dtype_size(t)) * 8;
    int code = t == DType::bool_                                                                ? kDLBool
               : t == DType::bfloat16                                                           ? kDLBfloat
               : t == DType::float32 || t == DType::float64 || t == DType::float16              ? kDLFloat
               : t == DType::uint8                                                              ? kDLUInt
                                                                                                : kDLInt;
    if (d.code == code && d.bits == bits) {
      *out = t;
      return true;
    }
  }
  return false;
}

DLDataType dl_of(DType t) {
  DLDataType d;
  d.bits = static_cast<uint8_t>(dtype_size(t) * 8);
  d.lanes = 1;
  switch (t) {
    case DType::bool_: d.code = kDLBool; break;
    case DType::bfloat16: d.code = kDLBfloat; break;
    case DType::float32:
    case DType::float64:
    case DType::float16: d.code = kDLFloat; break;
    case DType::uint8: d.code = kDLUInt; break;
    default: d.code = kDLInt;
  }
  return d;
}

}  // namespace

const char* dtype_name(DType t) { return ag::dtype_name(to_ag(t)); }
size_t dtype_size(DType t) { return ag::dtype_size(to_ag(t)); }
DType dtype_from_name(const std::string& s) {
  ag::DType t;
  if (!ag::dtype_from_name(s, &t))
    throw Error("airgraph: unknown dtype '" + s +
                "' (float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool)");
  return from_ag(t);
}

std::string TensorInfo::str() const {
  std::string s = name + ": " + dtype_name(dtype) + "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] >= 0 ? std::to_string(shape[i]) : dim_names[i];
  }
  return s + "]";
}

// ---- Tensor -------------------------------------------------------------------------------

Tensor::Tensor() = default;

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

namespace {
struct DLCtx {  // what a DLManagedTensor from to_dlpack keeps alive
  std::shared_ptr<void> owner;
  std::vector<int64_t> shape;
  DLManagedTensor m;
};
}  // namespace

DLManagedTensor* Tensor::to_dlpack() const {
  return guard([&] {
    auto* c = new DLCtx{owner_, shape_, {}};
    c->m.dl_tensor.data = const_cast<void*>(data_);
    c->m.dl_tensor.device = DLDevice{kDLCPU, 0};
    c->m.dl_tensor.ndim = static_cast<int32_t>(c->shape.size());
    c->m.dl_tensor.dtype = dl_of(dtype_);
    c->m.dl_tensor.shape = c->shape.data();
    c->m.dl_tensor.strides = nullptr;
    c->m.dl_tensor.byte_offset = 0;
    c->m.manager_ctx = c;
    c->m.deleter = [](DLManagedTensor* self) { delete static_cast<DLCtx*>(self->manager_ctx); };
    return &c->m;
  });
}

// ---- Model --------------------------------------------------------------------------------

struct Model::Impl {
  std::shared_ptr<ag::Model> m;
  std::vector<TensorInfo> inputs, outputs;
  explicit Impl(std::shared_ptr<ag::Model> model) : m(std::move(model)) {
    for (const auto& t : m->inputs()) inputs.push_back(info_of(t));
    for (const auto& t : m->outputs()) outputs.push_back(info_of(t));
  }
};

Model::Model(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(const Model&) = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(const Model&) = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path) {
  return guard([&] { return Model(std::make_shared<Impl>(ag::Model::load_file(path))); });
}

Model Model::load_bytes(const void* data, size_t size) {
  return guard([&] { return Model(std::make_shared<Impl>(ag::Model::load_bytes(data, size))); });
}

const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
const std::vector<std::string>& Model::symbols() const { return impl_->m->symbols(); }
const std::string& Model::producer() const { return impl_->m->producer(); }
const std::string& Model::metadata() const { return impl_->m->metadata(); }
size_t Model::num_compiled() const { return impl_->m->num_programs(); }

std::vector<Tensor> Model::run(const std::vector<TensorRef>& inputs, int threads) {
  return guard([&] {
    std::vector<ag::HostTensor> ins(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) ins[i] = ag::HostTensor{inputs[i].data, to_ag(inputs[i].dtype), inputs[i].shape};
    std::vector<ag::ModelOutput> outs = impl_->m->run(ins, threads);
    std::vector<Tensor> res(outs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      res[k].owner_ = std::move(outs[k].owner);
      res[k].data_ = outs[k].data;
      res[k].dtype_ = from_ag(outs[k].dtype);
      res[k].shape_ = std::move(outs[k].shape);
      res[k].written_input_ = outs[k].written_input;
    }
    return res;
  });
}

std::vector<Tensor> Model::run(const std::vector<const DLTensor*>& inputs, int threads) {
  return guard([&] {
    std::vector<TensorRef> refs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string what =
          "airgraph: DLPack input " + std::to_string(i) +
          (i < impl_->inputs.size() ? " ('" + impl_->inputs[i].name + "')" : std::string());
      const DLTensor* t = inputs[i];
      AG_CHECK(t != nullptr, what, " is null");
      AG_CHECK(t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost, what,
               " is on device type ", static_cast<int>(t->device.device_type), ", expected the CPU (", kDLCPU, ")");
      AG_CHECK(t->ndim >= 0 && (t->ndim == 0 || t->shape != nullptr), what, " has a bad ndim ", t->ndim,
               " or no shape");
      DType dt;
      AG_CHECK(dtype_of_dl(t->dtype, &dt), what, " has DLPack dtype (code ", int(t->dtype.code), ", bits ",
               int(t->dtype.bits), ", lanes ", t->dtype.lanes, "), which airgraph does not have");
      refs[i].dtype = dt;
      refs[i].shape.assign(t->shape, t->shape + t->ndim);
      if (t->strides) {  // compact C order; a dim of size 1 may have any stride
        int64_t want = 1;
        for (int d = t->ndim - 1; d >= 0; --d) {
          AG_CHECK(t->shape[d] == 1 || t->strides[d] == want, what, " is not contiguous (dim ", d, " has stride ",
                   t->strides[d], ", expected ", want, ")");
          want *= t->shape[d];
        }
      }
      refs[i].data = static_cast<char*>(t->data) + t->byte_offset;
    }
    return run(refs, threads);
  });
}

std::vector<Tensor> Model::run(const std::vector<DLManagedTensor*>& inputs, int threads) {
  std::vector<const DLTensor*> ts(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) ts[i] = inputs[i] ? &inputs[i]->dl_tensor : nullptr;
  return run(ts, threads);
}

}  // namespace airgraph
