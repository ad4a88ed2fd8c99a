// Helpers compare.cpp and compare_render.cpp share (how both name a target and a metric).
// Internal to `coldstart compare`.
#pragma once

#include <optional>
#include <string>

namespace coldstart::cli::compare_detail {

/// "NVIDIA H200, sm_90" (or just "sm_90" when the target is the arch): where a run ran.
std::string target_label(const std::string& target, int sm);

/// A time in ms with one decimal, "n/a" when absent.
std::string fmt_ms(const std::optional<double>& v);

/// How a metric is named in tables: "startup", "TTFT", "first decode".
std::string metric_label(const std::string& name);

}  // namespace coldstart::cli::compare_detail
