// coldstart: per-strategy views of a persistent kernel cache (`--cache-dir`).
//
// Every strategy of one `coldstart replay` starts from the cache directory as it was when the run
// began, so one strategy never loads what another strategy of the same run compiled; what each
// strategy compiled is merged into the directory when it ends, for later runs. The views are
// hard links of the run-start entries (cache entries are written by atomic rename and never
// changed in place, so a link can be shared safely); where links are impossible (another file
// system, a read-only directory) they are copies. POSIX only: this file ends up in the binary
// linked with a PyTorch wheel's libtorch, which must not use std::filesystem (see paths.h).
//
// Entry locks (JitOptions::disk_lock_timeout_s) deduplicate compiles between processes that
// share one cache directory. A strategy's view is private by design, so no strategy ever waits
// for, or loads, what another process compiles meanwhile: its compile accounting cannot depend
// on what else ran at the same time. Two concurrent runs on one --cache-dir therefore each
// compile what they miss, and the merges keep whichever entry lands first (lock files are
// never snapshotted or merged).
#pragma once

#include <string>

namespace coldstart::cli {

class CacheSnapshots {
 public:
  /// Takes the run-start snapshot of `cache_dir` (an existing directory): its regular files and
  /// those of its subdirectories (e.g. autotune/), skipping names that start with '.'. The work
  /// directory lives inside `cache_dir` when it can be written (same file system, so links
  /// work), else under $TMPDIR. Throws Error naming the directory when neither can be made.
  explicit CacheSnapshots(const std::string& cache_dir);
  /// Removes the work directory and every view still open (best effort).
  ~CacheSnapshots();
  CacheSnapshots(const CacheSnapshots&) = delete;
  CacheSnapshots& operator=(const CacheSnapshots&) = delete;

  /// A fresh directory holding the run-start entries, for one strategy run. Throws Error.
  std::string begin_job();
  /// Adds the entries `view` has and the cache directory lacks to the cache directory (an entry
  /// another process added meanwhile is kept), and replaces an entry the strategy rewrote (a
  /// damaged one it recompiled) when the directory still holds the run-start copy; then removes
  /// `view`. Symbolic links in the cache directory are never followed. Never throws: a cache
  /// that cannot be written keeps what it had. Returns the number of entries added or replaced.
  int end_job(const std::string& view);

 private:
  std::string cache_dir_;
  std::string work_;      // holds snapshot/ and the views
  std::string snapshot_;  // the run-start entries
  int next_ = 0;
};

}  // namespace coldstart::cli
