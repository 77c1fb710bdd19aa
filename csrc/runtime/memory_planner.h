// Memory planner: decides where every value of a graph lives at run time.
//
// Algorithm (after XNNPACK's and ggml's planners):
//  1. Views (kAlias ops) get no memory: they point into their input's root
//     buffer at a byte offset. A root is an input, a constant or a node output
//     that is not a view.
//  2. Each node-output root lives from the node that writes it to the last node
//     that reads it or any view of it.
//  3. An elementwise node may write in place over an input root that dies at
//     that node and has the output's size (not a graph output, not a view); so may a node
//     whose kernel adds its result to that input (OpDef::accumulates_into, given `ctx`), when
//     no other input of the node reads the same bytes.
//  4. Roots that reach a graph output are "external": allocated fresh on every
//     call and handed to the caller, so results never alias the arena.
//     A graph output that the graph writes into one of its inputs (Graph::input_writes) is
//     computed in that input's own bytes instead, when nothing reads the input's old value
//     after the node that makes it (a KV cache updated in place).
//  5. The other roots share one arena: largest first, each placed at the
//     lowest 64-byte-aligned offset that overlaps no placed root alive at the
//     same time.
#pragma once
#include <cstdint>
#include <vector>

#include "base/kernel.h"
#include "ir/graph.h"

namespace ag {

enum class LocKind : uint8_t { Input, Const, Arena, External };

struct Location {
  LocKind kind = LocKind::Arena;
  int index = 0;       // input index / external root index; unused for Arena and Const
  int64_t offset = 0;  // bytes: arena offset, or offset inside the root
  int root = -1;       // value id of the root buffer
};

struct MemoryPlan {
  std::vector<Location> loc;          // by value id (only values that are used are meaningful)
  std::vector<int> external_roots;    // value ids of external roots, index = Location::index
  std::vector<size_t> external_bytes;
  size_t arena_bytes = 0;
  size_t naive_bytes = 0;  // sum of all intermediate roots without reuse (for statistics)
  int inplace_count = 0;
  std::vector<int> output_in_input;  // by graph output: the input it is computed in, or -1
};

MemoryPlan plan_memory(const Graph& g, bool allow_inplace = true, const BuildCtx* ctx = nullptr);

}  // namespace ag
