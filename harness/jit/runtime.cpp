// The JIT runtime: in-memory cache with an allocation-free hit path, on-disk cache written
// atomically, NVRTC compiles on a miss, module loading and launches through the driver API.
//
// One file over 600 lines on purpose: it is the private Impl of JitRuntime, whose hit path, the
// in-flight table and the disk cache share Impl's locks and its state; splitting it would put
// Impl in a header and its lock order across files. Keys are compile_key.cpp, NVRTC compiler.cpp.
//
// Hit path: ensure() hashes (kernel source pointer, kernel name, constexpr names/values, each
// argument's kind/dtype/specialization) into 64 bits without building any string, finds the entry
// under a shared lock and verifies it field by field (so a hash collision can never return the
// wrong kernel). Only a miss builds the CompileKey text; the miss then looks the key up among the
// compiled keys (another call site may have compiled the same key), then in the on-disk cache,
// and only then compiles with NVRTC.
//
// Processes sharing a cache directory: a disk miss takes a per-entry advisory lock (flock on
// `<digest>.cubin.lock`) before compiling, then looks at the disk again, so a key several
// processes miss at once is compiled by one and loaded by the others. The lock is released when
// the entry is written, or by the kernel when its holder dies; a holder stuck beyond
// JitOptions::disk_lock_timeout_s is not waited for (the key is compiled anyway, with a warning).
// The lock file is removed by its holder, so a cache directory holds only entries at rest.
//
// Lazy loading: with CUDA_MODULE_LOADING=LAZY (the default since CUDA 12.2) cuModuleLoadData
// defers uploading a function's code to its first launch. The runtime calls cuFuncLoad (driver
// 12.4+) right after cuModuleGetFunction, so that cost lands in the compile record (compile_ms)
// when the kernel is compiled or loaded, not silently in the first launch afterwards.
//
// Why one file of ~740 lines: the hit path, the miss path, the disk cache and module loading share
// one locking protocol (the shared lock, the per-key compile slots); split apart, each part would
// have to restate it. The compiler (compiler.cpp), driver (driver.cpp), keys (compile_key.cpp)
// and monitor (monitor.cpp) are already their own files.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "harness/jit/api_timer.h"
#include "harness/jit/compiled_kernel.h"
#include "harness/jit/driver.h"
#include "harness/common/paths.h"
#include "harness/jit/jit.h"
#include "harness/jit/jit_internal.h"
#include "harness/jit/select.h"

namespace coldstart::jit {
namespace {

using detail::ms_since;

constexpr const char* kDiskMagic = "coldstart-cubin/2 ";
constexpr const char* kMemoMagic = "coldstart-memo/2 ";
constexpr size_t kMaxInlineArgs = 32;
constexpr unsigned kDefaultMaxDynamicSmem = 48 * 1024;

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * detail::kFnvPrime;
}

// Per argument: kind (3 bits), dtype (4 bits), specialization code (2 bits).
inline uint16_t arg_descriptor(const KernelArg& a) {
  const unsigned spec = detail::spec_code(a);
  const unsigned spec2 = spec == 1 ? 1 : (spec == 16 ? 2 : 0);
  return static_cast<uint16_t>((static_cast<unsigned>(a.kind) & 7u) |
                               ((static_cast<unsigned>(a.dtype) & 15u) << 3) | (spec2 << 7));
}

uint64_t fast_hash(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                   const std::vector<KernelArg>& args) {
  uint64_t h = mix(detail::kFnvOffset, reinterpret_cast<uintptr_t>(kernel.source));
  h = detail::fnv1a(kernel.name.data(), kernel.name.size(), h);
  h = mix(h, constexprs.size());
  for (const Constexpr& c : constexprs) {
    h = detail::fnv1a(c.name.data(), c.name.size(), h);
    h = mix(h, static_cast<uint64_t>(c.value));
  }
  h = mix(h, args.size());
  for (const KernelArg& a : args) h = mix(h, arg_descriptor(a));
  return h;
}

bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() >= 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
         bytes[3] == 'F';
}

std::string errno_text() { return std::strerror(errno); }

