// The version and commit `coldstart --version` prints and every result's meta records. CMake
// defines COLDSTART_VERSION for the coldstart target; git_sha() is generated at build time
// (cmake/GitSha.cmake), so an incremental build after a commit records the new commit.
#pragma once

#ifndef COLDSTART_VERSION
#define COLDSTART_VERSION "0.0.0"
#endif

namespace coldstart::cli {
inline constexpr const char* kVersion = COLDSTART_VERSION;  ///< e.g. "0.1.0"
/// The source tree's commit when the binary was built: 12 hex digits, with "-dirty" when tracked
/// files differed from it, or "unknown" without git.
const char* git_sha();
}  // namespace coldstart::cli
