// The strict .npy reader and writer of airgraph-run: see npy.h for what it accepts.
#include "npy.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace airgraph::npy {

namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr int kMaxRank = 32;

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw Error("npy: " + what + ": " + msg);
}

struct Code {
  const char* descr;
  DType dtype;
};
// the descr numpy writes (first) and the others taken for the same dtype
constexpr Code kCodes[] = {
    {"<f4", DType::float32}, {"<f8", DType::float64}, {"<f2", DType::float16}, {"<i8", DType::int64},
    {"<i4", DType::int32},   {"<i2", DType::int16},   {"|i1", DType::int8},    {"|u1", DType::uint8},
    {"|b1", DType::bool_},   {"bfloat16", DType::bfloat16},
    {"<i1", DType::int8},    {"=i1", DType::int8},    {"<u1", DType::uint8},   {"=u1", DType::uint8},
    {"<b1", DType::bool_},   {"=b1", DType::bool_},
};

// The header dict, parsed by hand: exactly what numpy writes, nothing more.
class HeaderParser {
 public:
  HeaderParser(const std::string& s, const std::string& what) : s_(s), what_(what) {}

  void parse(DType* dtype, std::vector<int64_t>* shape) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    ws();
    expect('{');
    while (true) {
      ws();
      if (peek() == '}') break;
      std::string key = string_lit("a key");
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        once(&seen_descr, key);
        std::string d = string_lit("the descr");
        bool found = false;
        for (const Code& c : kCodes)
          if (d == c.descr) {
            *dtype = c.dtype;
            found = true;
            break;
          }
        if (!found) {
          if (!d.empty() && d[0] == '>') bad(what_, "big-endian data ('" + d + "') is not supported; save it little-endian");
          bad(what_, "dtype '" + d +
                         "' is not supported (float32 '<f4', float64 '<f8', float16 '<f2', int64 '<i8', int32 '<i4', "
                         "int16 '<i2', int8 '|i1', uint8 '|u1', bool '|b1', and the extension 'bfloat16')");
        }
      } else if (key == "fortran_order") {
        once(&seen_order, key);
        if (word("False")) {
        } else if (word("True")) {
          bad(what_, "Fortran-order data is not supported; save a C-contiguous array");
        } else {
          fail_at("True or False for 'fortran_order'");
        }
      } else if (key == "shape") {
        once(&seen_shape, key);
        tuple(shape);
      } else {
        bad(what_, "unexpected header key '" + key + "' (only 'descr', 'fortran_order', 'shape')");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') break;
      fail_at("',' or '}'");
    }
    expect('}');
    ws();
    if (i_ != s_.size()) fail_at("the end of the header");
    if (!seen_descr || !seen_order || !seen_shape)
      bad(what_, std::string("the header lacks '") + (!seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape") +
                     "'");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n')) ++i_;
  }
  [[noreturn]] void fail_at(const std::string& want) {
    bad(what_, "malformed header: expected " + want + " at character " + std::to_string(i_) + " of \"" + s_ + "\"");
  }
  void expect(char c) {
    if (peek() != c) fail_at(std::string("'") + c + "'");
    ++i_;
  }
  void once(bool* seen, const std::string& key) {
    if (*seen) bad(what_, "header key '" + key + "' appears twice");
    *seen = true;
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  std::string string_lit(const char* what) {
    char q = peek();
    if (q != '\'' && q != '"') fail_at(std::string("a quoted string for ") + what);
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail_at("a closing quote");
    std::string v = s_.substr(i_ + 1, end - i_ - 1);
    if (v.find('\\') != std::string::npos) fail_at("a string without escapes");
    i_ = end + 1;
    return v;
  }
  int64_t integer() {
    size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (i_ - start >= 18) fail_at("a dimension below 10^18");
      v = v * 10 + (s_[i_] - '0');
      ++i_;
    }
    if (i_ == start) fail_at("a non-negative integer");
    return v;
  }
  void tuple(std::vector<int64_t>* shape) {
    expect('(');
    ws();
    shape->clear();
    if (peek() == ')') {
      ++i_;
      return;
    }
    while (true) {
      shape->push_back(integer());
      if (shape->size() > static_cast<size_t>(kMaxRank)) bad(what_, "rank above " + std::to_string(kMaxRank));
      ws();
      if (peek() == ')') {
        if (shape->size() == 1) fail_at("',' after the only dimension (a 1-tuple is written '(n,)')");
        ++i_;
        return;
      }
      expect(',');
      ws();
      if (peek() == ')') {
        ++i_;
        return;
      }
    }
  }
  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;
};

