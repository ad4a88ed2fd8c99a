// Workspace manager: one flat byte buffer per micro-batch slot, shared by every layer, that only
// grows and is locked at the end of CUDA graph capture. Mirrors vLLM V1's WorkspaceManager
// (vllm/v1/worker/workspace.py, 2025-2026), whose lock produces the public crash
// "Workspace is locked but allocation from '...:_continuation_prefill' requires 2.00 MB, current
// size is 0.26 MB" (vLLM issue #41565).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "harness/common/error.h"
#include "harness/runtime/graph_ledger.h"

namespace coldstart {

/// What a workspace does when a request needs more than it holds (engine.workspace_policy; the
/// engines each mirrors and their texts are cited in workspace_policy.engine_keys.h).
enum class WorkspacePolicy {
  kLock,    ///< grows until lock(), then raises WorkspaceLockedError (vLLM V1)
  kGrow,    ///< never locks: growth reallocates and releases the old block
  kFixed,   ///< one buffer of a configured size, allocated up front; overflow raises
            ///< WorkspaceOverflowError
  kResize,  ///< one shared tensor resized in place (resize_): new storage, the old block released
};

/// "lock", "grow", "fixed", "resize".
const char* workspace_policy_name(WorkspacePolicy policy);
/// The policy named `name` (one of workspace_policy_name's); throws Error for any other.
WorkspacePolicy workspace_policy_from_name(const std::string& name);

/// A request larger than a fixed workspace (WorkspacePolicy::kFixed). `what()` is the text the
/// mirrored engine raises (workspace.cpp cites it).
class WorkspaceOverflowError : public Error {
 public:
  WorkspaceOverflowError(const std::string& text, int64_t required_bytes, int64_t current_bytes)
      : Error(text), required_bytes(required_bytes), current_bytes(current_bytes) {}
  int64_t required_bytes;
  int64_t current_bytes;
};

/// Growth of a locked workspace. `what()` is vLLM's assertion text, exactly:
/// "Workspace is locked but allocation from '<file>:<line>:<function>' requires X.XX MB, current
/// size is Y.YY MB. Workspace growth is not allowed after locking." (MB = 2^20 bytes).
class WorkspaceLockedError : public Error {
 public:
  WorkspaceLockedError(const std::string& text, int64_t required_bytes, int64_t current_bytes)
      : Error(text), required_bytes(required_bytes), current_bytes(current_bytes) {}
  int64_t required_bytes;
  int64_t current_bytes;
};

/// One sub-allocation: a shape and dtype; its bytes are numel * element size, rounded up to 256.
struct WorkspaceRequest {
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
};

/// Rounds `bytes` up to the workspace's 256-byte sub-allocation granularity.
constexpr int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// The workspace of one engine. Sizes are bytes.
class WorkspaceManager {
 public:
  /// `device`: where buffers live (CUDA, or meta in compile-only mode, where accounting is
  /// identical). `num_slots`: micro-batch slots (vLLM's num_ubatches; 1 without DBO). `policy`:
  /// what growth does; kFixed allocates `fixed_bytes` (> 0) per slot on its first request (as
  /// vLLM's FlashInfer backend allocates its workspace buffer on first use), the other policies
  /// ignore it. Throws Error for kFixed without a size.
  explicit WorkspaceManager(c10::Device device, int num_slots = 1,
                            WorkspacePolicy policy = WorkspacePolicy::kLock,
                            int64_t fixed_bytes = 0);

  /// Reports every slot buffer to `ledger` (named "workspace (slot i)"): each growth is a move
  /// (reallocated, or resized in place under kResize) and get_simultaneous() marks the slot as
  /// used by the graph being captured. nullptr stops reporting.
  void set_ledger(GraphLedger* ledger);
  WorkspacePolicy policy() const { return policy_; }

  /// Returns views of the current slot's buffer, one per request, laid out back to back at
  /// 256-byte-rounded offsets. When the buffer is smaller than the rounded sum, every slot grows to
  /// exactly that sum (the old buffer is dropped; kResize resizes the slot's tensor in place).
  /// After lock(), growth throws WorkspaceLockedError naming `caller`; a fixed workspace throws
  /// WorkspaceOverflowError instead of growing. The views alias one buffer: they are valid until the
  /// next growth, and two calls return overlapping memory, as in vLLM.
  std::vector<at::Tensor> get_simultaneous(const std::vector<WorkspaceRequest>& requests,
                                           const SourceLocation& caller);

  /// Grows every slot to at least `bytes` (vLLM's reserve path; used by the reserve-max warmer).
  /// Throws WorkspaceLockedError after lock() when growth would be needed, and
  /// WorkspaceOverflowError when a fixed workspace is smaller.
  void reserve(int64_t bytes, const SourceLocation& caller);

  /// Forbids growth from now on under kLock (vLLM's lock_workspace(), called at the end of graph
  /// capture); the other policies only record the size.
  void lock();
  bool locked() const { return locked_; }

  /// Selects the micro-batch slot later calls use. Throws Error when out of range.
  void set_slot(int slot);

  /// Current size of the selected slot's buffer, bytes (0 before first use).
  int64_t current_bytes() const;
  /// Largest rounded sum any request asked for so far, bytes (including a request that failed).
  int64_t peak_requested_bytes() const { return peak_requested_; }
  /// Size at lock() time (0 if never locked), bytes.
  int64_t locked_bytes() const { return locked_bytes_; }
  int num_slots() const { return static_cast<int>(buffers_.size()); }
  /// Called after every growth with the new size (for logging / the replay's trace).
  void set_on_grow(std::function<void(int64_t new_bytes, const SourceLocation&)> fn) {
    on_grow_ = std::move(fn);
  }

 private:
  void ensure(int64_t required, const SourceLocation& caller);
  /// Slot i's tensor now holds sizes_[i] bytes: registers it with the ledger on its first
  /// memory, else reports the move `how`.
  void report(size_t i, BufferMove how);

  c10::Device device_;
  WorkspacePolicy policy_ = WorkspacePolicy::kLock;
  GraphLedger* ledger_ = nullptr;
  std::vector<GraphLedger::BufferId> ledger_ids_;  ///< per slot, -1 until registered
  std::vector<at::Tensor> buffers_;
  std::vector<int64_t> sizes_;
  int slot_ = 0;
  bool locked_ = false;
  int64_t peak_requested_ = 0;
  int64_t locked_bytes_ = 0;
  int64_t fixed_bytes_ = 0;  ///< kFixed: each slot's size once first used
  std::function<void(int64_t, const SourceLocation&)> on_grow_;
};

/// "X.XX" with MB = 2^20 bytes, as vLLM formats workspace sizes.
std::string format_mb(int64_t bytes);

}  // namespace coldstart
