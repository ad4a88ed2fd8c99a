// Small helpers shared by the replay engine's files (engine*.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/engine/engine.h"

namespace coldstart::engine_detail {

using Clock = std::chrono::steady_clock;

/// Milliseconds since `t0`.
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Fault injection for tests of watchdogs and interrupts (README: `COLDSTART_STALL_IN_PHASE`):
/// when that variable names `phase`, the replay stops here, after announcing the phase, until the
/// process is killed, so a test can stop a child at a known point however fast or slow the
/// machine is. The parent (`coldstart replay`) refuses a name that is no phase and warns.
inline void stall_if_asked(const std::string& phase) {
  static const char* const stall = std::getenv("COLDSTART_STALL_IN_PHASE");
  if (stall == nullptr || phase != stall) return;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

/// The monitor phase of the envelope's compile pass (Engine::do_envelope): the compiles that
/// measure what the cold keys would cost a cold process. They are not the run's compiles:
/// snapshot_inner leaves them out of startup and hot-path lists.
inline constexpr const char* kEnvelopeCompilePhase = "envelope_compile";

/// ceil(a / b) for positive b, as an int (block counts).
inline int cdiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

/// Whether `mode` captures piecewise graphs (mixed and prefill steps up to the largest size).
inline bool captures_piecewise(CudaGraphMode mode) {
  return mode == CudaGraphMode::kPiecewise || mode == CudaGraphMode::kFullAndPiecewise;
}

}  // namespace coldstart::engine_detail

namespace coldstart {

/// Piecewise graphs of one capture size: one graph per piece, attention eager in between
/// (vLLM's CUDAGraphMode.PIECEWISE).
class PiecewiseGraphs {
 public:
  int size = 0;
  ForwardBatch in;  ///< the batch the graphs were captured with; its tensors are static
  std::vector<CapturedGraph> graphs;
  std::vector<ForwardState> states;  ///< state after each piece (kept alive: static outputs)
  at::Tensor mixer_out;              ///< [size, widest mixer output] written by eager mixers
  std::vector<GraphLedger::GraphId> ledger_ids;  ///< per piece, its references in the ledger
  GraphLedger::BufferId static_ledger_id = -1;   ///< `in`, `states` and `mixer_out` in the ledger
};

/// One full graph of a uniform-decode size, mixers inside (vLLM's CUDAGraphMode.FULL for
/// decode batches in full_and_piecewise).
class FullGraph {
 public:
  int size = 0;
  ForwardBatch in;  ///< the batch the graph was captured with; its tensors are static
  std::unique_ptr<CapturedGraph> graph;
  at::Tensor hidden;  ///< [size, H] final hidden states, the graph's static output
  GraphLedger::GraphId ledger_id = -1;  ///< its references in the engine's ledger
  GraphLedger::BufferId static_ledger_id = -1;  ///< `in` and `hidden` in the ledger
};

}  // namespace coldstart
