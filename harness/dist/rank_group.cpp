// c10d behind rank_group.h: the TCPStore rendezvous, the gloo and store backends, the records.
#include "harness/dist/rank_group.h"
#include "harness/dist/stalls.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <algorithm>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if __has_include(<gloo/config.h>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define CS_HAVE_GLOO 1
#else
#define CS_HAVE_GLOO 0
#endif

namespace coldstart::dist {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void to_json(nlohmann::json& j, const CollectiveRecord& r) {
  nlohmann::json compiles = nlohmann::json::array();
  for (const auto& c : r.compiles)
    compiles.push_back({{"kernel", c.kernel}, {"key", c.key}, {"compile_ms", c.compile_ms},
                        {"source", c.source}});
  j = {{"seq", r.seq},         {"op", r.op},          {"site", r.site},
       {"phase", r.phase},     {"request", r.request}, {"step", r.step},
       {"arrive_ns", r.arrive_ns}, {"depart_ns", r.depart_ns}, {"compiles", compiles},
       {"autotunes", r.autotunes}};
}

void from_json(const nlohmann::json& j, CollectiveRecord& r) {
  r.seq = j.at("seq").get<int64_t>();
  r.op = j.at("op").get<std::string>();
  r.site = j.at("site").get<std::string>();
  r.phase = j.at("phase").get<std::string>();
  r.request = j.at("request").get<int>();
  r.step = j.at("step").get<int>();
  r.arrive_ns = j.at("arrive_ns").get<int64_t>();
  r.depart_ns = j.at("depart_ns").get<int64_t>();
  r.compiles.clear();
  for (const auto& c : j.at("compiles"))
    r.compiles.push_back({c.at("kernel").get<std::string>(), c.at("key").get<std::string>(),
                          c.at("compile_ms").get<double>(),
                          c.value("source", std::string("nvrtc"))});
  r.autotunes = j.at("autotunes").get<int>();
}

bool gloo_available() { return CS_HAVE_GLOO != 0; }

std::string resolve_backend(const std::string& requested) {
  if (requested == "auto") return gloo_available() ? "gloo" : "store";
  if (requested == "store") return "store";
  if (requested == "gloo") {
    if (!gloo_available())
      throw InputError(
          "distributed_backend gloo: this build has no c10d Gloo backend (Gloo's headers were not "
          "found when it was built; PyTorch wheels ship none); use auto or store");
    return "gloo";
  }
  throw InputError(fmt::format("distributed_backend '{}': known: auto, gloo, store", requested));
}

namespace {

/// c10's messages carry a backtrace after their first line.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

class TcpRendezvous final : public Rendezvous {
 public:
  TcpRendezvous(bool server, int port, int world, std::chrono::milliseconds timeout) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.isServer = server;
    o.numWorkers = static_cast<size_t>(world);
    o.waitWorkers = false;  // ranks join later; the backends meet them
    // The store's own timeout bounds connecting and the backends' rendezvous; it is kept at
    // least a minute (the client's connect timeout counts whole seconds). Collectives pass the
    // group's timeout explicitly.
    o.timeout = std::max(timeout, std::chrono::milliseconds(60000));
    try {
      store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}:{}: c10d::TCPStore(127.0.0.1, port {}, {}) failed: {}",
                              __FILE__, __LINE__, port, server ? "server" : "client",
                              first_line(e.what())));
    }
  }
  int port() const override { return store->getPort(); }
  c10::intrusive_ptr<c10d::TCPStore> store;
};

}  // namespace

std::unique_ptr<Rendezvous> Rendezvous::serve(int world, std::chrono::milliseconds timeout) {
  return std::make_unique<TcpRendezvous>(true, 0, world, timeout);
}

std::unique_ptr<Rendezvous> Rendezvous::connect(int port, int world,
                                                std::chrono::milliseconds timeout) {
  if (port <= 0 || port > 65535) throw Error(fmt::format("rendezvous port {} is not a port", port));
  return std::make_unique<TcpRendezvous>(false, port, world, timeout);
}

struct RankGroup::Impl {
  std::unique_ptr<Rendezvous> rv;
  c10::intrusive_ptr<c10d::TCPStore> store;
  GroupOptions o;
  std::string backend;
#if CS_HAVE_GLOO
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#endif
  std::vector<CollectiveRecord> records;
  bool paused = false;  // set_paused
  std::string phase = "init";
  int request = -1, step = -1;
  std::function<Where()> where;
  std::mutex mu;  // guards pending compiles and the published state
  std::vector<CompileNote> pending;
  int pending_autotunes = 0;
  std::string compiling;          // "kernel key" running now, "" when none
  int64_t compiling_since_ns = 0;
  std::string stopped;            // why this rank's engine stopped, "" while it runs
  int64_t arrived_seq = -1;
  std::string arrived_site;
  int64_t arrived_ns = 0;                                   // when it reached arrived_seq
  nlohmann::json arrived_after = nlohmann::json::array();  // [{kernel, compile_ms}] just before

  std::string state_path(int r) const { return rank_state_path(o.state_dir, r); }