// An exclusive advisory lock on one cache entry, between processes: flock(2) on `path` (the
// entry's name plus ".lock"). Not held when the file cannot be made (a read-only directory: the
// process then compiles as before) or when another holder kept it beyond the timeout. The holder
// unlinks the file before unlocking; a waiter that then locks the unlinked file notices (its
// inode is no longer the one at `path`) and tries again with the current file.
class EntryLock {
 public:
  EntryLock(std::string path, double timeout_s) : path_(std::move(path)) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, timeout_s)));
    int backoff_us = 500;
    for (;;) {
      if (fd_ < 0) fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) return;  // cannot lock here: compile without
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        struct stat mine {}, now {};
        if (::fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &now) == 0 &&
            mine.st_dev == now.st_dev && mine.st_ino == now.st_ino) {
          held_ = true;
          break;
        }
        ::close(fd_);  // the previous holder removed this one: take the current file
        fd_ = -1;
        continue;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
      waited_ = true;
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out_ = true;
        ::close(fd_);
        fd_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
      backoff_us = std::min(backoff_us * 2, 20000);
    }
    waited_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ~EntryLock() {
    if (fd_ < 0) return;
    if (held_) ::unlink(path_.c_str());
    ::close(fd_);  // releases the lock
  }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

  bool waited() const { return waited_; }        ///< another process held it when we came
  bool timed_out() const { return timed_out_; }  ///< ... for longer than the timeout
  double waited_s() const { return waited_s_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool held_ = false, waited_ = false, timed_out_ = false;
  double waited_s_ = 0;
};

}  // namespace

struct JitRuntime::Impl {
  std::mutex capture_mu;
  std::string capturing;  // the graph being captured (set_capturing), "" when none
  // One key being compiled by some thread; others asking for it wait on `cv`.
  struct InFlight {
    bool done = false;
    CompiledKernel* kernel = nullptr;
    std::exception_ptr error;
    std::condition_variable cv;
  };

  // What the hit path compares; one per distinct (call-site-visible) launch configuration.
  struct FastEntry {
    const char* source = nullptr;
    std::string name;
    std::string entry;
    size_t n_arg_names = 0;
    size_t n_do_not_specialize = 0;
    std::vector<Constexpr> constexprs;
    std::vector<uint16_t> arg_desc;
    CompiledKernel* kernel = nullptr;

    bool matches(const KernelSource& k, const std::vector<Constexpr>& cx,
                 const std::vector<KernelArg>& args) const {
      if (source != k.source || n_arg_names != k.arg_names.size() ||
          n_do_not_specialize != k.do_not_specialize.size() || cx.size() != constexprs.size() ||
          args.size() != arg_desc.size() || name != k.name || entry != k.entry) {
        return false;
      }
      for (size_t i = 0; i < cx.size(); ++i) {
        if (cx[i].value != constexprs[i].value || cx[i].name != constexprs[i].name) return false;
      }
      for (size_t i = 0; i < args.size(); ++i) {
        if (arg_descriptor(args[i]) != arg_desc[i]) return false;
      }
      return true;
    }
  };

  JitOptions options;
  const JitRuntime* owner = nullptr;  // for the SelectionScope lookup (select.h)
  std::string arch;
  std::string compiler;
  std::string cache_dir;
  bool owns_cache_dir = false;
  std::atomic<bool> disk_read_only{false};  // a write failed: stop trying (warned once)
  JitMonitor monitor;

  mutable std::shared_mutex map_mu;  // guards `fast` and `by_key` (writers also hold compile_mu)
  std::mutex compile_mu;             // guards `inflight` and insertions into `by_key`
  std::unordered_map<uint64_t, std::unique_ptr<FastEntry>> fast;
  std::unordered_map<std::string, std::unique_ptr<CompiledKernel>> by_key;
  std::unordered_map<std::string, std::shared_ptr<InFlight>> inflight;
  std::mutex autotuner_mu;  // guards making `autotuner`
  std::unique_ptr<Autotuner> autotuner;

  // Key-only mode (JitRuntime::set_key_only). The placeholders of keys recorded while it was on
  // live in their own map, never in `by_key` / `fast`, so a later ensure() outside the mode
  // compiles them as usual; `reached` collects every key ensure() saw while on.
  std::atomic<bool> key_only{false};
  std::mutex key_only_mu;  // guards `placeholders` and `reached`
  std::unordered_map<std::string, std::unique_ptr<CompiledKernel>> placeholders;
  std::set<std::string> reached;
  // What compile_key_only_misses() needs to compile each placeholder recorded as "key", in the
  // order they were first reached.
  struct PendingLaunch {
    KernelSource kernel;
    std::vector<Constexpr> constexprs;
    std::vector<KernelArg> args;
  };
  std::vector<PendingLaunch> pending;

  explicit Impl(JitOptions opts) : options(std::move(opts)), monitor(options.monitor) {}

