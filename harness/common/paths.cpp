#include "harness/common/paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::paths {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parent(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string filename(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string stem(const std::string& path) {
  const auto slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = name.find_last_of('.');
  if (dot != std::string::npos && dot != 0) name.resize(dot);
  return name;
}

std::string join(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string normalize(const std::string& path) {
  if (path.empty()) return path;
  const bool absolute = path[0] == '/';
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(part);
      }
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out = absolute ? "/" : "";
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "/" : "") + parts[k];
  return out.empty() ? "." : out;
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  make_dirs(parent(path));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error("cannot create directory " + path + ": " + std::strerror(errno));
  }
}

namespace {
int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }
}  // namespace

bool remove_tree(const std::string& path) noexcept {
  if (!exists(path)) return true;
  return ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

std::string make_temp_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = join(tmp && *tmp ? tmp : "/tmp", prefix + "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    throw Error("cannot create a temporary directory " + templ + ": " + std::strerror(errno));
  }
  return buf.data();
}

void write_file_atomic(const std::string& path, const std::string& data, unsigned mode) {
  // A short hidden name beside the target, so an output name near the file-name limit (255
  // bytes) still has room for its temporary file; ".tmp." marks it for the cache readers.
  const std::string dir = parent(path);
  std::string tmp = (dir.empty() ? std::string() : dir + "/") + ".cs.tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0) {
    throw Error(path + ": creating a temporary file " + tmp + " failed: " + std::strerror(errno));
  }
  tmp = name.data();
  auto fail = [&](const std::string& step) {
    const std::string msg = path + ": " + step + " failed: " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(msg);
  };
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) fail("setting the mode of " + tmp);
  if (::fsync(fd) != 0) fail("flushing " + tmp);
  const int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("closing " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming " + tmp);
}

namespace {

// What a file that is not a regular one is, for messages.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "is a FIFO, not a regular file";
  if (S_ISCHR(mode)) return "is a character device, not a regular file";
  if (S_ISBLK(mode)) return "is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

}  // namespace

std::string size_text(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string read_input_file(const std::string& path, size_t max_bytes, std::string& data) {
  data.clear();
  auto too_big = [&](const std::string& size) {
    return fmt::format("is {}, more than the {} such a file may be", size, size_text(max_bytes));
  };
  // stat first, so a socket or FIFO is named rather than opened; then open without blocking (a
  // FIFO that appeared in between opens at once and is refused by fstat) and check the file that
  // was opened, not the name.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return file_kind(st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::strerror(errno);
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = file_kind(st.st_mode);
  } else if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    const double size = static_cast<double>(st.st_size);
    why = too_big(size >= (1 << 20)   ? fmt::format("{:.1f} MiB", size / (1 << 20))
                  : size >= (1 << 10) ? fmt::format("{:.1f} KiB", size / (1 << 10))
                                      : fmt::format("{} B", st.st_size));
  } else {
    data.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    while (why.empty()) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        why = std::strerror(errno);
      } else if (n == 0) {
        break;
      } else if (data.size() + static_cast<size_t>(n) > max_bytes) {
        why = fmt::format("grew past the {} such a file may be while it was read",
                          size_text(max_bytes));
      } else {
        data.append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  if (!why.empty()) data.clear();
  return why;
}

std::optional<std::vector<std::string>> directory_entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int saved = errno;
  ::closedir(d);
  errno = saved;
  return names;
}

namespace {

std::string find_unreadable_below(const std::string& dir, const std::string& suffix,
                                  size_t max_bytes, int depth, size_t& budget) {
  const auto names = directory_entries(dir);
  if (!names) return "";  // an unreadable directory: nothing there is read either
  for (const std::string& name : *names) {
    if (budget == 0) return "";  // find_unreadable_input names the top directory
    --budget;
    const std::string path = join(dir, name);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // a dangling link is never read
    if (S_ISDIR(st.st_mode)) {
      if (depth <= 0) continue;
      std::string found = find_unreadable_below(path, suffix, max_bytes, depth - 1, budget);
      if (!found.empty()) return found;
      continue;
    }
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (!S_ISREG(st.st_mode)) return path + ": " + file_kind(st.st_mode);
    if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
      return fmt::format("{}: is {:.1f} MiB, more than the {} such a file may be", path,
                         static_cast<double>(st.st_size) / (1 << 20), size_text(max_bytes));
    }
  }
  return "";
}

}  // namespace