  /// Takes the phase and step from the engine (set_where), when it gave a source: asked outside
  /// the lock, as the engine's monitor takes its own.
  void refresh_where() {
    std::function<Where()> fn;
    {
      std::lock_guard<std::mutex> lock(mu);
      fn = where;
    }
    if (!fn) return;
    const Where w = fn();
    std::lock_guard<std::mutex> lock(mu);
    phase = w.phase;
    request = w.request;
    step = w.step;
  }

  /// Whether every rank has added itself to the store counter `key` before `deadline_ns`
  /// (CLOCK_MONOTONIC; polled every millisecond).
  bool all_counted(const std::string& key, int64_t deadline_ns) {
    while (store->add(key, 0) < o.world) {
      if (monotonic_ns() > deadline_ns) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  /// Writes this rank's state file (atomically: write, then rename). Best effort: a state file
  /// only feeds a timeout message.
  void publish_locked() {
    if (o.state_dir.empty()) return;
    nlohmann::json j = {{"rank", o.rank},       {"pid", static_cast<long>(getpid())},
                        {"arrived_seq", arrived_seq}, {"site", arrived_site},
                        {"phase", phase}};
    j["arrived_ns"] = arrived_ns;
    j["arrived_after"] = arrived_after;
    if (!compiling.empty())
      j["compiling"] = {{"what", compiling}, {"since_ns", compiling_since_ns}};
    if (!stopped.empty()) j["stopped"] = stopped;
    const std::string tmp = state_path(o.rank) + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      if (!f) return;
      f << j.dump();
    }
    std::rename(tmp.c_str(), state_path(o.rank).c_str());
  }

  /// The peers this rank waited for at collective `seq` (whose wait ended at `deadline_ns`),
  /// from their state files (late_ranks_text).
  std::string missing_ranks(int64_t seq, int64_t deadline_ns) const {
    return late_ranks_text(read_rank_states(o.state_dir, o.world, monotonic_ns()), o.rank, seq,
                           deadline_ns);
  }
};

RankGroup::RankGroup(std::unique_ptr<Rendezvous> rv, GroupOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world)
    throw Error(fmt::format("rank {} of world {} is not a rank", options.rank, options.world));
  m.o = std::move(options);
  m.backend = resolve_backend(m.o.backend);
  m.rv = std::move(rv);
  auto* tcp = dynamic_cast<TcpRendezvous*>(m.rv.get());
  CS_CHECK(tcp != nullptr, "the rendezvous is not a TCPStore");
  m.store = tcp->store;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.publish_locked();
  }
  {
    // Every rank joins before anything else: the first collective's wait is then not the ranks'
    // start-up skew, and Gloo's rendezvous (bounded by the collective timeout, which Gloo's
    // operations take from the group's options) starts with every rank present.
    try {
      m.store->add("cs/joined", 1);
      if (!m.all_counted("cs/joined", monotonic_ns() + 120000LL * 1000000LL))
        throw Error(fmt::format("only {} of {} ranks joined within 120 s",
                                m.store->add("cs/joined", 0), m.o.world));
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}:{}: rank {} of {} could not join the store: {}", __FILE__,
                              __LINE__, m.o.rank, m.o.world, first_line(e.what())));
    }
  }
#if CS_HAVE_GLOO
  if (m.backend == "gloo") {
    try {
      auto opts = c10d::ProcessGroupGloo::Options::create(m.o.timeout);
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      opts->threads = 1;
      m.gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
          m.store, m.o.rank, m.o.world, opts);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}:{}: c10d::ProcessGroupGloo(rank {}, world {}) failed: {}",
                              __FILE__, __LINE__, m.o.rank, m.o.world, first_line(e.what())));
    }
  }
#endif
}

RankGroup::~RankGroup() {
  // Rank 0 serves the store: it stays until every rank has said it is done with it (a rank
  // reading a collective's values from a store that is gone fails), at most the timeout.
  Impl& m = *impl_;
  try {
    m.store->add("cs/done", 1);
    if (m.o.rank == 0) m.all_counted("cs/done", monotonic_ns() + m.o.timeout.count() * 1000000LL);
  } catch (const std::exception&) {
    // A peer or the store is gone: nothing left to wait for.
  }
}

int RankGroup::rank() const { return impl_->o.rank; }
int RankGroup::world() const { return impl_->o.world; }
const std::string& RankGroup::backend() const { return impl_->backend; }
std::chrono::milliseconds RankGroup::timeout() const { return impl_->o.timeout; }
const std::vector<CollectiveRecord>& RankGroup::records() const { return impl_->records; }

void RankGroup::set_step(const std::string& phase, int request, int step) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->phase = phase;
  impl_->request = request;
  impl_->step = step;
}

void RankGroup::set_where(std::function<Where()> where) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->where = std::move(where);
}

void RankGroup::compile_started(const std::string& kernel, const std::string& key) {
  impl_->refresh_where();  // the phase the compile runs in, for the state file
  std::lock_guard<std::mutex> lock(impl_->mu);
  // A compile key's text starts with its kernel's name.
  impl_->compiling = key.rfind(kernel, 0) == 0 ? key : kernel + " " + key;
  impl_->compiling_since_ns = monotonic_ns();
  impl_->publish_locked();
}

