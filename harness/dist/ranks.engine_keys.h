// The engine keys of the multi-rank replay (engine_keys.h), read by the replay command and the
// engine (rank_group.h): whether every rank runs as its own process, which c10d backend joins
// them, and the collective timeout that plays the engine's watchdog.
//   collective_timeout_ms  torch.distributed's default process-group timeout is 10 minutes
//                          (default_pg_timeout, torch/distributed/constants.py), which NCCL's
//                          watchdog enforces; the engines pass their own through
//                          init_process_group(timeout=...).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_ranks() {
  EngineKeySpec ranks;
  ranks.name = "ranks";
  ranks.owner = "engine (ranks)";
  ranks.type = EngineKeyType::kChoice;
  ranks.choices = {"rank0", "all"};
  ranks.default_value = "rank0";
  ranks.doc = "rank0: one process replays rank 0's shapes, no collectives; all: one process per "
              "tensor-parallel rank, joined by c10d, with the all-reduces the engines issue";
  ranks.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec backend;
  backend.name = "distributed_backend";
  backend.owner = "engine (ranks)";
  backend.type = EngineKeyType::kChoice;
  backend.choices = {"auto", "gloo", "store"};
  backend.default_value = "auto";
  backend.doc = "with ranks: all, what joins the ranks: c10d's ProcessGroupGloo (gloo, where the "
                "build has Gloo's headers), collectives on c10d's TCPStore (store), or auto "
                "(gloo when built, else store)";
  backend.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec timeout;
  timeout.name = "collective_timeout_ms";
  timeout.owner = "engine (ranks)";
  timeout.type = EngineKeyType::kInt;
  timeout.min = 10;
  timeout.max = 86400000;
  timeout.unit = "milliseconds";
  timeout.default_value = "600000";
  timeout.doc = "with ranks: all, how long a rank waits in a collective before the replay aborts "
                "as the engine's watchdog does (torch's default process-group timeout, 10 min)";
  timeout.in_result = EngineKeyInResult::kWhenSet;
  return {ranks, backend, timeout};
}

/// engine.collective_timeout_ms as a duration.
inline std::chrono::milliseconds collective_timeout(const EngineConfig& e) {
  return std::chrono::milliseconds(e.int_key("collective_timeout_ms"));
}

/// engine.ranks == "all": one process per tensor-parallel rank.
inline bool replays_all_ranks(const EngineConfig& e) {
  return e.string_key("ranks") == "all" && e.tensor_parallel_size > 1;
}

}  // namespace coldstart