std::string find_unreadable_input(const std::string& dir, const std::string& suffix,
                                  size_t max_bytes, int max_depth) {
  size_t budget = kMaxInputDirEntries + 1;  // one more: whether there are more than the bound
  std::string found = find_unreadable_below(dir, suffix, max_bytes, max_depth, budget);
  if (found.empty() && budget == 0) {
    found = fmt::format("{}: more than {} entries below it (a symbolic link to an enclosing "
                        "directory?)",
                        dir, kMaxInputDirEntries);
  }
  return found;
}

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n < 0) throw Error(std::string("cannot read /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

namespace {
bool same_existing_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}
}  // namespace

std::string special_file_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISLNK(st.st_mode)) {
    std::vector<char> target(4096, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size() - 1);
    return n > 0 ? "is a symbolic link (to '" + std::string(target.data(), static_cast<size_t>(n)) + "')"
                 : std::string("is a symbolic link");
  }
  if (S_ISDIR(st.st_mode)) return "is a directory";
  return file_kind(st.st_mode);
}

namespace {

// Where an output will land: its directory with every link resolved, then its own name (the
// file itself need not exist). Two outputs written through different spellings of one directory
// ("out/a.md", "link-to-out/a.md", "out/sub/../a.md") get the same identity.
std::string output_identity(const std::string& out, const std::string& dir) {
  std::vector<char> buf(PATH_MAX + 1, '\0');
  const std::string name = filename(out);
  if (::realpath(dir.c_str(), buf.data()) == nullptr) return normalize(out);
  return join(buf.data(), name);
}

}  // namespace

void check_output_paths(const std::vector<std::string>& outputs,
                        const std::vector<std::string>& inputs, bool replace_special) {
  std::vector<std::string> identities(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& out = outputs[i];
    if (out.empty()) continue;
    if (is_directory(out)) throw InputError("output '" + out + "': is a directory");
    if (const std::string kind = special_file_kind(out); !kind.empty()) {
      // A link (or a FIFO the user made) may be replaced on request; a device node or socket
      // never: renaming a regular file over /dev/null would break the machine for everyone.
      const bool replaceable =
          kind.rfind("is a symbolic link", 0) == 0 || kind.rfind("is a FIFO", 0) == 0;
      if (!replaceable)
        throw InputError("output '" + out + "': " + kind +
                         "; outputs are written as a new regular file renamed over the path, so "
                         "they must go to a file (leave the option out to skip this output)");
      if (!replace_special)
        throw InputError("output '" + out + "': " + kind +
                         "; outputs are written as a new regular file renamed over the path, which "
                         "would replace it (pass --force to replace it)");
    }
    const std::string dir = parent(out).empty() ? "." : parent(out);
    if (!is_directory(dir) || ::access(dir.c_str(), W_OK) != 0)
      throw InputError("output '" + out + "': directory '" + dir +
                       "' does not exist or is not writable");
    for (const std::string& in : inputs)
      if (!in.empty() && same_existing_file(out, in))
        throw InputError("output '" + out + "': is an input of this run (" + in + ")");
    if (filename(out).size() > NAME_MAX)
      throw InputError(fmt::format("output '{}': its file name is {} bytes, past the file "
                                   "system's limit of {}", out, filename(out).size(), NAME_MAX));
    identities[i] = output_identity(out, dir);
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].empty() &&
          (identities[j] == identities[i] || same_existing_file(outputs[j], out)))
        throw InputError("output '" + out + "': also given as another output ('" + outputs[j] +
                         "'); each output needs its own file");
  }
}

}  // namespace coldstart::paths