void RankGroup::compile_finished(const std::string& kernel, const std::string& key,
                                 double compile_ms, const std::string& source) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.push_back({kernel, key, compile_ms, source});
  if (!impl_->compiling.empty()) {
    impl_->compiling.clear();
    impl_->publish_locked();
  }
}

void RankGroup::autotuned() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->pending_autotunes;
}

void RankGroup::mark_stopped(const std::string& why) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->stopped.empty()) return;
  const std::string line = first_line(why);
  impl_->stopped = line.size() <= 160 ? line : line.substr(0, 160) + "...";
  if (impl_->stopped.empty()) impl_->stopped = "stopped";
  impl_->publish_locked();
}

void RankGroup::set_paused(bool paused) { impl_->paused = paused; }

std::vector<int64_t> RankGroup::all_reduce(std::vector<int64_t> values, const std::string& site) {
  Impl& m = *impl_;
  if (m.paused) return values;
  CollectiveRecord rec;
  rec.seq = static_cast<int64_t>(m.records.size());
  rec.op = "all_reduce";
  rec.site = site;
  m.refresh_where();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    rec.phase = m.phase;
    rec.request = m.request;
    rec.step = m.step;
    rec.compiles.swap(m.pending);
    rec.autotunes = m.pending_autotunes;
    m.pending_autotunes = 0;
    m.arrived_seq = rec.seq;
    m.arrived_site = site;
    m.arrived_ns = monotonic_ns();
    m.arrived_after = nlohmann::json::array();
    for (const CompileNote& c : rec.compiles)
      m.arrived_after.push_back({{"kernel", c.kernel}, {"compile_ms", c.compile_ms}});
    m.publish_locked();
  }
  rec.arrive_ns = monotonic_ns();
  m.records.push_back(rec);
  auto fail = [&](const std::exception& e) -> std::vector<int64_t> {
    const std::string where = rec.request >= 0
                                  ? fmt::format("{}, request {}, step {}", rec.phase, rec.request,
                                                rec.step)
                                  : rec.phase;
    const double waited_ms = (monotonic_ns() - rec.arrive_ns) / 1e6;
    const int64_t deadline_ns = rec.arrive_ns + m.o.timeout.count() * 1000000LL;
    const std::string why = first_line(e.what());
    // The backend says which it was: its wait ran out (the watchdog's case), or a peer went
    // away first (a rank that crashed or timed out itself closes its connections).
    const bool timed_out = why.find("imed out") != std::string::npos ||
                           why.find("Timeout") != std::string::npos ||
                           why.find("timeout") != std::string::npos;
    if (timed_out)
      throw CollectiveTimeoutError(
          fmt::format("[Rank {}] collective all_reduce #{} at '{}' ({}) timed out: waited {:.0f} "
                      "ms, the process group's timeout is {} ms ({}: {}). Ranks that had not "
                      "arrived: {}",
                      m.o.rank, rec.seq, site, where, waited_ms, m.o.timeout.count(), m.backend,
                      why, m.missing_ranks(rec.seq, deadline_ns)),
          rec.seq);
    throw CollectiveError(fmt::format(
        "[Rank {}] collective all_reduce #{} at '{}' ({}) failed after {:.0f} ms: a peer left the "
        "group ({}: {}). Ranks that had not arrived: {}",
        m.o.rank, rec.seq, site, where, waited_ms, m.backend, why,
        m.missing_ranks(rec.seq, deadline_ns)));
  };
  std::vector<int64_t> out;
  try {
#if CS_HAVE_GLOO
    if (m.backend == "gloo") {
      at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
      std::copy(values.begin(), values.end(), t.data_ptr<int64_t>());
      std::vector<at::Tensor> ts = {t};
      m.gloo->allreduce(ts)->wait();
      out.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    }
#endif
    if (m.backend == "store") {
      const std::string prefix = fmt::format("cs/{}/", rec.seq);
      std::vector<uint8_t> bytes(values.size() * sizeof(int64_t));
      std::memcpy(bytes.data(), values.data(), bytes.size());
      m.store->set(prefix + std::to_string(m.o.rank), bytes);
      std::vector<std::string> keys;
      for (int r = 0; r < m.o.world; ++r) keys.push_back(prefix + std::to_string(r));
      m.store->wait(keys, m.o.timeout);
      out.assign(values.size(), 0);
      for (const auto& k : keys) {
        const std::vector<uint8_t> b = m.store->get(k);
        if (b.size() != bytes.size())
          throw Error(fmt::format("a peer sent {} bytes to collective #{}, this rank {}", b.size(),
                                  rec.seq, bytes.size()));
        for (size_t i = 0; i < values.size(); ++i) {
          int64_t v = 0;
          std::memcpy(&v, b.data() + i * sizeof(int64_t), sizeof v);
          out[i] += v;
        }
      }
    }
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    return fail(e);
  }
  m.records.back().depart_ns = monotonic_ns();
  return out;
}

}  // namespace coldstart::dist
