#include "harness/kernels/mamba_ssd/mamba_ssd_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_mamba_ssd_common;
extern const char* const kSource_mamba_ssd_cumsum;
extern const char* const kSource_mamba_ssd_chunk_state;
extern const char* const kSource_mamba_ssd_state_passing;
extern const char* const kSource_mamba_ssd_bmm;
extern const char* const kSource_mamba_ssd_chunk_scan;

namespace coldstart::mamba_ssd {
namespace {

constexpr const char* kFamily = "mamba_ssd";

// No SSD kernel has a do_not_specialize list (see the header).
jit::KernelSource make_source(const char* name, const char* text, std::string& storage) {
  return kernels::make_kernel_source(kSource_mamba_ssd_common, name, text, storage);
}

bool is_pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

jit::KernelConfig mnk(int m, int n, int k, int warps, int stages) {
  return jit::make_config({{"BLOCK_SIZE_M", m}, {"BLOCK_SIZE_N", n}, {"BLOCK_SIZE_K", k}}, warps,
                          stages);
}

void append_config(std::vector<jit::Constexpr>& v, const jit::KernelConfig& c) {
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
}

std::string tag_of(std::optional<jit::DType> t) { return t ? jit::dtype_name(*t) : "None"; }

// Triton's Config defaults.
constexpr int kDefaultWarps = 4;
constexpr int kDefaultStages = 3;

}  // namespace

void SsdDims::validate() const {
  if (nheads <= 0 || nheads > 65535) {
    throw InputError(fmt::format("{}: nheads {} must be in 1..65535", kFamily, nheads));
  }
  if (ngroups <= 0 || nheads % ngroups != 0) {
    throw InputError(fmt::format("{}: ngroups {} must be positive and divide nheads {}", kFamily,
                                 ngroups, nheads));
  }
  if (!is_pow2_in(head_dim, 16, 256) || !is_pow2_in(dstate, 16, 256)) {
    throw InputError(fmt::format("{}: head_dim {} and dstate {} must be powers of two in 16..256",
                                 kFamily, head_dim, dstate));
  }
  if (!is_pow2_in(chunk_size, 16, 256)) {
    throw InputError(
        fmt::format("{}: chunk_size {} must be a power of two in 16..256", kFamily, chunk_size));
  }
}

ChunkMetadata compute_chunk_metadata(const std::vector<int32_t>& query_start_loc,
                                     const std::vector<int32_t>& num_computed_tokens,
                                     int64_t chunk_size) {
  if (chunk_size <= 0) {
    throw InputError(fmt::format("{}: chunk_size {} must be positive", kFamily, chunk_size));
  }
  if (query_start_loc.empty() || query_start_loc[0] != 0) {
    throw InputError(
        fmt::format("{}: query_start_loc must start with 0 ([B + 1] offsets)", kFamily));
  }
  const size_t B = query_start_loc.size() - 1;
  if (num_computed_tokens.size() != B) {
    throw InputError(fmt::format("{}: num_computed_tokens has {} entries for {} sequences", kFamily,
                                 num_computed_tokens.size(), B));
  }
  ChunkMetadata m;
  int64_t pos = 0;
  for (size_t b = 0; b < B; ++b) {
    int64_t fresh = static_cast<int64_t>(query_start_loc[b + 1]) - query_start_loc[b];
    const int64_t done = num_computed_tokens[b];
    if (fresh < 0) {
      throw InputError(fmt::format("{}: query_start_loc decreases at sequence {}", kFamily, b));
    }
    if (done < 0) {
      throw InputError(
          fmt::format("{}: num_computed_tokens[{}] = {} is negative", kFamily, b, done));
    }
    // a continuing sequence off a chunk boundary: the first chunk finishes that chunk
    if (done % chunk_size != 0) {
      const int64_t room = (done + chunk_size - 1) / chunk_size * chunk_size - done;
      const int64_t take = std::min(room, fresh);
      m.seq_idx.push_back(static_cast<int32_t>(b));
      m.cu_chunk_seqlens.push_back(static_cast<int32_t>(pos));
      pos += take;
      fresh -= take;
    }
    while (fresh > 0) {
      const int64_t take = std::min(chunk_size, fresh);
      m.seq_idx.push_back(static_cast<int32_t>(b));
      m.cu_chunk_seqlens.push_back(static_cast<int32_t>(pos));
      pos += take;
      fresh -= take;
    }
    m.last_chunk_indices.push_back(static_cast<int32_t>(m.cu_chunk_seqlens.size()) - 1);
  }
  m.cu_chunk_seqlens.push_back(static_cast<int32_t>(pos));
  return m;
}

int dtype_code(jit::DType dtype) {
  switch (dtype) {
    case jit::DType::kF32: return 0;
    case jit::DType::kF16: return 1;
    case jit::DType::kBF16: return 2;
    default: break;
  }
  throw InputError(fmt::format("{}: dtype {} is not supported (fp32, fp16 or bf16)", kFamily,
                               jit::dtype_name(dtype)));
}

// ---- sources --------------------------------------------------------------------------------

const jit::KernelSource& cumsum_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("mamba_ssd_cumsum", kSource_mamba_ssd_cumsum, storage);
  return k;
}

