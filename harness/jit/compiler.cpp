// NVRTC: CUDA C++ source -> cubin for one arch. See jit.h (compile_to_cubin).
#include <nvrtc.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/jit/jit_internal.h"
#include "harness/jit/nvrtc_archs.h"

#ifndef COLDSTART_CUDA_INCLUDE_DIR
#define COLDSTART_CUDA_INCLUDE_DIR ""
#endif

namespace coldstart::jit {
namespace {

// CUDA include directories for the kernels' #include <cuda_bf16.h> etc.: the colon-separated
// list in $COLDSTART_CUDA_INCLUDE_DIR when set, else the toolkit's include dirs found at build time.
std::vector<std::string> include_dirs() {
  const char* env = std::getenv("COLDSTART_CUDA_INCLUDE_DIR");
  const std::string list = (env != nullptr && *env != '\0') ? env : COLDSTART_CUDA_INCLUDE_DIR;
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = list.find(':', start);
    const std::string part = list.substr(start, end == std::string::npos ? std::string::npos
                                                                          : end - start);
    if (!part.empty()) dirs.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return dirs;
}

// Accepts "sm_<digits>[a|f]".
bool valid_arch(const std::string& arch) {
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return false;
  size_t i = 3;
  while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
  if (i == 3) return false;
  return i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f'));
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    if (p != nullptr && *p != nullptr) nvrtcDestroyProgram(p);  // cleanup: never masks an error
    delete p;
  }
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  CS_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> nvrtc_supported_archs() {
  int n = 0;
  CS_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&n));
  std::vector<int> archs(static_cast<size_t>(n));
  if (n > 0) CS_NVRTC_CHECK(nvrtcGetSupportedArchs(archs.data()));
  std::vector<std::string> out;
  for (int a : archs) out.push_back("sm_" + std::to_string(a));
  return out;
}

namespace detail {

std::vector<char> compile_cubin(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                                const std::vector<KernelArg>& args, const std::string& arch,
                                const std::string& key_text) {
  if (!valid_arch(arch)) {
    throw Error(fmt::format("compile of {}: bad arch '{}' (expected sm_XX, e.g. sm_90)",
                            kernel.name, arch));
  }
  if (!nvrtc_can_target(arch)) {
    // Said here by name: NVRTC's own text for an arch it lacks is "invalid value for
    // --gpu-architecture (-arch)".
    throw UnsupportedArchError("compile of " + kernel.name + ": " + nvrtc_cannot_target_text(arch));
  }
  if (kernel.source == nullptr) throw Error("compile of " + kernel.name + ": source is null");
  if (args.size() != kernel.arg_names.size()) {
    throw Error(fmt::format("kernel {}: {} launch arguments given, {} declared in arg_names",
                            kernel.name, args.size(), kernel.arg_names.size()));
  }

  std::vector<std::string> options = {"--gpu-architecture=" + arch, "-std=c++17",
                                      "-default-device"};
  // Constexprs and specializations are #define lines in front of the kernel's text, not -D
  // options: a -D macro also rewrites NVRTC's built-in header, and the engines' lower-case
  // constexpr names clash with it (NVRTC 11.8's declares `template <..., int dim>`, which
  // -Ddim=8192 breaks). `#line` keeps the kernel's own line numbers in NVRTC's log.
  std::string defines;
  for (const Constexpr& c : constexprs) defines += fmt::format("#define {} {}\n", c.name, c.value);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_specialized(kernel, i)) continue;
    const uint8_t spec = spec_code(args[i]);
    if (spec != 0) defines += fmt::format("#define CS_SPEC_{} {}\n", kernel.arg_names[i], spec);
  }
  for (const std::string& dir : include_dirs()) options.push_back("-I" + dir);
  std::vector<const char*> option_ptrs;
  option_ptrs.reserve(options.size());
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram(nullptr));
  const std::string file_name = kernel.name + ".cu";
  const std::string text = defines + "#line 1 \"" + file_name + "\"\n" + kernel.source;
  CS_NVRTC_CHECK(nvrtcCreateProgram(prog.get(), text.c_str(), file_name.c_str(), 0, nullptr, nullptr));
  const nvrtcResult rc =
      nvrtcCompileProgram(*prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  if (rc != NVRTC_SUCCESS) {
    std::string opts;
    for (const std::string& o : options) opts += (opts.empty() ? "" : " ") + o;
    throw CudaError(fmt::format(
        "NVRTC compile of kernel {} failed: {} (nvrtcResult {})\n  key: {}\n  options: {}\n"
        "  defines:\n{}NVRTC log:\n{}",
        kernel.name, nvrtcGetErrorString(rc), static_cast<int>(rc), key_text, opts, defines,
        program_log(*prog)));
  }
  size_t cubin_size = 0;
  CS_NVRTC_CHECK(nvrtcGetCUBINSize(*prog, &cubin_size));
  if (cubin_size == 0) {
    throw CudaError(fmt::format("NVRTC produced an empty cubin for kernel {} (key {})",
                                kernel.name, key_text));
  }
  std::vector<char> cubin(cubin_size);
  CS_NVRTC_CHECK(nvrtcGetCUBIN(*prog, cubin.data()));
  return cubin;
}

}  // namespace detail

std::vector<char> compile_to_cubin(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                                   const std::vector<KernelArg>& args, const std::string& arch) {
  const CompileKey key =
      make_compile_key(kernel, constexprs, args, arch, "nvrtc-" + nvrtc_version());
  return detail::compile_cubin(kernel, constexprs, args, arch, key.str());
}

}  // namespace coldstart::jit
