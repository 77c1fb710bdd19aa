// The airgraph file: one engine graph (symbolic or static) in a versioned binary
// format, for the compile cache, offline export and the C++ runner.
//
//   [0, 64)         header: magic "AIRGRAPH", format version, flags, the offsets
//                   and sizes of the two sections, the metadata's CRC-32C, and the
//                   header's own CRC-32C (last 4 bytes)
//   metadata        the graph: symbols, size expressions, every value (kind, name,
//                   type; a constant's place in the data section and its CRC-32C,
//                   or only its name when it is supplied at load), the nodes in
//                   order (op, FX name, source line, attributes, operands, symbolic
//                   attributes), dim expressions, outputs, input writes; then the
//                   caller's producer string and metadata text
//   data            constants' bytes, each at a 64-byte aligned offset from the
//                   section start (itself 64-byte aligned): a mapped file serves
//                   them in place, with no copy; then the blobs' bytes (version 3)
//
// Version 3 adds blobs after the metadata text: opaque bytes tied to one inline
// constant under a text key (an exported file's weights in the layout the kernels
// pack them into: kernels/onednn_util.h, adopt_packed), mapped like the constants.
// Version 4 starts the metadata with the plugin ops the graph uses (op name, plugin name,
// plugin version: kernels/plugin.h): a file is refused, naming the op and the plugin, where that
// plugin is not loaded or is loaded in another version. Versions 2 (no blobs) and 3 are read too.
//
// Little-endian; counts are u32, sizes i64, strings a u32 length and bytes.
// Loading rebuilds the graph through the same builder the front uses (every
// node's inference runs again and must give the recorded types), so a file can
// only describe a graph the builder accepts. Every read is bounds-checked and
// every count is checked against the bytes left before anything is allocated:
// a truncated, corrupt, foreign or newer file gives ag::Error ("airgraph file:
// ..."), never a crash or a read outside the buffer.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace ag {

inline constexpr uint32_t kGraphFileVersion = 4;  // 2: size guards; 3: blobs; 4: plugin ops

struct SaveOptions {
  // false: constants are written by name and type only, and the loader's resolver supplies
  // them (the compile cache: a process's own parameters, never stale bytes from a file)
  bool inline_constants = true;
  std::string producer;  // who wrote it ("airgraph 0.4.0"), shown in errors
  std::string metadata;  // the caller's text (the Python front: how to feed the graph), checksummed
  // constants written by name even when inline_constants is true (a model's parameters in the compile
  // cache, while tensors the traced code created stay in the file)
  std::vector<std::string> by_name;
  // Bytes stored beside an inline constant (its name), under a key the reader interprets
  struct Blob {
    std::string value, key;
    const void* data = nullptr;
    size_t nbytes = 0;
  };
  std::vector<Blob> blobs;
};

// The file's bytes.
std::string save_graph(const Graph& g, const SaveOptions& opt);

// The storage of a constant written by name; nullptr when the caller has none (an error).
using ConstResolver = std::function<std::shared_ptr<Storage>(const std::string& name, const TensorType& type)>;

struct LoadedGraph {
  std::unique_ptr<Graph> graph;
  std::string producer, metadata;
  // The file's blobs (checked like the constants), each with the address of its constant's bytes
  struct Blob {
    const void* src = nullptr;  // the constant's data
    std::string key;
    const void* data = nullptr;
    size_t nbytes = 0;
  };
  std::vector<Blob> blobs;
  std::shared_ptr<void> keep;  // what keeps the blobs' (and inline constants') bytes alive
};

// Loads from `size` bytes at `data`. Inline constants point into the buffer when it is
// 64-byte aligned (kept alive by `keep`, which must keep the bytes unchanged) and are
// copied otherwise. `verify_data` checks each inline constant's CRC-32C.
LoadedGraph load_graph(const void* data, size_t size, std::shared_ptr<void> keep, const ConstResolver& resolve,
                       bool verify_data = true);
// Maps the file read-only and loads it; constants stay in the mapping. After the checksums the
// mapping's pages are released from the process (madvise): the bytes a kernel reads come back
// from the page cache when it reads them, so the process holds only what it uses, and processes
// that load the same file share those pages.
LoadedGraph load_graph_file(const std::string& path, const ConstResolver& resolve, bool verify_data = true);

// CRC-32C (Castagnoli), hardware-accelerated where the CPU has SSE4.2.
uint32_t crc32c(const void* p, size_t n, uint32_t crc = 0);
// Two CRC-32C lanes over alternate 8-byte words (twice one lane's speed, and 64 bits): the compile
// cache's check that the weights an optimized graph folded are the ones it was made from.
uint64_t checksum64(const void* p, size_t n);

}  // namespace ag
