// Errors of the engine are exceptions of one type that carry the context a user
// needs: the FX node, the op, the shapes and dtypes, the user's source line.
// The bindings turn them into airgraph.EngineError on the Python side.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ag {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void cat(std::ostringstream&) {}
template <typename T, typename... R>
void cat(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  cat(os, rest...);
}
}  // namespace detail

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::cat(os, args...);
  throw Error(os.str());
}

#define AG_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ::ag::fail(__VA_ARGS__);   \
  } while (0)

}  // namespace ag
