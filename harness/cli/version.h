// The version and commit `coldstart --version` prints and every result's meta records. CMake
// defines both for the coldstart target (COLDSTART_GIT_SHA is read when CMake configures).
#pragma once

#ifndef COLDSTART_GIT_SHA
#define COLDSTART_GIT_SHA "unknown"
#endif
#ifndef COLDSTART_VERSION
#define COLDSTART_VERSION "0.0.0"
#endif

namespace coldstart::cli {
inline constexpr const char* kVersion = COLDSTART_VERSION;  ///< e.g. "0.1.0"
inline constexpr const char* kGitSha = COLDSTART_GIT_SHA;   ///< 12 hex digits, or "unknown"
}  // namespace coldstart::cli
