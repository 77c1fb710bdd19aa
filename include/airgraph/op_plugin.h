// airgraph op plugins: a user's own operator, defined and run in C++, in airgraph's graphs.
//
// A plugin is a shared library that exports one C function,
//
//   AG_PLUGIN_EXPORT const ag_plugin* airgraph_plugin(void);   // (extern "C", visible)
//
// returning a static description of the plugin (its name and version) and of its ops: each op's
// name, arity, shape and dtype inference and kernel, and its properties (elementwise, fusable as
// a GEMM epilogue, thread safety). `airgraph.load_library(path)` (Python) and
// `airgraph-run --plugin path` load it: every op becomes an entry of airgraph's op registry,
// exactly where the built-in ops are, so graphs, passes, the memory planner, exported files and
// error messages treat it as one of theirs. A Python lowering (airgraph.register_lowering) maps
// a torch.library op onto it: b.op("mylib::my_op", x, alpha=0.5).
//
// The interface is plain C (fixed-size structs and function pointers), so that a plugin built
// by any C or C++ compiler works with any airgraph of the same AG_PLUGIN_ABI; this header
// includes nothing but <stddef.h>/<stdint.h>. C++ plugins may use the helpers at the end
// (ag::plugin::...), which are header-only.
//
// Contract (what airgraph checks, what the plugin promises):
// - `infer` sees the input types and the node's attributes and writes the output types; it is
//   run when a graph is built, again when a file is loaded, and for every size of a graph with
//   symbolic sizes. Its results are checked (count, dtype, rank, dims; an elementwise op's
//   result must be its inputs' broadcast shape) and, in a torch.compile'd model, against the
//   type PyTorch traced for the node. Errors are returned as text and become airgraph errors
//   naming the node, the op, the shapes and the user's source line.
// - `create` makes a kernel for one node with all sizes known (once per compiled program);
//   `run` gets contiguous C-order buffers: in[i] for input i, out[j] for output j, of the types
//   inference gave, and writes only the outputs. It must not keep the pointers.
//   AG_OP_ELEMENTWISE: the output may be the very buffer of an input of the same size (the memory
//   plan computes elementwise ops in place): read element i before writing element i.
// - Thread safety: with AG_OP_THREAD_SAFE, `run` may be called on the same kernel from several
//   threads at once (one compiled model serving a thread pool). Without it, airgraph runs one
//   call of that kernel at a time (a lock around `run`).
// - AG_OP_EPILOGUE (unary float ops only): `epilogue_f32` computes the op in place on a row
//   segment of float32 values; a GEMM (linear, matmul, conv) whose only consumer is this op
//   applies it to its f32 result before rounding (airgraph.explain shows the fused node). The
//   numbers it reads come from the node's float attributes named in `epilogue_attrs`.
#ifndef AIRGRAPH_OP_PLUGIN_H_
#define AIRGRAPH_OP_PLUGIN_H_
#include <stddef.h>
#include <stdint.h>

#define AG_PLUGIN_ABI 1   // the version of this interface; a plugin of another is refused at load
#define AG_MAX_RANK 8     // dims of a tensor type crossing the interface
#define AG_MAX_OUTPUTS 8  // results of one op
#define AG_ERROR_BYTES 512

