#include "harness/replay/kv_cache_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/common/error.h"

namespace coldstart {
namespace {
int64_t cdiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }  // a >= 0, b > 0; no a + b

// a * b, or an Error naming both factors (`what` says what the product is).
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw Error(fmt::format("kv cache plan: {} ({} x {}) does not fit 64 bits", what, a, b));
  }
  return out;
}
}  // namespace

void FreeBlockQueue::reset(int64_t first, int64_t end) {
  if (first < 0 || end > kMaxKvBlocks + 1)
    throw Error(fmt::format("free block queue [{}, {}): block ids are 32-bit", first, end));
  next_ = first;
  end_ = std::max(first, end);
  returned_.clear();
}

int32_t FreeBlockQueue::front() const {
  if (next_ < end_) return static_cast<int32_t>(next_);
  if (returned_.empty()) throw Error("free block queue: front() of an empty queue");
  return returned_.front();
}

void FreeBlockQueue::pop_front() {
  if (next_ < end_) {
    ++next_;
  } else if (!returned_.empty()) {
    returned_.pop_front();
  } else {
    throw Error("free block queue: pop_front() of an empty queue");
  }
}

KvCachePage plan_page(const KvCachePlanInput& in) {
  KvCachePage p;
  p.block_size = in.block_size;
  if (in.block_size < 1 || in.align < 1) throw Error("kv cache plan: block_size and align must be >= 1");
  int64_t attn_token = 0, state_page = 0;
  for (const LayerCacheNeed& l : in.layers) {
    if (l.paged ? l.bytes_per_token <= 0 : l.state_bytes <= 0) {
      throw Error(fmt::format("kv cache plan: layer {} ({}) needs no bytes", l.layer, l.spec));
    }
    if (l.paged && attn_token != 0 && attn_token != l.bytes_per_token) {
      // vLLM needs one page size across groups; layers of different widths are not unified here.
      throw Error(fmt::format("kv cache plan: attention layers of {} and {} bytes per token",
                              attn_token, l.bytes_per_token));
    }
    if (l.paged) attn_token = l.bytes_per_token;
    if (!l.paged) state_page = std::max(state_page, l.state_bytes);
  }
  // Attention pages of block_size tokens; with recurrent layers, the hybrid rule raises the block
  // size until an attention page holds a state page, then pads the state page.
  if (attn_token > 0 && state_page > 0) {
    const int64_t attn_block =
        checked_mul(in.align, cdiv(state_page, checked_mul(in.align, attn_token,
                                                           "an aligned attention token")),
                    "the hybrid block size");
    if (attn_block > INT32_MAX) {
      throw Error(fmt::format("kv cache plan: a state page of {} B needs attention blocks of {} "
                              "tokens, more than 2^31",
                              state_page, attn_block));
    }
    if (attn_block > p.block_size) {
      p.block_size = static_cast<int>(attn_block);
      p.block_size_raised = true;
    }
    p.page_bytes = checked_mul(p.block_size, attn_token, "an attention page");
    p.state_padding_bytes = p.page_bytes - state_page;
  } else if (attn_token > 0) {
    p.page_bytes = checked_mul(p.block_size, attn_token, "an attention page");
  } else {
    p.page_bytes = state_page;
  }
  return p;
}

int64_t kv_cache_bytes_for_request(const KvCachePlanInput& in, int64_t tokens) {
  const KvCachePage page = plan_page(in);
  int64_t bytes = 0;
  for (const LayerCacheNeed& l : in.layers) {
    const int64_t pages = l.paged ? cdiv(std::max<int64_t>(tokens, 0), page.block_size) : 1;
    bytes += checked_mul(pages, page.page_bytes, "the cache bytes of one request in a layer");
  }
  return bytes;
}

