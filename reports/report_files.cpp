// coldstart: writes the rendered reports to their files, each one atomically.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "reports/renderers.h"

#include "harness/common/paths.h"

namespace coldstart::reports {

namespace {

// Reports are written atomically; the error names the report.
void write_atomically(const std::string& path, const std::string& text) {
  try {
    paths::write_file_atomic(path, text);
  } catch (const Error& e) {
    throw Error("cannot write report '" + path + "': " + e.what());
  }
}

}  // namespace

void write_report_files(const std::vector<RunResults>& runs, const ReportFiles& files) {
  if (!files.junit.empty()) {
    JunitOptions options;
    options.hot_path_compiles_fail = files.hot_path_compiles_fail;
    write_atomically(files.junit, render_junit(runs, options));
  }
  if (!files.markdown.empty()) write_atomically(files.markdown, render_markdown(runs));
  if (!files.html.empty()) write_atomically(files.html, render_html(runs));
  if (!files.trace.empty()) write_atomically(files.trace, render_trace(runs));
}

}  // namespace coldstart::reports