#ifdef __cplusplus
extern "C" {
#endif

// Element types: the numbering of airgraph::DType (runner.h).
enum ag_dtype {
  AG_FLOAT32 = 0, AG_FLOAT64 = 1, AG_FLOAT16 = 2, AG_BFLOAT16 = 3, AG_INT64 = 4,
  AG_INT32 = 5, AG_INT16 = 6, AG_INT8 = 7, AG_UINT8 = 8, AG_BOOL = 9,
};

typedef struct ag_type {
  int32_t dtype;  // an ag_dtype
  int32_t rank;   // 0..AG_MAX_RANK
  int64_t shape[AG_MAX_RANK];
} ag_type;

// A node's attributes (read-only; valid during the call that received them). Each getter
// returns 1 and writes *out when the attribute exists with that type, else 0.
typedef struct ag_attrs ag_attrs;
typedef struct ag_attr_api {
  int (*get_int)(const ag_attrs* a, const char* key, int64_t* out);
  int (*get_float)(const ag_attrs* a, const char* key, double* out);  // ints are read as floats too
  int (*get_ints)(const ag_attrs* a, const char* key, const int64_t** data, size_t* n);
  int (*get_string)(const ag_attrs* a, const char* key, const char** out);
} ag_attr_api;

// Where an error's text goes: write a NUL-terminated message of at most AG_ERROR_BYTES.
typedef struct ag_error {
  char message[AG_ERROR_BYTES];
} ag_error;

enum ag_op_flags {
  AG_OP_ELEMENTWISE = 1u << 0,  // out[i] depends on the broadcast inputs' [i] only (1 output)
  AG_OP_EPILOGUE = 1u << 1,     // unary: epilogue_f32 may run it as a GEMM's post-op
  AG_OP_THREAD_SAFE = 1u << 2,  // run() may be called concurrently on one kernel
  AG_OP_NO_FOLD = 1u << 3,      // never evaluated at compile time on constant inputs (random, side effects)
};

typedef struct ag_op_def {
  const char* name;  // "<plugin>::<op>", e.g. "mylib::scaled_gelu"
  int32_t min_inputs, max_inputs;  // max_inputs -1: any number
  uint32_t flags;                  // ag_op_flags
  // Output types from input types; returns the number of outputs (1..AG_MAX_OUTPUTS), or 0 with
  // err->message set when the inputs or attributes do not fit the op.
  int32_t (*infer)(const ag_type* in, int32_t n_in, const ag_attrs* attrs, const ag_attr_api* api, ag_type* out,
                   ag_error* err);
  // A kernel for one node (its state: attributes read here, tables, weights); NULL with
  // err->message set on failure. `destroy` frees it.
  void* (*create)(const ag_type* in, int32_t n_in, const ag_type* out, int32_t n_out, const ag_attrs* attrs,
                  const ag_attr_api* api, ag_error* err);
  // Runs the kernel; returns 0, or nonzero with err->message set (a data-dependent error).
  int32_t (*run)(void* kernel, const void* const* in, void* const* out, ag_error* err);
  void (*destroy)(void* kernel);
  // AG_OP_EPILOGUE: x[0..n) = op(x[0..n)) on float32, p[k] the float attribute epilogue_attrs[k]
  // (0 when absent or NULL).
  void (*epilogue_f32)(float* x, int64_t n, const double* p);
  const char* epilogue_attrs[3];
} ag_op_def;

typedef struct ag_plugin {
  uint32_t abi;         // AG_PLUGIN_ABI
  const char* name;     // the plugin's name: the namespace of its ops ("mylib")
  const char* version;  // recorded in exported files; a file is refused by another version
  int32_t num_ops;
  const ag_op_def* ops;
} ag_plugin;

typedef const ag_plugin* (*ag_plugin_entry)(void);
#define AG_PLUGIN_ENTRY "airgraph_plugin"
// Declares the entry point exported (visible even when a build hides symbols by default):
//   AG_PLUGIN_EXPORT const ag_plugin* airgraph_plugin(void) { return &my_plugin; }
#ifdef __cplusplus
#define AG_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define AG_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}  // extern "C"

#include <cstdio>
#include <cstring>

// ---- C++ helpers (header-only) ---------------------------------------------------------------
namespace ag::plugin {

inline int64_t numel(const ag_type& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.rank; ++i) n *= t.shape[i];
  return n;
}

// Writes a printf-style message into err and returns 0 (an infer failure) / nullptr-able.
template <typename... A>
inline int32_t fail(ag_error* err, const char* fmt, A... args) {
  std::snprintf(err->message, AG_ERROR_BYTES, fmt, args...);
  return 0;
}

inline double float_attr(const ag_attrs* a, const ag_attr_api* api, const char* key, double dflt) {
  double v;
  return api->get_float(a, key, &v) ? v : dflt;
}

}  // namespace ag::plugin
#endif  // __cplusplus

#endif  // AIRGRAPH_OP_PLUGIN_H_