const jit::KernelSource& chunk_state_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "mamba_ssd_chunk_state", kSource_mamba_ssd_chunk_state, storage);
  return k;
}

const jit::KernelSource& state_passing_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("mamba_ssd_state_passing", kSource_mamba_ssd_state_passing, storage);
  return k;
}

const jit::KernelSource& bmm_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("mamba_ssd_bmm", kSource_mamba_ssd_bmm, storage);
  return k;
}

const jit::KernelSource& chunk_scan_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("mamba_ssd_chunk_scan", kSource_mamba_ssd_chunk_scan, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&cumsum_kernel(), &chunk_state_kernel(), &state_passing_kernel(), &bmm_kernel(),
          &chunk_scan_kernel()};
}

// ---- candidates -------------------------------------------------------------------------------

std::vector<jit::KernelConfig> cumsum_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int h : {2, 4, 8, 16, 32, 64}) {
    out.push_back(jit::make_config({{"BLOCK_SIZE_H", h}}, kDefaultWarps, kDefaultStages));
  }
  return out;
}

std::vector<jit::KernelConfig> chunk_state_candidates() {
  return {// PR #35397: small head_dim / dstate tiles, then low register pressure for dstate 128
          mnk(32, 32, 32, 4, 3), mnk(32, 64, 32, 4, 3), mnk(64, 32, 32, 4, 3),
          mnk(64, 64, 64, 4, 2), mnk(64, 128, 64, 4, 2),
          // the original list
          mnk(128, 256, 64, 8, 3), mnk(64, 256, 32, 4, 4), mnk(128, 128, 32, 4, 4),
          mnk(128, 64, 32, 4, 4), mnk(64, 128, 32, 4, 4), mnk(128, 32, 32, 4, 4),
          mnk(64, 32, 32, 2, 5), mnk(32, 64, 32, 2, 5), mnk(64, 64, 32, 2, 4)};
}

std::vector<jit::KernelConfig> state_passing_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int b : {64, 128, 256, 512, 1024, 2048}) {
    out.push_back(jit::make_config({{"BLOCK_SIZE", b}}, kDefaultWarps, kDefaultStages));
  }
  return out;
}

std::vector<jit::KernelConfig> bmm_candidates() {
  return {mnk(128, 256, 64, 8, 3), mnk(64, 256, 32, 4, 4), mnk(128, 128, 32, 4, 4),
          mnk(128, 64, 32, 4, 4),  mnk(64, 128, 32, 4, 4), mnk(128, 32, 32, 4, 4),
          mnk(64, 32, 32, 2, 5),   mnk(32, 64, 32, 2, 5),  mnk(64, 64, 32, 2, 4)};
}

std::vector<jit::KernelConfig> chunk_scan_candidates() {
  return {
      // PR #35397: 8 warps, small tiles with more stages, num_stages 1 and 2 variants
      mnk(32, 32, 32, 8, 2), mnk(32, 64, 32, 8, 2), mnk(64, 32, 32, 8, 2), mnk(32, 32, 32, 4, 3),
      mnk(32, 32, 64, 4, 2), mnk(64, 64, 64, 4, 1), mnk(64, 64, 32, 4, 1), mnk(128, 64, 32, 4, 1),
      mnk(32, 64, 32, 4, 1), mnk(64, 64, 64, 4, 2), mnk(64, 64, 32, 4, 2), mnk(32, 64, 32, 4, 2),
      // the original list
      mnk(128, 256, 64, 8, 3), mnk(64, 256, 32, 4, 4), mnk(128, 128, 32, 4, 4),
      mnk(128, 64, 32, 4, 4), mnk(64, 128, 32, 4, 4), mnk(128, 64, 64, 4, 4),
      mnk(64, 128, 64, 4, 4), mnk(128, 32, 32, 4, 4), mnk(64, 32, 32, 2, 5), mnk(32, 64, 32, 2, 5),
      mnk(64, 64, 32, 2, 4)};
}

// ---- tuning keys ----------------------------------------------------------------------------

