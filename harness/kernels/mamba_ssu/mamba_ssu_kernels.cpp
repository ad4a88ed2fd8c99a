#include "harness/kernels/mamba_ssu/mamba_ssu_kernels.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_mamba_ssu_common;
extern const char* const kSource_mamba_ssu_update;

namespace coldstart::mamba_ssu {
namespace {

constexpr const char* kFamily = "mamba_ssu";

bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Tables read so far in this process, by path (vLLM caches get_ssm_configs with functools.cache).
std::mutex g_mu;
std::unordered_map<std::string, std::shared_ptr<const jit::TunedTable>> g_tables;

std::shared_ptr<const jit::TunedTable> load_cached(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_tables.find(path);
    if (it != g_tables.end()) return it->second;
  }
  auto table = std::make_shared<const jit::TunedTable>(jit::load_tuned_table(path));
  std::lock_guard<std::mutex> lock(g_mu);
  return g_tables.emplace(path, std::move(table)).first->second;
}

// The value `name` of a table entry, if present.
std::optional<int64_t> value_of(const jit::TunedEntry& e, const char* name) {
  for (const auto& [k, v] : e.values) {
    if (k == name) return v;
  }
  return std::nullopt;
}

// BLOCK_SIZE_M / num_warps of a table entry as a config; throws naming file and key.
jit::KernelConfig entry_config(const jit::TunedTable& t, const jit::TunedEntry& e) {
  const std::optional<int64_t> bm = value_of(e, "BLOCK_SIZE_M");
  const std::optional<int64_t> nw = value_of(e, "num_warps");
  for (const auto& [name, v] : {std::pair<const char*, std::optional<int64_t>>{"BLOCK_SIZE_M", bm},
                                {"num_warps", nw}}) {
    if (!v) {
      throw InputError(fmt::format("{}: key \"{}\": the entry has no \"{}\" (vLLM reads "
                                   "BLOCK_SIZE_M and num_warps)",
                                   t.file, e.batch, name));
    }
  }
  if (!pow2(*bm) || *bm > 1024) {
    throw InputError(fmt::format("{}: key \"{}\": BLOCK_SIZE_M {} is not a power of two in "
                                 "1..1024",
                                 t.file, e.batch, *bm));
  }
  if (!pow2(*nw) || *nw > 32) {
    throw InputError(fmt::format("{}: key \"{}\": num_warps {} is not a power of two in 1..32",
                                 t.file, e.batch, *nw));
  }
  return jit::make_config({{"BLOCK_SIZE_M", *bm}}, static_cast<int>(*nw));
}

// The name of an entry's config for the candidate list (no validation: vLLM only reads the
// chosen entry).
std::string candidate_name(const jit::TunedEntry& e) {
  const std::optional<int64_t> bm = value_of(e, "BLOCK_SIZE_M");
  const std::optional<int64_t> nw = value_of(e, "num_warps");
  if (!bm || !nw) return e.config().name;
  return jit::config_name({{"BLOCK_SIZE_M", *bm}}, static_cast<int>(*nw), 1);
}

}  // namespace

std::string ssm_device_name(const std::string& device_name) {
  std::string out;
  bool in_run = false;
  for (char ch : device_name) {
    const bool sep = std::isspace(static_cast<unsigned char>(ch)) || ch == '/' || ch == '-';
    if (sep) {
      if (!in_run) out += '_';
      in_run = true;
      continue;
    }
    in_run = false;
    const bool invalid = static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f || ch == '\\' ||
                         ch == ':' || ch == '*' || ch == '?' || ch == '"' || ch == '<' ||
                         ch == '>' || ch == '|';
    if (!invalid) out += ch;
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '.')) out.pop_back();
  return out;
}

std::string canonical_cache_dtype(const std::string& cache_dtype) {
  if (cache_dtype == "float32" || cache_dtype == "float16") return cache_dtype;
  if (cache_dtype == "bfloat16") return "float16";
  throw InputError(fmt::format("mamba_ssu: cache dtype '{}' is not one of float32, bfloat16, "
                               "float16",
                               cache_dtype));
}

std::string config_file_name(int64_t headdim, int64_t dstate, const std::string& device_name,
                             const std::string& cache_dtype) {
  return jit::tuned_file_name({{"headdim", std::to_string(headdim)},
                               {"dstate", std::to_string(dstate)},
                               {"device_name", ssm_device_name(device_name)},
                               {"cache_dtype", canonical_cache_dtype(cache_dtype)}});
}

