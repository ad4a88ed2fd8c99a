// coldstart: JSON report renderer.
#include "reports/json_report.h"

namespace coldstart::reports {

nlohmann::json results_json(const RunResults& results) {
  nlohmann::json j = results;  // to_json in result.cpp adds the schema tag
  return j;
}

std::string render_json(const RunResults& results) {
  return results_json(results).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace coldstart::reports
