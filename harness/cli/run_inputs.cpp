// coldstart: the input files of a `coldstart replay`, frozen when the run starts. See
// run_inputs.h. POSIX only (no std::filesystem: see harness/common/paths.h).
#include "harness/cli/run_inputs.h"

#include <cstdlib>

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "harness/common/checksum.h"
#include "harness/common/error.h"
#include "harness/replay/engine_keys.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

// As every input is read (paths::read_input_file): a FIFO swapped in since validation must not
// block the parent, a device must not be read until memory runs out.
std::string read_bytes(const std::string& path) {
  std::string data;
  const std::string why = paths::read_input_file(path, paths::kMaxTableBytes, data);
  if (!why.empty()) {
    throw InputError(fmt::format("{}: cannot read it to freeze the run's inputs: {}", path, why));
  }
  return data;
}

// How far below a tuned-config directory files are copied (the harness reads one level down),
// and how many: a symbolic link to an enclosing directory made the walk endless (two such links:
// 2^40 paths before the kernel's ELOOP).
constexpr int kMaxListDepth = 4;
constexpr size_t kMaxListFiles = 10000;

// The copy is read-only: nothing is meant to change it during the run.
void write_copy(const std::string& path, const std::string& data) {
  paths::make_dirs(paths::parent(path));
  paths::write_file_atomic(path, data, 0444);
}

// Regular files under `dir` (symbolic links followed, at most kMaxListDepth levels down), as
// paths relative to it. Throws InputError past kMaxListFiles files or
// paths::kMaxInputDirEntries entries looked at (`seen` counts them).
void list_files(const std::string& dir, const std::string& rel, std::vector<std::string>& out,
                int depth = 0, size_t* seen = nullptr) {
  size_t seen_here = 0;
  if (seen == nullptr) seen = &seen_here;
  const auto names = paths::directory_entries(dir);
  if (!names) {
    throw Error(fmt::format("{}: cannot list it to freeze the run's inputs: {}", dir,
                            std::strerror(errno)));
  }
  for (const std::string& name : *names) {
    if (++*seen > paths::kMaxInputDirEntries) {
      throw InputError(fmt::format("{}: more than {} entries below it to freeze the run's inputs "
                                   "(a symbolic link to an enclosing directory?)",
                                   dir, paths::kMaxInputDirEntries));
    }
    const std::string path = paths::join(dir, name);
    const std::string r = rel.empty() ? name : rel + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // a dangling link is nothing to read
    if (S_ISDIR(st.st_mode)) {
      if (depth < kMaxListDepth) list_files(path, r, out, depth + 1, seen);
    } else if (S_ISREG(st.st_mode)) {
      out.push_back(r);
      if (out.size() > kMaxListFiles) {
        throw InputError(fmt::format("{}: more than {} files below it to freeze the run's inputs "
                                     "(a symbolic link to an enclosing directory?)",
                                     dir, kMaxListFiles));
      }
    }
  }
}

}  // namespace

std::string absolute_path(const std::string& path) {
  if (!path.empty() && path[0] == '/') return paths::normalize(path);
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) {
    throw Error(std::string("cannot read the working directory: ") + std::strerror(errno));
  }
  return paths::normalize(paths::join(cwd, path));
}

