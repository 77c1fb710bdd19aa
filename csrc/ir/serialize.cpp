#include "ir/serialize.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_set>

#include "base/error.h"
#include "ir/op_registry.h"

namespace ag {

// ---- CRC-32C ------------------------------------------------------------------------------
namespace {

constexpr uint32_t kCrcPoly = 0x82F63B78u;  // Castagnoli, reflected

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kCrcPoly : 0);
    t[i] = c;
  }
  return t;
}

uint32_t crc32c_soft(const uint8_t* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> t = crc_table();
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

// Lanes a and b over alternate 8-byte words of n / 16 pairs.
__attribute__((target("sse4.2"))) void crc32c_lanes_hw(const uint8_t* p, size_t pairs, uint32_t& a, uint32_t& b) {
  uint64_t x = a, y = b;
  for (; pairs > 0; --pairs, p += 16) {
    uint64_t u, v;
    std::memcpy(&u, p, 8);
    std::memcpy(&v, p + 8, 8);
    x = __builtin_ia32_crc32di(x, u);
    y = __builtin_ia32_crc32di(y, v);
  }
  a = static_cast<uint32_t>(x);
  b = static_cast<uint32_t>(y);
}
#endif

void crc32c_lanes_soft(const uint8_t* p, size_t pairs, uint32_t& a, uint32_t& b) {
  for (; pairs > 0; --pairs, p += 16) {
    a = crc32c_soft(p, 8, a);
    b = crc32c_soft(p + 8, 8, b);
  }
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  c = hw ? crc32c_hw(p, n, c) : crc32c_soft(p, n, c);
#else
  c = crc32c_soft(p, n, c);
#endif
  return ~c;
}

uint64_t checksum64(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t a = ~0u, b = ~0x5bd1e995u;
  const size_t pairs = n / 16;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw)
    crc32c_lanes_hw(p, pairs, a, b);
  else
    crc32c_lanes_soft(p, pairs, a, b);
#else
  crc32c_lanes_soft(p, pairs, a, b);
#endif
  a = crc32c(p + pairs * 16, n - pairs * 16, ~a);  // (the tail, < 16 bytes, in lane a)
  return (static_cast<uint64_t>(a) << 32) | ~b;
}

// ---- format -------------------------------------------------------------------------------
namespace {

constexpr char kMagic[8] = {'A', 'I', 'R', 'G', 'R', 'A', 'P', 'H'};
constexpr size_t kHeaderBytes = 64;
constexpr uint32_t kFlagInlineConstants = 1;
constexpr int kMaxRank = 16;
constexpr int64_t kMaxElements = int64_t(1) << 48;
constexpr size_t kMapFrom = 64 << 10;  // inline constants of this many bytes and more are served from the mapping

enum ValueCode : uint8_t { kUnused = 0, kInput = 1, kConstInline = 2, kConstByName = 3, kNodeOutput = 4 };

struct Header {
  char magic[8];
  uint32_t version, flags;
  uint64_t meta_offset, meta_bytes, data_offset, data_bytes;
  uint32_t meta_crc;
  uint32_t reserved[2];
  uint32_t header_crc;  // of bytes [0, 60)
};
static_assert(sizeof(Header) == kHeaderBytes, "header layout");
static_assert(std::is_trivially_copyable_v<Header>);

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void count(size_t n) {
    AG_CHECK(n <= std::numeric_limits<uint32_t>::max(), "airgraph file: too many items (", n, ")");
    put<uint32_t>(static_cast<uint32_t>(n));
  }
  void str(const std::string& s) {
    count(s.size());
    out += s;
  }
  void type(const TensorType& t) {
    put<uint8_t>(static_cast<uint8_t>(t.dtype));
    count(t.dims.size());
    for (const Dim& d : t.dims) {
      put<int64_t>(d.value);
      put<int32_t>(d.sym);
    }
  }
  void attrs(const Attrs& a) {
    count(a.items().size());
    for (const auto& [k, v] : a.items()) {
      str(k);
      put<uint8_t>(static_cast<uint8_t>(v.index()));
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) {
              str(x);
            } else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
              count(x.size());
              for (auto e : x) put(e);
            } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, DType>) {
              put<uint8_t>(static_cast<uint8_t>(x));
            } else {
              put(x);
            }
          },
          v);
    }
  }
  std::string out;
};

