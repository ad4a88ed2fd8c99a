// coldstart: the input files of a `coldstart replay`, frozen when the run starts. See
// run_inputs.h. POSIX only (no std::filesystem: see harness/common/paths.h).
#include "harness/cli/run_inputs.h"

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// A YAML double-quoted scalar holding `s` exactly (paths may hold ": ", "#", quotes).
std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
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

RunInputs::RunInputs(const std::vector<Scenario>& scenarios, const std::vector<std::string>& sets,
                     const Loader& load) {
  dir_ = paths::make_temp_dir("coldstart-inputs-");
  const std::string root = paths::join(dir_, "root");
  auto copy_of = [&](const std::string& path) { return root + absolute_path(path); };
  try {
    for (const Scenario& s : scenarios) {
      PerScenario ps;
      // The scenario: the text that was validated, byte for byte.
      const std::string& text = s.source.text;
      ps.path = copy_of(s.file);
      write_copy(ps.path, text);
      ps.inputs.push_back({"scenario", s.file, static_cast<long long>(text.size()),
                           checksum::fnv1a64_hex(text), -1});

      std::vector<Scenario> variants;
      for (const Variant& v : s.variants) variants.push_back(apply_variant(s, v));
      std::set<std::string> done;
      auto add_config = [&](const std::string& file) {
        if (file.empty() || !done.insert(file).second) return;
        const std::string data = read_bytes(file);
        write_copy(copy_of(file), data);
        ps.inputs.push_back({"config", file, static_cast<long long>(data.size()),
                             checksum::fnv1a64_hex(data), -1});
      };
      // Every declared directory key (engine_keys.h) is an input folder; its role is the key.
      std::vector<std::string> dir_keys;
      for (const EngineKeySpec& k : declared_engine_keys())
        if (k.type == EngineKeyType::kDirectory) dir_keys.push_back(k.name);
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
      add_config(s.model.config_file);
      for (const std::string& key : dir_keys) add_dir(key, s.engine.string_key(key));
      for (const Scenario& v : variants) {
        add_config(v.model.config_file);
        for (const std::string& key : dir_keys) add_dir(key, v.engine.string_key(key));
      }

      // Paths the child must not resolve to the user's files: named outright, after the run's
      // own --set overrides (a matrix axis over them still applies last, relative to the copy).
      auto all_variants_use = [&](auto field, const std::string& value) {
        return std::all_of(variants.begin(), variants.end(),
                           [&](const Scenario& v) { return field(v) == value; });
      };
      if (!s.model.config_file.empty() &&
          all_variants_use([](const Scenario& v) { return v.model.config_file; },
                           s.model.config_file)) {
        ps.sets.push_back("model.config=" + yaml_quoted(copy_of(s.model.config_file)));
      }
      for (const std::string& key : dir_keys) {
        const std::string& dir = s.engine.string_key(key);
        if (!dir.empty() &&
            all_variants_use([&](const Scenario& v) { return v.engine.string_key(key); }, dir)) {
          ps.sets.push_back("engine." + key + "=" + yaml_quoted(copy_of(dir)));
        }
      }

      // The copies must be what was validated: validate them again and compare the merged model
      // config of every variant (the scenario text is the same by construction; config.json was
      // read again to be copied, and may have been edited in between).
      std::vector<std::string> child_sets = sets;
      child_sets.insert(child_sets.end(), ps.sets.begin(), ps.sets.end());
      const std::string changed = fmt::format(
          "{}: changed while the run was starting (a file it reads, e.g. its config.json {}, was "
          "edited after it was validated); run again",
          s.file, s.model.config_file);
      bool same = false;
      try {
        const Scenario copy = load(ps.path, child_sets);
        same = copy.variants.size() == s.variants.size() && copy.model.raw == s.model.raw;
        for (size_t k = 0; same && k < copy.variants.size(); ++k) {
          same = apply_variant(copy, copy.variants[k]).model.raw == variants[k].model.raw;
        }
      } catch (const InputError& e) {
        throw InputError(changed + ": " + e.what());
      }
      if (!same) throw InputError(changed);
      per_scenario_.push_back(std::move(ps));
    }
  } catch (...) {
    paths::remove_tree(dir_);
    throw;
  }
}

RunInputs::~RunInputs() { paths::remove_tree(dir_); }

}  // namespace coldstart::cli