uint32_t le(const unsigned char* p, int n) {
  uint32_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

std::shared_ptr<void> aligned(size_t n) {
  void* p = std::aligned_alloc(64, (n + 63) / 64 * 64 + 64);
  if (!p) throw Error("npy: out of memory for " + std::to_string(n) + " bytes");
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace

Array parse(const void* bytes, size_t size, const std::string& what) {
  const auto* b = static_cast<const unsigned char*>(bytes);
  if (size < 10 || std::memcmp(b, kMagic, 6) != 0)
    bad(what, size < 10 ? "too short for a .npy file (" + std::to_string(size) + " bytes)"
                        : "not a .npy file (no \\x93NUMPY magic)");
  const int major = b[6], minor = b[7];
  if (!((major == 1 || major == 2) && minor == 0))
    bad(what, "format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " is not supported (1.0 and 2.0 are)");
  const size_t start = major == 1 ? 10 : 12;
  if (size < start) bad(what, "truncated in the header length");
  const size_t hlen = le(b + 8, major == 1 ? 2 : 4);
  if (hlen > size - start)
    bad(what, "the header claims " + std::to_string(hlen) + " bytes but the file has " +
                  std::to_string(size - start) + " after the header length (truncated?)");
  std::string header(reinterpret_cast<const char*>(b + start), hlen);
  if (hlen == 0 || header.back() != '\n') bad(what, "the header does not end with a newline (truncated or corrupt)");
  for (unsigned char c : header)
    if (c < 0x20 && c != '\n') bad(what, "the header holds a control byte " + std::to_string(c) + " (corrupt)");
    else if (c >= 0x7f) bad(what, "the header holds a non-ASCII byte " + std::to_string(c) + " (corrupt)");
  Array a;
  HeaderParser(header, what).parse(&a.dtype, &a.shape);
  int64_t numel = 1;
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(numel, d, &numel)) bad(what, "the shape's element count overflows");
  int64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(a.dtype)), &nbytes))
    bad(what, "the data size overflows");
  const size_t have = size - start - hlen;
  if (static_cast<uint64_t>(nbytes) != have) {
    std::string shape = "(";
    for (size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
    bad(what, std::string(dtype_name(a.dtype)) + shape + ") needs " + std::to_string(nbytes) +
                  " data bytes but the file has " + std::to_string(have) +
                  (static_cast<uint64_t>(nbytes) > have ? " (truncated)" : " (trailing bytes)"));
  }
  a.nbytes = static_cast<size_t>(nbytes);
  a.data = aligned(a.nbytes);
  if (a.nbytes) std::memcpy(a.data.get(), b + start + hlen, a.nbytes);
  return a;
}

Array read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) bad(path, "read error");
  return parse(bytes.data(), bytes.size(), path);
}

std::string serialize(DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes) {
  const char* descr = nullptr;
  for (const Code& c : kCodes)
    if (c.dtype == dtype) {
      descr = c.descr;
      break;
    }
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) h += (i ? ", " : "") + std::to_string(shape[i]);
  h += shape.size() == 1 ? ",), }" : "), }";
  const bool v2 = h.size() + 1 + 10 > 65535;
  const size_t pre = v2 ? 12 : 10;
  size_t total = pre + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string out(kMagic, 6);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  const uint32_t n = static_cast<uint32_t>(h.size());
  for (int k = 0; k < (v2 ? 4 : 2); ++k) out += static_cast<char>((n >> (8 * k)) & 0xff);
  out += h;
  out.append(static_cast<const char*>(data), nbytes);
  return out;
}

void write(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes) {
  std::string bytes = serialize(dtype, shape, data, nbytes);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) bad(path, std::string("cannot open for writing: ") + std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) bad(path, "write error");
}

}  // namespace airgraph::npy
