#include "harness/replay/kv_cache_plan.h"

#include <gtest/gtest.h>

#include <cmath>

#include "harness/common/error.h"

namespace coldstart {
namespace {

LayerCacheNeed attn(int layer, int64_t per_token) { return {layer, "attention", true, per_token, 0}; }
LayerCacheNeed state(int layer, int64_t bytes) { return {layer, "gdn", false, 0, bytes}; }

TEST(KvCachePlan, DenseModelOneTensorPerLayer) {
  KvCachePlanInput in;
  for (int l = 0; l < 36; ++l) in.layers.push_back(attn(l, 2 * 8 * 128 * 2));
  in.block_size = 16;
  in.available_bytes = 1000ll * 16 * 4096 * 36;  // 1000 pages per layer
  KvCachePlan p = plan_kv_cache(in);
  EXPECT_EQ(p.block_size, 16);
  EXPECT_FALSE(p.block_size_raised);
  EXPECT_EQ(p.page_bytes, 16 * 4096);
  EXPECT_EQ(p.group_size, 36);
  EXPECT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.num_blocks, 1000);
  for (int l = 0; l < 36; ++l) EXPECT_EQ(p.tensor_of_layer[l], l);
}

TEST(KvCachePlan, HybridRaisesTheBlockSizeAndSharesTensorsAcrossGroups) {
  // Qwen3-Next-like: 36 GDN + 12 attention layers (vLLM's example: group_size 12, 4 groups, 12
  // tensors). GDN state per request: conv (3, 8192) bf16 + ssm (32, 128, 128) fp32.
  const int64_t gdn = 3 * 8192 * 2 + 32 * 128 * 128 * 4;
  const int64_t tok = 2 * 2 * 256 * 2;  // K+V, 2 KV heads of 256, bf16
  KvCachePlanInput in;
  for (int l = 0; l < 48; ++l) in.layers.push_back(l % 4 == 3 ? attn(l, tok) : state(l, gdn));
  in.block_size = 16;
  in.num_gpu_blocks = 100;
  KvCachePlan p = plan_kv_cache(in);
  // attn_block = 16 * cdiv(gdn, 16 * tok) tokens.
  const int64_t want_block = 16 * ((gdn + 16 * tok - 1) / (16 * tok));
  EXPECT_EQ(p.block_size, want_block);
  EXPECT_TRUE(p.block_size_raised);
  EXPECT_EQ(p.page_bytes, want_block * tok);
  EXPECT_GE(p.page_bytes, gdn);
  EXPECT_EQ(p.state_padding_bytes, p.page_bytes - gdn);
  EXPECT_EQ(p.group_size, 12);
  EXPECT_EQ(p.groups.size(), 4u);  // 3 GDN groups + 1 attention group
  // One layer of every group per tensor: tensor 0 holds the first layer of each group.
  int in_tensor0 = 0;
  for (int l = 0; l < 48; ++l) in_tensor0 += p.tensor_of_layer[l] == 0;
  EXPECT_EQ(in_tensor0, 4);
}

TEST(KvCacheMemory, OneRequestIsCdivPagesPerAttentionLayerAndOnePagePerStateLayer) {
  KvCachePlanInput in;
  in.layers = {attn(0, 4096), attn(1, 4096), state(2, 1000)};
  in.block_size = 16;
  // 17 tokens: 2 pages of 64 KiB in each attention layer, one (padded) page in the state layer.
  EXPECT_EQ(kv_cache_bytes_for_request(in, 17), 5 * 16 * 4096);
  EXPECT_EQ(kv_cache_bytes_for_request(in, 16), 3 * 16 * 4096);
  // The longest request that fits: 4 attention pages + the state page = 64 tokens.
  EXPECT_EQ(estimate_max_model_len(in, 5 * 16 * 4096, 32768), 32);
  EXPECT_EQ(estimate_max_model_len(in, 5 * 16 * 4096 - 1, 32768), 16);
  EXPECT_EQ(estimate_max_model_len(in, 1 << 30, 100), 100);  // capped by max_model_len
  EXPECT_EQ(estimate_max_model_len(in, 100, 32768), 0);      // not even one token
}

TEST(KvCacheMemory, TooLittleMemoryRaisesVllmsStartupErrors) {
  KvCachePlanInput in;
  for (int l = 0; l < 36; ++l) in.layers.push_back(attn(l, 2 * 8 * 128 * 2));
  in.block_size = 16;
  const int64_t one_request = kv_cache_bytes_for_request(in, 32768);  // 4.50 GiB (Qwen3-8B)
  EXPECT_EQ(one_request, 36LL * 2048 * 16 * 4096);
  EXPECT_NO_THROW(check_enough_kv_cache_memory(in, one_request, 32768));
  for (int64_t available : {int64_t{0}, int64_t{-5}}) {
    try {
      check_enough_kv_cache_memory(in, available, 32768);
      FAIL() << "no error for " << available;
    } catch (const KvCacheMemoryError& e) {
      EXPECT_EQ(std::string(e.what()),
                "No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.");
    }
  }
  try {
    check_enough_kv_cache_memory(in, one_request / 2, 32768);
    FAIL() << "no error for half a request";
  } catch (const KvCacheMemoryError& e) {
    EXPECT_EQ(std::string(e.what()),
              "To serve at least one request with the models's max seq len (32768), (4.50 GiB KV "
              "cache is needed, which is larger than the available KV cache memory (2.25 GiB). "
              "Based on the available memory, the estimated maximum model length is 16384. Try "
              "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
              "initializing the engine.");
  }
}

TEST(KvCacheMemory, TooLittleFreeMemoryAtWorkerStartRaisesVllmsError) {
  EXPECT_EQ(python_round2(15.0), "15.0");
  EXPECT_EQ(python_round2(14.6049), "14.6");
  EXPECT_EQ(python_round2(139.7988), "139.8");
  EXPECT_EQ(python_round2(0.004), "0.0");
  const int64_t total = 16760905728;  // 15.61 GiB, an RTX A4000
  const int64_t context = 648871936;
  EXPECT_NO_THROW(check_startup_free_memory(total - context, total, 0.94));
  EXPECT_NO_THROW(check_startup_free_memory(total, total, 1.0));  // nothing else on the device
  try {
    check_startup_free_memory(total - context, total, 0.99);
    FAIL() << "no error at 0.99";
  } catch (const KvCacheMemoryError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Free memory on device cuda:0 (15.01/15.61 GiB) on startup is less than desired GPU "
              "memory utilization (0.99, 15.45 GiB). Decrease GPU memory utilization or reduce GPU "
              "memory used by other processes.");
  }
  // ceil(total * utilization): one byte short of it is refused.
  const int64_t requested = static_cast<int64_t>(std::ceil(0.9 * static_cast<double>(total)));
  EXPECT_NO_THROW(check_startup_free_memory(requested, total, 0.9));
  EXPECT_THROW(check_startup_free_memory(requested - 1, total, 0.9), KvCacheMemoryError);
  try {
    check_startup_free_memory(0, total, 1.0);
    FAIL();
  } catch (const KvCacheMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("(1.0, 15.61 GiB)"), std::string::npos) << e.what();
  }
}

