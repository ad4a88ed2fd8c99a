#include <algorithm>
#include <map>

#include "harness/common/error.h"
#include "harness/models/mixer.h"
#include "warmers/warmer.h"

namespace coldstart {
namespace {
std::map<std::string, WarmerFactory>& registry() {
  static std::map<std::string, WarmerFactory> r;
  return r;
}
}  // namespace

bool register_warmer(const std::string& name, WarmerFactory factory) {
  if (!registry().emplace(name, std::move(factory)).second) {
    throw Error("warmer '" + name + "' registered twice");
  }
  return true;
}

std::unique_ptr<Warmer> make_warmer(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : warmer_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown warmer '" + name + "' (known: " + known + ")");
  }
  return it->second();
}

std::vector<std::string> warmer_names() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

bool warmer_exists(const std::string& name) { return registry().count(name) != 0; }

std::vector<std::string> warmer_unresolved_mixers(const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& m : make_warmer(name)->mixers_used())
    if (!MixerRef(m).registered()) out.push_back(m);
  return out;
}

}  // namespace coldstart
