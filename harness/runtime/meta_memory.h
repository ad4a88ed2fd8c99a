// Compile-only memory: a counting allocator for torch's meta device. In compile-only mode every
// tensor of the replay (weights, activations, KV cache, workspace, graph inputs) lives on the meta
// device, which has sizes but no memory; with this allocator installed every meta storage the
// process allocates is counted, so memory_stats(kCompileOnly) reports what is allocated and the
// peak since the last reset, as torch's CUDA caching allocator does on a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "harness/common/error.h"

namespace coldstart {

/// The device ran out of memory: torch's caching-allocator message (c10/cuda/CUDACachingAllocator.cpp,
/// the out-of-memory branch of malloc in torch 2.x: "CUDA out of memory. Tried to allocate ...
/// GPU 0 has a total capacity of ... of which ... is free. ..."), raised by the counting meta
/// allocator in compile-only mode when an allocation would pass the target's device memory.
/// Sizes in bytes.
class DeviceOutOfMemoryError : public Error {
 public:
  /// `outside_bytes`: device memory outside torch's allocator (the CUDA context), counted as in
  /// use and never free.
  DeviceOutOfMemoryError(int64_t requested_bytes, int64_t allocated_bytes, int64_t capacity_bytes,
                         int64_t outside_bytes = 0);
  int64_t requested_bytes() const { return requested_; }   ///< the block asked for
  int64_t allocated_bytes() const { return allocated_; }   ///< held by tensors at that moment
  int64_t capacity_bytes() const { return capacity_; }     ///< the device's memory

 private:
  int64_t requested_, allocated_, capacity_;
};

/// torch's spelling of a size in its memory messages (c10's format_size): "512 bytes" up to
/// 1 KiB, then "1.50 KiB", "2.00 MiB", "139.80 GiB" with two decimals.
std::string torch_format_size(int64_t bytes);

/// Installs the counting allocator for the meta device (once per process; later calls do
/// nothing). Storages allocated before the first call are not counted. Thread-safe.
void track_meta_memory();

/// Whether track_meta_memory() has run in this process.
bool meta_memory_tracked();

/// Bytes of meta storage alive now, each rounded as the CUDA caching allocator rounds a block
/// (meta_block_bytes); 0 until track_meta_memory().
int64_t meta_allocated_bytes();

/// The most meta_allocated_bytes() has been since the last reset_meta_peak() (or since
/// tracking began).
int64_t meta_peak_bytes();

/// Starts a new peak window at the current allocation.
void reset_meta_peak();

/// The device memory the meta allocator may hand out in total, in bytes (the target's memory);
/// 0 (the default) is unlimited. An allocation that would take meta_allocated_bytes() past it
/// throws DeviceOutOfMemoryError and allocates nothing. The memory outside torch's allocator
/// (set_meta_outside_allocator_bytes) is taken from it first. Not modelled: the caching
/// allocator's cached but unused segments, so a device runs out somewhat earlier than this says.
void set_meta_memory_limit(int64_t bytes);
int64_t meta_memory_limit();

/// Device memory held outside torch's allocator (the CUDA context, library handles), in bytes:
/// no meta allocation may use it, and memory_stats() counts it as neither free nor reserved, as
/// cudaMemGetInfo and torch's statistics disagree by it on a GPU. 0 (the default) is none.
void set_meta_outside_allocator_bytes(int64_t bytes);
int64_t meta_outside_allocator_bytes();

/// A storage of `nbytes` as the CUDA caching allocator accounts it in allocated_bytes: at least
/// 512 bytes, rounded up to a multiple of 512 (c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize
/// and round_size). A zero-byte storage takes no block.
int64_t meta_block_bytes(int64_t nbytes);

}  // namespace coldstart
