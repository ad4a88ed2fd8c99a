#include "harness/kernels/gdn_chunk/gdn_chunk_kernels.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_gdn_chunk_common;
extern const char* const kSource_gdn_post_conv;
extern const char* const kSource_gdn_chunk_cumsum;
extern const char* const kSource_gdn_chunk_kkt;
extern const char* const kSource_gdn_chunk_solve_tril;
extern const char* const kSource_gdn_chunk_wy;
extern const char* const kSource_gdn_chunk_h;
extern const char* const kSource_gdn_chunk_o;

namespace coldstart::gdn_chunk {
namespace {

constexpr const char* kFamily = "gdn_chunk";

// Every FLA kernel of the chain is @triton.jit(do_not_specialize=["T"]); the post-conv kernel is
// a plain @triton.jit (its L is specialized like any int).
jit::KernelSource make_source(const char* name, const char* text, std::string& storage,
                              bool t_not_specialized) {
  jit::KernelSource k = kernels::make_kernel_source(kSource_gdn_chunk_common, name, text, storage);
  if (t_not_specialized) k.do_not_specialize = {"T"};
  return k;
}

int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

bool is_head_dim(int x) { return x == 64 || x == 128 || x == 256; }

std::vector<jit::Constexpr> with_config(std::vector<jit::Constexpr> fixed,
                                        const jit::KernelConfig& c) {
  for (const jit::Constexpr& x : c.constexprs) fixed.push_back(x);
  fixed.push_back({"NUM_WARPS", c.num_warps});
  fixed.push_back({"NUM_STAGES", c.num_stages});
  return fixed;
}

int next_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

int64_t GdnDims::conv_dim() const {
  return 2ll * num_k_heads * head_k_dim + static_cast<int64_t>(num_v_heads) * head_v_dim;
}

void GdnDims::validate() const {
  if (num_k_heads <= 0 || num_k_heads > 1024) {
    throw InputError(fmt::format("{}: num_k_heads {} must be in 1..1024", kFamily, num_k_heads));
  }
  if (num_v_heads <= 0 || num_v_heads % num_k_heads != 0 || num_v_heads > 1024) {
    throw InputError(fmt::format(
        "{}: num_v_heads {} is not a positive multiple of num_k_heads {} (at most 1024)", kFamily,
        num_v_heads, num_k_heads));
  }
  if (!is_head_dim(head_k_dim) || !is_head_dim(head_v_dim)) {
    throw InputError(fmt::format("{}: head_k_dim {} / head_v_dim {} must each be 64, 128 or 256",
                                 kFamily, head_k_dim, head_v_dim));
  }
}

int64_t num_chunks(const std::vector<int>& seq_lens) {
  int64_t nt = 0;
  for (int n : seq_lens) {
    if (n < 0) throw InputError(fmt::format("{}: sequence length {} is negative", kFamily, n));
    nt += (n + kChunkSize - 1) / kChunkSize;
  }
  return nt;
}

ChunkScratchLayout chunk_scratch_layout(const GdnDims& d, int64_t T, int64_t nt,
                                        int64_t num_seqs) {
  d.validate();
  if (T < 0 || nt < 0 || num_seqs < 0) {
    throw InputError(fmt::format("{}: negative scratch geometry T={} NT={} S={}", kFamily, T, nt,
                                 num_seqs));
  }
  const int64_t hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  ChunkScratchLayout l;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t off = at;
    at += round_up_256(bytes);
    return off;
  };
  l.g_cumsum = take(T * hv * 4);
  l.A = take(T * hv * kChunkSize * 4);
  l.Ai = take(T * hv * kChunkSize * 2);
  l.w = take(T * hv * K * 2);
  l.u = take(T * hv * V * 2);
  l.h = take(nt * hv * V * K * 2);
  l.v_new = take(T * hv * V * 2);
  l.chunk_indices = take(nt * 2 * 4);
  l.chunk_offsets = take((num_seqs + 1) * 4);
  l.total = at;
  return l;
}

int64_t chunk_scratch_bytes(const GdnDims& d, int64_t T, const std::vector<int>& seq_lens_host) {
  int64_t sum = 0;
  for (int n : seq_lens_host) sum += n;
  if (sum != T) {
    throw InputError(
        fmt::format("{}: sequence lengths sum to {}, not T = {}", kFamily, sum, T));
  }
  return chunk_scratch_layout(d, T, num_chunks(seq_lens_host),
                              static_cast<int64_t>(seq_lens_host.size()))
      .total;
}

// ---- sources --------------------------------------------------------------------------------

const jit::KernelSource& post_conv_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "gdn_post_conv", kSource_gdn_post_conv, storage, false);
  return k;
}