// Bounds-checked reads of the metadata section.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A count of items of at least `min_each` bytes each: never more than the bytes left allow.
  size_t count(size_t min_each, const char* what) {
    uint32_t c = get<uint32_t>();
    AG_CHECK(c <= (n_ - pos_) / std::max<size_t>(min_each, 1), "airgraph file: corrupt metadata: ", c, " ", what,
             " at byte ", pos_ - 4, " do not fit in the ", n_ - pos_, " bytes left");
    return c;
  }
  std::string str(const char* what) {
    size_t len = count(1, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  int index(size_t limit, const char* what) {  // a u32 index below `limit`
    uint32_t i = get<uint32_t>();
    AG_CHECK(i < limit, "airgraph file: corrupt metadata: ", what, " ", i, " out of range [0, ", limit, ") at byte ",
             pos_ - 4);
    return static_cast<int>(i);
  }
  TensorType type(size_t num_symbols) {
    uint8_t dt = get<uint8_t>();
    AG_CHECK(dt < kNumDTypes, "airgraph file: corrupt metadata: unknown dtype code ", int(dt), " at byte ", pos_ - 1);
    size_t rank = count(12, "dims");
    AG_CHECK(rank <= kMaxRank, "airgraph file: corrupt metadata: rank ", rank, " at byte ", pos_);
    TensorType t;
    t.dtype = static_cast<DType>(dt);
    int64_t numel = 1;
    for (size_t i = 0; i < rank; ++i) {
      Dim d;
      d.value = get<int64_t>();
      d.sym = get<int32_t>();
      AG_CHECK(d.value >= 0 && d.value <= kMaxElements && d.sym >= -1 && d.sym < static_cast<int64_t>(num_symbols),
               "airgraph file: corrupt metadata: dim (", d.value, ", symbol ", d.sym, ") at byte ", pos_ - 12);
      AG_CHECK(!__builtin_mul_overflow(numel, d.value, &numel) && numel <= kMaxElements,
               "airgraph file: corrupt metadata: a tensor of more than 2^48 elements at byte ", pos_);
      t.dims.push_back(d);
    }
    return t;
  }
  Attrs attrs() {
    Attrs a;
    size_t n = count(6, "attributes");
    for (size_t i = 0; i < n; ++i) {
      std::string k = str("attribute name");
      uint8_t tag = get<uint8_t>();
      switch (tag) {
        case 0: a.set(k, get<int64_t>()); break;
        case 1: a.set(k, get<double>()); break;
        case 2: a.set(k, get<uint8_t>() != 0); break;
        case 3: a.set(k, str("attribute string")); break;
        case 4: a.set(k, list<int64_t>()); break;
        case 5: a.set(k, list<double>()); break;
        case 6: {
          uint8_t dt = get<uint8_t>();
          AG_CHECK(dt < kNumDTypes, "airgraph file: corrupt metadata: unknown dtype code ", int(dt), " in attribute ",
                   k);
          a.set(k, static_cast<DType>(dt));
          break;
        }
        default: fail("airgraph file: corrupt metadata: attribute ", k, " has unknown tag ", int(tag));
      }
    }
    return a;
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == n_; }

 private:
  template <typename T>
  std::vector<T> list() {
    std::vector<T> v(count(sizeof(T), "list items"));
    for (auto& e : v) e = get<T>();
    return v;
  }
  void need(size_t k) {
    AG_CHECK(k <= n_ - pos_, "airgraph file: metadata ends early (", k, " bytes needed at byte ", pos_, " of ", n_,
             ")");
  }
  const uint8_t* p_;
  size_t n_, pos_ = 0;
};

}  // namespace

// The friend of Graph that writes and reads its private state.
class GraphFile {
 public:
  static std::string save(const Graph& g, const SaveOptions& opt);
  static LoadedGraph load(const uint8_t* base, size_t size, const std::shared_ptr<void>& keep,
                          const ConstResolver& resolve, bool verify_data);
};

