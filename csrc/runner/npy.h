// A small, strict .npy reader and writer for airgraph-run (and its tests).
//
// Read: format versions 1.0 and 2.0 (3.0 and others are refused), a header that is
// exactly the dict numpy writes ({'descr': ..., 'fortran_order': False, 'shape': (...)},
// keys in any order, each once, nothing else), little-endian or byte-order-free
// descr, C order, and a data size that must equal what the shape and dtype need,
// to the byte (no trailing bytes). Dtypes: '<f4' '<f8' '<f2' '<i8' '<i4' '<i2'
// '|i1' '|u1' '|b1' (a '<' or '=' before a 1-byte code is taken too). Extension:
// bfloat16, which numpy has no code for, is the descr 'bfloat16' (numpy itself
// cannot load such a file; airgraph writes it for bfloat16 outputs). Any other
// descr, big-endian data, Fortran order, or a header that does not parse gives
// airgraph::Error naming the file and what is wrong.
// Write: version 1.0 (2.0 when the header needs it), header padded to 64 bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "airgraph/runner.h"

namespace airgraph::npy {

struct Array {
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  std::shared_ptr<void> data;  // 64-byte aligned
  size_t nbytes = 0;
};

// Parses a whole .npy file's bytes; `what` names it in errors.
Array parse(const void* bytes, size_t size, const std::string& what);
Array read(const std::string& path);
std::string serialize(DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes);
void write(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes);

}  // namespace airgraph::npy
