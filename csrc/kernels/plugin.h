// Op plugins (include/airgraph/op_plugin.h): a shared library a user built against airgraph's
// public header, loaded at run time. Each of its ops becomes one OpDef in the op registry,
// where the built-in ops are (no second registry, nothing plugin-specific in the executor):
// its inference, kernel factory and properties are adapters around the plugin's C functions,
// which check what the plugin returns (output count, dtypes, ranks, dims; an elementwise op's
// broadcast shape) and turn its error texts into ag::Error. A kernel without AG_OP_THREAD_SAFE
// runs one call at a time. An epilogue op gets an instruction code in [kRowCodeBegin, ...)
// and its row function (OpDef::row_f32), which the GEMM epilogues run as a post-op.
//
// Each copy of the core (the Python extension, libairgraph_runtime) keeps its own registry:
// a process loads a plugin into the copy it uses (airgraph.load_library, airgraph-run --plugin).
#pragma once
#include <string>
#include <vector>

namespace ag {

struct PluginInfo {
  std::string name, version, path;
  std::vector<std::string> ops;
};

// Loads the plugin at `path` and registers its ops. Loading the same plugin (name and version)
// again returns it as loaded; another version of a loaded plugin, a library without the entry
// point, another ABI, an op outside the plugin's namespace or one already registered is refused
// with an ag::Error naming the file.
const PluginInfo& load_plugin(const std::string& path);
std::vector<PluginInfo> loaded_plugins();

}  // namespace ag
