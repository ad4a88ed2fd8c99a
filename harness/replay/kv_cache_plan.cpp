#include "harness/replay/kv_cache_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "harness/common/error.h"

namespace coldstart {
namespace {
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

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
    const int64_t attn_block = in.align * cdiv(state_page, in.align * attn_token);
    if (attn_block > p.block_size) {
      p.block_size = static_cast<int>(attn_block);
      p.block_size_raised = true;
    }
    p.page_bytes = p.block_size * attn_token;
    p.state_padding_bytes = p.page_bytes - state_page;
  } else if (attn_token > 0) {
    p.page_bytes = p.block_size * attn_token;
  } else {
    p.page_bytes = state_page;
  }
  return p;
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
    p.num_blocks = in.available_bytes / p.page_bytes / p.group_size;
  }
  if (p.num_blocks < in.min_blocks) {
    throw Error(fmt::format("KV cache too small: {} blocks of {} B, the requests need {}",
                            p.num_blocks, p.page_bytes, in.min_blocks));
  }
  return p;
}

}  // namespace coldstart
