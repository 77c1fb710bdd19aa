// Value bounds: a proof, from the graph alone, that a value holds no NaN and no infinity whenever
// the graph's float32 inputs are finite and at most kInputBound in magnitude (which the executor
// checks on each call: runtime/executor.cpp). What it buys: oneDNN's eltwise post-ops turn NaN into a
// number (its activations are a max and a min), so an activation runs inside a convolution's primitive
// only where its input is proven NaN-free; on every finite value those post-ops give what our rows give
// (up to the sign of a zero result: kernels/epilogue.h, finite_exact_activation).
// A call whose inputs fail the check runs the exact plan (kernels/conv.cpp keeps both).
//
// of(v) = B (finite) says: under that condition every element of v is finite with |v| <= B. +inf
// says nothing (the op has no rule, OpDef::bound, or a bound overflowed). An op's rule gets its
// inputs' bounds through of() and returns its output 0's bound.
#pragma once
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace ag {

// The largest |x| the call's float32 inputs may hold for the bounds to apply (a finite input past
// it runs the exact plan: slower, never wrong).
inline constexpr double kInputBound = 1e6;
// Bounds past this are treated as unknown: rounding (a relative n * 2^-24 on a sum of n terms) can
// never carry a value below it to an infinity.
inline constexpr double kBoundLimit = 1e30;
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

class ValueBounds {
 public:
  explicit ValueBounds(const Graph& g);  // runs every node's rule in order
  double of(const Value* v) const;       // constants: max |c| (float32 only), on first ask
  bool any() const { return any_; }      // some node output has a finite bound

 private:
  std::vector<double> by_id_;
  mutable std::mutex mu_;  // (kernels are built on several threads)
  mutable std::unordered_map<int, double> consts_;
  bool any_ = false;
};

// OpDef::bound of float32 ops whose every output element is one of their inputs' elements (views,
// copies, cat, max pooling): the largest of the inputs' bounds.
double bound_moves(const Node& n, const ValueBounds& b);
// max |c| over a float32 constant; kUnbounded if another dtype or any element is not finite.
double const_bound(const Value* v);
// A sum that stays a bound: kUnbounded from kBoundLimit on (and for NaN).
inline double checked_bound(double b) { return b < kBoundLimit ? b : kUnbounded; }

}  // namespace ag