std::string tuning_key(const std::vector<std::pair<std::string, int64_t>>& key_values,
                       const std::vector<TensorTag>& tensors) {
  std::string s;
  for (size_t i = 0; i < key_values.size(); ++i) {
    s += fmt::format("{}{}={}", i ? "," : "", key_values[i].first, key_values[i].second);
  }
  s += '|';
  for (size_t i = 0; i < tensors.size(); ++i) {
    s += fmt::format("{}{}:{}", i ? "," : "", tensors[i].name, tag_of(tensors[i].dtype));
  }
  return s;
}

std::string cumsum_tuning_key(const SsdDims& d, jit::DType dt, std::optional<jit::DType> dt_bias) {
  using jit::DType;
  return tuning_key({{"chunk_size", d.chunk_size}, {"nheads", d.nheads}},
                    {{"dt", dt},
                     {"A", DType::kF32},
                     {"dt_bias", dt_bias},
                     {"dt_out", DType::kF32},
                     {"dA_cumsum", DType::kF32},
                     {"cu_chunk_seqlens", DType::kI32}});
}

std::string chunk_state_tuning_key(const SsdDims& d, jit::DType x) {
  using jit::DType;
  return tuning_key({{"hdim", d.head_dim}, {"dstate", d.dstate}, {"chunk_size", d.chunk_size}},
                    {{"x", x},
                     {"b", x},
                     {"states", DType::kF32},
                     {"dt", DType::kF32},
                     {"dA_cumsum", DType::kF32},
                     {"cu_chunk_seqlens", DType::kI32}});
}

std::string state_passing_tuning_key(const SsdDims& d, jit::DType state,
                                     std::optional<jit::DType> initial_states) {
  using jit::DType;
  return tuning_key({{"dim", static_cast<int64_t>(d.head_dim) * d.dstate}},
                    {{"states", DType::kF32},
                     {"out", state},
                     {"dA_cs", DType::kF32},
                     {"initstates", initial_states},
                     {"last_chunk_indices", DType::kI32}});
}

std::string bmm_tuning_key(const SsdDims& d, jit::DType c) {
  using jit::DType;
  return tuning_key({{"chunk_size", d.chunk_size}, {"K", d.dstate}, {"IS_CAUSAL", 0}},
                    {{"a", c}, {"b", c}, {"out", DType::kF32}, {"cu_chunk_seqlens", DType::kI32}});
}

std::string chunk_scan_tuning_key(const SsdDims& d, jit::DType x, jit::DType state,
                                  std::optional<jit::DType> D,
                                  std::optional<jit::DType> initial_states) {
  using jit::DType;
  return tuning_key(
      {{"chunk_size", d.chunk_size}, {"hdim", d.head_dim}, {"dstate", d.dstate}, {"IS_CAUSAL", 1}},
      {{"cb", DType::kF32},
       {"x", x},
       {"z", std::nullopt},
       {"out", x},
       {"dt", DType::kF32},
       {"dA_cumsum", DType::kF32},
       {"seq_idx", DType::kI32},
       {"C", x},
       {"states", state},
       {"D", D},
       {"initstates", initial_states},
       {"cu_chunk_seqlens", DType::kI32}});
}

// ---- constexprs -------------------------------------------------------------------------------

int64_t float_bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<int64_t>(bits);
}

std::vector<jit::Constexpr> cumsum_constexprs(const SsdDims& d, const CumsumFlags& f,
                                              const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"nheads", d.nheads},
                                {"chunk_size", d.chunk_size},
                                {"dt_min", float_bits(f.dt_min)},
                                {"dt_max", float_bits(f.dt_max)},
                                {"stride_dt_head", f.stride_dt_head},
                                {"stride_A_head", 1},
                                {"stride_dt_bias_head", f.has_dt_bias ? f.stride_dt_bias_head : 0},
                                {"stride_dt_out_csize", 1},
                                {"stride_dA_cs_csize", 1},
                                {"DT_SOFTPLUS", f.dt_softplus ? 1 : 0},
                                {"HAS_DT_BIAS", f.has_dt_bias ? 1 : 0}};
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);  // BLOCK_SIZE_H
  v.push_back({"BLOCK_SIZE_CHUNK", next_power_of_2(d.chunk_size)});
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
  v.push_back({"DT_BIAS_DTYPE", dtype_code(f.dt_bias_dtype)});
  return v;
}

