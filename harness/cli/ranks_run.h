// engine.ranks: all: every tensor-parallel rank of a (variant, strategy) as its own process.
// Rank 0 is the strategy's process (the child `coldstart replay` started, or the parent under
// --no-isolate): it serves the c10d rendezvous, starts ranks 1..N-1 as children of its own
// (`coldstart _child --job` with their rank; each dies with rank 0, so the replay's watchdog
// stopping rank 0 stops them), runs its own engine, and merges every rank's result into one
// (merge_rank_results). Ranks > 0 join and report their result with their collective records.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/cli/child_job.h"
#include "harness/replay/result.h"

namespace coldstart::dist {
class RankGroup;
}  // namespace coldstart::dist

namespace coldstart::cli {

using SnapshotFn = std::function<void(const StrategyResult&, const std::string& current_phase)>;

/// Runs the engine of `job` in this process, as rank `group` (nullptr: one process).
StrategyResult run_engine(const ChildJob& job, SnapshotFn on_snapshot, dist::RankGroup* group);

/// Rank 0 of a job whose scenario replays every rank: starts the others, runs its own, merges.
/// A rank that cannot start or join makes the result an `error` naming it.
StrategyResult run_all_ranks(const ChildJob& job, SnapshotFn on_snapshot);

/// A rank > 0 (job.rank): joins rank 0's rendezvous, runs, and returns its result with its
/// collective records in extra["rank_records"].
StrategyResult run_one_rank(const ChildJob& job, SnapshotFn on_snapshot);

/// One result for the strategy from every rank's (`ranks[r]` is rank r's; each may carry
/// extra["rank_records"], removed here). Rank 0's timings and phases stand; hot_path_compiles
/// and startup_compile_list hold every rank's, each with its rank; extra["ranks"] gets
/// {world, backend, collective_timeout_ms, per_rank: [{rank, outcome, error, failed_phase,
/// hot_path_compiles, startup_compiles, ttft_ms, collectives, wait_ms, last_arrivals}],
/// steps: dist::analyse_stalls' steps}. Outcome: ok when every rank's is; else that of the
/// first rank whose collective timed out (the engine's watchdog), else of the first rank that
/// did not end ok, with its error, failed phase and failed step. A coverage run's
/// extra["envelope"] (engine_envelope.cpp) becomes every rank's: each rank is a process with its
/// own JIT, so a key counts once per rank that reaches it (under expert parallelism the ranks
/// route their own tokens and reach their own MoE keys). Counts and compile times are summed,
/// `cold` and `loaded` entries carry their rank, warmup_classes is the union (rank 0's order,
/// then classes only later ranks need), and `per_rank` keeps each rank's counts.
StrategyResult merge_rank_results(std::vector<StrategyResult> ranks, const std::string& backend,
                                  long long timeout_ms);

/// After the replay's watchdog or an interrupt stopped rank 0 of `job` (whose job.rank_dir the
/// parent chose, so the ranks' published states outlive rank 0): when `r` has no `ranks` block,
/// gives it one with {world, collective_timeout_ms, stopped: true, per_rank: [{rank, outcome (r's
/// own: every rank was stopped with it), and what the rank last published
/// (dist::read_rank_states: phase, last collective, site, the compile running and for how
/// long)}]}. Nothing when the job does not replay every rank or has no rank directory.
void add_stopped_ranks(StrategyResult& r, const ChildJob& job);

}  // namespace coldstart::cli
