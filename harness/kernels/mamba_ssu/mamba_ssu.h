// Mamba2 selective state update for decode (vLLM's selective_state_update, Triton backend, as
// MambaMixer2 calls it): the torch-side launch wrapper of mamba_ssu_update (mamba_ssu_kernels.h
// has the torch-free part: the vLLM sources mirrored, the config choice, the constexprs).
//
// The wrapper validates dtypes, ranks, shapes and devices (throwing coldstart::Error
// "mamba_ssu::<function>: argument '<arg>' ...") and launches with JitRuntime::launch on torch's
// current CUDA stream. In compile-only mode the tensors live on the meta device and nothing is
// launched: the wrapper never reads tensor data, calls .item() or synchronizes, so the compile
// keys equal a GPU run's. As in Triton, every integer and pointer argument but N is specialized
// (== 1, % 16, 16-byte alignment), and the None-ness of the optional tensors (D, dt_bias,
// state_batch_indices; z, num_accepted_tokens and cu_seqlens are always None here) is part of the
// key through vLLM's HAS_* / IS_* constexprs.
//
// Units: batch rows (one decode token each), heads, head dim P, state size N; strides in elements.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/mamba_ssu/mamba_ssu_kernels.h"

namespace coldstart::mamba_ssu {

/// One decode step of B requests (kernel mamba_ssu_update; vLLM's selective_state_update with
/// z, num_accepted_tokens and cu_seqlens None). For row b and head h (group g = h / (H / G)):
///   dt'  = softplus(dt[b, h, :] + dt_bias[h, :])   (softplus when dt_softplus; + when given)
///   s    = state[src] * exp(dt' * A[h]) + (dt' * B[b, g]) (outer) x[b, h]   [P, N]
///   out[b, h, :] = s . C[b, g] + D[h, :] * x[b, h, :]   (+ D term when given)
///   state[dst] = s
/// with src = state_batch_indices[b], dst = dst_state_batch_indices[b] (both b when
/// state_batch_indices is undefined). src == null_block_id: s starts from zeros and nothing is
/// stored (out is still written), as in vLLM; any other index must be in [0, slots) (not checked,
/// as in vLLM). Rows should use distinct slots (programs run concurrently).
/// - state: float32, bfloat16 or float16 [slots, H, P, N], any strides (MambaMixer2: a view into
///   the per-request pages, slot stride = page stride, the rest contiguous); N <= 1024
/// - x: [B, H, P]; dt: [B, H, P] (MambaMixer2: dt[:, :, None].expand(-1, -1, P)); out: [B, H, P]
/// - A: [H, P, N] (MambaMixer2: float32 A[:, None, None].expand(-1, P, N))
/// - B, C: [B, G, N], G dividing H (views of the conv output)
/// - D, dt_bias: [H, P] (MambaMixer2: [:, None].expand(-1, P)) or undefined (None)
/// - state_batch_indices, dst_state_batch_indices: int32 [>= B] or [>= B, >= 1] (column 0 is
///   used), any strides, or undefined: dst undefined = the same as state_batch_indices
/// - every tensor but the indices: float32, bfloat16 or float16, any strides (vLLM passes the
///   strides); all on one device
/// The launch config is select_config(src, P, N, state dtype, B, H, is_blackwell_arch(rt.arch()))
/// (vLLM's tuned table, else its heuristic); the launch runs under a jit::SelectionScope of it and
/// the Selection is returned. TIE_HDIM is vLLM's: A, dt and dt_bias stride-0 along P, A along N.
/// Compile key: the constexprs (update_constexprs), the strides, dims and pointers (Triton's
/// specialization; N, the batch size, is not specialized: do_not_specialize), null_block_id
/// (a specialized integer) and the dtypes. B == 0 launches nothing.
/// Throws coldstart::Error naming the argument on any violation, InputError for a bad table file.
jit::Selection selective_state_update(jit::JitRuntime& rt, const ConfigSource& src,
                                      const at::Tensor& state, const at::Tensor& x,
                                      const at::Tensor& dt, const at::Tensor& A,
                                      const at::Tensor& B, const at::Tensor& C,
                                      const at::Tensor& D, const at::Tensor& dt_bias,
                                      bool dt_softplus, const at::Tensor& state_batch_indices,
                                      const at::Tensor& dst_state_batch_indices,
                                      const at::Tensor& out, int64_t null_block_id = kNullBlockId);

/// selective_state_update with a given selection (sel.config: constexpr BLOCK_SIZE_M and
/// num_warps; the compiles record sel's provenance), for tests and benchmarks that force a
/// config. Throws InputError when sel.config has no BLOCK_SIZE_M or bad values.
void selective_state_update_with(jit::JitRuntime& rt, const jit::Selection& sel,
                                 const at::Tensor& state, const at::Tensor& x,
                                 const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                                 const at::Tensor& C, const at::Tensor& D,
                                 const at::Tensor& dt_bias, bool dt_softplus,
                                 const at::Tensor& state_batch_indices,
                                 const at::Tensor& dst_state_batch_indices, const at::Tensor& out,
                                 int64_t null_block_id = kNullBlockId);

}  // namespace coldstart::mamba_ssu