std::string GraphFile::save(const Graph& g, const SaveOptions& opt) {
  Writer w;
  std::string data;
  // (version 4) the plugin ops the nodes use, each once: what a reader must have loaded
  std::vector<const OpDef*> plugin_ops;
  for (const auto& n : g.nodes_)
    if (n->op->plugin && std::find(plugin_ops.begin(), plugin_ops.end(), n->op) == plugin_ops.end())
      plugin_ops.push_back(n->op);
  w.count(plugin_ops.size());
  for (const OpDef* d : plugin_ops) {
    w.str(d->name);
    w.str(d->plugin);
    w.str(d->plugin_version ? d->plugin_version : "");
  }
  w.count(g.symbols_.size());
  for (const auto& s : g.symbols_) w.str(s);
  w.count(g.exprs_.size());
  for (const auto& e : g.exprs_) {
    w.count(e.code.size());
    for (int64_t c : e.code) w.put(c);
    w.str(e.text);
  }
  std::vector<char> live(g.values_.size(), 0);
  for (const Value* v : g.inputs_) live[v->id] = 1;
  for (const auto& n : g.nodes_)
    for (const Value* o : n->outputs) live[o->id] = 1;
  std::unordered_set<std::string> by_name(opt.by_name.begin(), opt.by_name.end());
  w.count(g.values_.size());
  for (const auto& v : g.values_) {
    const bool inline_data = opt.inline_constants && !by_name.count(v->name);
    if (v->kind == ValueKind::Const) {
      w.put<uint8_t>(inline_data ? kConstInline : kConstByName);
    } else {
      w.put<uint8_t>(!live[v->id] ? kUnused : v->kind == ValueKind::Input ? kInput : kNodeOutput);
      if (!live[v->id]) continue;
    }
    w.str(v->name);
    w.type(v->type);
    if (v->kind == ValueKind::Const && inline_data) {
      const size_t nbytes = v->type.nbytes();
      AG_CHECK(nbytes == 0 || (v->storage && v->storage->data && v->storage->nbytes >= nbytes), "constant %",
               v->name, " has no data to save");
      size_t off = 0;  // (an empty constant has no bytes and claims none)
      if (nbytes) {
        off = align64(data.size());
        data.resize(off);
        data.append(static_cast<const char*>(v->storage->data), nbytes);
      }
      w.put<uint64_t>(off);
      w.put<uint64_t>(nbytes);
      w.put<uint32_t>(nbytes ? crc32c(v->storage->data, nbytes) : crc32c(nullptr, 0));
    }
  }
  w.count(g.inputs_.size());
  for (const Value* v : g.inputs_) w.put<uint32_t>(v->id);
  w.count(g.nodes_.size());
  for (const auto& n : g.nodes_) {
    w.put<int32_t>(n->id);
    w.str(n->op->name);
    w.str(n->name);
    w.str(n->source);
    w.attrs(n->attrs);
    w.count(n->inputs.size());
    for (const Value* v : n->inputs) w.put<uint32_t>(v->id);
    w.count(n->outputs.size());
    for (const Value* v : n->outputs) w.put<uint32_t>(v->id);
    w.count(n->sym_attrs.size());
    for (const SymAttr& s : n->sym_attrs) {
      w.str(s.key);
      w.put<int32_t>(s.index);
      w.put<int32_t>(s.expr);
    }
    w.put<uint8_t>(n->sized);
  }
  size_t ndim = 0;
  for (size_t id = 0; id < g.dim_exprs_.size(); ++id) ndim += !g.dim_exprs_[id].empty() && live[id];
  w.count(ndim);
  for (size_t id = 0; id < g.dim_exprs_.size(); ++id) {
    if (g.dim_exprs_[id].empty() || !live[id]) continue;
    w.put<uint32_t>(static_cast<uint32_t>(id));
    w.count(g.dim_exprs_[id].size());
    for (int32_t e : g.dim_exprs_[id]) w.put(e);
  }
  w.count(g.outputs_.size());
  for (const Value* v : g.outputs_) w.put<uint32_t>(v->id);
  w.count(g.input_writes_.size());
  for (const auto& iw : g.input_writes_) {
    w.put<uint32_t>(iw.input);
    w.put<uint32_t>(iw.output);
  }
  w.count(g.guards_.size());
  for (const auto& gd : g.guards_) {
    w.put<int32_t>(gd.expr);
    w.put<uint8_t>(static_cast<uint8_t>(gd.rel));
    w.put<uint8_t>(gd.outcome);
    w.str(gd.text);
  }
  w.put<int32_t>(g.next_node_id_);
  w.str(opt.producer);
  w.str(opt.metadata);
  std::unordered_set<std::string> inline_names;
  for (const auto& c : g.values_)
    if (c->kind == ValueKind::Const && opt.inline_constants && !by_name.count(c->name)) inline_names.insert(c->name);
  std::vector<const SaveOptions::Blob*> blobs;  // (a blob of a constant this graph has not inline is left out)
  for (const auto& b : opt.blobs)
    if (inline_names.count(b.value)) blobs.push_back(&b);
  w.count(blobs.size());
  for (const SaveOptions::Blob* bp : blobs) {
    const SaveOptions::Blob& b = *bp;
    const size_t off = align64(data.size());
    data.resize(off);
    data.append(static_cast<const char*>(b.data), b.nbytes);
    w.str(b.value);
    w.str(b.key);
    w.put<uint64_t>(off);
    w.put<uint64_t>(b.nbytes);
    w.put<uint32_t>(crc32c(b.data, b.nbytes));
  }

  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kGraphFileVersion;
  h.flags = opt.inline_constants ? kFlagInlineConstants : 0;
  h.meta_offset = kHeaderBytes;
  h.meta_bytes = w.out.size();
  h.data_offset = align64(kHeaderBytes + w.out.size());
  h.data_bytes = data.size();
  h.meta_crc = crc32c(w.out.data(), w.out.size());
  h.header_crc = crc32c(&h, offsetof(Header, header_crc));
  std::string file(reinterpret_cast<const char*>(&h), sizeof h);
  file += w.out;
  file.resize(h.data_offset);
  file += data;
  return file;
}