std::vector<jit::Constexpr> chunk_state_constexprs(const SsdDims& d, const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{
      {"hdim", d.head_dim},         {"dstate", d.dstate},
      {"chunk_size", d.chunk_size}, {"nheads_ngroups_ratio", d.nheads / d.ngroups},
      {"stride_x_hdim", 1},         {"stride_b_dstate", 1},
      {"stride_states_dstate", 1},  {"stride_dt_csize", 1},
      {"stride_dA_cs_csize", 1}};
  append_config(v, c);
  return v;
}

std::vector<jit::Constexpr> state_passing_constexprs(const SsdDims& d, bool has_initstates,
                                                     jit::DType out_dtype, jit::DType init_dtype,
                                                     const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"dim", static_cast<int64_t>(d.head_dim) * d.dstate},
                                {"chunk_size", d.chunk_size},
                                {"stride_states_dim", 1},
                                {"stride_out_dim", 1},
                                {"stride_dA_cs_csize", 1},
                                {"stride_initstates_dim", has_initstates ? 1 : 0},
                                {"HAS_INITSTATES", has_initstates ? 1 : 0}};
  append_config(v, c);  // BLOCK_SIZE
  v.push_back({"OUT_DTYPE", dtype_code(out_dtype)});
  v.push_back({"INIT_DTYPE", dtype_code(init_dtype)});
  return v;
}

std::vector<jit::Constexpr> bmm_constexprs(const SsdDims& d, const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"chunk_size", d.chunk_size},
                                {"K", d.dstate},
                                {"ngroups", d.ngroups},
                                {"stride_ak", 1},
                                {"stride_bk", 1},
                                {"stride_outn", 1},
                                {"IS_CAUSAL", 0},
                                {"dot_dtype", dtype_code(jit::DType::kBF16)}};
  append_config(v, c);
  return v;
}

std::vector<jit::Constexpr> chunk_scan_constexprs(const SsdDims& d, const ScanFlags& f,
                                                  const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"chunk_size", d.chunk_size},
                                {"hdim", d.head_dim},
                                {"dstate", d.dstate},
                                {"nheads_ngroups_ratio", d.nheads / d.ngroups},
                                {"stride_cb_csize_k", 1},
                                {"stride_x_hdim", 1},
                                {"stride_z_hdim", 0},
                                {"stride_out_hdim", 1},
                                {"stride_dt_csize", 1},
                                {"stride_dA_cs_csize", 1},
                                {"stride_seq_idx_chunk", 1},
                                {"stride_C_dstate", 1},
                                {"stride_states_dstate", 1},
                                {"stride_init_states_dstate", f.has_initstates ? 1 : 0},
                                {"stride_D_head", f.has_d ? f.stride_D_head : 0},
                                {"IS_CAUSAL", 1},
                                {"HAS_D", f.has_d ? 1 : 0},
                                {"D_HAS_HDIM", (!f.has_d || f.d_has_hdim) ? 1 : 0},
                                {"HAS_Z", 0}};
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);  // BLOCK_SIZE_M / N / K
  v.push_back({"BLOCK_SIZE_DSTATE", std::max<int64_t>(next_power_of_2(d.dstate), 16)});
  v.push_back({"IS_TRITON_22", 1});
  v.push_back({"HAS_INITSTATES", f.has_initstates ? 1 : 0});
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
  v.push_back({"STATES_DTYPE", dtype_code(f.states_dtype)});
  v.push_back({"INIT_DTYPE", dtype_code(f.init_dtype)});
  v.push_back({"D_DTYPE", dtype_code(f.d_dtype)});
  return v;
}

