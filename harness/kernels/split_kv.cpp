#include "harness/kernels/split_kv.h"

// Embedded by cs_embed_sources (harness/kernels/CMakeLists.txt).
extern const char* const kSource_split_kv_decode;

namespace coldstart::kernels {

const char* split_kv_decode_source() { return kSource_split_kv_decode; }

std::vector<jit::Constexpr> split_kv_stage2_constexprs(int head_dim, int num_kv_splits) {
  return {{"HEAD_DIM", head_dim}, {"NUM_KV_SPLITS", num_kv_splits}};
}

}  // namespace coldstart::kernels