std::string python_round2(double x) {
  std::string s = fmt::format("{:.2f}", x);
  while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

void check_startup_free_memory(int64_t free_bytes, int64_t total_bytes, double gpu_memory_utilization) {
  // vllm/v1/worker/utils.py, request_memory (called by gpu_worker.py's Worker.init_device with
  // the init MemorySnapshot): requested = ceil(total * gpu_memory_utilization); a ValueError when
  // the free memory is less. GiB figures are mem_utils.format_gib, round(b / GiB, 2), printed as
  // Python floats; the utilization as Python prints it; the device as torch prints it.
  const double requested = std::ceil(gpu_memory_utilization * static_cast<double>(total_bytes));
  if (static_cast<double>(free_bytes) >= requested) return;
  constexpr double kGiB = 1073741824.0;
  std::string util = fmt::format("{}", gpu_memory_utilization);
  if (util.find_first_of(".e") == std::string::npos) util += ".0";
  throw KvCacheMemoryError(fmt::format(
      "Free memory on device cuda:0 ({}/{} GiB) on startup is less than desired GPU memory utilization "
      "({}, {} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
      python_round2(static_cast<double>(free_bytes) / kGiB),
      python_round2(static_cast<double>(total_bytes) / kGiB), util, python_round2(requested / kGiB)));
}

int64_t estimate_max_model_len(const KvCachePlanInput& in, int64_t available_bytes,
                               int64_t max_model_len) {
  int64_t lo = 0, hi = max_model_len;  // lo fits (or is 0); the answer is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (kv_cache_bytes_for_request(in, mid) <= available_bytes) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

void check_enough_kv_cache_memory(const KvCachePlanInput& in, int64_t available_bytes,
                                  int64_t max_model_len) {
  // vllm/v1/core/kv_cache_utils.py (001cabc1), _check_enough_kv_cache_memory: both are ValueErrors
  // raised while the engine core starts, before any request is served. GiB with two decimals.
  if (available_bytes <= 0) {
    throw KvCacheMemoryError(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.");
  }
  const int64_t needed = kv_cache_bytes_for_request(in, max_model_len);
  if (needed <= available_bytes) return;
  constexpr double kGiB = 1073741824.0;
  throw KvCacheMemoryError(fmt::format(
      "To serve at least one request with the models's max seq len ({}), ({:.2f} GiB KV cache is "
      "needed, which is larger than the available KV cache memory ({:.2f} GiB). Based on the "
      "available memory, the estimated maximum model length is {}. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
      max_model_len, static_cast<double>(needed) / kGiB, static_cast<double>(available_bytes) / kGiB,
      estimate_max_model_len(in, available_bytes, max_model_len)));
}

KvCachePlan plan_kv_cache(const KvCachePlanInput& in) {
  const KvCachePage page = plan_page(in);
  KvCachePlan p;
  p.block_size = page.block_size;
  p.block_size_raised = page.block_size_raised;
  p.page_bytes = page.page_bytes;
  p.state_padding_bytes = page.state_padding_bytes;
  int max_layer = -1;
  std::map<std::string, std::vector<int>> by_spec;
  std::vector<std::string> spec_order;
  for (const LayerCacheNeed& l : in.layers) {
    max_layer = std::max(max_layer, l.layer);
    if (!by_spec.count(l.spec)) spec_order.push_back(l.spec);
    by_spec[l.spec].push_back(l.layer);
  }
  p.tensor_of_layer.assign(max_layer + 1, -1);
  if (in.layers.empty()) return p;
  // Groups of group_size layers of one spec; one shared tensor per position in a group.
  size_t group_size = SIZE_MAX;
  for (const auto& [spec, layers] : by_spec) group_size = std::min(group_size, layers.size());
  p.group_size = static_cast<int>(group_size);
  for (const std::string& spec : spec_order) {
    const auto& layers = by_spec[spec];
    for (size_t i = 0; i < layers.size(); i += group_size) {
      std::vector<int> g(layers.begin() + i, layers.begin() + std::min(layers.size(), i + group_size));
      for (size_t j = 0; j < g.size(); ++j) p.tensor_of_layer[g[j]] = static_cast<int>(j);
      p.groups.push_back(std::move(g));
      p.group_specs.push_back(spec);
    }
  }
  if (in.num_gpu_blocks) {
    p.num_blocks = *in.num_gpu_blocks;
  } else {
    // Sized from memory: as many as fit, up to what 32-bit block ids can name.
    p.num_blocks = std::min(in.available_bytes / p.page_bytes / p.group_size, kMaxKvBlocks);
  }
  if (p.num_blocks < in.min_blocks) {
    throw Error(fmt::format("KV cache too small: {} blocks of {} B, the requests need {}",
                            p.num_blocks, p.page_bytes, in.min_blocks));
  }
  if (p.num_blocks > kMaxKvBlocks) {
    throw Error(fmt::format("kv cache plan: {} blocks, more than {} (block ids are 32-bit)",
                            p.num_blocks, kMaxKvBlocks));
  }
  checked_mul(checked_mul(p.page_bytes, p.num_blocks, "the bytes of one cache tensor"),
              p.group_size, "the bytes of all cache tensors");
  return p;
}

}  // namespace coldstart
