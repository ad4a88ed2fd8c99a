// coldstart: per-strategy views of a persistent kernel cache. See cache_snapshot.h.
#include "harness/cli/cache_snapshot.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

/// Names in `dir` (no "." / ".."; none starting with '.'), with whether each is a directory.
std::vector<std::pair<std::string, bool>> entries(const std::string& dir) {
  std::vector<std::pair<std::string, bool>> out;
  for (const std::string& name : paths::directory_entries(dir).value_or(std::vector<std::string>{})) {
    // Hidden names (the run's own work directory), the temporary files of an atomic write that
    // a killed process left behind and entry locks (harness/jit/runtime.cpp: held by a process
    // compiling into this directory, or left by one that died) are not cache entries.
    const bool lock = name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0;
    if (name.empty() || name[0] == '.' || name.find(".tmp.") != std::string::npos || lock) continue;
    struct stat st {};
    if (::lstat(paths::join(dir, name).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) out.emplace_back(name, true);
    else if (S_ISREG(st.st_mode)) out.emplace_back(name, false);
  }
  return out;
}

/// `dst` as a hard link of `src`, else a copy (written atomically). False when `dst` exists
/// or neither works.
bool link_or_copy(const std::string& src, const std::string& dst) {
  if (::link(src.c_str(), dst.c_str()) == 0) return true;
  if (errno == EEXIST) return false;
  // Read like any input: a FIFO swapped in since the listing must not block the run.
  std::string data;
  if (!paths::read_input_file(src, paths::kMaxResultsBytes, data).empty()) return false;
  if (paths::exists(dst)) return false;
  try {
    paths::write_file_atomic(dst, data);
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// Whether `path` is a directory itself, not a symbolic link to one.
bool real_directory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// Every regular file under `from` that `to` lacks, linked or copied into `to` (directories
/// created as needed); what `to` has is kept. A symbolic link in `to` where a directory goes is
/// never followed (a link planted in a shared cache would have the merge write elsewhere).
/// Returns the number added.
int mirror(const std::string& from, const std::string& to) {
  int added = 0;
  for (const auto& [name, is_dir] : entries(from)) {
    const std::string src = paths::join(from, name), dst = paths::join(to, name);
    if (is_dir) {
      if (!real_directory(dst)) {
        if (::mkdir(dst.c_str(), 0755) != 0 || !real_directory(dst)) continue;
      }
      added += mirror(src, dst);
    } else if (!paths::exists(dst) && link_or_copy(src, dst)) {
      ++added;
    }
  }
  return added;
}

/// Entries a strategy rewrote in its view (a damaged entry it recompiled: another inode than the
/// run-start snapshot's) replace the cache directory's copy, when that copy is still the one the
/// run started from (same inode as the snapshot's hard link; another process may have replaced
/// it meanwhile, and then it is kept). Atomic: a link beside the entry, renamed over it. Returns
/// the number replaced.
int replace_rewritten(const std::string& view, const std::string& snapshot, const std::string& cache) {
  int replaced = 0;
  for (const auto& [name, is_dir] : entries(view)) {
    const std::string v = paths::join(view, name), s = paths::join(snapshot, name),
                      c = paths::join(cache, name);
    if (is_dir) {
      if (real_directory(s) && real_directory(c)) replaced += replace_rewritten(v, s, c);
      continue;
    }
    struct stat vs {}, ss {}, cs {};
    if (::lstat(v.c_str(), &vs) != 0 || ::lstat(s.c_str(), &ss) != 0 || ::lstat(c.c_str(), &cs) != 0)
      continue;
    if (!S_ISREG(vs.st_mode) || !S_ISREG(cs.st_mode)) continue;
    const bool rewritten = vs.st_ino != ss.st_ino || vs.st_dev != ss.st_dev;
    const bool unchanged = cs.st_ino == ss.st_ino && cs.st_dev == ss.st_dev;
    if (!rewritten || !unchanged) continue;
    const std::string tmp = c + ".tmp.replace";
    ::unlink(tmp.c_str());
    if (::link(v.c_str(), tmp.c_str()) != 0) continue;
    if (::rename(tmp.c_str(), c.c_str()) == 0) {
      ++replaced;
    } else {
      ::unlink(tmp.c_str());
    }
  }
  return replaced;
}

std::string make_dir_in(const std::string& parent, const std::string& prefix) {
  std::string templ = paths::join(parent, prefix + "XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

}  // namespace

CacheSnapshots::CacheSnapshots(const std::string& cache_dir) : cache_dir_(cache_dir) {
  work_ = ::access(cache_dir.c_str(), W_OK) == 0 ? make_dir_in(cache_dir, ".coldstart-run-") : "";
  if (work_.empty()) work_ = paths::make_temp_dir("coldstart-cache-run-");
  snapshot_ = paths::join(work_, "snapshot");
  paths::make_dirs(snapshot_);
  mirror(cache_dir_, snapshot_);
}

CacheSnapshots::~CacheSnapshots() { paths::remove_tree(work_); }

std::string CacheSnapshots::begin_job() {
  const std::string view = paths::join(work_, "job-" + std::to_string(next_++));
  paths::make_dirs(view);
  mirror(snapshot_, view);
  return view;
}

int CacheSnapshots::end_job(const std::string& view) {
  int added = 0;
  if (::access(cache_dir_.c_str(), W_OK) == 0) {
    added = mirror(view, cache_dir_);
    added += replace_rewritten(view, snapshot_, cache_dir_);
  }
  paths::remove_tree(view);
  return added;
}

}  // namespace coldstart::cli
