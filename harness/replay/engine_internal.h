// Small helpers shared by the replay engine's two files (engine.cpp, engine_requests.cpp).
#pragma once

#include <chrono>
#include <cstdint>

namespace coldstart::engine_detail {

using Clock = std::chrono::steady_clock;

/// Milliseconds since `t0`.
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// ceil(a / b) for positive b, as an int (block counts).
inline int cdiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace coldstart::engine_detail
