// The cases the op-row tests run (tests/cpp/test_op_rows.cpp, within one build) and the
// cross-build test compares (tests/cpp/test_cross_build.cpp, the release build against the core
// compiled at -O1): the rows of kernels/elementwise_ops.h from the registry, the attribute
// settings of the rows that need them, the values every row sees, and a row's two graphs (its
// single-op kernel, and its instruction alone in a fused_elementwise node).
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "check_op.h"
#include "test_util.h"

namespace ag::test {

// Attributes for the rows that need them (several settings where the row has modes).
inline const std::map<std::string, std::vector<Attrs>>& row_attrs() {
  static const std::map<std::string, std::vector<Attrs>> m = {
      {"leaky_relu", {attrs({{"negative_slope", 0.2}}), Attrs{}}},
      {"gelu", {attrs({{"approximate", std::string("none")}}), attrs({{"approximate", std::string("tanh")}})}},
      {"clamp",
       {attrs({{"min", -1.0}, {"max", 2.0}}), attrs({{"min", 0.0}}), attrs({{"max", 6.0}}),
        attrs({{"min", 3.0}, {"max", 1.0}})}},
      {"pow_scalar",
       {attrs({{"exponent", 2.0}}), attrs({{"exponent", 0.5}}), attrs({{"exponent", -1.0}}),
        attrs({{"exponent", 3.3}})}},
      {"logit", {attrs({{"lo", 0.1}, {"hi", 0.9}})}},
      {"nan_to_num", {attrs({{"nan", 0.0}, {"posinf", 100.0}, {"neginf", -100.0}})}},
      {"elu", {attrs({{"alpha", 1.0}, {"scale", 1.0}, {"input_scale", 1.0}}),
               attrs({{"alpha", 1.6732632423543772}, {"scale", 1.0507009873554805}, {"input_scale", 1.0}})}},
      {"threshold", {attrs({{"threshold", 0.5}, {"value", -2.0}})}},
      {"polygamma", {attrs({{"n", int64_t{1}}})}},
      // binary: the plain row and each form
      {"add", {Attrs{}, attrs({{"alpha", 2.5}}), attrs({{"alpha", -1.0}}), attrs({{"alpha", 0.3}})}},
      {"sub", {Attrs{}, attrs({{"alpha", 0.3}})}},
      {"div",
       {Attrs{}, attrs({{"rounding_mode", std::string("trunc")}}), attrs({{"rounding_mode", std::string("floor")}})}},
  };
  return m;
}

inline std::vector<Attrs> row_settings(const std::string& op) {
  auto it = row_attrs().find(op);
  return it == row_attrs().end() ? std::vector<Attrs>{Attrs{}} : it->second;
}

// The values every row sees: specials and a spread of ordinary ones.
inline std::vector<float> row_values() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  return {nan, -nan, inf, -inf, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.5f, -2.5f, 1e-30f,
          -1e-30f, 1e-3f, 3.0f, -3.0f, 7.9f, -7.9f, 20.0f, -20.0f, 88.5f, -88.5f, 100.0f, 3e38f, -3e38f,
          0.25f, 0.75f, 0.999f, -0.999f, 6.0f, -6.0f};
}

// The rows (ops with an instruction code) of one arity.
inline std::vector<const OpDef*> rows_of(int arity) {
  std::vector<const OpDef*> r;
  for (const OpDef* d : all_ops())
    if (d->fused_code != 0 && d->min_inputs == arity && d->max_inputs == arity) r.push_back(d);
  return r;
}

// One node of row d over inputs of `types` (*single), and the same node's instruction alone in a
// fused_elementwise node (*fused). False (the error in *err) when the op does not take these
// dtypes, or (*err empty) when it takes them but does not fuse.
inline bool row_graphs(const OpDef* d, const Attrs& a, const std::vector<TensorType>& types, Graph* single,
                       Graph* fused, std::string* err = nullptr) {
  auto inputs = [&](Graph& g) {
    std::vector<Value*> in;
    for (size_t j = 0; j < types.size(); ++j) in.push_back(g.add_input(types[j], "x" + std::to_string(j)));
    return in;
  };
  Node* node;
  try {
    node = single->add_node(d->name, inputs(*single), a, "op");
  } catch (const Error& e) {
    if (err) *err = e.what();
    return false;
  }
  single->set_outputs({node->out()});
  FusedInstr fi;
  if (!d->fuse(*node, &fi)) {
    if (err) err->clear();
    return false;
  }
  std::vector<int64_t> args = {-1, -1, -1};
  for (size_t j = 0; j < types.size(); ++j) args[j] = static_cast<int64_t>(j);
  Attrs fa = attrs({{"ops", std::vector<int64_t>{fi.code}},
                    {"args", args},
                    {"params", std::vector<double>{fi.p[0], fi.p[1], fi.p[2]}},
                    {"outputs", std::vector<int64_t>{static_cast<int64_t>(types.size())}}});
  Node* f = fused->add_node("fused_elementwise", inputs(*fused), fa, "fused");
  fused->set_outputs({f->out()});
  return true;
}

}  // namespace ag::test
