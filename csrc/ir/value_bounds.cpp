#include "ir/value_bounds.h"

#include <algorithm>
#include <cmath>

#include "ir/op_registry.h"

namespace ag {

double const_bound(const Value* v) {
  if (!v->is_const() || !v->storage || v->type.dtype != DType::f32) return kUnbounded;
  const float* p = static_cast<const float*>(v->storage->data);
  const int64_t n = v->type.numel();
  float m = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(p[i]);
    finite &= a <= 3.4e38f;  // (false for NaN and inf)
    m = a > m ? a : m;
  }
  return finite ? checked_bound(m) : kUnbounded;
}

double bound_moves(const Node& n, const ValueBounds& b) {
  if (n.outputs.empty() || n.outputs[0]->type.dtype != DType::f32) return kUnbounded;
  double r = 0;
  for (const Value* v : n.inputs) {
    if (v->type.dtype != DType::f32) return kUnbounded;
    r = std::max(r, b.of(v));
  }
  return r;
}

ValueBounds::ValueBounds(const Graph& g) : by_id_(g.num_values(), kUnbounded) {
  for (const Value* v : g.inputs())
    if (v->type.dtype == DType::f32) by_id_[v->id] = kInputBound;
  for (const auto& n : g.nodes()) {
    if (!n->op->bound || n->outputs.empty()) continue;
    const double b = checked_bound(n->op->bound(*n, *this));
    by_id_[n->out()->id] = b;
    any_ |= b < kUnbounded;
  }
}

double ValueBounds::of(const Value* v) const {
  if (!v->is_const()) return v->id >= 0 && static_cast<size_t>(v->id) < by_id_.size() ? by_id_[v->id] : kUnbounded;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = consts_.find(v->id);
    if (it != consts_.end()) return it->second;
  }
  const double b = const_bound(v);
  std::lock_guard<std::mutex> lk(mu_);
  consts_[v->id] = b;
  return b;
}

}  // namespace ag
