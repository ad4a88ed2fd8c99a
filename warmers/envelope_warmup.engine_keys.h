// The engine key of the generated envelope warmer (warmers/envelope_warmup.cpp): the envelope
// classes it runs at startup, as `coldstart coverage` lists them for a strategy's cold keys.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

/// One envelope class label (engine_envelope.cpp): "prefill N", "continue N after C", "decode B",
/// "decode B + prefill N".
inline const char* const kEnvelopeClassPattern =
    "(prefill [1-9][0-9]{0,8}|continue [1-9][0-9]{0,8} after [1-9][0-9]{0,8}|"
    "decode [1-9][0-9]{0,8}( \\+ prefill [1-9][0-9]{0,8})?)";

inline std::vector<EngineKeySpec> engine_keys_envelope_warmup() {
  EngineKeySpec k;
  k.name = "envelope_warmup_classes";
  k.owner = "envelope-warmup";
  k.type = EngineKeyType::kText;
  k.pattern = std::string(kEnvelopeClassPattern) + "(, " + kEnvelopeClassPattern + ")*";
  k.pattern_doc = "a list of envelope classes in one line, e.g. 'prefill 17, continue 2 after "
                  "2048, decode 3'";
  k.default_value = "";
  k.doc = "the envelope classes envelope-warmup runs one dummy step of each at startup (what "
          "`coldstart coverage` prints for a strategy's cold keys)";
  k.in_result = EngineKeyInResult::kWhenSet;
  // Each class must be a batch this server's scheduler could form (what the envelope sweeps).
  k.check = [](const std::string& list, const EngineConfig& e) -> std::string {
    size_t start = 0;
    while (start < list.size()) {
      const size_t comma = list.find(", ", start);
      const std::string label = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? list.size() : comma + 2;
      long long n = 0, c = 0;
      char tail = 0;
      long long tokens = 0, seqs = 1, longest = 0;
      if (std::sscanf(label.c_str(), "decode %lld + prefill %lld%c", &n, &c, &tail) == 2) {
        tokens = n + c, seqs = n + 1, longest = c;
      } else if (std::sscanf(label.c_str(), "continue %lld after %lld%c", &n, &c, &tail) == 2) {
        tokens = n, longest = c + n;
      } else if (std::sscanf(label.c_str(), "prefill %lld%c", &n, &tail) == 1) {
        tokens = n, longest = n;
      } else if (std::sscanf(label.c_str(), "decode %lld%c", &n, &tail) == 1) {
        tokens = n, seqs = n, longest = 2;
      }
      if (tokens > e.max_num_batched_tokens || seqs > e.max_num_seqs || longest > e.max_model_len)
        return fmt::format("'{}' is outside this server's envelope (max_num_batched_tokens {}, "
                           "max_num_seqs {}, max_model_len {})",
                           label, e.max_num_batched_tokens, e.max_num_seqs, e.max_model_len);
    }
    return "";
  };
  return {k};
}

/// engine.envelope_warmup_classes: "" when unset.
inline const std::string& envelope_warmup_classes(const EngineConfig& e) {
  return e.string_key("envelope_warmup_classes");
}

}  // namespace coldstart