const jit::KernelSource& cumsum_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("gdn_chunk_cumsum", kSource_gdn_chunk_cumsum, storage, true);
  return k;
}

const jit::KernelSource& kkt_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("gdn_chunk_kkt", kSource_gdn_chunk_kkt, storage, true);
  return k;
}

const jit::KernelSource& solve_tril_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("gdn_chunk_solve_tril", kSource_gdn_chunk_solve_tril, storage, true);
  return k;
}

const jit::KernelSource& wy_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "gdn_chunk_wy", kSource_gdn_chunk_wy, storage, true);
  return k;
}

const jit::KernelSource& h_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("gdn_chunk_h", kSource_gdn_chunk_h, storage, true);
  return k;
}

const jit::KernelSource& o_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("gdn_chunk_o", kSource_gdn_chunk_o, storage, true);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&post_conv_kernel(), &cumsum_kernel(), &kkt_kernel(), &solve_tril_kernel(),
          &wy_kernel(),        &h_kernel(),      &o_kernel()};
}

// ---- target-dependent facts -----------------------------------------------------------------

int max_shared_mem(int sm) {
  switch (sm) {
    case 80:
    case 87:
      return 166912;
    case 86:
    case 89:
    case 120:
    case 121:
      return 101376;
    default:
      return sm >= 90 ? 232448 : 101376;
  }
}

bool check_shared_mem(int sm) { return max_shared_mem(sm) >= 102400; }

bool is_nvidia_hopper(int sm) { return sm >= 90; }

// ---- candidates -------------------------------------------------------------------------------

std::vector<jit::KernelConfig> cumsum_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int w : {1, 2, 4, 8}) out.push_back(jit::make_config({}, w, 3));
  return out;
}

std::vector<jit::KernelConfig> kkt_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int bk : {32, 64, 128})
    for (int w : {2, 4, 8})
      for (int s : {2, 3, 4}) out.push_back(jit::make_config({{"BK", bk}}, w, s));
  return out;
}

std::vector<jit::KernelConfig> solve_tril_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int w : {2, 4, 8})
    for (int s : {2, 3, 4, 5}) out.push_back(jit::make_config({}, w, s));
  return out;
}

std::vector<jit::KernelConfig> wy_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int w : {2, 4, 8})
    for (int s : {2, 3, 4}) out.push_back(jit::make_config({}, w, s));
  return out;
}

std::vector<jit::KernelConfig> h_candidates() {
  std::vector<jit::KernelConfig> out;
  for (int w : {2, 4})
    for (int s : {2, 3, 4})
      for (int bv : {32, 64}) out.push_back(jit::make_config({{"BV", bv}}, w, s));
  return out;
}

std::vector<jit::KernelConfig> o_candidates(int sm) {
  const std::vector<int> bkv = check_shared_mem(sm) ? std::vector<int>{64, 128}
                                                    : std::vector<int>{32, 64};
  const std::vector<int> warps =
      is_nvidia_hopper(sm) ? std::vector<int>{2, 4} : std::vector<int>{2, 4, 8};
  std::vector<jit::KernelConfig> out;
  for (int bk : bkv)
    for (int bv : bkv)
      for (int w : warps)
        for (int s : {2, 3, 4}) out.push_back(jit::make_config({{"BK", bk}, {"BV", bv}}, w, s));
  return out;
}

// ---- tuning keys ----------------------------------------------------------------------------

std::string cumsum_tuning_key(const GdnDims& d) {
  return fmt::format("B=1,H={},BT={},IS_VARLEN=1,REVERSE=0", d.num_v_heads, kChunkSize);
}
std::string kkt_tuning_key(const GdnDims& d) {
  return fmt::format("H={},K={},BT={},IS_VARLEN=1", d.num_v_heads, d.head_k_dim, kChunkSize);
}
std::string solve_tril_tuning_key(const GdnDims& d) {
  return fmt::format("H={},BT={},IS_VARLEN=1", d.num_v_heads, kChunkSize);
}
std::string wy_tuning_key(const GdnDims& d) {
  return fmt::format("H={},K={},V={},BT={},BK=64,BV=64,IS_VARLEN=1", d.num_v_heads, d.head_k_dim,
                     d.head_v_dim, kChunkSize);
}
std::string h_tuning_key(const GdnDims& d) {
  return fmt::format("H={},K={},V={},BT={}", d.num_v_heads, d.head_k_dim, d.head_v_dim,
                     kChunkSize);
}
std::string o_tuning_key(const GdnDims& d) { return h_tuning_key(d); }

