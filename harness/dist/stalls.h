// Which rank the others waited for, and why: the analysis of every rank's collective records
// (rank_group.h) that the multi-rank replay adds to its result. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "harness/dist/rank_group.h"

namespace coldstart::dist {

/// One rank's records, as its process reported them.
struct RankRecords {
  int rank = 0;
  std::vector<CollectiveRecord> records;
};

/// The ranks' collectives matched by sequence number (a collective some rank never reached is
/// left out). Returns
///   {"per_rank": [{rank, collectives, wait_ms, last_arrivals}],
///    "steps": [{phase, request, step, collectives, stall_ms, last_rank, wait_ms: [per rank],
///               why: [{kernel, key, compile_ms, source, every_rank}], autotunes}]}
/// where a collective's stall is its latest arrival minus its earliest (milliseconds, the time
/// the first rank to arrive waited for the last); a step's stall_ms sums its collectives', its
/// last_rank is the rank that arrived last at its largest stall, and `why` lists the compiles
/// that rank ran before its arrivals in that step (so a stall caused by a hot-path compile
/// names the kernel), each with every_rank: whether every other rank compiled the same key in
/// that step too (then it explains the stall only by how long it took here). wait_ms is each rank's time inside the collectives (departure minus
/// arrival). Steps whose stall_ms is below `min_stall_ms` and whose last rank compiled nothing
/// are left out of "steps".
nlohmann::json analyse_stalls(const std::vector<RankRecords>& ranks, double min_stall_ms = 1.0);

/// The state file rank `rank` publishes in `dir` (GroupOptions::state_dir): "<dir>/rank<r>.json".
std::string rank_state_path(const std::string& dir, int rank);

/// What each of ranks 0..world-1 last published in `dir`, read now (CLOCK_MONOTONIC `now_ns`):
/// one object per rank, {rank, published: false} when its file is missing or unreadable, else
/// {rank, published: true, pid, phase, arrived_seq (the last collective it reached, -1 before
/// the first), site, arrived_ns (when it reached it, CLOCK_MONOTONIC; 0 if unknown),
/// arrived_after ([{kernel, compile_ms}]: the compiles it ran just before), compiling: {what,
/// for_ms}} (compiling only while a compile runs), stopped: why its engine stopped (only once it
/// has). Used for
/// the peers in a collective-timeout message and, when the watchdog stopped a multi-rank run,
/// for what every rank was doing then. Never throws on a bad file.
nlohmann::json read_rank_states(const std::string& dir, int world, int64_t now_ns);

/// The peers a rank waited for at collective `seq`, for its timeout message, from
/// read_rank_states' `states`: a peer whose last collective is before `seq` (what it is doing
/// and compiling), and a peer that reached `seq` only after `deadline_ns` (CLOCK_MONOTONIC; the
/// waiting rank's arrival plus the timeout), which the waiting rank read as arrived because its
/// wait overran the deadline: "arrived N ms after this rank's timeout, after compiling K1 12 ms,
/// ..." from the state's arrived_ns and arrived_after; a peer whose engine stopped (the state's
/// `stopped`, RankGroup::mark_stopped) is named with its reason instead of as not arrived yet.
/// `self` is left out. "none found (...)" when no peer qualifies.
std::string late_ranks_text(const nlohmann::json& states, int self, int64_t seq,
                            int64_t deadline_ns);

}  // namespace coldstart::dist
