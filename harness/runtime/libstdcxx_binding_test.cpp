// Where a torch-linked program's calls into the C++ standard library bind at run time.
//
// PyTorch wheels since 2.5 export statically linked copies of some libstdc++ functions
// (std::filesystem among them; pytorch/pytorch#133437). When libtorch comes before libstdc++ on a
// program's link line, --as-needed linking takes those functions from libtorch, and the
// program's calls run torch's copy: torch 2.11's std::filesystem::remove_all in libtorch.so jumps
// to address 0, which killed ConfigViewChecks by SIGSEGV in the GPU build only. cs_torch
// (cmake/Dependencies.cmake) names libstdc++ first; this test fails, with the library each
// function came from, if any of them binds to anything but libstdc++: the shared library, or the
// program's own copy where the toolchain links libstdc++ statically (the H200 machine's
// /opt/gcc does: its test programs have no libstdc++.so in DT_NEEDED and define these functions
// in their own .text). It links torch like every replay binary and is meaningful in the GPU build
// (a CPU build's Debian libtorch exports no such copies).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "harness/common/paths.h"

namespace coldstart {
namespace {

namespace fs = std::filesystem;

std::string object_of(const void* addr) {
  Dl_info info{};
  if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

constexpr const char* kOwnCopy = " (the program's own copy)";

// The loaded object whose definition of the function at `fn` this program calls. `fn` is where
// the program's own reference leads: the definition itself, or, in a program that is not
// position independent, the program's PLT entry for an undefined symbol (a symbol-table entry
// with SHN_UNDEF and a non-zero value), whose definition is then the next one in the load order.
// A defined symbol inside the program is its own copy (a statically linked libstdc++).
std::string provider_of(void* fn) {
  static const std::string self = object_of(reinterpret_cast<const void*>(&object_of));
  Dl_info info{};
  void* entry = nullptr;
  if (dladdr1(fn, &info, &entry, RTLD_DL_SYMENT) == 0 || info.dli_fname == nullptr) return "?";
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  std::string obj = info.dli_fname;
  if (obj != self) return obj;
  if (sym != nullptr && sym->st_shndx == SHN_UNDEF && info.dli_sname != nullptr) {
    void* real = dlsym(RTLD_NEXT, info.dli_sname);
    return real != nullptr ? object_of(real) : "?";
  }
  return obj + kOwnCopy;
}

std::vector<std::string> loaded_objects() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name ? info->dlpi_name
                                                                                : "");
        return 0;
      },
      &out);
  return out;
}

template <typename F>
void* address_of(F* fn) {
  return reinterpret_cast<void*>(fn);
}

TEST(LinkOrder, StdFilesystemBindsToLibstdcxxInATorchLinkedProgram) {
  // Load and use libtorch the way the replay does.
  const at::Tensor t = at::arange(4, at::kFloat);
  ASSERT_EQ(t.sum().item<float>(), 6.0f);
  bool torch_loaded = false;
  for (const std::string& o : loaded_objects())
    if (o.find("libtorch") != std::string::npos || o.find("libc10") != std::string::npos)
      torch_loaded = true;
  ASSERT_TRUE(torch_loaded) << "libtorch is not loaded: this test checks nothing";

  using RemoveAllEc = std::uintmax_t(const fs::path&, std::error_code&);
  using RemoveAll = std::uintmax_t(const fs::path&);
  using CreateDirs = bool(const fs::path&, std::error_code&);
  using TempDir = fs::path(std::error_code&);
  using Status = fs::file_status(const fs::path&, std::error_code&);
  using Rename = void(const fs::path&, const fs::path&, std::error_code&);
  const std::vector<std::pair<const char*, void*>> functions = {
      {"std::filesystem::remove_all(path, error_code)", address_of<RemoveAllEc>(&fs::remove_all)},
      {"std::filesystem::remove_all(path)", address_of<RemoveAll>(&fs::remove_all)},
      {"std::filesystem::create_directories(path, error_code)",
       address_of<CreateDirs>(&fs::create_directories)},
      {"std::filesystem::temp_directory_path(error_code)",
       address_of<TempDir>(&fs::temp_directory_path)},
      {"std::filesystem::status(path, error_code)", address_of<Status>(&fs::status)},
      {"std::filesystem::rename(path, path, error_code)", address_of<Rename>(&fs::rename)},
  };
  for (const auto& [name, fn] : functions) {
    const std::string from = provider_of(fn);
    const bool libstdcxx = from.find("libstdc++") != std::string::npos;
    const bool own_copy = from.find(kOwnCopy) != std::string::npos;
    EXPECT_TRUE(libstdcxx || own_copy)
        << name << " binds to " << from << ", not libstdc++ (pytorch/pytorch#133437)";
  }

  // And the call that crashed works.
  const std::string dir = paths::make_temp_dir("cs_link_order_");
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "a" / "b", ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(fs::remove_all(dir, ec), 3u) << ec.message();
  EXPECT_FALSE(paths::exists(dir));
}

}  // namespace
}  // namespace coldstart