bool is_blackwell_arch(const std::string& arch) { return jit::arch_sm(arch) / 10 == 10; }

jit::KernelConfig default_config(int64_t dstate, bool is_blackwell) {
  int64_t bm = 4;
  int nw = 8;
  if (dstate <= 16) {
    bm = 32, nw = 4;
  } else if (dstate <= 32) {
    bm = 16, nw = 4;
  } else if (dstate <= 64) {
    bm = 8, nw = 4;
  } else if (is_blackwell) {
    bm = 32, nw = 8;
  } else if (dstate <= 128) {
    bm = 4, nw = 4;
  }
  return jit::make_config({{"BLOCK_SIZE_M", bm}}, nw);
}

jit::Selection select_config(const ConfigSource& src, int64_t headdim, int64_t dstate,
                             const std::string& cache_dtype, int64_t batch, int64_t nheads,
                             bool is_blackwell) {
  if (headdim <= 0 || dstate <= 0 || batch < 0 || nheads <= 0) {
    throw InputError(fmt::format("mamba_ssu::select_config: headdim {}, dstate {} and nheads {} "
                                 "must be positive and batch {} non-negative",
                                 headdim, dstate, nheads, batch));
  }
  const jit::StemFields stem = {{"headdim", std::to_string(headdim)},
                                {"dstate", std::to_string(dstate)},
                                {"device_name", ssm_device_name(src.device_name)},
                                {"cache_dtype", canonical_cache_dtype(cache_dtype)}};
  std::optional<std::string> file;
  if (!src.user_dir.empty()) file = jit::find_tuned_file(src.user_dir, stem);
  if (!file && !src.table_dir.empty()) file = jit::find_tuned_file(src.table_dir, stem);
  if (!file) {
    return jit::select_by_heuristic(
        fmt::format("dstate={},is_blackwell={}", dstate, is_blackwell ? 1 : 0),
        default_config(dstate, is_blackwell));
  }
  const std::shared_ptr<const jit::TunedTable> table = load_cached(*file);
  const int64_t effective_batch = batch * nheads;
  const jit::TunedEntry& entry = jit::nearest(*table, effective_batch);
  jit::Selection sel;
  sel.config = entry_config(*table, entry);
  sel.selector = "table";
  sel.tuning_key = fmt::format("batch*nheads={} -> {}", effective_batch, entry.batch);
  for (const jit::TunedEntry& e : table->entries) sel.candidates.push_back(candidate_name(e));
  sel.table_file = table->file;
  return sel;
}