  // A record carrying the launch config's provenance: the innermost SelectionScope of this
  // runtime on the calling thread, if any.
  CompileRecord provenance_record() const {
    CompileRecord rec;
    if (const Selection* sel = current_selection(*owner)) {
      rec.selector = sel->selector;
      rec.tuning_key = sel->tuning_key;
      rec.config = sel->config.name;
      rec.num_candidates = static_cast<int>(sel->candidates.size());
    }
    return rec;
  }

  void note_reached(const std::string& key_text) {
    std::lock_guard<std::mutex> lock(key_only_mu);
    reached.insert(key_text);
  }

  // ensure() under key-only mode for a launch the hit path did not find: the held kernel, else
  // the key's placeholder, recorded with the monitor the first time (no disk, no NVRTC).
  const CompiledKernel& key_only_miss(const KernelSource& kernel,
                                      const std::vector<Constexpr>& constexprs,
                                      const std::vector<KernelArg>& args) {
    CompileKey key = make_compile_key(kernel, constexprs, args, kernel_arch(kernel, arch), compiler);
    std::string key_text = key.str();
    note_reached(key_text);
    {
      std::shared_lock<std::shared_mutex> lock(map_mu);
      auto held = by_key.find(key_text);
      if (held != by_key.end()) return *held->second;
    }
    std::lock_guard<std::mutex> lock(key_only_mu);
    auto& slot = placeholders[key_text];
    if (slot) return *slot;
    CompileRecord rec = provenance_record();
    rec.kernel = kernel.name;
    rec.key = key_text;
    // A key the on-disk cache holds would be loaded, not compiled: recorded as a load.
    std::vector<char> cubin;
    const bool on_disk =
        read_disk(cache_dir + "/" + key.digest() + ".cubin", key_text, kernel.name, &cubin) ==
        EntryRead::kOk;
    rec.source = on_disk ? "disk" : "key";
    if (!on_disk) pending.push_back({kernel, constexprs, args});
    slot = std::make_unique<CompiledKernel>();
    slot->key = std::move(key);
    slot->key_text = std::move(key_text);
    monitor.record(std::move(rec));
    return *slot;
  }

  // One entry file (a kernel-cache `<digest>.cubin` or a compile-memo `<digest>.memo`):
  //   line 1: magic + the key text (a file for another key under the digest is a miss),
  //   line 2: "<cubin bytes> <fnv1a-64 of the cubin, hex> <compile_ms or ->",
  //   then the cubin. A short file, a wrong size or checksum, or a non-ELF body is damaged:
  // never loaded, reported by the caller, and replaced by the fresh compile.
  enum class EntryRead { kMissing, kForeign, kDamaged, kOk };
  /// The largest entry read: cubins of the harness's kernels are at most a few MiB.
  static constexpr size_t kMaxEntryBytes = 256u << 20;

