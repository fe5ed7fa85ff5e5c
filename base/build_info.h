// What --version prints for regcached and regcachectl: the project version and the build type
// of this very binary, both from CMake (compile definitions REGCACHE_VERSION and
// REGCACHE_BUILD_TYPE, set on the executables in server/ and tools/). Without them abseil's
// default says "Debug build" or not from NDEBUG of whatever compiled its usage code, which is
// not this binary's build type.
#ifndef REGCACHE_BASE_BUILD_INFO_H_
#define REGCACHE_BASE_BUILD_INFO_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#ifndef REGCACHE_VERSION
#define REGCACHE_VERSION "unknown"
#endif
#ifndef REGCACHE_BUILD_TYPE
#define REGCACHE_BUILD_TYPE ""
#endif

namespace regcache::base {

// "<program> <version> (<CMAKE_BUILD_TYPE> build)\n", e.g. "regcachectl 0.1.0 (Release build)".
inline std::string VersionString(absl::string_view program) {
  const absl::string_view type = REGCACHE_BUILD_TYPE;
  return absl::StrCat(program, " ", REGCACHE_VERSION, " (",
                      type.empty() ? "no CMAKE_BUILD_TYPE" : type, " build)\n");
}

}  // namespace regcache::base
#endif  // REGCACHE_BASE_BUILD_INFO_H_
