// The owned engine keys' lookup and EngineConfig's accessors for them (engine_keys.h); the
// registry itself is generated (engine_keys_declared.cpp, harness/replay/CMakeLists.txt).
#include "harness/replay/engine_keys.h"

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"
#include "harness/replay/scenario_internal.h"

namespace coldstart {
namespace {

const EngineKeySpec& declared(const std::string& name) {
  const EngineKeySpec* k = find_engine_key(name);
  if (k == nullptr) throw Error(fmt::format("engine key '{}' is declared by no owner", name));
  return *k;
}

const EngineKeySpec& declared(const std::string& name, bool want_int) {
  const EngineKeySpec& k = declared(name);
  if ((k.type == EngineKeyType::kInt) != want_int) {
    throw Error(fmt::format("engine key '{}' (owner {}) is {}an integer key", name, k.owner,
                            want_int ? "not " : ""));
  }
  return k;
}

}  // namespace

const EngineKeySpec* find_engine_key(const std::string& name) {
  for (const EngineKeySpec& k : declared_engine_keys())
    if (k.name == name) return &k;
  return nullptr;
}

int64_t EngineConfig::int_key(const std::string& name) const {
  const EngineKeySpec& k = declared(name, true);
  const auto it = owned.find(name);
  return it != owned.end() ? it->get<int64_t>() : std::stoll(k.default_value);
}

const std::string& EngineConfig::string_key(const std::string& name) const {
  const EngineKeySpec& k = declared(name, false);
  const auto it = owned.find(name);
  return it != owned.end() ? it->get_ref<const std::string&>() : k.default_value;
}

void EngineConfig::set_key(const std::string& name, const nlohmann::json& value) {
  const bool is_int = declared(name).type == EngineKeyType::kInt;
  if (is_int ? !value.is_number_integer() : !value.is_string()) {
    throw Error(fmt::format("engine key '{}' takes {}, got {}", name, is_int ? "an integer" : "a string",
                            value.dump()));
  }
  owned[name] = value;
}

namespace scenario_detail {

const std::vector<std::string>& engine_key_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = kCoreEngineKeys;
    for (const EngineKeySpec& k : declared_engine_keys()) out.push_back(k.name);
    return out;
  }();
  return names;
}

}  // namespace scenario_detail
}  // namespace coldstart
