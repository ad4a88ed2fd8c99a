// Small POSIX path helpers. The harness's own code uses these rather than std::filesystem:
// PyTorch wheels export their own, statically linked copies of some libstdc++ std::filesystem
// functions (pytorch/pytorch#133437; torch 2.11's std::filesystem::remove_all in libtorch.so
// jumps to address 0). cs_torch links libstdc++ ahead of libtorch so that such calls bind to
// libstdc++ (cmake/Dependencies.cmake; checked by harness/runtime/libstdcxx_binding_test.cpp);
// keeping std::filesystem out of the harness is the second line of defence. Tests may use it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace coldstart::paths {

bool exists(const std::string& path);
/// The names in directory `dir`, without "." and "..", in readdir order; nullopt when it cannot
/// be opened (errno says why).
std::optional<std::vector<std::string>> directory_entries(const std::string& dir);
bool is_directory(const std::string& path);
/// Directory part of `path` ("" for a bare file name), like dirname without the "." fallback.
std::string parent(const std::string& path);
/// Last component ("a/b.yaml" -> "b.yaml").
std::string filename(const std::string& path);
/// File name without directory and without the last extension ("a/b.yaml" -> "b").
std::string stem(const std::string& path);
/// `a/b`, or `b` when `b` is absolute or `a` is empty.
std::string join(const std::string& a, const std::string& b);
/// Lexically normalized: "a/./b//c/../d" -> "a/b/d"; keeps leading ".." of a relative path.
std::string normalize(const std::string& path);
/// Creates `path` and missing parents (mode 0755). Throws Error naming the path and errno text.
void make_dirs(const std::string& path);
/// Removes `path` and everything below it; best effort, never throws. Returns false on a failure.
bool remove_tree(const std::string& path) noexcept;
/// A new private directory under $TMPDIR (or /tmp) named `<prefix>XXXXXX`. Throws Error.
std::string make_temp_dir(const std::string& prefix);
/// make_temp_dir for a scope: the directory and its contents are removed (best effort) when the
/// object is destroyed. Throws Error like make_temp_dir.
struct ScopedTempDir {
  explicit ScopedTempDir(const std::string& prefix) : path(make_temp_dir(prefix)) {}
  ~ScopedTempDir() { remove_tree(path); }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string path;
};
/// Writes `data` to `path` atomically: a temporary file beside it (same file system), written in
/// full, given `mode` (mkstemp makes 0600), fsync'ed, then renamed over `path`; a reader sees the
/// old file or the whole new one, never a part. Throws Error "<path>: <step> failed: <errno
/// text>" and removes the temporary file when a step fails.
void write_file_atomic(const std::string& path, const std::string& data, unsigned mode = 0644);
/// Size bounds of the input files the harness reads whole into memory (what real files stay far
/// below; what a mistake such as /dev/zero or a log named as input would exceed).
constexpr size_t kMaxScenarioBytes = 16u << 20;  ///< a scenario YAML or an HF config.json
constexpr size_t kMaxTableBytes = 16u << 20;     ///< a tuned config table (JSON)
constexpr size_t kMaxResultsBytes = 256u << 20;  ///< a results file (replay --json, merge -o)
/// Reads the whole of `path` into `data` when it is a regular file (symbolic links followed) of
/// at most `max_bytes`. Returns "" then, else why not, to be put after "<path>: ": "is a FIFO, not
/// a regular file", "is a directory", "is 20.0 MiB, more than the 16 MiB such a file may be",
/// or the errno text of the failing call. Never blocks on a FIFO (it is opened non-blocking and
/// refused), never reads past max_bytes (a device such as /dev/zero is refused, a file that grows
/// while read is cut off and refused).
std::string read_input_file(const std::string& path, size_t max_bytes, std::string& data);
/// The most entries find_unreadable_input looks at below a directory.
constexpr size_t kMaxInputDirEntries = 100000;
/// The first file below the directory `dir` (symbolic links followed, at most `max_depth` levels
/// down) whose name ends with `suffix` and that read_input_file would refuse for its type or size,
/// as "<path>: <why>"; "" when there is none. More than kMaxInputDirEntries entries below `dir`
/// (symbolic links to an enclosing directory multiply them) is a problem too. Nothing is opened or
/// read: a FIFO is found by stat alone.
std::string find_unreadable_input(const std::string& dir, const std::string& suffix,
                                  size_t max_bytes, int max_depth = 4);
/// "16 MiB", "512 KiB", "100 B": a size limit as read_input_file's messages print it.
std::string size_text(size_t bytes);
/// The running executable (readlink /proc/self/exe). Throws Error.
std::string self_executable();

/// What `path` is when it exists and is not a regular file, as "is a symbolic link (to 'x')",
/// "is a character device", "is a FIFO", "is a socket", "is a block device"; "" when it is a
/// regular file or does not exist. The link itself is looked at (lstat), not what it points to.
std::string special_file_kind(const std::string& path);

/// Checks, before anything is written, every non-empty path of `outputs` (files a command will
/// write) against `inputs` (files it reads): each must not be a directory, its directory must
/// exist and be writable, it must not be one of the inputs (the same file, by device and inode),
/// and no two outputs may land on one file (compared by their directory with links resolved plus
/// their name, so "d/a.md" and "link-to-d/a.md" collide even before either exists). Outputs are
/// written by renaming a new file over the path, which would replace what is there with a regular
/// file: a symbolic link or FIFO is refused unless `replace_special` (the commands' --force), a
/// device node or socket always. Throws InputError naming the output.
void check_output_paths(const std::vector<std::string>& outputs,
                        const std::vector<std::string>& inputs, bool replace_special = false);

}  // namespace coldstart::paths
