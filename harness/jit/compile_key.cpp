// Compile keys and Triton-style argument specialization. See jit.h.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "harness/jit/jit.h"
#include "harness/jit/jit_internal.h"

namespace coldstart::jit {

namespace detail {

uint64_t source_hash(const char* source) {
  if (source == nullptr) return fnv1a_cstr(source);
  struct Known {
    std::string text;
    uint64_t hash;
  };
  static std::mutex mu;
  static std::unordered_map<const char*, Known> known;
  const size_t n = std::strlen(source);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(source);
    if (it != known.end() && it->second.text.size() == n &&
        std::memcmp(it->second.text.data(), source, n) == 0)
      return it->second.hash;
  }
  const uint64_t h = fnv1a_cstr(source);
  std::lock_guard<std::mutex> lock(mu);
  known[source] = Known{std::string(source, n), h};
  return h;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

bool is_specialized(const KernelSource& kernel, size_t i) {
  if (i >= kernel.arg_names.size()) return true;
  const std::string& name = kernel.arg_names[i];
  return std::find(kernel.do_not_specialize.begin(), kernel.do_not_specialize.end(), name) ==
         kernel.do_not_specialize.end();
}

}  // namespace detail

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kU8: return "u8";
    case DType::kI8: return "i8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kF8E4M3: return "fp8e4nv";
    case DType::kU64: return "u64";
  }
  return "?";
}

size_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3: return 1;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kI64:
    case DType::kU64: return 8;
  }
  return 1;
}

void TensorMapSpec::validate(const std::string& what) const {
  auto bad = [&](const std::string& why) {
    throw InputError(fmt::format("{}: invalid TMA tensor map: {}", what, why));
  };
  const size_t elem = dtype_bytes(dtype);
  if (elem != 1 && elem != 2 && elem != 4) bad(fmt::format("element type {}", dtype_name(dtype)));
  if (rank < 1 || rank > 5) bad(fmt::format("rank {} (1..5)", rank));
  if (address % 16 != 0) bad(fmt::format("address {:#x} is not 16-byte aligned", address));
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128) {
    bad(fmt::format("swizzle {} (0, 32, 64 or 128)", swizzle));
  }
  for (uint32_t d = 0; d < rank; ++d) {
    if (dims[d] < 1 || dims[d] > (uint64_t{1} << 32)) bad(fmt::format("dims[{}] = {}", d, dims[d]));
    if (box[d] < 1 || box[d] > 256) bad(fmt::format("box[{}] = {} (1..256)", d, box[d]));
    if (d >= 1) {
      const uint64_t st = strides[d - 1];
      if (st % 16 != 0 || st == 0 || st >= (uint64_t{1} << 40)) {
        bad(fmt::format("stride of dim {} = {} bytes (a non-zero multiple of 16 below 2^40)", d, st));
      }
    }
  }
  if ((uint64_t{box[0]} * elem) % 16 != 0) {
    bad(fmt::format("box[0] = {} elements is not a multiple of 16 bytes", box[0]));
  }
  if (swizzle != 0 && uint64_t{box[0]} * elem > swizzle) {
    bad(fmt::format("box[0] = {} bytes exceeds the {}-byte swizzle", uint64_t{box[0]} * elem, swizzle));
  }
}

KernelArg KernelArg::pointer(uint64_t address, DType dtype) {
  KernelArg a;
  a.kind = Kind::kPointer;
  a.dtype = dtype;
  a.address = address;
  return a;
}

KernelArg KernelArg::i32(int32_t v) {
  KernelArg a;
  a.kind = Kind::kI32;
  a.dtype = DType::kI32;
  a.value = v;
  return a;
}

KernelArg KernelArg::i64(int64_t v) {
  KernelArg a;
  a.kind = Kind::kI64;
  a.dtype = DType::kI64;
  a.value = v;
  return a;
}

KernelArg KernelArg::u64(uint64_t v) {
  KernelArg a;
  a.kind = Kind::kU64;
  a.dtype = DType::kU64;
  a.address = v;
  return a;
}

KernelArg KernelArg::tmap(const TensorMapSpec& spec, const std::string& what) {
  spec.validate(what);
  KernelArg a;
  a.kind = Kind::kTensorMap;
  a.dtype = spec.dtype;
  a.address = spec.address;
  a.tensor_map = std::make_shared<const TensorMapSpec>(spec);
  return a;
}

KernelArg KernelArg::f32(float v) {
  KernelArg a;
  a.kind = Kind::kF32;
  a.dtype = DType::kF32;
  a.fvalue = v;
  return a;
}

std::string specialization(const KernelArg& arg) {
  switch (detail::spec_code(arg)) {
    case 1: return "1";
    case 16: return "16";
    default: return "";
  }
}

std::string CompileKey::str() const {
  std::string s = kernel;
  s += '[';
  for (size_t i = 0; i < constexprs.size(); ++i) {
    if (i) s += ',';
    s += constexprs[i].name;
    s += '=';
    s += std::to_string(constexprs[i].value);
  }
  s += "](";
  s += signature;
  s += ")@";
  s += arch;
  s += '/';
  s += compiler;
  s += '#';
  s += detail::hex64(source_hash);
  return s;
}

std::string CompileKey::digest() const {
  const std::string text = str();
  return detail::hex64(detail::fnv1a(text.data(), text.size()));
}

