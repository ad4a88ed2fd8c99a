#include "harness/common/error.h"

#include <cstring>

namespace coldstart {

std::string SourceLocation::str() const {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line) + ":" + function;
}

}  // namespace coldstart