  static EntryRead read_entry(const std::string& path, const std::string& magic,
                              const std::string& key_text, std::vector<char>* cubin,
                              std::optional<double>* ms, std::string* why) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return EntryRead::kMissing;
    // Never followed: a link planted in a shared cache could make the run read (or, replacing
    // it, write) any file. Never read past kMaxEntryBytes: a sparse 20 GB entry was read whole.
    if (S_ISLNK(st.st_mode)) {
      *why = "is a symbolic link";
      return EntryRead::kDamaged;
    }
    std::string data;
    if (const std::string err = paths::read_input_file(path, kMaxEntryBytes, data); !err.empty()) {
      *why = err;
      return EntryRead::kDamaged;
    }
    const size_t nl1 = data.find('\n');
    if (nl1 == std::string::npos || data.compare(0, nl1, magic + key_text) != 0) return EntryRead::kForeign;
    const size_t nl2 = data.find('\n', nl1 + 1);
    if (nl2 == std::string::npos) {
      *why = "truncated before its checksum line";
      return EntryRead::kDamaged;
    }
    const std::string meta = data.substr(nl1 + 1, nl2 - nl1 - 1);
    std::vector<char> bytes(data.begin() + static_cast<std::ptrdiff_t>(nl2 + 1), data.end());
    unsigned long long size = 0;
    char sum[17] = {0}, ms_text[64] = {0};
    if (std::sscanf(meta.c_str(), "%llu %16s %63s", &size, sum, ms_text) != 3) {
      *why = "malformed checksum line";
      return EntryRead::kDamaged;
    }
    if (size != bytes.size()) {
      *why = fmt::format("{} cubin bytes, the entry says {}", bytes.size(), size);
      return EntryRead::kDamaged;
    }
    if (detail::hex64(detail::fnv1a(bytes.data(), bytes.size())) != sum || !is_elf(bytes)) {
      *why = "checksum mismatch";
      return EntryRead::kDamaged;
    }
    if (std::string(ms_text) != "-") {
      char* end = nullptr;
      const double v = std::strtod(ms_text, &end);
      if (end == ms_text || *end != '\0' || !(v >= 0)) {
        *why = "malformed compile time";
        return EntryRead::kDamaged;
      }
      *ms = v;
    }
    *cubin = std::move(bytes);
    return EntryRead::kOk;
  }

  static std::string encode_entry(const std::string& magic, const std::string& key_text,
                                  const std::vector<char>& cubin, std::optional<double> ms) {
    std::string data = magic + key_text + "\n" +
                       fmt::format("{} {} {}\n", cubin.size(),
                                   detail::hex64(detail::fnv1a(cubin.data(), cubin.size())),
                                   ms ? fmt::format("{:.6f}", *ms) : std::string("-"));
    data.append(cubin.data(), cubin.size());
    return data;
  }

  // Reads `<digest>.cubin`: kOk when it holds this key's intact cubin. A damaged entry is a
  // warning (JitMonitor::warn) and a miss; it is recompiled and replaced.
  EntryRead read_disk(const std::string& path, const std::string& key_text,
                      const std::string& kernel, std::vector<char>* cubin) {
    std::optional<double> unused;
    std::string why;
    const EntryRead r = read_entry(path, kDiskMagic, key_text, cubin, &unused, &why);
    if (r == EntryRead::kDamaged) {
      monitor.warn(fmt::format("kernel cache entry {} ({}) is damaged: {}; recompiled and "
                               "replaced",
                               path, kernel, why));
    }
    return r;
  }

  // Writes `<digest>.cubin` atomically (a temporary file in the same directory, then rename(2)),
  // so a concurrent reader sees either no file or a complete one. A cache directory that cannot
  // be written (read-only, full) is a warning, once: compiling goes on in memory.
  void write_disk(const std::string& path, const std::string& key_text,
                  const std::vector<char>& cubin) {
    if (disk_read_only) return;
    try {
      paths::write_file_atomic(path, encode_entry(kDiskMagic, key_text, cubin, std::nullopt));
    } catch (const Error& e) {
      disk_read_only = true;
      monitor.warn(fmt::format("kernel cache directory {} cannot be written ({}): new compiles "
                               "are kept in memory only",
                               cache_dir, e.what()));
    }
  }

  // The run's compile memo (JitOptions::compile_memo_dir), compile-only mode only:
  // `<digest>.memo` holds the key, the compile_ms measured when it was compiled, and the cubin.
  std::string memo_path(const CompileKey& key) const {
    if (options.launch || options.compile_memo_dir.empty()) return "";
    return options.compile_memo_dir + "/" + key.digest() + ".memo";
  }

  // A damaged or foreign memo entry is a miss: the key is compiled for real.
  bool read_memo(const std::string& path, const std::string& key_text, double* ms,
                 std::vector<char>* cubin) {
    if (path.empty()) return false;
    std::optional<double> stored;
    std::string why;
    if (read_entry(path, kMemoMagic, key_text, cubin, &stored, &why) != EntryRead::kOk || !stored)
      return false;
    *ms = *stored;
    return true;
  }

  // Best effort: a memo that cannot be written only costs the next strategy a real compile.
  void write_memo(const std::string& path, const std::string& key_text, double ms,
                  const std::vector<char>& cubin) {
    if (path.empty()) return;
    try {
      paths::write_file_atomic(path, encode_entry(kMemoMagic, key_text, cubin, ms));
    } catch (const Error&) {
    }
  }

  // Loads the cubin and resolves the entry (and, where the driver can, uploads its code now).
  void load_module(CompiledKernel& ck, const KernelSource& kernel) {
    const DriverApi& d = driver();
    ensure_context();
    CUmodule module = nullptr;
    CS_CU_CHECK(d.cuModuleLoadData(&module, ck.cubin.data()));
    try {
      CUfunction fn = nullptr;
      CS_CU_CHECK(d.cuModuleGetFunction(&fn, module, kernel.entry.c_str()));
      if (d.cuFuncLoad != nullptr) CS_CU_CHECK(d.cuFuncLoad(fn));
      ck.function = fn;
      ck.module = module;
    } catch (...) {
      d.cuModuleUnload(module);  // cleanup only; the first error is the one reported
      throw;
    }
  }

  // The miss path, under compile_mu: disk cache, else NVRTC (after asking the monitor), then the
  // module load when launching; records the compile.
  std::unique_ptr<CompiledKernel> load_or_compile(const KernelSource& kernel,
                                                  const std::vector<Constexpr>& constexprs,
                                                  const std::vector<KernelArg>& args,
                                                  CompileKey key, std::string key_text) {
    {
      std::lock_guard<std::mutex> lock(capture_mu);
      if (!capturing.empty()) {
        throw CaptureUnsupportedError(fmt::format(
            "Triton Error [CUDA]: operation not permitted when stream is capturing: {} (compile "
            "key {}) was first needed while capturing the {}; its module load "
            "(cuModuleLoadData) is refused during stream capture "
            "(cudaErrorStreamCaptureUnsupported)",
            kernel.name, key.digest(), capturing));
      }
    }
    // The JIT monitor times this whole load or compile; the API timer must not count it again.
    const ApiTimeExcluded timed_by_monitor;
    auto ck = std::make_unique<CompiledKernel>();
    const std::string path = cache_dir + "/" + key.digest() + ".cubin";
    CompileRecord rec = provenance_record();
    const auto t0 = std::chrono::steady_clock::now();
    double ms = 0;
    std::string source;
    // A miss locks the entry, from a second look at the disk until the entry is written (see
    // the top of the file): the second look finds what another process wrote meanwhile.
    const EntryRead first = read_disk(path, key_text, kernel.name, &ck->cubin);
    bool found = first == EntryRead::kOk;
    std::optional<EntryLock> lock;
    if (!found && !disk_read_only) {
      lock.emplace(path + ".lock", options.disk_lock_timeout_s);
      if (lock->timed_out()) {
        monitor.warn(fmt::format("kernel cache entry {} ({}): another process held its lock for "
                                 "{:.0f} s; compiled here too",
                                 path, kernel.name, lock->waited_s()));
      } else if (lock->waited() || first == EntryRead::kMissing) {
        found = read_disk(path, key_text, kernel.name, &ck->cubin) == EntryRead::kOk;
      }
    }
    if (found) {
      source = "disk";  // ms includes any wait for the process that compiled it
      ms = ms_since(t0);
    } else {
      monitor.before_compile(key, rec);  // may throw HotPathCompileError: nothing compiled
      const std::string memo = memo_path(key);
      if (read_memo(memo, key_text, &ms, &ck->cubin)) {
        rec.reused = true;
      } else {
        const auto t1 = std::chrono::steady_clock::now();
        ck->cubin = detail::compile_cubin(kernel, constexprs, args, key.arch, key_text);
        ms = ms_since(t1);
        write_memo(memo, key_text, ms, ck->cubin);
      }
      source = "nvrtc";
      write_disk(path, key_text, ck->cubin);
    }
    lock.reset();  // the entry is on disk (or cannot be written): others may load it now
    if (options.launch) {
      const auto t2 = std::chrono::steady_clock::now();
      load_module(*ck, kernel);
      ms += ms_since(t2);
    }
    ck->key = std::move(key);
    ck->key_text = std::move(key_text);
    rec.kernel = kernel.name;
    rec.key = ck->key_text;
    rec.compile_ms = ms;
    rec.source = source;
    monitor.record(std::move(rec));
    return ck;
  }

  // The miss path. Distinct keys compile concurrently (a warmer's thread pool); a key already
  // being compiled is waited for, never compiled twice. compile_mu guards `by_key` insertions and
  // `inflight` only, not the compiles.
  const CompiledKernel& miss(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                             const std::vector<KernelArg>& args, uint64_t h) {
    {
      std::shared_lock<std::shared_mutex> lock(map_mu);
      auto it = fast.find(h);
      if (it != fast.end() && it->second->matches(kernel, constexprs, args)) {
        return *it->second->kernel;  // another thread got here first
      }
    }
    // The arch this kernel compiles for here (its "a" target when arch-specific); throws
    // UnsupportedArchError when the kernel does not exist for the target.
    const std::string karch = kernel_arch(kernel, arch);
    CompileKey key = make_compile_key(kernel, constexprs, args, karch, compiler);
    std::string key_text = key.str();
    CompiledKernel* ck = nullptr;
    std::shared_ptr<InFlight> flight;
    bool mine = false;
    {
      std::unique_lock<std::mutex> lock(compile_mu);
      auto found = by_key.find(key_text);
      if (found != by_key.end()) {
        ck = found->second.get();
      } else {
        auto f = inflight.find(key_text);
        if (f == inflight.end()) {
          flight = std::make_shared<InFlight>();
          inflight.emplace(key_text, flight);
          mine = true;
        } else {
          flight = f->second;
          flight->cv.wait(lock, [&] { return flight->done; });
          if (flight->error) std::rethrow_exception(flight->error);
          ck = flight->kernel;
        }
      }
    }
    if (mine) {
      std::unique_ptr<CompiledKernel> made;
      try {
        made = load_or_compile(kernel, constexprs, args, std::move(key), key_text);
      } catch (...) {
        std::lock_guard<std::mutex> lock(compile_mu);
        flight->error = std::current_exception();
        flight->done = true;
        inflight.erase(key_text);
        flight->cv.notify_all();
        throw;
      }
      ck = made.get();
      std::lock_guard<std::mutex> lock(compile_mu);
      {
        std::unique_lock<std::shared_mutex> map_lock(map_mu);
        by_key.emplace(key_text, std::move(made));
      }
      flight->kernel = ck;
      flight->done = true;
      inflight.erase(key_text);
      flight->cv.notify_all();
    }
    auto entry = std::make_unique<FastEntry>();
    entry->source = kernel.source;
    entry->name = kernel.name;
    entry->entry = kernel.entry;
    entry->n_arg_names = kernel.arg_names.size();
    entry->n_do_not_specialize = kernel.do_not_specialize.size();
    entry->constexprs = constexprs;
    entry->arg_desc.reserve(args.size());
    for (const KernelArg& a : args) entry->arg_desc.push_back(arg_descriptor(a));
    entry->kernel = ck;
    std::unique_lock<std::shared_mutex> lock(map_mu);
    fast[h] = std::move(entry);  // a (vanishingly rare) 64-bit collision just replaces the entry
    return *ck;
  }
};