// ---- constexprs -------------------------------------------------------------------------------

std::vector<jit::Constexpr> post_conv_constexprs(const GdnDims& d) {
  return {{"H", d.num_k_heads},
          {"HV", d.num_v_heads},
          {"K", d.head_k_dim},
          {"V", d.head_v_dim},
          {"APPLY_L2NORM", 1},
          {"OUTPUT_G_EXP", 0},
          {"BLOCK_T", kPostConvBlockT},
          {"BK", next_pow2(d.head_k_dim)},
          {"BV", next_pow2(d.head_v_dim)},
          {"NUM_WARPS", kPostConvWarps},
          {"NUM_STAGES", 2}};
}

std::vector<jit::Constexpr> cumsum_constexprs(const GdnDims& d, const jit::KernelConfig& c) {
  return with_config({{"B", 1},
                      {"H", d.num_v_heads},
                      {"BT", kChunkSize},
                      {"REVERSE", 0},
                      {"IS_VARLEN", 1},
                      {"HEAD_FIRST", 0}},
                     c);
}

std::vector<jit::Constexpr> kkt_constexprs(const GdnDims& d, const jit::KernelConfig& c) {
  // vLLM's order: H, Hg, K, BT, BK (the candidate's), IS_VARLEN, USE_G.
  std::vector<jit::Constexpr> v{
      {"H", d.num_v_heads}, {"Hg", d.num_k_heads}, {"K", d.head_k_dim}, {"BT", kChunkSize}};
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);
  v.push_back({"IS_VARLEN", 1});
  v.push_back({"USE_G", 1});
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
  return v;
}

std::vector<jit::Constexpr> solve_tril_constexprs(const GdnDims& d, const jit::KernelConfig& c,
                                                  int sm) {
  return with_config({{"H", d.num_v_heads},
                      {"BT", kChunkSize},
                      {"USE_TMA", sm >= 90 ? 1 : 0},
                      {"IS_VARLEN", 1},
                      {"DOT_PRECISION", 0}},
                     c);
}

std::vector<jit::Constexpr> wy_constexprs(const GdnDims& d, const jit::KernelConfig& c) {
  return with_config({{"H", d.num_v_heads},
                      {"Hg", d.num_k_heads},
                      {"K", d.head_k_dim},
                      {"V", d.head_v_dim},
                      {"BT", kChunkSize},
                      {"BK", 64},
                      {"BV", 64},
                      {"IS_VARLEN", 1}},
                     c);
}

std::vector<jit::Constexpr> h_constexprs(const GdnDims& d, const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"H", d.num_v_heads},
                                {"Hg", d.num_k_heads},
                                {"K", d.head_k_dim},
                                {"V", d.head_v_dim},
                                {"BT", kChunkSize}};
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);  // BV
  for (const char* flag : {"USE_G", "USE_GK", "USE_INITIAL_STATE", "STORE_FINAL_STATE",
                           "SAVE_NEW_VALUE", "IS_VARLEN", "USE_EXP2"}) {
    const std::string f = flag;
    v.push_back({f, (f == "USE_GK" || f == "USE_EXP2") ? 0 : 1});
  }
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
  return v;
}

std::vector<jit::Constexpr> o_constexprs(const GdnDims& d, const jit::KernelConfig& c) {
  std::vector<jit::Constexpr> v{{"H", d.num_v_heads},
                                {"Hg", d.num_k_heads},
                                {"K", d.head_k_dim},
                                {"V", d.head_v_dim},
                                {"BT", kChunkSize}};
  for (const jit::Constexpr& x : c.constexprs) v.push_back(x);  // BK, BV
  v.push_back({"USE_G", 1});
  v.push_back({"IS_VARLEN", 1});
  v.push_back({"NUM_WARPS", c.num_warps});
  v.push_back({"NUM_STAGES", c.num_stages});
  return v;
}

