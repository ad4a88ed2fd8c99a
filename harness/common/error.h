// coldstart: error types and checked-call macros shared by every part of the harness.
#pragma once

#include <stdexcept>
#include <string>

namespace coldstart {

/// Where a call was made from: used in error texts and in the workspace-lock message,
/// which names the caller as `<file>:<line>:<function>` (file is the base name).
struct SourceLocation {
  const char* file;
  int line;
  const char* function;
  /// `<basename>:<line>:<function>`, the form vLLM's WorkspaceManager prints.
  std::string str() const;
};

#define CS_HERE (::coldstart::SourceLocation{__FILE__, __LINE__, __func__})

/// Base of every error the harness raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA driver / runtime / NVRTC call returned an error. The text names the call as written,
/// the file:line it was made from, and the library's own error name and string.
class CudaError : public Error {
 public:
  using Error::Error;
};

/// Bad user input (scenario file, command-line override, fixture). The text names the file, line
/// and key. Raised before any strategy runs, so no result is lost.
class InputError : public Error {
 public:
  using Error::Error;
};

/// Throws Error("<file>:<line>: <message>") when `cond` is false. For internal invariants.
#define CS_CHECK(cond, msg)                                                              \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      throw ::coldstart::Error(CS_HERE.str() + ": check failed: " #cond ": " + (msg));   \
    }                                                                                    \
  } while (0)

}  // namespace coldstart
