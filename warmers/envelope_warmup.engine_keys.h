// The engine key of the generated envelope warmer (warmers/envelope_warmup.cpp): the envelope
// classes it runs at startup, as `coldstart coverage` lists them for a strategy's cold keys.
#pragma once

#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

/// One envelope class label (warmup_context.h, envelope_class_steps): parts joined by " + ",
/// each "prefill N", "prefill N x S", "continue N after C", "decode B", "decode B after C",
/// "verify B" or "verify B after C"; or, under expert parallelism, "experts M" (M tokens routed
/// to a rank's own experts).
#define CS_ENVELOPE_COUNT "[1-9][0-9]{0,8}"
#define CS_ENVELOPE_PART                                                                     \
  "(prefill " CS_ENVELOPE_COUNT "( x " CS_ENVELOPE_COUNT ")?|continue " CS_ENVELOPE_COUNT \
  " after " CS_ENVELOPE_COUNT "|(decode|verify) " CS_ENVELOPE_COUNT "( after " CS_ENVELOPE_COUNT ")?)"
inline const char* const kEnvelopeClassPattern =
    "(experts " CS_ENVELOPE_COUNT "|" CS_ENVELOPE_PART "( \\+ " CS_ENVELOPE_PART ")*)";
#undef CS_ENVELOPE_PART
#undef CS_ENVELOPE_COUNT

inline std::vector<EngineKeySpec> engine_keys_envelope_warmup() {
  EngineKeySpec k;
  k.name = "envelope_warmup_classes";
  k.owner = "envelope-warmup";
  k.type = EngineKeyType::kText;
  // Empty: the same as unset (the warmer skips itself).
  k.pattern = "(" + std::string(kEnvelopeClassPattern) + "(, " + kEnvelopeClassPattern + ")*)?";
  k.item_pattern = kEnvelopeClassPattern;
  k.pattern_doc = "envelope classes (each count a whole number from 1, at most 9 digits) "
                  "separated by a comma and a space, e.g. 'prefill 17, "
                  "continue 2 after 2048, decode 3, decode 1 after 17 + prefill 2, "
                  "prefill 2 x 3, verify 2 + prefill 5, experts 8' ('experts M' stands "
                  "alone, never joined to another part by ' + '; or empty)";
  k.default_value = "";
  k.doc = "the envelope classes envelope-warmup runs one dummy step of each at startup (what "
          "`coldstart coverage` prints for a strategy's cold keys)";
  k.in_result = EngineKeyInResult::kWhenSet;
  return {k};
}

/// engine.envelope_warmup_classes: "" when unset.
inline const std::string& envelope_warmup_classes(const EngineConfig& e) {
  return e.string_key("envelope_warmup_classes");
}

}  // namespace coldstart