namespace {

const char* arg_kind_text(const KernelArg& a) {
  switch (a.kind) {
    case KernelArg::Kind::kPointer: return "a pointer";
    case KernelArg::Kind::kI32: return "an i32";
    case KernelArg::Kind::kI64: return "an i64";
    case KernelArg::Kind::kF32: return "an fp32";
    case KernelArg::Kind::kU64: return "a u64";
    case KernelArg::Kind::kTensorMap: return "a tensor map";
  }
  return "?";
}

bool kind_fits(ParamType::Kind want, KernelArg::Kind got) {
  switch (want) {
    case ParamType::Kind::kUnchecked: return true;
    case ParamType::Kind::kPointer: return got == KernelArg::Kind::kPointer;
    case ParamType::Kind::kI32: return got == KernelArg::Kind::kI32;
    case ParamType::Kind::kI64: return got == KernelArg::Kind::kI64;
    case ParamType::Kind::kU64: return got == KernelArg::Kind::kU64;
    case ParamType::Kind::kF32: return got == KernelArg::Kind::kF32;
    case ParamType::Kind::kTensorMap: return got == KernelArg::Kind::kTensorMap;
  }
  return false;
}

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF8E4M3;
}

}  // namespace

void check_launch_args(const KernelSource& kernel, const std::vector<KernelArg>& args) {
  if (kernel.arg_types.empty()) return;
  for (size_t i = 0; i < args.size() && i < kernel.arg_types.size(); ++i) {
    const ParamType& t = kernel.arg_types[i];
    const KernelArg& a = args[i];
    // The argument's name, looked up only for a message.
    auto name = [&] { return i < kernel.arg_names.size() ? kernel.arg_names[i] : std::string("?"); };
    if (!kind_fits(t.kind, a.kind)) {
      throw Error(fmt::format("kernel {}: argument {} '{}' is declared {} but the launch passes {}",
                              kernel.name, i + 1, name(), t.text, arg_kind_text(a)));
    }
    if (t.kind != ParamType::Kind::kPointer) continue;
    const bool size_ok = t.elem_bytes == 0 || dtype_bytes(a.dtype) == t.elem_bytes;
    const bool class_ok = t.elem == ParamType::Elem::kAny ||
                          (t.elem == ParamType::Elem::kFloat) == is_float_dtype(a.dtype);
    if (!size_ok || !class_ok) {
      throw Error(fmt::format("kernel {}: argument {} '{}' is declared {} but the launch passes a "
                              "pointer to {}",
                              kernel.name, i + 1, name(), t.text, dtype_name(a.dtype)));
    }
  }
}

CompileKey make_compile_key(const KernelSource& kernel, const std::vector<Constexpr>& constexprs,
                            const std::vector<KernelArg>& args, const std::string& arch,
                            const std::string& compiler) {
  if (args.size() != kernel.arg_names.size()) {
    throw Error(fmt::format("kernel {}: {} launch arguments given, {} declared in arg_names",
                            kernel.name, args.size(), kernel.arg_names.size()));
  }
  check_launch_args(kernel, args);
  CompileKey key;
  key.kernel = kernel.name;
  key.source_hash = detail::source_hash(kernel.source);
  key.constexprs = constexprs;
  key.arch = arch;
  key.compiler = compiler;
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    if (i) key.signature += ',';
    switch (a.kind) {
      case KernelArg::Kind::kPointer:
        key.signature += '*';
        key.signature += dtype_name(a.dtype);
        break;
      case KernelArg::Kind::kI32: key.signature += "i32"; break;
      case KernelArg::Kind::kI64: key.signature += "i64"; break;
      case KernelArg::Kind::kF32: key.signature += "fp32"; break;
      case KernelArg::Kind::kU64: key.signature += "u64"; break;
      case KernelArg::Kind::kTensorMap: key.signature += "tmap"; break;
    }
    if (detail::is_specialized(kernel, i)) {
      const std::string spec = specialization(a);
      if (!spec.empty()) {
        key.signature += ':';
        key.signature += spec;
      }
    }
  }
  return key;
}

int arch_sm(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return 0;
  int v = 0;
  size_t i = 3;
  for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) v = v * 10 + (arch[i] - '0');
  const bool tail_ok = i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f'));
  return i > 3 && tail_ok ? v : 0;
}

namespace {
bool declares(const KernelSource& k, int sm) {
  // Arch-specific targets exist for sm_90 and sm_100 (and later "a" families), not below sm_90.
  if (k.arch_specific && sm < 90) return false;
  return sm >= k.min_sm && (k.max_sm == 0 || sm <= k.max_sm);
}
}  // namespace

std::string declared_archs_text(const KernelSource& k) {
  std::string lo = "sm_" + std::to_string(k.min_sm) + (k.arch_specific ? "a" : "");
  if (k.max_sm == 0) return lo + "+";
  return lo + ".." + "sm_" + std::to_string(k.max_sm) + (k.arch_specific ? "a" : "");
}

std::string kernel_arch(const KernelSource& k, const std::string& target_arch) {
  const int sm = arch_sm(target_arch);
  if (!declares(k, sm)) {
    throw UnsupportedArchError("kernel " + k.name + " exists for " + declared_archs_text(k) +
                               "; the target is " + target_arch);
  }
  if (!k.arch_specific || (!target_arch.empty() && target_arch.back() == 'a')) return target_arch;
  return "sm_" + std::to_string(sm) + "a";
}

std::vector<std::string> declared_archs(const KernelSource& k,
                                        const std::vector<std::string>& candidates) {
  std::vector<std::string> out;
  for (const std::string& a : candidates) {
    const int sm = arch_sm(a);
    if (sm == 0 || !declares(k, sm)) continue;
    const bool suffixed = a.back() == 'a';
    if (k.arch_specific != suffixed) continue;  // plain kernels on plain archs, "a" on "a"
    out.push_back(a);
  }
  return out;
}

}  // namespace coldstart::jit
