// The graph memory ledger: which device buffers each captured CUDA graph references, and whether
// they are still the memory the graph baked in when it is replayed.
//
// A captured graph holds raw device addresses. When a buffer it used is reallocated (a scratch
// buffer that grows after capture in a runner that never locks it), resized in place (torch's
// resize_() of a shared workspace: a new block, the old one released) or freed, the graph still
// points at the released block: replaying it reads and writes memory the caching allocator may
// already have handed to another tensor (an illegal memory access if the block went back to the
// driver, silent corruption otherwise). The ledger makes that deterministic: every tracked buffer
// has a generation that each move bumps; capture records the generation of every buffer the
// graph's body touched; a replay whose recorded generation is no longer current is stale.
// Addresses are recorded for the report only (0 in compile-only mode), so both modes decide alike.
//
// Torch-free: buffers are reported by their owners (WorkspaceManager, the engine's static batches,
// the mixers' persistent scratch), which call touch() whenever a graph body may use them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/step_context.h"

namespace coldstart {

/// When and where something happened: the engine phase running and, inside a request, the
/// scheduler step (request -1 when none).
struct LedgerWhere {
  std::string phase;
  StepContext step;
  /// "continuation_prefill (request 0, step 1)" or "kernel_warmup".
  std::string str() const;
};

/// How a tracked buffer's memory changed.
enum class BufferMove {
  kReallocated,     ///< a new, larger block replaced it; the old block was released
  kResizedInPlace,  ///< resize_() on the same tensor: new storage, the old block released
  kFreed,           ///< released with no replacement
};

/// "reallocated", "resized in place", "freed".
const char* buffer_move_name(BufferMove move);

/// Where a reference of a graph went stale: the buffer's state at capture and what moved it.
struct StaleReference {
  std::string graph;         ///< the graph's label ("full decode graph, capture size 4")
  std::string buffer;        ///< the buffer's name ("workspace (slot 0)")
  int captured_generation = 0;
  int64_t captured_bytes = 0;
  uint64_t captured_address = 0;  ///< 0 in compile-only mode
  BufferMove move = BufferMove::kReallocated;  ///< the first move after capture
  int64_t new_bytes = 0;     ///< after that move (0 when freed)
  LedgerWhere moved_at;      ///< the phase (and step) of that move
  int moves_since = 0;       ///< moves since capture (>= 1)
  int64_t current_bytes = 0; ///< its size now (after the last move)
};

/// Replay of a captured graph that references a buffer generation that no longer exists (see the
/// file comment). The replayed engine would read and write released memory here: a `crash`.
class StaleGraphReplayError : public Error {
 public:
  StaleGraphReplayError(const std::string& text, StaleReference ref)
      : Error(text), ref(std::move(ref)) {}
  StaleReference ref;
};

/// The ledger of one engine. Not thread-safe (the engine's thread only).
class GraphLedger {
 public:
  using BufferId = int;
  using GraphId = int;

  /// Says where the engine is when a buffer moves (phase, step). Optional; without it moves are
  /// reported at phase "".
  void set_where(std::function<LedgerWhere()> where) { where_ = std::move(where); }

  /// Registers a buffer graphs may reference, generation 0. `name` is how messages name it;
  /// `bytes` its size; `address` its device address (0 when there is none).
  BufferId add_buffer(std::string name, int64_t bytes, uint64_t address);

  /// The buffer changed memory: its generation goes up by one. `new_bytes` / `new_address` are
  /// its size and address afterwards (0 when freed). Throws Error for an unknown id.
  void move(BufferId id, BufferMove how, int64_t new_bytes, uint64_t new_address);

  /// While a graph is being captured, records that its body uses buffer `id` at its current
  /// generation; does nothing otherwise. Throws Error for an unknown id.
  void touch(BufferId id);

  /// Starts recording for the graph `label` ("full decode graph, capture size 4"). Throws Error
  /// while another capture is open.
  void begin_capture(std::string label);
  /// Ends the open capture; returns the graph's id. Throws Error when none is open.
  GraphId end_capture();
  /// Drops the open capture's records (the capture failed).
  void abort_capture();
  bool capturing() const { return capturing_; }

  /// The first reference of graph `g` whose buffer has moved since capture, in touch order; none
  /// when the graph is safe to replay. Throws Error for an unknown id.
  std::optional<StaleReference> stale(GraphId g) const;

  /// The crash text for a stale reference: the graph, the buffer, its size at capture and now,
  /// and the phase and step that moved it.
  static std::string stale_text(const StaleReference& ref);

  /// Graphs replayed stale so far (recorded by the engine, see note_stale_replay()).
  void note_stale_replay(const StaleReference& ref, const std::string& device_report);

  /// The ledger for a result: every buffer (name, generation, bytes, each move with its phase and
  /// step), the number of graphs and the references each buffer has, stale replays.
  nlohmann::json to_json() const;

  /// Buffers registered so far.
  size_t num_buffers() const { return buffers_.size(); }
  size_t num_graphs() const { return graphs_.size(); }

 private:
  struct Move {
    BufferMove how;
    int64_t old_bytes, new_bytes;
    LedgerWhere where;
  };
  struct Buffer {
    std::string name;
    int generation = 0;
    int64_t bytes = 0;
    uint64_t address = 0;
    std::vector<Move> moves;  ///< moves[i] took generation i to i + 1
  };
  struct Reference {
    BufferId buffer;
    int generation;
    int64_t bytes;
    uint64_t address;
  };
  struct Graph {
    std::string label;
    std::vector<Reference> refs;
  };
  Buffer& at(BufferId id);
  const Buffer& at(BufferId id) const;

  std::vector<Buffer> buffers_;
  std::vector<Graph> graphs_;
  bool capturing_ = false;
  Graph open_;
  std::function<LedgerWhere()> where_;
  nlohmann::json stale_replays_ = nlohmann::json::array();
};

}  // namespace coldstart
