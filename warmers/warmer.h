// Warmers: startup steps run in the kernel_warmup phase, before CUDA graph capture, that compile
// kernels and/or size buffers. Each lives in its own file in warmers/ and registers itself by name
// with CS_REGISTER_WARMER; a strategy is an ordered list of warmer names.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace coldstart {

class WarmupContext;  // warmers/warmup_context.h

/// One warmer. `run` gets a narrow view of the engine after the KV cache exists and before graph
/// capture. It may compile kernels (through the JIT runtime), run mixers on synthetic inputs and
/// grow the workspace; it must not keep state that changes serving results.
class Warmer {
 public:
  virtual ~Warmer() = default;
  /// Registered name, e.g. "tq-decode-warmup".
  virtual std::string name() const = 0;
  /// One line for `coldstart list`: what it does and which engine behaviour it mirrors.
  virtual std::string description() const = 0;
  /// Runs the warmer. Errors propagate and fail the strategy in kernel_warmup: outcome `crash`
  /// for what the engine raises (e.g. the workspace-lock error), `error` for anything else.
  virtual void run(WarmupContext& ctx) = 0;
  /// The mixer backend names or kinds run() looks layers up by (WarmupContext::mixers with a
  /// MixerRef of each); every one must be registered (warmer_unresolved_mixers).
  virtual std::vector<std::string> mixers_used() const { return {}; }
};

using WarmerFactory = std::function<std::unique_ptr<Warmer>()>;

/// Adds a warmer to the registry; returns true (for static registration). Throws Error on a
/// duplicate name.
bool register_warmer(const std::string& name, WarmerFactory factory);
/// Builds the named warmer; throws InputError listing the known names when unknown.
std::unique_ptr<Warmer> make_warmer(const std::string& name);
/// Every registered name, sorted.
std::vector<std::string> warmer_names();
bool warmer_exists(const std::string& name);
/// The names in `name`'s mixers_used() that no registered mixer backend has as its name or kind;
/// empty when all resolve. Throws InputError for an unknown warmer.
std::vector<std::string> warmer_unresolved_mixers(const std::string& name);

#define CS_REGISTER_WARMER(Class)                                           \
  static const bool cs_registered_##Class = ::coldstart::register_warmer(   \
      Class().name(), [] { return std::unique_ptr<::coldstart::Warmer>(new Class()); })

}  // namespace coldstart
