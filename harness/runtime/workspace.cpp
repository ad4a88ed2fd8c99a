#include "harness/runtime/workspace.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace coldstart {

std::string format_mb(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

WorkspaceManager::WorkspaceManager(c10::Device device, int num_slots) : device_(device) {
  CS_CHECK(num_slots >= 1, "a workspace needs at least one slot");
  buffers_.resize(num_slots);
  sizes_.assign(num_slots, 0);
}

void WorkspaceManager::set_slot(int slot) {
  CS_CHECK(slot >= 0 && slot < num_slots(), "workspace slot out of range");
  slot_ = slot;
}

int64_t WorkspaceManager::current_bytes() const { return sizes_[slot_]; }

void WorkspaceManager::ensure(int64_t required, const SourceLocation& caller) {
  peak_requested_ = std::max(peak_requested_, required);
  if (sizes_[slot_] >= required) return;
  if (locked_) {
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
    buffers_[i] = at::Tensor();
    buffers_[i] = at::empty({required}, at::TensorOptions().dtype(at::kByte).device(device_));
    sizes_[i] = required;
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
