// Argument validation and launch helpers shared by the kernel families' torch launch wrappers
// (turboquant/turboquant.cpp, paged/paged.cpp). Torch-side only (cs_kernels).
//
// Every check names the wrapper and the argument in its error text, with the family as prefix:
// "paged::store: argument 'key' must have dtype BFloat16, got Float".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"

namespace coldstart::kernels {

/// The wrapper a check runs for: its family prefix and its name ("paged", "store"); error texts
/// start "<family>::<name>: ".
struct CallSite {
  const char* family;
  const char* name;
};

/// Throws coldstart::Error "<family>::<name>: argument '<arg>' <what>".
[[noreturn]] void fail(const CallSite& fn, const char* arg, const std::string& what);

/// A tensor's shape as "[2, 3, 4]".
std::string shape_str(const at::Tensor& t);

/// What check() requires of a tensor's strides.
enum class Layout { kAny, kInnerContiguous, kContiguous };

/// Fails unless `t` is defined and on a CUDA device (or the meta device in compile-only mode).
void check_on_device(const CallSite& fn, const char* arg, const at::Tensor& t);

/// Checks dtype, rank, device kind (CUDA, or meta in compile-only mode) and optionally full
/// contiguity or a contiguous innermost dimension.
void check(const CallSite& fn, const char* arg, const at::Tensor& t, at::ScalarType dtype,
           int64_t dim, Layout layout);

/// Fails unless dimension `d` of `t` is `want`.
void check_size(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t d,
                int64_t want);

/// Fails unless `t` has exactly `shape`: its rank and every dimension.
void check_shape(const CallSite& fn, const char* arg, const at::Tensor& t,
                 std::initializer_list<int64_t> shape);

/// Fails unless `t`'s data starts at a multiple of `bytes` (kernels that move bf16 pairs as
/// 32-bit words need 4; a TMA descriptor's base 16; scratch 256).
void check_aligned(const CallSite& fn, const char* arg, const at::Tensor& t, uint64_t bytes);

/// The largest CUDA grid extents: x, and y or z.
inline constexpr int64_t kMaxGridX = 2147483647;
inline constexpr int64_t kMaxGridYZ = 65535;

/// Fails unless `t` is on the device of `ref` (the argument the others are compared with).
void check_same_device(const CallSite& fn, const at::Tensor& ref, const char* arg,
                       const at::Tensor& t);

/// The number of KV splits of a split-KV decode scratch `mid_o` [B, Hq, S, D + 1] (dimension 2);
/// fails unless it is in 1..1024.
int64_t check_kv_splits(const CallSite& fn, const at::Tensor& mid_o);

/// `v` as a kernel's int32 argument; fails (naming `arg`) when it does not fit.
int32_t to_i32(const CallSite& fn, const char* arg, int64_t v);

/// `v` as a grid dimension; throws Error "<family>::<name>: grid <what> = <v> out of range"
/// unless 0 < v <= max.
unsigned grid_dim(const CallSite& fn, const char* what, int64_t v, int64_t max);

/// A TMA tensor-map argument over `t` (its data address; compile-only: the storage offset):
/// `dims` innermost first in elements, `byte_strides` of dimensions 1.. in bytes, `box` in
/// elements, `swizzle` 0 / 32 / 64 / 128 bytes. Fails (coldstart::Error naming the wrapper and
/// the argument) when TMA cannot encode it (alignment, strides, box; TensorMapSpec::validate).
jit::KernelArg tensor_map_arg(const CallSite& fn, const char* arg, const at::Tensor& t, jit::DType dtype,
                              std::initializer_list<int64_t> dims, std::initializer_list<int64_t> byte_strides,
                              std::initializer_list<uint32_t> box, uint32_t swizzle);

/// torch's current stream on the tensor's device; nullptr on the meta device (no launch happens).
void* stream_for(const at::Tensor& t);

/// Launch dimensions: grid (gx, gy, gz), a 1-D block of `threads`, `shared_bytes` of dynamic
/// shared memory (none by default).
jit::LaunchDims dims(unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                     unsigned shared_bytes = 0);

/// Autotunes `kernel` over `candidates` under `key` (jit::autotune: measured on the first call
/// for a key, remembered after), then calls `launch` with the pick under a jit::SelectionScope,
/// so any compile the launch causes records which selection it came from. `stream` is where the
/// candidates are timed. Errors are autotune's and the launch's.
void tuned_launch(jit::JitRuntime& rt, const jit::KernelSource& kernel, const std::string& key,
                  const std::vector<jit::KernelConfig>& candidates, void* stream,
                  const std::function<void(const jit::KernelConfig&)>& launch);

// Pieces of the wrappers every family has: the cache store's token inputs and the split-KV decode
// (stage 1's batch arguments, stage 2 whole).

/// A cache store's token inputs, checked before the cache: key and value bf16 [N, Hk, D] with a
/// contiguous innermost dimension (any token/head strides), slot_mapping int64 [N], contiguous
/// (dtypes, ranks, device kinds, layouts).
void check_store_inputs(const CallSite& fn, const at::Tensor& key, const at::Tensor& value,
                        const at::Tensor& slot_mapping);

/// A cache store's token inputs against the layout, after the cache: key is [N, num_kv_heads,
/// head_dim], value has key's shape, slot_mapping N entries, all on the device of `cache`.
/// Returns N.
int64_t check_store_shapes(const CallSite& fn, int64_t num_kv_heads, int64_t head_dim,
                           const at::Tensor& cache, const at::Tensor& key,
                           const at::Tensor& value, const at::Tensor& slot_mapping);

/// A cache store's grid: x = tokens, y = KV heads (at most 65535), `threads` threads a block.
jit::LaunchDims store_grid(const CallSite& fn, int64_t tokens, int64_t kv_heads,
                           unsigned threads);

/// Split-KV decode stage 1's tables, checked after the query and the cache: block_table int32
/// [>= B, W] with a contiguous innermost dimension, seq_lens int32 [>= B] and mid_o float32
/// [B, Hq, S, D + 1], contiguous (dtypes, ranks, device kinds, layouts).
void check_decode_tables(const CallSite& fn, const at::Tensor& block_table,
                         const at::Tensor& seq_lens, const at::Tensor& mid_o);

/// The split-KV decode grid: x = batch (B), y = query head groups (Hq / the heads one block
/// serves, at most 65535), z = `splits`, with `threads` threads a block; grid_dim's error when B
/// or the group count is out of range.
jit::LaunchDims decode_grid(const CallSite& fn, int64_t batch, int64_t head_groups, int64_t splits,
                            unsigned threads);

/// Split-KV decode stage 1's batch arguments, for a batch of B = q.size(0) sequences and
/// Hq = q.size(1) query heads (dtypes, ranks and q's own shape are the caller's to check first):
/// block_table has >= B rows, seq_lens >= B entries, mid_o is [B, Hq, S, head_dim + 1] with S in
/// 1..1024; q, block_table, seq_lens and mid_o are on the device of `cache`. Returns S.
int64_t check_decode_batch(const CallSite& fn, int64_t head_dim, const at::Tensor& cache,
                           const at::Tensor& q, const at::Tensor& block_table,
                           const at::Tensor& seq_lens, const at::Tensor& mid_o);

/// Views of a split-KV decode scratch inside `buffer`, a family's decode workspace:
/// - mid_o: float32 [batch, num_q_heads, num_kv_splits, head_dim + 1] at byte 0
/// - lse: float32 [batch, num_q_heads] at byte `lse_offset` (the family's layout may put other
///   buffers between the two)
struct SplitKvViews {
  at::Tensor mid_o;
  at::Tensor lse;
};

/// Checks `buffer` (uint8, 1-D, contiguous; at least `need` bytes, the family's
/// decode_workspace_bytes for this geometry) and returns its split-KV views (SplitKvViews). Works
/// on the meta device. Throws Error "<family>::<name>: bad geometry ..." unless batch and
/// num_q_heads are >= 0 and head_dim and num_kv_splits > 0; fails naming `buffer` when it is
/// smaller than `need`.
SplitKvViews split_kv_views(const CallSite& fn, const at::Tensor& buffer, int64_t batch,
                            int64_t num_q_heads, int64_t head_dim, int64_t num_kv_splits,
                            int64_t need, int64_t lse_offset);

/// Split-KV decode stage 2, which every family's decode ends with: validates
/// - mid_o: float32 [B, Hq, S, head_dim + 1], contiguous (stage 1's output; S in 1..1024)
/// - out: bf16 [B, Hq, head_dim], innermost contiguous
/// - lse: float32 [B, Hq], contiguous
/// then launches `kernel` (arguments mid_o, out, lse, out_stride_b, out_stride_h) with
/// `constexprs(S)` on grid (B, Hq) of `threads` threads, on torch's current stream. B == 0 or
/// Hq == 0 launches nothing.
void launch_decode_stage2(jit::JitRuntime& rt, const CallSite& fn, const jit::KernelSource& kernel,
                          const std::function<std::vector<jit::Constexpr>(int)>& constexprs,
                          int64_t head_dim, unsigned threads, const at::Tensor& mid_o,
                          const at::Tensor& out, const at::Tensor& lse);

}  // namespace coldstart::kernels