int64_t config_value(const jit::KernelConfig& c, const char* name, int64_t fallback) {
  for (const jit::Constexpr& x : c.constexprs) {
    if (x.name == name) return x.value;
  }
  return fallback;
}

unsigned h_smem_bytes(const GdnDims& d, const jit::KernelConfig& c) {
  const int64_t K = d.head_k_dim, bt = kChunkSize;
  const int64_t bv = std::min<int64_t>(config_value(c, "BV", 64), d.head_v_dim);
  // w and k [stages][BT][K], bf16(S) [BV][K], scaled v_new^T [BV][BT] (rows padded by 8), g
  // [stages][BT]; two stages up to K = 128, one for K = 256 (gdn_chunk_h.cu's kStages)
  const int64_t stages = K <= 128 ? 2 : 1;
  const int64_t elems = 2 * stages * bt * (K + 8) + bv * (K + 8) + bv * (bt + 8);
  return static_cast<unsigned>(elems * 2 + stages * bt * 4);
}

unsigned o_smem_bytes(const GdnDims& d, const jit::KernelConfig& c) {
  const int64_t bt = kChunkSize;
  const int64_t bk = std::min<int64_t>(config_value(c, "BK", 64), d.head_k_dim);
  const int64_t bv = std::min<int64_t>(config_value(c, "BV", 64), d.head_v_dim);
  // q, k [BT][BK], h [BV][BK], scores [BT][BT], v_new [BT][BV] (rows padded by 8), g [BT]
  const int64_t elems = 2 * bt * (bk + 8) + bv * (bk + 8) + bt * (bt + 8) + bt * (bv + 8);
  return static_cast<unsigned>(elems * 2 + bt * 4);
}

// ---- compile cases ----------------------------------------------------------------------------

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  const GdnDims d = gdn_dims(kernels::shapes::kQwen3NextGdnTp1);
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  const int T = 4096;              // do_not_specialize: any T gives these keys
  auto p = [&](DType t) { return KernelArg::pointer(base, t); };
  const KernelArg tt = KernelArg::i32(T);
  std::vector<KernelCompileCase> cases;
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case(kFamily, k, std::move(cs), std::move(args)));
  };
  const int64_t conv = d.conv_dim() + 2 * d.num_v_heads;  // a fused projection row, say
  add(post_conv_kernel(), post_conv_constexprs(d),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kF32), p(DType::kBF16),
       p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kF32), p(DType::kF32),
       KernelArg::i64(conv), KernelArg::i64(conv), KernelArg::i64(conv),
       KernelArg::i64(d.num_k_heads * d.head_k_dim), KernelArg::i64(d.num_k_heads * d.head_k_dim),
       KernelArg::i64(d.num_v_heads * d.head_v_dim), KernelArg::i32(T)});
  add(cumsum_kernel(), cumsum_constexprs(d, cumsum_candidates()[0]),
      {p(DType::kF32), p(DType::kF32), p(DType::kI32), p(DType::kI32), tt});
  add(kkt_kernel(), kkt_constexprs(d, kkt_candidates()[0]),
      {p(DType::kBF16), p(DType::kF32), p(DType::kF32), p(DType::kF32), p(DType::kI32),
       p(DType::kI32), tt});
  add(solve_tril_kernel(), solve_tril_constexprs(d, solve_tril_candidates()[0], 90),
      {p(DType::kF32), p(DType::kBF16), p(DType::kI32), p(DType::kI32), tt});
  add(wy_kernel(), wy_constexprs(d, wy_candidates()[0]),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kF32), p(DType::kBF16), p(DType::kBF16),
       p(DType::kBF16), p(DType::kF32), p(DType::kI32), p(DType::kI32), tt});
  add(h_kernel(), h_constexprs(d, h_candidates()[0]),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kF32),
       KernelArg::pointer(0, DType::kF32), p(DType::kBF16), p(DType::kF32), p(DType::kF32),
       p(DType::kI32), p(DType::kI32), tt});
  add(o_kernel(), o_constexprs(d, o_candidates(90).back()),
      {p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kBF16), p(DType::kF32),
       p(DType::kBF16), p(DType::kI32), p(DType::kI32), KernelArg::f32(0.0883883f), tt,
       KernelArg::i64(d.num_v_heads * d.head_v_dim)});
  return cases;
}

}  // namespace coldstart::gdn_chunk
