// coldstart: the machine-readable report, the JSON form of a run (schema "coldstart.replay/1").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/replay/result.h"

namespace coldstart::reports {

/// The whole run as a JSON object: {schema: "coldstart.replay/1", meta, scenario, results}.
nlohmann::json results_json(const RunResults& results);

/// results_json pretty-printed (2-space indent) with a trailing newline: the exact text
/// write_results_json puts in a results file. Invalid UTF-8 in a text field is replaced, never
/// thrown on.
std::string render_json(const RunResults& results);

}  // namespace coldstart::reports