LoadedGraph GraphFile::load(const uint8_t* base, size_t size, const std::shared_ptr<void>& keep,
                            const ConstResolver& resolve, bool verify_data) {
  AG_CHECK(size >= kHeaderBytes, "airgraph file: ", size, " bytes, shorter than the ", kHeaderBytes,
           "-byte header (truncated, or not an airgraph file)");
  Header h;
  std::memcpy(&h, base, sizeof h);
  AG_CHECK(std::memcmp(h.magic, kMagic, 8) == 0, "airgraph file: not an airgraph file (no AIRGRAPH magic)");
  AG_CHECK(crc32c(&h, offsetof(Header, header_crc)) == h.header_crc,
           "airgraph file: the header's checksum does not match (corrupt file)");
  AG_CHECK(h.version >= 2 && h.version <= kGraphFileVersion, "airgraph file: format version ", h.version,
           ", this airgraph reads 2 to ", kGraphFileVersion, " (written by another airgraph version: export or compile "
           "it again)");
  AG_CHECK(h.meta_offset == kHeaderBytes && h.meta_bytes <= size - kHeaderBytes &&
               h.data_offset == align64(kHeaderBytes + h.meta_bytes) && h.data_offset <= size &&
               h.data_bytes <= size - h.data_offset,
           "airgraph file: sections [", h.meta_offset, " +", h.meta_bytes, ", ", h.data_offset, " +", h.data_bytes,
           ") do not fit in ", size, " bytes (truncated or corrupt)");
  const uint8_t* meta = base + h.meta_offset;
  AG_CHECK(crc32c(meta, h.meta_bytes) == h.meta_crc, "airgraph file: the metadata's checksum does not match (corrupt "
           "file)");
  const bool inline_consts = (h.flags & kFlagInlineConstants) != 0;
  AG_CHECK((h.flags & ~kFlagInlineConstants) == 0, "airgraph file: unknown flags ", h.flags);
  const uint8_t* data = base + h.data_offset;

  Reader r(meta, h.meta_bytes);
  auto g = std::make_unique<Graph>();
  const size_t nplugin = h.version >= 4 ? r.count(12, "plugin ops") : 0;
  for (size_t i = 0; i < nplugin; ++i) {
    const std::string op = r.str("plugin op"), plugin = r.str("plugin name"), version = r.str("plugin version");
    const OpDef* d = find_op(op);
    AG_CHECK(d, "airgraph file: the graph uses op '", op, "' of plugin '", plugin, "' version ", version,
             ", which is not loaded (Python: airgraph.load_library(path); airgraph-run: --plugin path)");
    AG_CHECK(d->plugin && plugin == d->plugin && version == (d->plugin_version ? d->plugin_version : ""),
             "airgraph file: the graph uses op '", op, "' of plugin '", plugin, "' version ", version,
             ", but the loaded op is ", d->plugin ? "plugin '" + std::string(d->plugin) + "' version " +
             (d->plugin_version ? d->plugin_version : "") : std::string("a built-in op"),
             " (load the plugin the file was exported with)");
  }
  size_t nsym = r.count(4, "symbols");
  for (size_t i = 0; i < nsym; ++i) g->add_symbol(r.str("symbol"));
  size_t nexpr = r.count(8, "size expressions");
  for (size_t i = 0; i < nexpr; ++i) {
    SizeExpr e;
    e.code.resize(r.count(8, "expression tokens"));
    for (auto& c : e.code) c = r.get<int64_t>();
    e.text = r.str("expression text");
    g->add_expr(std::move(e));  // checked against the symbols
  }
  const size_t nval = r.count(1, "values");
  std::vector<uint8_t> codes(nval);
  std::vector<TensorType> recorded(nval);
  for (size_t i = 0; i < nval; ++i) g->new_value(ValueKind::NodeOutput, TensorType{}, std::string{});
  for (size_t i = 0; i < nval; ++i) {
    uint8_t code = codes[i] = r.get<uint8_t>();
    AG_CHECK(code <= kNodeOutput, "airgraph file: corrupt metadata: value kind ", int(code), " at byte ", r.pos() - 1);
    if (code == kUnused) continue;
    Value* v = g->values_[i].get();
    v->name = r.str("value name");
    recorded[i] = r.type(nsym);
    if (code == kInput) {
      v->kind = ValueKind::Input;
      v->type = recorded[i];
    } else if (code == kConstInline || code == kConstByName) {
      v->kind = ValueKind::Const;
      v->type = recorded[i];
      AG_CHECK(v->type.is_static(), "airgraph file: constant %", v->name, " has a symbolic type ", v->type.str());
      const size_t nbytes = v->type.nbytes();
      if (code == kConstInline) {
        AG_CHECK(inline_consts, "airgraph file: constant %", v->name, " is inline in a file without constants");
        uint64_t off = r.get<uint64_t>(), len = r.get<uint64_t>();
        uint32_t crc = r.get<uint32_t>();
        AG_CHECK(len == nbytes && off % 64 == 0 && off <= h.data_bytes && len <= h.data_bytes - off,
                 "airgraph file: constant %", v->name, " (", v->type.str(), ") claims bytes [", off, ", +", len,
                 ") of a ", h.data_bytes, "-byte data section");
        if (verify_data)
          AG_CHECK(crc32c(data + off, len) == crc, "airgraph file: the data of constant %", v->name,
                   " does not match its checksum (corrupt file)");
        const uint8_t* p = data + off;
        // small constants (norms' scales, biases) are copied: read in place, each would map the file's
        // pages around it (a large folio of the page cache, up to megabytes) into the process
        if (reinterpret_cast<uintptr_t>(p) % 64 == 0 && keep && len >= kMapFrom) {
          auto s = std::make_shared<Storage>();
          s->data = const_cast<uint8_t*>(p);
          s->nbytes = len;
          s->owner = keep;
          v->storage = std::move(s);
        } else {
          v->storage = Storage::allocate(len);
          if (len) std::memcpy(v->storage->data, p, len);
        }
      } else {
        AG_CHECK(resolve, "airgraph file: constant %", v->name, " is not in the file and no resolver was given");
        v->storage = resolve(v->name, v->type);
        AG_CHECK(v->storage && v->storage->nbytes >= nbytes, "airgraph file: no data for constant %", v->name, " (",
                 v->type.str(), ")");
      }
    }
  }
  size_t nin = r.count(4, "inputs");
  std::vector<char> live(nval, 0);
  for (size_t i = 0; i < nin; ++i) {
    int id = r.index(nval, "input value");
    AG_CHECK(codes[id] == kInput && !live[id], "airgraph file: corrupt metadata: input ", i, " is value ", id,
             ", not an unlisted input");
    live[id] = 1;
    g->inputs_.push_back(g->values_[id].get());
  }
  for (size_t i = 0; i < nval; ++i) {
    AG_CHECK(codes[i] != kInput || live[i], "airgraph file: corrupt metadata: value ", i, " is an input not listed");
    if (codes[i] == kConstInline || codes[i] == kConstByName) live[i] = 1;
  }
  size_t nnodes = r.count(33, "nodes");
  for (size_t i = 0; i < nnodes; ++i) {
    int32_t id = r.get<int32_t>();
    std::string op = r.str("op name"), name = r.str("node name"), source = r.str("source line");
    AG_CHECK(find_op(op) != nullptr, "airgraph file: node '", name, "' has op '", op,
             "', which this airgraph does not have (written by another version?)");
    Attrs a = r.attrs();
    std::vector<Value*> ins, outs;
    size_t ni = r.count(4, "node inputs");
    for (size_t k = 0; k < ni; ++k) {
      int v = r.index(nval, "node input");
      AG_CHECK(live[v], "airgraph file: node '", name, "' reads value ", v, " before it is defined");
      ins.push_back(g->values_[v].get());
    }
    size_t no = r.count(4, "node outputs");
    for (size_t k = 0; k < no; ++k) {
      int v = r.index(nval, "node output");
      AG_CHECK(codes[v] == kNodeOutput && !live[v], "airgraph file: node '", name, "' defines value ", v,
               " again or defines a non-node value");
      live[v] = 1;
      outs.push_back(g->values_[v].get());
    }
    std::vector<SymAttr> sym;
    size_t ns = r.count(12, "symbolic attributes");
    for (size_t k = 0; k < ns; ++k) {
      SymAttr s;
      s.key = r.str("attribute name");
      s.index = r.get<int32_t>();
      s.expr = r.get<int32_t>();
      const AttrValue* v = a.find(s.key);
      bool ok = s.expr >= 0 && s.expr < static_cast<int32_t>(nexpr) && v &&
                (s.index < 0 ? std::holds_alternative<int64_t>(*v)
                             : std::holds_alternative<std::vector<int64_t>>(*v) &&
                                   s.index < static_cast<int32_t>(std::get<std::vector<int64_t>>(*v).size()));
      AG_CHECK(ok, "airgraph file: node '", name, "': symbolic attribute ", s.key, "[", s.index, "] -> expression ",
               s.expr, " does not fit");
      sym.push_back(std::move(s));
    }
    bool sized = r.get<uint8_t>() != 0;
    Node* m;
    try {
      m = g->make_node(op, ins, std::move(a), name, source, &outs);
    } catch (const Error& e) {
      fail("airgraph file: ", e.what());
    } catch (const std::exception& e) {  // an op's inference on attributes no front would write
      fail("airgraph file: node '", name, "' (op ", op, ") is malformed: ", e.what());
    }
    m->id = id;
    m->sym_attrs = std::move(sym);
    m->sized = sized;
    g->nodes_.emplace_back(m);
    for (Value* o : outs)
      AG_CHECK(o->type == recorded[o->id], "airgraph file: ", m->context(), ": output %", o->name,
               " is inferred as ", o->type.str(), " but the file records ", recorded[o->id].str(),
               " (corrupt, or written by another version)");
  }
  size_t ndim = r.count(8, "dim expressions");
  for (size_t i = 0; i < ndim; ++i) {
    int id = r.index(nval, "value");
    AG_CHECK(live[id], "airgraph file: dim expressions for undefined value ", id);
    std::vector<int32_t> ex(r.count(4, "dim expressions"));
    for (auto& e : ex) e = r.get<int32_t>();
    g->set_dim_exprs(g->values_[id].get(), std::move(ex));  // checks rank and expression range
  }
  std::vector<Value*> outs(r.count(4, "outputs"));
  for (auto& o : outs) {
    int id = r.index(nval, "output value");
    AG_CHECK(live[id], "airgraph file: graph output value ", id, " is never defined");
    o = g->values_[id].get();
  }
  g->set_outputs(outs);
  std::vector<Graph::InputWrite> writes(r.count(8, "input writes"));
  for (auto& w : writes) {
    w.input = r.index(g->inputs_.size(), "written input");
    w.output = r.index(outs.size(), "written output");
  }
  g->set_input_writes(std::move(writes));
  size_t nguard = r.count(10, "guards");
  for (size_t i = 0; i < nguard; ++i) {
    Graph::Guard gd;
    gd.expr = r.get<int32_t>();
    const uint8_t rel = r.get<uint8_t>(), outcome = r.get<uint8_t>();
    AG_CHECK(rel <= static_cast<uint8_t>(Graph::Rel::ge) && outcome <= 1, "airgraph file: corrupt guard ", i);
    gd.rel = static_cast<Graph::Rel>(rel);
    gd.outcome = outcome;
    gd.text = r.str("guard");
    g->add_guard(std::move(gd));  // checks the expression's range
  }
  int32_t next = r.get<int32_t>();
  for (const auto& n : g->nodes_)
    AG_CHECK(n->id >= 0 && n->id < next, "airgraph file: corrupt metadata: node id ", n->id);
  g->next_node_id_ = next;
  LoadedGraph out;
  out.producer = r.str("producer");
  out.metadata = r.str("metadata");
  const size_t nblob = h.version >= 3 ? r.count(28, "blobs") : 0;
  for (size_t i = 0; i < nblob; ++i) {
    const std::string name = r.str("blob constant");
    LoadedGraph::Blob b;
    b.key = r.str("blob key");
    const uint64_t off = r.get<uint64_t>(), len = r.get<uint64_t>();
    const uint32_t crc = r.get<uint32_t>();
    const Value* v = nullptr;
    for (const auto& c : g->values_)
      if (c->kind == ValueKind::Const && c->name == name) v = c.get();
    AG_CHECK(v && v->storage && codes[v->id] == kConstInline, "airgraph file: blob '", b.key,
             "' belongs to no inline constant (%", name, ")");
    AG_CHECK(off % 64 == 0 && off <= h.data_bytes && len <= h.data_bytes - off, "airgraph file: blob '", b.key,
             "' claims bytes [", off, ", +", len, ") of a ", h.data_bytes, "-byte data section");
    if (verify_data)
      AG_CHECK(crc32c(data + off, len) == crc, "airgraph file: blob '", b.key, "' of %", name,
               " does not match its checksum (corrupt file)");
    if (!keep || reinterpret_cast<uintptr_t>(data + off) % 64 != 0) continue;  // (a copied file: the reader packs its own)
    b.src = v->storage->data;
    b.data = data + off;
    b.nbytes = len;
    out.blobs.push_back(std::move(b));
  }
  out.keep = keep;
  AG_CHECK(r.done(), "airgraph file: ", h.meta_bytes - r.pos(), " bytes of metadata left over (corrupt file)");
  try {
    g->verify();
  } catch (const Error& e) {
    fail("airgraph file: the graph does not verify: ", e.what());
  }
  out.graph = std::move(g);
  return out;
}

std::string save_graph(const Graph& g, const SaveOptions& opt) { return GraphFile::save(g, opt); }

LoadedGraph load_graph(const void* data, size_t size, std::shared_ptr<void> keep, const ConstResolver& resolve,
                       bool verify_data) {
  return GraphFile::load(static_cast<const uint8_t*>(data), size, keep, resolve, verify_data);
}

LoadedGraph load_graph_file(const std::string& path, const ConstResolver& resolve, bool verify_data) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  AG_CHECK(fd >= 0, "airgraph file: cannot open ", path, ": ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < 0) {
    ::close(fd);
    fail("airgraph file: cannot stat ", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  AG_CHECK(size == 0 || p != MAP_FAILED, "airgraph file: cannot map ", path, ": ", std::strerror(errno));
  std::shared_ptr<void> keep(size ? p : nullptr, [size](void* q) {
    if (q) ::munmap(q, size);
  });
  try {
    LoadedGraph g = load_graph(p, size, keep, resolve, verify_data);
    if (size) ::madvise(p, size, MADV_DONTNEED);  // (the header's comment: pages come back when read)
    return g;
  } catch (const Error& e) {
    fail(e.what(), " (", path, ")");
  }
}

}  // namespace ag
