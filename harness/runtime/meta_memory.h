// Compile-only memory: a counting allocator for torch's meta device. In compile-only mode every
// tensor of the replay (weights, activations, KV cache, workspace, graph inputs) lives on the meta
// device, which has sizes but no memory; with this allocator installed every meta storage the
// process allocates is counted, so memory_stats(kCompileOnly) reports what is allocated and the
// peak since the last reset, as torch's CUDA caching allocator does on a GPU.
#pragma once

#include <cstdint>

namespace coldstart {

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

/// A storage of `nbytes` as the CUDA caching allocator accounts it in allocated_bytes: at least
/// 512 bytes, rounded up to a multiple of 512 (c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize
/// and round_size). A zero-byte storage takes no block.
int64_t meta_block_bytes(int64_t nbytes);

}  // namespace coldstart
