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

namespace coldstart::reports {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw Error("cannot write report '" + path + "': " + what + ": " + std::strerror(err));
}

// Text to `<path>.tmp.XXXXXX` beside it, fsync, rename over `path`.
void write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0) fail(path, "creating a temporary file", errno);
  tmp = name.data();
  auto abandon = [&](const char* what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, what, err);
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("writing");
    }
    done += static_cast<size_t>(n);
  }
  // mkstemp creates 0600; a report is for others to read.
  if (::fchmod(fd, 0644) != 0) abandon("setting permissions");
  if (::fsync(fd) != 0) abandon("flushing");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) abandon("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("renaming the temporary file");
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
