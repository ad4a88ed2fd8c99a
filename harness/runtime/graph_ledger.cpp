#include "harness/runtime/graph_ledger.h"

#include <fmt/format.h>

#include <algorithm>

#include "harness/runtime/workspace.h"

namespace coldstart {

std::string LedgerWhere::str() const {
  if (step.request < 0) return phase.empty() ? "startup" : phase;
  return fmt::format("{} (request {}, step {})", phase.empty() ? "a request step" : phase,
                     step.request, step.step);
}

const char* buffer_move_name(BufferMove move) {
  switch (move) {
    case BufferMove::kReallocated: return "reallocated";
    case BufferMove::kResizedInPlace: return "resized in place";
    case BufferMove::kFreed: return "freed";
  }
  return "moved";
}

GraphLedger::Buffer& GraphLedger::at(BufferId id) {
  CS_CHECK(id >= 0 && static_cast<size_t>(id) < buffers_.size(), "unknown ledger buffer");
  return buffers_[static_cast<size_t>(id)];
}

const GraphLedger::Buffer& GraphLedger::at(BufferId id) const {
  CS_CHECK(id >= 0 && static_cast<size_t>(id) < buffers_.size(), "unknown ledger buffer");
  return buffers_[static_cast<size_t>(id)];
}

GraphLedger::BufferId GraphLedger::add_buffer(std::string name, int64_t bytes, uint64_t address) {
  Buffer b;
  b.name = std::move(name);
  b.bytes = bytes;
  b.address = address;
  buffers_.push_back(std::move(b));
  return static_cast<BufferId>(buffers_.size() - 1);
}

void GraphLedger::move(BufferId id, BufferMove how, int64_t new_bytes, uint64_t new_address) {
  Buffer& b = at(id);
  b.moves.push_back(Move{how, b.bytes, new_bytes, where_ ? where_() : LedgerWhere{}});
  ++b.generation;
  b.bytes = new_bytes;
  b.address = new_address;
}

void GraphLedger::touch(BufferId id) {
  const Buffer& b = at(id);
  if (!capturing_) return;
  for (const Reference& r : open_.refs)
    if (r.buffer == id && r.generation == b.generation) return;
  open_.refs.push_back(Reference{id, b.generation, b.bytes, b.address});
}

void GraphLedger::begin_capture(std::string label) {
  CS_CHECK(!capturing_, "a graph capture is already open in the ledger");
  capturing_ = true;
  open_ = Graph{std::move(label), {}};
}

GraphLedger::GraphId GraphLedger::end_capture() {
  CS_CHECK(capturing_, "no graph capture is open in the ledger");
  capturing_ = false;
  graphs_.push_back(std::move(open_));
  open_ = Graph{};
  return static_cast<GraphId>(graphs_.size() - 1);
}

void GraphLedger::abort_capture() {
  capturing_ = false;
  open_ = Graph{};
}

std::optional<StaleReference> GraphLedger::stale(GraphId g) const {
  CS_CHECK(g >= 0 && static_cast<size_t>(g) < graphs_.size(), "unknown ledger graph");
  const Graph& graph = graphs_[static_cast<size_t>(g)];
  for (const Reference& r : graph.refs) {
    const Buffer& b = at(r.buffer);
    if (b.generation == r.generation) continue;
    const Move& m = b.moves.at(static_cast<size_t>(r.generation));
    StaleReference s;
    s.graph = graph.label;
    s.buffer = b.name;
    s.captured_generation = r.generation;
    s.captured_bytes = r.bytes;
    s.captured_address = r.address;
    s.move = m.how;
    s.new_bytes = m.new_bytes;
    s.moved_at = m.where;
    s.moves_since = b.generation - r.generation;
    s.current_bytes = b.bytes;
    return s;
  }
  return std::nullopt;
}

std::string GraphLedger::stale_text(const StaleReference& ref) {
  std::string moved;
  switch (ref.move) {
    case BufferMove::kReallocated:
      moved = fmt::format("reallocated it at {} MB", format_mb(ref.new_bytes));
      break;
    case BufferMove::kResizedInPlace:
      moved = fmt::format("resized it in place to {} MB", format_mb(ref.new_bytes));
      break;
    case BufferMove::kFreed:
      moved = "freed it";
      break;
  }
  return fmt::format(
      "Stale CUDA graph replay: the {} was captured with {} at {} MB (generation {}), but {} {}{}; "
      "the graph still holds the released block, so this replay would read and write freed "
      "memory",
      ref.graph, ref.buffer, format_mb(ref.captured_bytes), ref.captured_generation,
      ref.moved_at.str(), moved,
      ref.moves_since > 1 ? fmt::format(" ({} moves since capture, now {} MB)", ref.moves_since,
                                        format_mb(ref.current_bytes))
                          : "");
}

void GraphLedger::note_stale_replay(const StaleReference& ref, const std::string& device_report) {
  stale_replays_.push_back({{"graph", ref.graph},
                            {"buffer", ref.buffer},
                            {"captured_bytes", ref.captured_bytes},
                            {"captured_generation", ref.captured_generation},
                            {"move", buffer_move_name(ref.move)},
                            {"new_bytes", ref.new_bytes},
                            {"current_bytes", ref.current_bytes},
                            {"moved_in", ref.moved_at.str()},
                            {"device", device_report}});
}

nlohmann::json GraphLedger::to_json() const {
  std::vector<int> refs(buffers_.size(), 0);
  for (const Graph& g : graphs_)
    for (const Reference& r : g.refs) ++refs[static_cast<size_t>(r.buffer)];
  // Buffers that moved are listed with each move; the many that never did (static batches, the KV
  // cache, the block table) only as totals, so a result stays small with 60+ capture sizes.
  nlohmann::json moved = nlohmann::json::array();
  int64_t unmoved = 0, unmoved_bytes = 0, unmoved_refs = 0;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = buffers_[i];
    if (b.moves.empty()) {
      ++unmoved;
      unmoved_bytes += b.bytes;
      unmoved_refs += refs[i];
      continue;
    }
    nlohmann::json moves = nlohmann::json::array();
    for (const Move& m : b.moves)
      moves.push_back({{"how", buffer_move_name(m.how)},
                       {"old_bytes", m.old_bytes},
                       {"new_bytes", m.new_bytes},
                       {"in", m.where.str()}});
    moved.push_back({{"name", b.name},
                     {"bytes", b.bytes},
                     {"generation", b.generation},
                     {"graph_references", refs[i]},
                     {"moves", moves}});
  }
  return {{"graphs", graphs_.size()},
          {"moved_buffers", moved},
          {"unmoved_buffers",
           {{"count", unmoved}, {"bytes", unmoved_bytes}, {"graph_references", unmoved_refs}}},
          {"stale_replays", stale_replays_}};
}

}  // namespace coldstart