JitRuntime::JitRuntime(JitOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  s.owner = this;
  s.compiler = "nvrtc-" + nvrtc_version();
  if (s.options.launch) {
    if (!driver_available()) {
      throw CudaError("JitRuntime: launching kernels needs a CUDA driver and GPU: " +
                      driver_unavailable_reason() + " (use compile-only mode, launch = false)");
    }
    ensure_context();
  }
  if (s.options.arch.empty()) {
    if (!driver_available()) {
      throw CudaError("JitRuntime: no arch given and no GPU to take it from (" +
                      driver_unavailable_reason() + "); pass an arch such as sm_90");
    }
    s.arch = current_device_arch();
  } else {
    s.arch = s.options.arch;
  }
  if (s.options.cache_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/coldstart-jit-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw Error(fmt::format("JitRuntime: mkdtemp({}) failed: {}", tmpl, errno_text()));
    }
    s.cache_dir = tmpl;
    s.owns_cache_dir = true;
  } else {
    s.cache_dir = s.options.cache_dir;
    paths::make_dirs(s.cache_dir);  // throws Error naming the directory
    if (!paths::is_directory(s.cache_dir)) {
      throw Error(fmt::format("JitRuntime: cache directory {} is not a directory", s.cache_dir));
    }
  }
}

JitRuntime::~JitRuntime() {
  Impl& s = *impl_;
  if (s.options.launch && driver_available()) {
    try {
      ensure_context();
      for (auto& [text, ck] : s.by_key) {
        if (ck->module != nullptr) driver().cuModuleUnload(ck->module);  // teardown: best effort
      }
    } catch (...) {
      // A destructor cannot report; a sticky context error was already raised where it happened.
    }
  }
  if (s.owns_cache_dir) {
    paths::remove_tree(s.cache_dir);  // best effort
  }
}