TEST(KvCachePlan, SmallStatesKeepTheScenarioBlockSize) {
  KvCachePlanInput in;
  in.layers = {attn(0, 4096), state(1, 1000)};
  in.block_size = 32;
  in.num_gpu_blocks = 10;
  KvCachePlan p = plan_kv_cache(in);
  EXPECT_EQ(p.block_size, 32);
  EXPECT_FALSE(p.block_size_raised);
  EXPECT_EQ(p.state_padding_bytes, 32 * 4096 - 1000);
}

TEST(KvCachePlan, TooFewBlocksAndMalformedNeedsAreErrors) {
  KvCachePlanInput in;
  in.layers = {attn(0, 4096)};
  in.available_bytes = 4096 * 16 * 3;
  in.min_blocks = 4;
  EXPECT_THROW(plan_kv_cache(in), Error);
  in.layers = {attn(0, 0)};
  EXPECT_THROW(plan_kv_cache(in), Error);
}

// Products of user-sized needs are checked (issue 10 item): they used to wrap and print
// negative sizes, or truncate a hybrid block size to int.
TEST(KvCachePlan, OverflowingSizesAreErrorsNamingTheOperands) {
  auto error_of = [](const KvCachePlanInput& in) -> std::string {
    try {
      plan_kv_cache(in);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  KvCachePlanInput in;
  in.layers = {attn(0, int64_t{1} << 60)};
  in.block_size = 256;
  in.num_gpu_blocks = 10;
  EXPECT_EQ(error_of(in), "kv cache plan: an attention page (256 x 1152921504606846976) does not "
                          "fit 64 bits");
  in.layers = {attn(0, 4096)};
  in.num_gpu_blocks = int64_t{1} << 40;
  EXPECT_EQ(error_of(in), "kv cache plan: 1099511627776 blocks, more than 2147483647 (block ids "
                          "are 32-bit)");
  in.layers = {attn(0, 1), state(1, int64_t{1} << 40)};  // a state page of 2^40 B
  in.block_size = 16;
  in.num_gpu_blocks = 10;
  EXPECT_NE(error_of(in).find("needs attention blocks of 1099511627776 tokens"), std::string::npos)
      << error_of(in);
  // Sized from memory: capped at what 32-bit ids name, not an error.
  in.layers = {attn(0, 1)};
  in.num_gpu_blocks.reset();
  in.available_bytes = int64_t{1} << 40;
  EXPECT_EQ(plan_kv_cache(in).num_blocks, kMaxKvBlocks);
}

// The free block queue hands out ids in order, then the returned ones, and costs nothing for
// ids never handed out (a deque of every id of a 2^31-block cache took 8 GiB).
TEST(FreeBlockQueue, FreshIdsFirstThenReturnedOnes) {
  FreeBlockQueue q;
  q.reset(1, kMaxKvBlocks);
  EXPECT_EQ(q.size(), static_cast<size_t>(kMaxKvBlocks - 1));
  EXPECT_EQ(q.front(), 1);
  q.pop_front();
  q.pop_front();
  q.push_back(1);
  EXPECT_EQ(q.front(), 3);
  q.reset(1, 3);  // ids 1, 2
  q.pop_front();
  q.push_back(1);
  q.pop_front();
  EXPECT_EQ(q.front(), 1);
  EXPECT_EQ(q.size(), 1u);
  q.pop_front();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_THROW(q.front(), Error);
  EXPECT_THROW(q.reset(0, kMaxKvBlocks + 2), Error);
}

}  // namespace
}  // namespace coldstart
