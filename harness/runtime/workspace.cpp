#include "harness/runtime/workspace.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "harness/runtime/device.h"

namespace coldstart {

std::string format_mb(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

const char* workspace_policy_name(WorkspacePolicy policy) {
  switch (policy) {
    case WorkspacePolicy::kLock: return "lock";
    case WorkspacePolicy::kGrow: return "grow";
    case WorkspacePolicy::kFixed: return "fixed";
    case WorkspacePolicy::kResize: return "resize";
  }
  return "lock";
}

WorkspacePolicy workspace_policy_from_name(const std::string& name) {
  for (WorkspacePolicy p : {WorkspacePolicy::kLock, WorkspacePolicy::kGrow, WorkspacePolicy::kFixed,
                            WorkspacePolicy::kResize})
    if (name == workspace_policy_name(p)) return p;
  throw Error("unknown workspace policy '" + name + "' (lock, grow, fixed, resize)");
}

namespace {
/// The error a fixed workspace raises when a request needs more than it holds: FlashInfer's
/// AlignedAllocator::aligned_alloc (include/flashinfer/allocator.h, flashinfer-ai/flashinfer at
/// fb28d724), whose workspace buffers are allocated once and never grow (vLLM's
/// VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, SGLang's global_workspace_buffer). The name is the
/// caller; the size is the whole request (its parts laid out at 256-byte offsets from the start)
/// and the space available the buffer's size.
std::string fixed_overflow_text(int64_t required, int64_t size, const SourceLocation& caller) {
  return fmt::format("Buffer overflow when allocating memory for {} with size {} and alignment "
                     "256, but only {} bytes available in AlignedAllocator. Increase the "
                     "workspace buffer size.",
                     caller.str(), required, size);
}
}  // namespace

WorkspaceManager::WorkspaceManager(c10::Device device, int num_slots, WorkspacePolicy policy,
                                   int64_t fixed_bytes)
    : device_(device), policy_(policy) {
  CS_CHECK(num_slots >= 1, "a workspace needs at least one slot");
  buffers_.resize(num_slots);
  sizes_.assign(num_slots, 0);
  ledger_ids_.assign(num_slots, -1);
  if (policy_ == WorkspacePolicy::kFixed) {
    CS_CHECK(fixed_bytes > 0, "a fixed workspace needs a size");
    // Allocated on first use, not here: vLLM's FlashInfer backend takes its workspace buffer
    // lazily (FlashInferMetadataBuilder._get_workspace_buffer, on the first plan with attention
    // metadata), after the profile run sized the KV cache, so the KV budget does not leave room
    // for it (open PR #46883 proposes reserving it first).
    fixed_bytes_ = fixed_bytes;
  }
}

void WorkspaceManager::set_ledger(GraphLedger* ledger) {
  ledger_ = ledger;
  ledger_ids_.assign(buffers_.size(), -1);
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (sizes_[i] > 0) report(i, BufferMove::kReallocated);
}

void WorkspaceManager::report(size_t i, BufferMove how) {
  if (ledger_ == nullptr) return;
  const uint64_t address = device_.is_cuda() && buffers_[i].defined()
                               ? reinterpret_cast<uint64_t>(buffers_[i].data_ptr())
                               : 0;
  if (ledger_ids_[i] < 0) {
    // The slot's first memory: no graph can have captured it before.
    ledger_ids_[i] = ledger_->add_buffer(fmt::format("the workspace (slot {})", i), sizes_[i], address);
    return;
  }
  ledger_->move(ledger_ids_[i], how, sizes_[i], address);
}

void WorkspaceManager::set_slot(int slot) {
  CS_CHECK(slot >= 0 && slot < num_slots(), "workspace slot out of range");
  slot_ = slot;
}

int64_t WorkspaceManager::current_bytes() const { return sizes_[slot_]; }

void WorkspaceManager::ensure(int64_t required, const SourceLocation& caller) {
  peak_requested_ = std::max(peak_requested_, required);
  if (policy_ == WorkspacePolicy::kFixed && sizes_[slot_] == 0) {
    // The first request of a fixed workspace allocates every slot at its configured size (it may
    // run out of device memory here).
    for (size_t i = 0; i < buffers_.size(); ++i) {
      buffers_[i] = at::empty({fixed_bytes_}, at::TensorOptions().dtype(at::kByte).device(device_));
      sizes_[i] = fixed_bytes_;
      report(i, BufferMove::kReallocated);
    }
  }
  if (sizes_[slot_] >= required) return;
  if (policy_ == WorkspacePolicy::kFixed) {
    throw WorkspaceOverflowError(fixed_overflow_text(required, sizes_[slot_], caller), required,
                                 sizes_[slot_]);
  }
  if (locked_ && policy_ == WorkspacePolicy::kLock) {
    throw WorkspaceLockedError(
        fmt::format("Workspace is locked but allocation from '{}' requires {} MB, current size is "
                    "{} MB. Workspace growth is not allowed after locking.",
                    caller.str(), format_mb(required), format_mb(sizes_[slot_])),
        required, sizes_[slot_]);
  }
  // Every slot grows together, to exactly the requested sum; the old buffer is released first so
  // peak device memory is the new size, as in vLLM.
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (sizes_[i] >= required) continue;
    if (policy_ == WorkspacePolicy::kResize && buffers_[i].defined()) {
      // resize_() keeps the tensor (and every view of its storage) but moves the storage to a new,
      // larger block and releases the old one; a graph captured earlier still holds the old one.
      if (device_.is_meta()) {
        // Compile-only: the same move done by hand. libtorch 1.x resizes a meta tensor through
        // its CPU path, which copies the old bytes (there are none behind a meta storage; with
        // the counting allocator of meta_memory.h its pointer test passes and the copy faults);
        // 2.x only relabels the storage's size, which the allocator would never see.
        at::Tensor grown = at::empty({required}, buffers_[i].options());
        buffers_[i].set_(grown.storage(), 0, {required}, {1});
      } else {
        buffers_[i].resize_({required});
      }
    } else {
      // vLLM's WorkspaceManager._ensure_workspace_size (vllm/v1/worker/workspace.py at
      // 4ff865c38): drop the old tensor, torch.accelerator.empty_cache(), then allocate the new
      // size, so the old block goes back to the driver before the new one is taken.
      // Not while a graph is being captured (a growth inside a capture body): torch's
      // empty_cache during capture is not something this harness has verified, and the new
      // block comes from the graph's private pool then anyway.
      buffers_[i] = at::Tensor();
      if (device_.is_cuda() && (ledger_ == nullptr || !ledger_->capturing())) empty_device_cache();
      buffers_[i] = at::empty({required}, at::TensorOptions().dtype(at::kByte).device(device_));
    }
    sizes_[i] = required;
    report(i, policy_ == WorkspacePolicy::kResize ? BufferMove::kResizedInPlace
                                                  : BufferMove::kReallocated);
  }
  if (on_grow_) on_grow_(required, caller);
}

std::vector<at::Tensor> WorkspaceManager::get_simultaneous(
    const std::vector<WorkspaceRequest>& requests, const SourceLocation& caller) {
  std::vector<int64_t> actual(requests.size());
  std::vector<int64_t> offsets(requests.size());
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : requests[i].shape) {
      CS_CHECK(d >= 0, "negative workspace dimension");
      numel *= d;
    }
    actual[i] = numel * static_cast<int64_t>(c10::elementSize(requests[i].dtype));
    offsets[i] = total;
    total += round_up_256(actual[i]);
  }
  ensure(total, caller);
  if (ledger_ != nullptr && ledger_ids_[slot_] >= 0) ledger_->touch(ledger_ids_[slot_]);
  std::vector<at::Tensor> views;
  views.reserve(requests.size());
  const at::Tensor& buf = buffers_[slot_];
  for (size_t i = 0; i < requests.size(); ++i) {
    views.push_back(buf.narrow(0, offsets[i], actual[i]).view(requests[i].dtype).view(requests[i].shape));
  }
  return views;
}

void WorkspaceManager::reserve(int64_t bytes, const SourceLocation& caller) {
  ensure(bytes, caller);
}

void WorkspaceManager::lock() {
  locked_ = true;
  locked_bytes_ = sizes_[slot_];
}

}  // namespace coldstart