const CompiledKernel& JitRuntime::ensure(const KernelSource& kernel,
                                         const std::vector<Constexpr>& constexprs,
                                         const std::vector<KernelArg>& args) {
  const uint64_t h = fast_hash(kernel, constexprs, args);
  {
    std::shared_lock<std::shared_mutex> lock(impl_->map_mu);
    auto it = impl_->fast.find(h);
    if (it != impl_->fast.end() && it->second->matches(kernel, constexprs, args)) {
      if (impl_->key_only.load(std::memory_order_relaxed))
        impl_->note_reached(it->second->kernel->key_text);
      return *it->second->kernel;
    }
  }
  if (impl_->key_only.load(std::memory_order_relaxed))
    return impl_->key_only_miss(kernel, constexprs, args);
  return impl_->miss(kernel, constexprs, args, h);
}

void JitRuntime::set_key_only(bool on) {
  if (on && impl_->options.launch) {
    throw Error("JitRuntime::set_key_only: key-only mode needs a compile-only runtime (launch = "
                "false): a launching runtime would run kernels it never compiled");
  }
  impl_->key_only.store(on);
}

bool JitRuntime::key_only() const { return impl_->key_only.load(); }

std::vector<std::string> JitRuntime::reached_keys() const {
  std::lock_guard<std::mutex> lock(impl_->key_only_mu);
  return {impl_->reached.begin(), impl_->reached.end()};
}

