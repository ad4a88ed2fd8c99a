#include <map>

#include "harness/models/model.h"

namespace coldstart {
namespace {
std::map<std::string, AttentionBackendFactory>& backends() {
  static std::map<std::string, AttentionBackendFactory> m;
  return m;
}
}  // namespace

bool register_attention_backend(const std::string& kv_cache_dtype, AttentionBackendFactory f) {
  backends()[kv_cache_dtype] = std::move(f);
  return true;
}

std::unique_ptr<AttentionBackend> make_attention_backend(const AttentionContext& ctx) {
  auto it = backends().find(ctx.engine->kv_cache_dtype);
  if (it == backends().end()) {
    std::string known;
    for (const auto& kv : backends()) known += (known.empty() ? "" : ", ") + kv.first;
    throw InputError("kv_cache_dtype '" + ctx.engine->kv_cache_dtype +
                     "' has no attention backend in coldstart yet (replayable: " + known + ")");
  }
  return it->second(ctx);
}

}  // namespace coldstart