RunInputs::RunInputs(const std::vector<Scenario>& scenarios) {
  dir_ = paths::make_temp_dir("coldstart-inputs-");
  const std::string root = paths::join(dir_, "root");
  auto copy_of = [&](const std::string& path) { return root + absolute_path(path); };
  // Every declared directory key (engine_keys.h) is an input folder; its role is the key.
  std::vector<std::string> dir_keys;
  for (const EngineKeySpec& k : declared_engine_keys())
    if (k.type == EngineKeyType::kDirectory) dir_keys.push_back(k.name);
  try {
    for (const Scenario& s : scenarios) {
      PerScenario ps;
      // The scenario itself: recorded, not copied (the children get the parsed scenario).
      const std::string& text = s.source.text;
      ps.inputs.push_back({"scenario", s.file, static_cast<long long>(text.size()),
                           checksum::fnv1a64_hex(text), -1});

      for (const Variant& v : s.variants) ps.variants.push_back(apply_variant(s, v));
      std::set<std::string> done;
      // config.json: travels parsed in the job, so it is not copied; its bytes are read again to
      // record them and to refuse a file edited since the loader parsed it (meta.inputs must
      // describe what the run replays).
      // Each file is read once; every variant naming it is compared with that reading.
      std::map<std::string, std::string> config_sums;
      auto add_config = [&](const ModelConfig& m) {
        if (m.config_file.empty()) return;
        auto it = config_sums.find(m.config_file);
        if (it == config_sums.end()) {
          const std::string data = read_bytes(m.config_file);
          it = config_sums.emplace(m.config_file, checksum::fnv1a64_hex(data)).first;
          ps.inputs.push_back(
              {"config", m.config_file, static_cast<long long>(data.size()), it->second, -1});
        }
        if (it->second != m.config_fnv1a64) {
          throw InputError(fmt::format(
              "{}: changed while the run was starting (its config.json {} was edited after it "
              "was validated); run again",
              s.file, m.config_file));
        }
      };
      auto add_dir = [&](const std::string& key, const std::string& dir) {
        if (dir.empty() || !done.insert(dir).second) return;
        std::vector<std::string> files;
        list_files(dir, "", files);
        std::sort(files.begin(), files.end());
        std::string lines;
        long long bytes = 0;
        paths::make_dirs(copy_of(dir));
        for (const std::string& rel : files) {
          const std::string data = read_bytes(paths::join(dir, rel));
          write_copy(paths::join(copy_of(dir), rel), data);
          bytes += static_cast<long long>(data.size());
          lines += rel + " " + checksum::fnv1a64_hex(data) + "\n";
        }
        ps.inputs.push_back({key, dir, bytes, checksum::fnv1a64_hex(lines),
                             static_cast<int>(files.size())});
      };
      add_config(s.model);
      for (const std::string& key : dir_keys) add_dir(key, s.engine.string_key(key));
      for (Scenario& v : ps.variants) {
        add_config(v.model);
        for (const std::string& key : dir_keys) add_dir(key, v.engine.string_key(key));
        // The children read the copies, never the user's files.
        rewrite_directory_keys(v, copy_of);
      }
      per_scenario_.push_back(std::move(ps));
    }
  } catch (...) {
    paths::remove_tree(dir_);
    throw;
  }
}

RunInputs::~RunInputs() { paths::remove_tree(dir_); }

void rewrite_directory_keys(Scenario& s, const std::function<std::string(const std::string&)>& to) {
  for (const EngineKeySpec& k : declared_engine_keys()) {
    if (k.type != EngineKeyType::kDirectory) continue;
    const std::string dir = s.engine.string_key(k.name);
    if (!dir.empty()) s.engine.set_key(k.name, to(dir));
  }
}

std::string shared_compile_memo_dir() {
  const char* dir = std::getenv("COLDSTART_COMPILE_MEMO_DIR");
  return dir != nullptr ? std::string(dir) : std::string();
}

void RunInputs::name_originals(StrategyResult& r) const {
  // A copy is <dir>/root<absolute original path>: dropping "<dir>/root" leaves the original.
  const std::string root = paths::join(dir_, "root");
  auto fix = [&](std::string& s) {
    for (size_t p = s.find(root + "/"); p != std::string::npos; p = s.find(root + "/", p))
      s.erase(p, root.size());
  };
  std::function<void(nlohmann::json&)> walk = [&](nlohmann::json& j) {
    if (j.is_string()) {
      std::string s = j.get<std::string>();
      fix(s);
      j = s;
    } else if (j.is_structured()) {
      for (auto& v : j) walk(v);
    }
  };
  walk(r.extra);
  if (r.error) fix(*r.error);
}

}  // namespace coldstart::cli