size_t JitRuntime::reached_key_count() const {
  std::lock_guard<std::mutex> lock(impl_->key_only_mu);
  return impl_->reached.size();
}

void JitRuntime::clear_reached_keys() {
  std::lock_guard<std::mutex> lock(impl_->key_only_mu);
  impl_->reached.clear();
}

size_t JitRuntime::compile_key_only_misses() {
  if (impl_->key_only.load()) {
    throw Error("JitRuntime::compile_key_only_misses: key-only mode is still on (turn it off "
                "first: the compiles would be recorded as keys again)");
  }
  std::vector<Impl::PendingLaunch> todo;
  {
    std::lock_guard<std::mutex> lock(impl_->key_only_mu);
    todo.swap(impl_->pending);
  }
  for (const Impl::PendingLaunch& p : todo) ensure(p.kernel, p.constexprs, p.args);
  return todo.size();
}

namespace {

#if CUDA_VERSION >= 12000
CUtensorMapDataType tma_dtype(DType t) {
  switch (dtype_bytes(t)) {
    case 1: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // FP8 / int8 bytes move as bytes
    case 2: return t == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    default: return t == DType::kF32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_INT32;
  }
}

CUtensorMapSwizzle tma_swizzle(uint32_t bytes) {
  switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

/// Encodes `spec` into `out` (cuTensorMapEncodeTiled, optional symbol: CUDA 12.0+ drivers).
void encode_tensor_map(const TensorMapSpec& spec, CUtensorMap* out) {
  const DriverApi& d = driver();
  if (d.cuTensorMapEncodeTiled == nullptr) {
    throw CudaError("this CUDA driver lacks cuTensorMapEncodeTiled (needs 12.0+): TMA kernels cannot run");
  }
  cuuint64_t dims[5];
  cuuint64_t strides[4];
  cuuint32_t box[5];
  cuuint32_t elem_strides[5];
  for (uint32_t i = 0; i < spec.rank; ++i) {
    dims[i] = spec.dims[i];
    box[i] = spec.box[i];
    elem_strides[i] = 1;
    if (i + 1 < spec.rank) strides[i] = spec.strides[i];
  }
  CS_CU_CHECK(d.cuTensorMapEncodeTiled(
      out, tma_dtype(spec.dtype), spec.rank, reinterpret_cast<void*>(spec.address), dims, strides,
      box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, tma_swizzle(spec.swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}
#else
// Built against a CUDA toolkit older than 12.0: no CUtensorMap / cuLaunchKernelEx in cuda.h.
struct CUtensorMap {
  alignas(64) unsigned long long opaque[16];
};
[[noreturn]] void encode_tensor_map(const TensorMapSpec&, CUtensorMap*) {
  throw CudaError("coldstart was built against a CUDA toolkit older than 12.0: TMA kernels cannot run");
}
#endif

void check_cluster(const KernelSource& kernel, const LaunchDims& dims) {
  for (int i = 0; i < 3; ++i) {
    if (dims.cluster[i] == 0 || dims.grid[i] % dims.cluster[i] != 0) {
      throw InputError(fmt::format("kernel {}: grid {}x{}x{} is not a multiple of cluster {}x{}x{}",
                                   kernel.name, dims.grid[0], dims.grid[1], dims.grid[2],
                                   dims.cluster[0], dims.cluster[1], dims.cluster[2]));
    }
  }
}

}  // namespace

void JitRuntime::launch(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                        const std::vector<KernelArg>& args, const LaunchDims& dims, void* stream) {
  const HostFrame launch_path(HostPart::kJitLaunch);  // a compile inside is its own frame
  check_cluster(kernel, dims);
  const CompiledKernel& k = ensure(kernel, constexprs, args);
  if (!impl_->options.launch) return;
  const DriverApi& d = driver();
  ensure_context();

  // Kernel parameters point into `args` (pointers, i64, u64, f32), into a local int32 copy, or
  // into an encoded tensor map.
  void* inline_params[kMaxInlineArgs];
  int32_t inline_i32[kMaxInlineArgs];
  std::vector<void*> heap_params;
  std::vector<int32_t> heap_i32;
  std::vector<CUtensorMap> tmaps;
  void** params = inline_params;
  int32_t* i32 = inline_i32;
  if (args.size() > kMaxInlineArgs) {
    heap_params.resize(args.size());
    heap_i32.resize(args.size());
    params = heap_params.data();
    i32 = heap_i32.data();
  }
  size_t n_tmaps = 0;
  for (const KernelArg& a : args) n_tmaps += a.kind == KernelArg::Kind::kTensorMap;
  tmaps.resize(n_tmaps);  // no reallocation below: params keep pointing into it
  n_tmaps = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    switch (a.kind) {
      case KernelArg::Kind::kPointer:
      case KernelArg::Kind::kU64: params[i] = const_cast<uint64_t*>(&a.address); break;
      case KernelArg::Kind::kI64: params[i] = const_cast<int64_t*>(&a.value); break;
      case KernelArg::Kind::kF32: params[i] = const_cast<float*>(&a.fvalue); break;
      case KernelArg::Kind::kI32:
        i32[i] = static_cast<int32_t>(a.value);
        params[i] = &i32[i];
        break;
      case KernelArg::Kind::kTensorMap:
        if (!a.tensor_map) throw Error(fmt::format("kernel {}: tensor-map argument {} has no map", kernel.name, i));
        encode_tensor_map(*a.tensor_map, &tmaps[n_tmaps]);
        params[i] = &tmaps[n_tmaps++];
        break;
    }
  }

  auto& ck = const_cast<CompiledKernel&>(k);
  if (dims.shared_bytes > kDefaultMaxDynamicSmem &&
      dims.shared_bytes > ck.max_dynamic_smem.load(std::memory_order_relaxed)) {
    CS_CU_CHECK(d.cuFuncSetAttribute(ck.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(dims.shared_bytes)));
    ck.max_dynamic_smem.store(dims.shared_bytes, std::memory_order_relaxed);
  }
  if (dims.cluster[0] * dims.cluster[1] * dims.cluster[2] == 1) {
    CS_CU_CHECK(d.cuLaunchKernel(k.function, dims.grid[0], dims.grid[1], dims.grid[2],
                                 dims.block[0], dims.block[1], dims.block[2], dims.shared_bytes,
                                 static_cast<CUstream>(stream), params, nullptr));
    return;
  }
#if CUDA_VERSION < 12000
  throw CudaError(fmt::format("kernel {}: coldstart was built against a CUDA toolkit older than "
                              "12.0: cluster launches cannot run", kernel.name));
#else
  if (d.cuLaunchKernelEx == nullptr) {
    throw CudaError(fmt::format("kernel {}: this CUDA driver lacks cuLaunchKernelEx (needs 12.0+): "
                                "cluster launches cannot run", kernel.name));
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = dims.cluster[0];
  attr.value.clusterDim.y = dims.cluster[1];
  attr.value.clusterDim.z = dims.cluster[2];
  CUlaunchConfig config{};
  config.gridDimX = dims.grid[0];
  config.gridDimY = dims.grid[1];
  config.gridDimZ = dims.grid[2];
  config.blockDimX = dims.block[0];
  config.blockDimY = dims.block[1];
  config.blockDimZ = dims.block[2];
  config.sharedMemBytes = dims.shared_bytes;
  config.hStream = static_cast<CUstream>(stream);
  config.attrs = &attr;
  config.numAttrs = 1;
  CS_CU_CHECK(d.cuLaunchKernelEx(&config, k.function, params, nullptr));
#endif
}

void JitRuntime::set_capturing(const std::string& graph) {
  std::lock_guard<std::mutex> lock(impl_->capture_mu);
  impl_->capturing = graph;
}

std::string JitRuntime::capturing_graph() const {
  std::lock_guard<std::mutex> lock(impl_->capture_mu);
  return impl_->capturing;
}

const std::string& JitRuntime::arch() const { return impl_->arch; }

std::shared_ptr<void> JitRuntime::benchmark_scratch(int64_t bytes, const std::string& what) const {
  return impl_->options.benchmark_scratch ? impl_->options.benchmark_scratch(bytes, what) : nullptr;
}

const std::string& JitRuntime::compiler() const { return impl_->compiler; }

JitMonitor& JitRuntime::monitor() { return impl_->monitor; }

size_t JitRuntime::cached_kernels() const {
  std::shared_lock<std::shared_mutex> lock(impl_->map_mu);
  return impl_->by_key.size();
}

const std::string& JitRuntime::cache_dir() const { return impl_->cache_dir; }

bool JitRuntime::launches() const { return impl_->options.launch; }

Autotuner& JitRuntime::autotuner() {
  std::lock_guard<std::mutex> lock(impl_->autotuner_mu);
  if (!impl_->autotuner) impl_->autotuner = std::make_unique<Autotuner>(*this);
  return *impl_->autotuner;
}

}  // namespace coldstart::jit
