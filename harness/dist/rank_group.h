// Ranks of a multi-process replay (engine.ranks: all): one process per tensor-parallel rank,
// joined by torch.distributed's c10d, with the collectives the engines issue. Torch-free header:
// the c10d code sits in rank_group.cpp.
//
// Backends (RankGroup::backend()):
//   gloo   c10d's ProcessGroupGloo over a TCPStore rendezvous. Built where Gloo's headers are
//          installed (Debian's libtorch 1.13 with libgloo-dev); PyTorch wheels ship no gloo/
//          headers (checked on the GPU machine: torch 2.11's include/ has none), so a build
//          against a wheel has no gloo.
//   store  the collective formed on c10d's TCPStore itself: each rank sets its payload under the
//          collective's sequence number and waits for every other rank's (Store::wait with the
//          group's timeout), as torch's own _store_based_barrier meets ranks. Always built.
//   nccl   not built: it needs one GPU per rank, and no machine with several GPUs was lent.
// A collective's payload is a short vector of int64 (a barrier token, token counts): the replay
// runs every rank on one device (or none), so the activations an all-reduce would sum are not
// moved; what is replayed is when each rank can leave the collective, i.e. the wait for the
// slowest rank.
//
// Every collective is recorded with the rank's arrival and departure on CLOCK_MONOTONIC (one
// clock for every process of the host), and with the compiles and autotunes the rank ran since
// its previous collective, so a parent can tell which rank arrived last and why (stalls.h).
// A collective that exceeds the group's timeout throws CollectiveTimeoutError naming the ranks
// that had not arrived and what each was compiling (each rank publishes its state in a small
// file under the run's rendezvous directory).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"

namespace coldstart::dist {

/// A compile a rank ran between two collectives.
struct CompileNote {
  std::string kernel;
  std::string key;
  double compile_ms = 0;  ///< host milliseconds the compile (or cache load) held the rank
  std::string source = "nvrtc";  ///< "nvrtc" (compiled) or "disk" (loaded from the kernel cache)
};

/// One collective as one rank saw it. Times are CLOCK_MONOTONIC nanoseconds.
struct CollectiveRecord {
  int64_t seq = 0;        ///< 0, 1, ...: the same number on every rank for the same collective
  std::string op;         ///< "all_reduce", "barrier", ...
  std::string site;       ///< where the engine issues it ("layer 3 o_proj", "cudagraph replay")
  std::string phase;      ///< the engine phase running
  int request = -1;       ///< the scheduler step's lead request, -1 during startup
  int step = -1;          ///< the scheduler step's index, -1 during startup
  int64_t arrive_ns = 0;  ///< when this rank entered the collective
  int64_t depart_ns = 0;  ///< when it left (0 when it never did: timed out)
  /// Compiles (and kernel-cache loads) this rank ran since its previous collective.
  std::vector<CompileNote> compiles;
  int autotunes = 0;      ///< autotunings this rank ran since its previous collective
};
void to_json(nlohmann::json& j, const CollectiveRecord& r);
void from_json(const nlohmann::json& j, CollectiveRecord& r);

/// A collective that failed as torch.distributed raises it in the engine (a peer that went away).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// A collective that did not complete within the group's timeout: the engine's watchdog would
/// abort the process. The text is the backend's error, then the ranks that had not arrived.
class CollectiveTimeoutError : public CollectiveError {
 public:
  CollectiveTimeoutError(const std::string& text, int64_t seq) : CollectiveError(text), seq(seq) {}
  int64_t seq;  ///< the collective that timed out (CollectiveRecord::seq)
};

/// Whether this build has c10d's Gloo backend.
bool gloo_available();
/// The backend `requested` ("auto", "gloo" or "store") resolves to in this build; throws
/// InputError for gloo without Gloo, or an unknown name.
std::string resolve_backend(const std::string& requested);

/// The rendezvous every rank of one run connects to: a c10d TCPStore on the loopback address,
/// served by rank 0.
class Rendezvous {
 public:
  /// Rank 0: starts the store on a free port (port()). Throws Error when it cannot listen.
  static std::unique_ptr<Rendezvous> serve(int world, std::chrono::milliseconds timeout);
  /// Ranks > 0: connects to rank 0's store. Throws Error after `timeout` without it.
  static std::unique_ptr<Rendezvous> connect(int port, int world, std::chrono::milliseconds timeout);
  virtual ~Rendezvous() = default;
  virtual int port() const = 0;
};

/// Where the engine is: what a collective record carries.
struct Where {
  std::string phase;
  int request = -1;
  int step = -1;
};

/// How one rank joins its group.
struct GroupOptions {
  int rank = 0;
  int world = 1;
  std::string backend = "auto";  ///< "auto" (gloo when built, else store), "gloo" or "store"
  std::chrono::milliseconds timeout{600000};  ///< collective timeout (torch's default: 10 min)
  /// Where each rank publishes its state (rank<r>.json) for the others' timeout messages.
  std::string state_dir;
};

/// One rank's membership in the group. Not thread-safe: the engine thread issues collectives;
/// compile notes may come from compile threads (they are locked).
class RankGroup {
 public:
  /// Joins the group through `rv` (kept). Blocks until every rank joined (gloo) or returns at
  /// once (store); throws Error on a bad rank / world or a failed join.
  RankGroup(std::unique_ptr<Rendezvous> rv, GroupOptions options);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int rank() const;
  int world() const;
  /// "gloo" or "store".
  const std::string& backend() const;
  std::chrono::milliseconds timeout() const;

  /// Sums `values` elementwise over the ranks; every rank must pass as many values. Records the
  /// collective. Throws CollectiveTimeoutError after timeout(), Error on another failure (a
  /// peer gone).
  std::vector<int64_t> all_reduce(std::vector<int64_t> values, const std::string& site);
  /// While paused, all_reduce returns `values` unchanged at once, without meeting the other
  /// ranks or recording anything. For a compile-only envelope sweep (engine_envelope.cpp): there
  /// the model's collectives carry no bytes and no time is measured, so each rank sweeps at its
  /// own pace; a collective whose result matters is made after resuming.
  void set_paused(bool paused);

  /// The phase and scheduler step the next collectives belong to.
  void set_step(const std::string& phase, int request, int step);
  /// Or: asked at each collective (replaces set_step's values; the engine's JIT monitor knows).
  void set_where(std::function<Where()> where);
  /// A compile starts / ended on this rank (thread-safe); published for the others' timeout
  /// messages and attached to the next collective's record.
  void compile_started(const std::string& kernel, const std::string& key);
  void compile_finished(const std::string& kernel, const std::string& key, double compile_ms,
                        const std::string& source = "nvrtc");
  /// An autotuning ran on this rank (its benchmarking held the rank like a compile); counted
  /// in the next collective's record.
  void autotuned();
  /// This rank's engine stopped (crashed or failed) with `why` (its error; cut to 160 chars):
  /// published so a peer still waiting, or failing because this rank left, says so instead of
  /// listing this rank as not arrived yet. Thread-safe; later calls keep the first reason.
  void mark_stopped(const std::string& why);

  /// Every collective so far, in order.
  const std::vector<CollectiveRecord>& records() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// CLOCK_MONOTONIC now, nanoseconds.
int64_t monotonic_ns();

}  // namespace coldstart::dist