int64_t config_value(const jit::KernelConfig& c, const char* name, int64_t fallback) {
  for (const jit::Constexpr& x : c.constexprs) {
    if (x.name == name) return x.value;
  }
  return fallback;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t next_power_of_2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- shared memory (mirrors the constexpr arithmetic atop each .cu) ---------------------------

unsigned chunk_state_smem_bytes(const SsdDims& d, const jit::KernelConfig& c) {
  const int64_t bm = std::min<int64_t>(config_value(c, "BLOCK_SIZE_M", 64), d.head_dim);
  const int64_t bn = std::min<int64_t>(config_value(c, "BLOCK_SIZE_N", 64), d.dstate);
  const int64_t bk = std::min<int64_t>(config_value(c, "BLOCK_SIZE_K", 32), d.chunk_size);
  return static_cast<unsigned>(bk * (bm + 8) * 2 + bk * (bn + 8) * 2);
}

unsigned bmm_smem_bytes(const SsdDims& d, const jit::KernelConfig& c) {
  const int64_t bm = std::min<int64_t>(config_value(c, "BLOCK_SIZE_M", 64), d.chunk_size);
  const int64_t bn = std::min<int64_t>(config_value(c, "BLOCK_SIZE_N", 64), d.chunk_size);
  const int64_t bk = std::min<int64_t>(config_value(c, "BLOCK_SIZE_K", 32), d.dstate);
  return static_cast<unsigned>((bm + bn) * (bk + 8) * 2);
}

unsigned chunk_scan_smem_bytes(const SsdDims& d, const jit::KernelConfig& c) {
  const int64_t bm = std::min<int64_t>(config_value(c, "BLOCK_SIZE_M", 64), d.chunk_size);
  const int64_t bn = std::min<int64_t>(config_value(c, "BLOCK_SIZE_N", 64), d.head_dim);
  const int64_t bk = std::min<int64_t>(config_value(c, "BLOCK_SIZE_K", 32), d.chunk_size);
  const int64_t ds = std::max<int64_t>(next_power_of_2(d.dstate), 16);
  const int64_t dk = ds <= 128 ? ds : config_value(c, "BLOCK_SIZE_K", 32);
  const int64_t phase1 = (bm + bn) * (dk + 8) * 2;
  const int64_t phase2 = bm * (bk + 8) * 2 + bk * (bn + 8) * 2;
  return static_cast<unsigned>(2 * d.chunk_size * 4 + std::max(phase1, phase2));
}

// ---- compile cases ----------------------------------------------------------------------------

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  const SsdDims d = ssd_dims(kernels::shapes::kNemotronNanoMambaTp1);
  const uint64_t base = 1u << 20;        // 256-byte aligned, as a real allocation
  const int64_t H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate, cs = d.chunk_size;
  const int64_t nchunks = 64;  // T = 8192 in one sequence
  const int64_t conv = H * P + 2 * G * N;
  const int64_t proj = 2 * H * P + 2 * G * N + H;  // in_proj row: gate, x, B, C, dt
  auto p = [&](DType t) { return KernelArg::pointer(base, t); };
  auto i64 = [](int64_t v) { return KernelArg::i64(v); };
  std::vector<KernelCompileCase> cases;
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs_,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case(kFamily, k, std::move(cs_), std::move(args)));
  };
  add(cumsum_kernel(), cumsum_constexprs(d, {true, true, 0.0, INFINITY}, cumsum_candidates()[0]),
      {p(DType::kBF16), p(DType::kF32), p(DType::kBF16), p(DType::kF32), p(DType::kF32),
       p(DType::kI32), i64(proj), i64(nchunks * cs), i64(cs), i64(nchunks * cs), i64(cs)});
  add(chunk_state_kernel(), chunk_state_constexprs(d, chunk_state_candidates()[0]),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kF32), p(DType::kF32), p(DType::kF32),
       p(DType::kI32), i64(conv), i64(P), i64(conv), i64(N), i64(H * P * N), i64(P * N), i64(N),
       i64(nchunks * cs), i64(cs), i64(nchunks * cs), i64(cs)});
  add(state_passing_kernel(),
      state_passing_constexprs(d, true, DType::kF32, DType::kF32, state_passing_candidates()[0]),
      {p(DType::kF32), p(DType::kF32), p(DType::kF32), p(DType::kF32), p(DType::kI32),
       i64(H * P * N), i64(P * N), i64(H * P * N), i64(P * N), i64(nchunks * cs), i64(cs),
       i64(H * P * N), i64(P * N)});
  add(bmm_kernel(), bmm_constexprs(d, bmm_candidates()[0]),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kF32), p(DType::kI32), i64(conv), i64(N),
       i64(conv), i64(N), i64(G * cs * cs), i64(cs * cs), i64(cs)});
  ScanFlags f;
  f.has_initstates = true;
  add(chunk_scan_kernel(), chunk_scan_constexprs(d, f, chunk_scan_candidates()[0]),
      {p(DType::kF32),
       p(DType::kBF16),
       KernelArg::pointer(0, DType::kBF16),
       p(DType::kBF16),
       p(DType::kF32),
       p(DType::kF32),
       p(DType::kI32),
       p(DType::kBF16),
       p(DType::kF32),
       p(DType::kBF16),
       p(DType::kF32),
       p(DType::kI32),
       i64(G * cs * cs),
       i64(cs * cs),
       i64(cs),
       i64(conv),
       i64(P),
       i64(0),
       i64(0),
       i64(H * P),
       i64(P),
       i64(cs),
       i64(nchunks * cs),
       i64(cs),
       i64(nchunks * cs),
       i64(conv),
       i64(N),
       i64(H * P * N),
       i64(P * N),
       i64(N),
       i64(H * P * N),
       i64(P * N),
       i64(N)});
  return cases;
}

}  // namespace coldstart::mamba_ssd