const jit::KernelSource& update_kernel() {
  static std::string storage;
  static const jit::KernelSource k = [] {
    jit::KernelSource s = kernels::make_kernel_source(
        kSource_mamba_ssu_common, "mamba_ssu_update", kSource_mamba_ssu_update, storage);
    // vLLM: @triton.jit(do_not_specialize=["N"]) on _selective_scan_update_kernel.
    s.do_not_specialize = {"N"};
    return s;
  }();
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() { return {&update_kernel()}; }

int dtype_code(jit::DType dtype) {
  switch (dtype) {
    case jit::DType::kF32: return 0;
    case jit::DType::kF16: return 1;
    case jit::DType::kBF16: return 2;
    default: break;
  }
  throw InputError(fmt::format("mamba_ssu: dtype {} is not float32, float16 or bfloat16",
                               jit::dtype_name(dtype)));
}

std::vector<jit::Constexpr> update_constexprs(const UpdateSpec& s) {
  if (!pow2(s.block_size_m) || s.block_size_m > 1024) {
    throw InputError(fmt::format("mamba_ssu: BLOCK_SIZE_M {} is not a power of two in 1..1024",
                                 s.block_size_m));
  }
  if (!pow2(s.num_warps) || s.num_warps > 32) {
    throw InputError(fmt::format("mamba_ssu: num_warps {} is not a power of two in 1..32",
                                 s.num_warps));
  }
  if (s.dstate < 1 || s.dstate > 1024) {
    throw InputError(fmt::format("mamba_ssu: dstate {} is outside 1..1024", s.dstate));
  }
  return {{"DT_SOFTPLUS", s.dt_softplus ? 1 : 0},
          {"TIE_HDIM", s.tie_hdim ? 1 : 0},
          {"BLOCK_SIZE_M", s.block_size_m},
          {"HAS_DT_BIAS", s.has_dt_bias ? 1 : 0},
          {"HAS_D", s.has_d ? 1 : 0},
          {"HAS_Z", 0},
          {"HAS_STATE_BATCH_INDICES", s.has_state_batch_indices ? 1 : 0},
          {"IS_SPEC_DECODING", 0},
          {"IS_VARLEN", 0},
          {"BLOCK_SIZE_DSTATE", next_pow2(s.dstate)},
          {"USE_RS_ROUNDING", 0},
          {"PHILOX_ROUNDS", 0},
          {"NUM_WARPS", s.num_warps},
          {"STATE_DTYPE", dtype_code(s.state)},
          {"X_DTYPE", dtype_code(s.x)},
          {"DT_DTYPE", dtype_code(s.dt)},
          {"DT_BIAS_DTYPE", dtype_code(s.dt_bias)},
          {"A_DTYPE", dtype_code(s.A)},
          {"B_DTYPE", dtype_code(s.B)},
          {"C_DTYPE", dtype_code(s.C)},
          {"D_DTYPE", dtype_code(s.D)},
          {"OUT_DTYPE", dtype_code(s.out)}};
}

std::vector<jit::KernelArg> update_kernel_args(const UpdateArgs& a) {
  using jit::KernelArg;
  std::vector<KernelArg> v = {a.state,
                              KernelArg::pointer(0, jit::DType::kI64),  // rand_seed: None
                              a.x,
                              a.dt,
                              a.dt_bias,
                              a.A,
                              a.B,
                              a.C,
                              a.D,
                              KernelArg::pointer(0, jit::DType::kF32),  // z: None
                              a.out,
                              a.state_batch_indices,
                              a.dst_state_batch_indices,
                              KernelArg::i64(a.null_block_id),
                              KernelArg::pointer(0, jit::DType::kI32),  // num_accepted_tokens
                              KernelArg::pointer(0, jit::DType::kI32),  // cu_seqlens
                              KernelArg::i64(a.N),
                              KernelArg::i64(a.nheads),
                              KernelArg::i64(a.dim),
                              KernelArg::i64(a.dstate),
                              KernelArg::i64(a.nheads_ngroups_ratio)};
  auto add = [&v](const int64_t* s, int n) {
    for (int i = 0; i < n; ++i) v.push_back(KernelArg::i64(s[i]));
  };
  add(a.stride_state, 4);
  add(a.stride_x, 3);
  add(a.stride_dt, 3);
  add(a.stride_dt_bias, 2);
  add(a.stride_A, 3);
  add(a.stride_B, 3);
  add(a.stride_C, 3);
  add(a.stride_D, 2);
  const int64_t no_z[3] = {0, 0, 0};
  add(no_z, 3);
  add(a.stride_out, 3);
  add(a.stride_state_indices, 2);
  add(a.stride_dst_state_indices, 2);
  return v;
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  // MambaMixer2 decode at (H, P, G, N), the views vLLM passes: x / B / C columns of the conv
  // output (row stride conv_dim), dt a column slice of in_proj's output expanded over P, A / D /
  // dt_bias expanded, the state a view into per-request pages, 1-D int32 indices unsqueezed.
  auto mixer_args = [&](int64_t H, int64_t P, int64_t G, int64_t N, int64_t page, DType st) {
    const int64_t conv_dim = H * P + 2 * G * N;
    const int64_t proj_row = H * P + conv_dim + H;
    UpdateArgs a;
    a.state = KernelArg::pointer(base + 4096, st);
    a.x = KernelArg::pointer(base, DType::kBF16);
    a.dt = KernelArg::pointer(base + 2 * (H * P + conv_dim), DType::kBF16);
    a.dt_bias = KernelArg::pointer(base, DType::kBF16);
    a.A = KernelArg::pointer(base, DType::kF32);
    a.B = KernelArg::pointer(base + 2 * H * P, DType::kBF16);
    a.C = KernelArg::pointer(base + 2 * (H * P + G * N), DType::kBF16);
    a.D = KernelArg::pointer(base + 256, DType::kBF16);
    a.out = KernelArg::pointer(base, DType::kBF16);
    a.state_batch_indices = KernelArg::pointer(base, DType::kI32);
    a.dst_state_batch_indices = KernelArg::pointer(base, DType::kI32);
    a.N = 8, a.nheads = H, a.dim = P, a.dstate = N, a.nheads_ngroups_ratio = H / G;
    const int64_t ss[4] = {page, P * N, N, 1}, sx[3] = {conv_dim, P, 1}, sdt[3] = {proj_row, 1, 0},
                  sdb[2] = {1, 0}, sa[3] = {1, 0, 0}, sb[3] = {conv_dim, N, 1}, sd[2] = {1, 0},
                  so[3] = {H * P, P, 1}, si[2] = {1, 1};
    std::copy(ss, ss + 4, a.stride_state);
    std::copy(sx, sx + 3, a.stride_x);
    std::copy(sdt, sdt + 3, a.stride_dt);
    std::copy(sdb, sdb + 2, a.stride_dt_bias);
    std::copy(sa, sa + 3, a.stride_A);
    std::copy(sb, sb + 3, a.stride_B);
    std::copy(sb, sb + 3, a.stride_C);
    std::copy(sd, sd + 2, a.stride_D);
    std::copy(so, so + 3, a.stride_out);
    std::copy(si, si + 2, a.stride_state_indices);
    std::copy(si, si + 2, a.stride_dst_state_indices);
    return a;
  };
  auto add = [&](const UpdateSpec& s, const UpdateArgs& a) {
    cases.push_back(kernels::make_compile_case(kFamily, update_kernel(), update_constexprs(s),
                                               update_kernel_args(a)));
  };
  // Nemotron-3 Nano TP1: the page holds the conv state (3 x 6144 bf16) before the SSM state.
  const kernels::shapes::Mamba2Heads nano = kernels::shapes::kNemotronNanoMambaTp1;
  const kernels::shapes::Mamba2Heads super = kernels::shapes::kNemotronSuperMambaTp8;
  const int64_t nano_page = int64_t{nano.nheads} * nano.head_dim * nano.dstate + 3 * 6144 / 2;
  for (const auto& [bm, nw, st] : {std::tuple<int, int, DType>{4, 1, DType::kF32},
                                   {8, 1, DType::kF32},
                                   {4, 4, DType::kBF16},    // no bf16 (= float16) table: heuristic
                                   {32, 8, DType::kF32}}) {  // the Blackwell heuristic
    UpdateSpec s;
    s.block_size_m = bm;
    s.num_warps = nw;
    s.state = st;
    add(s, mixer_args(nano.nheads, nano.head_dim, nano.ngroups, nano.dstate,
                      st == DType::kF32 ? nano_page : 2 * nano_page, st));
  }
  {  // Super TP8 (H 16, one group) with a float16 state: vLLM's float16 table or the heuristic
    UpdateSpec s;
    s.block_size_m = 4;
    s.num_warps = 4;
    s.state = DType::kF16;
    add(s, mixer_args(super.nheads, super.head_dim, super.ngroups, super.dstate,
                      int64_t{super.nheads} * super.head_dim * super.dstate + 3 * 2304, DType::kF16));
  }
  {  // untied dt / A / dt_bias / D, dstate 48, head dim 50, a state stride defeating vectors
    UpdateSpec s;
    s.tie_hdim = false;
    s.block_size_m = 8;
    s.num_warps = 4;
    s.dstate = 48;
    s.state = DType::kBF16;
    s.dt = DType::kF32;
    s.dt_bias = DType::kF32;
    s.D = DType::kF32;
    UpdateArgs a = mixer_args(4, 50, 2, 48, 4 * 50 * 48 + 24, DType::kBF16);
    const int64_t sdt[3] = {200, 50, 1}, sdb[2] = {50, 1}, sa[3] = {50 * 48, 48, 1};
    std::copy(sdt, sdt + 3, a.stride_dt);
    std::copy(sdb, sdb + 2, a.stride_dt_bias);
    std::copy(sa, sa + 3, a.stride_A);
    std::copy(sdb, sdb + 2, a.stride_D);
    a.dt = KernelArg::pointer(base, DType::kF32);
    a.dt_bias = KernelArg::pointer(base, DType::kF32);
    a.D = KernelArg::pointer(base, DType::kF32);
    add(s, a);
  }
  return cases;
}

}  // namespace coldstart::mamba_ssu
