// The serving envelope (EngineOptions::envelope, `coldstart coverage`, issue 29): after startup,
// one step of each class of request and batch shape the scenario's server can be sent, with the
// JIT in key-only mode (JitRuntime::set_key_only), so every kernel key the envelope reaches is
// known without compiling it, next to the keys startup compiled.
//
// The classes, in this order (each a step the engine runs as it would serve it:
// graph replay where a captured size holds it, else eager, through Engine::run_step):
//   prefill n     one sequence, no cached context, n = 1 .. min(max_num_batched_tokens,
//                 max_model_len - 1): every prompt chunk a fresh prompt can start with. Every
//                 count is run (no class derivation yet: each family's token-count classes, e.g.
//                 fused_moe::envelope_token_classes, are to replace it where proved);
//   continue n    one sequence whose first max_num_batched_tokens tokens are cached, n new ones
//                 (the chunked prefill's later chunks), when max_model_len allows a second chunk:
//                 n = 1 .. min(max_num_batched_tokens, max_model_len - 1 - max_num_batched_tokens);
//   decode B      B sequences of one new token each after one cached token, B = 1 ..
//                 max_num_seqs; "decode B after C": after C cached tokens each, C = 16 and 17;
//   decode B + prefill N
//                 B decode rows first, then a fresh prompt of N tokens (vLLM's V1 scheduler
//                 takes the RUNNING requests before the WAITING ones, Scheduler.schedule in
//                 vllm/v1/core/sched/scheduler.py at b4622cf9): B = 1 .. max_num_seqs - 1,
//                 N each prefill length at which the prefill sweep reached a new key
//                 (mixed_classes: derived, not every N); "decode B after C + prefill N" the
//                 same with C = 16 and 17 cached tokens per decode row, for B = 1 or N = 2;
//   continue N after C - 1
//                 a later chunk after one token less than a full chunk (C =
//                 max_num_batched_tokens), N = 1 and each N at which the `continue` sweep reached a
//                 new key (derived);
//   decode B + continue N after C
//                 B decode rows, then a later chunk of N tokens after C = max_num_batched_tokens
//                 and C - 1 cached ones, N = 2 and the `continue` sweep's key-changing lengths;
//   prefill N + prefill M
//                 two fresh prompts in one step, N and M each of the mixed batches' prompt
//                 lengths (derived);
//   prefill N x S three or more fresh prompts of N tokens each, S = 3 .. max_num_seqs, N each
//                 key-changing prompt length (derived);
//   decode B + prefill 2 x S
//                 decode rows beside S >= 2 prompts, every B and S the row limit allows;
//   continue N after C + prefill M, decode 1 + continue N after C + prefill M
//                 a later chunk beside a fresh prompt, with and without a decode row; one of N
//                 and M varied over its key-changing lengths, the other 2 (derived: not every
//                 pair), and B decode rows with both 2;
//   verify B, verify B after C
//                 speculative decoding only: B verify rows of 1 + k tokens (the scheduler's
//                 rows for a running request with k drafts), every B whose rows fit the token
//                 budget, C = 16 and 17 as for decodes; and in the mixed classes above, verify
//                 rows in the decode rows' place (fewer: beside a prompt of N > 2 tokens and
//                 beside S > 2 prompts as one row only). The drafter's passes run after every class's
//                 step (Engine::run_step proposes drafts), so its rows are reached with them.
// The decode rows' cached lengths: a kernel that takes a row's context length as an integer
// argument is keyed by its specialization class (== 1, a multiple of 16, neither: the JIT's
// Triton-style specialization, compile_key.cpp), so 1, 16 and 17 reach every class a decode row
// of any length can. A mixed batch's decode row goes through the prefill path of some backends
// (TurboQuant's dequantizes its cached tokens with their count as an argument); a first version
// that kept every decode row at one cached token left that count's other two classes out of the
// envelope, while the lazy-capture scenario's second request reached one of them.
//   experts M     (first) under expert parallelism, this rank's routed experts alone at M tokens,
//                 for each of their token-count classes (MoeExperts::token_classes): the count a
//                 rank receives follows the routing, which no batch shape fixes.
// Verify rows cut short (fewer than k drafts, at the token budget or max_model_len) are not
// enumerated. Keys inside a replayed CUDA graph are not
// reached by the replay (its kernels were captured at startup); such a class is counted as
// covered by its graph.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/dist/rank_group.h"
#include "harness/engine/engine.h"
#include "harness/engine/engine_internal.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

/// The cached lengths of the decode rows (see the header comment): one of each integer
/// specialization class, == 1 first (the plain "decode B" rows).
constexpr int kDecodeContexts[] = {1, 16, 17};

/// "decode B" (or "verify B") for rows after one cached token, else "decode B after C".
std::string row_label(const char* kind, int rows, int context) {
  return context == 1 ? fmt::format("{} {}", kind, rows)
                      : fmt::format("{} {} after {}", kind, rows, context);
}

std::string decode_label(int rows, int context) { return row_label("decode", rows, context); }

/// `v` with `n` in it, sorted.
std::vector<int> with_count(std::vector<int> v, int n) {
  if (std::find(v.begin(), v.end(), n) == v.end()) v.push_back(n);
  std::sort(v.begin(), v.end());
  return v;
}

struct EnvelopeClass {
  std::string label;           ///< "prefill 17", "continue 5 after 8192", "decode 12"
  std::vector<SeqStep> seqs;
  int tokens = 0;
  bool experts_only = false;   ///< "experts M": this rank's routed experts at M = tokens
};

/// A step class of `label` with rows `seqs`, its token count summed.
EnvelopeClass make_class(std::string label, std::vector<SeqStep> seqs) {
  int tokens = 0;
  for (const SeqStep& s : seqs) tokens += s.query_len;
  return {std::move(label), std::move(seqs), tokens};
}

std::vector<EnvelopeClass> envelope_classes(const EngineConfig& e) {
  std::vector<std::string> labels;
  const int chunk = e.max_num_batched_tokens;
  for (int n = 1; n <= std::min(chunk, e.max_model_len - 1); ++n)
    labels.push_back(fmt::format("prefill {}", n));
  for (int n = 1; n <= std::min(chunk, e.max_model_len - 1 - chunk); ++n)
    labels.push_back(fmt::format("continue {} after {}", n, chunk));
  for (int c : kDecodeContexts)
    for (int b = 1; b <= e.max_num_seqs; ++b) labels.push_back(decode_label(b, c));
  // Speculative decoding: B verify rows of 1 + k tokens, every B whose rows fit the token budget.
  const int k = num_speculative_tokens(e);
  if (k > 0)
    for (int c : kDecodeContexts)
      for (int b = 1; b <= e.max_num_seqs && b * (1 + k) <= chunk; ++b)
        labels.push_back(row_label("verify", b, c));
  // The batches come from the one parser envelope-warmup also uses, and pass the one fit rule it
  // applies (envelope_batch_fits: a decode or verify row's cached plus new tokens stay below
  // max_model_len), so a listed class warms the batch the sweep ran and no class the sweep
  // reports is one the warmer would refuse as outside.
  std::vector<EnvelopeClass> out;
  for (std::string& label : labels) {
    std::vector<SeqStep> seqs = *envelope_class_steps(label, e.block_size, k);
    if (envelope_batch_fits(seqs, e)) out.push_back(make_class(std::move(label), std::move(seqs)));
  }
  return out;
}

// The mixed batches: B decode rows first (request slots 0..B-1), then one fresh prompt of N
// tokens (slot B), for B = 1 .. max_num_seqs - 1 and N each of `prefill_reps` (B + N within
// max_num_batched_tokens). Their keys follow the batch's metadata as well as its token count
// (the prompt's rows start at row B: unaligned slices of state indices and query offsets).
// N is taken from the prefill lengths where a new key appeared, not every length: derived, on
// the assumption that the prompt part's keys change at the same lengths inside a mixed batch.
// The other batch shapes (later chunks, several prompts, verify rows) follow, each explained
// where it is added.
std::vector<EnvelopeClass> mixed_classes(const EngineConfig& e, std::vector<int> prefill_reps,
                                         std::vector<int> continue_reps) {
  // A 1-token prompt beside decode rows makes a uniform decode batch; the smallest prompt that
  // makes the batch mixed is always taken, even where alone it reached no new key (with lazy
  // capture, "prefill 1" reaches the decode kernels and "prefill 2" nothing new, but a decode row
  // beside it goes through the prefill path).
  prefill_reps = with_count(std::move(prefill_reps), 2);
  // A 1-token later chunk beside decodes is a uniform decode batch too: 2 likewise.
  const std::vector<int> chunk_reps = with_count(continue_reps, 2);
  const int chunk = e.max_num_batched_tokens;
  const int k = num_speculative_tokens(e);
  std::vector<EnvelopeClass> out;
  std::set<std::string> seen;
  // Every class is checked against the server's limits here, once (envelope_batch_fits, the
  // rule envelope-warmup applies too).
  auto add = [&](const std::string& label) {
    if (!seen.insert(label).second) return;
    std::vector<SeqStep> seqs = *envelope_class_steps(label, e.block_size, k);
    if (envelope_batch_fits(seqs, e)) out.push_back(make_class(label, std::move(seqs)));
  };
  // The running rows of a mixed batch: decode rows after each cached-length class, and under
  // speculative decoding verify rows the same way (a running request with drafts).
  std::vector<const char*> running = {"decode"};
  if (k > 0) running.push_back("verify");
  // Every pair of B and N for decode rows after one cached token; after 16 and 17 cached tokens,
  // and for verify rows, one row beside each length and every count of rows beside the 2-token
  // prompt (not every pair: DeepSeek V4 MTP's coverage, max_num_seqs 64, takes 4 minutes on 2
  // cores so; with every pair of decode rows after 16 and 17 it took 5.5, with every pair of
  // verify rows too 8.3, and reached the same keys).
  for (const char* kind : running)
    for (int c : kDecodeContexts)
      for (int b = 1; b < e.max_num_seqs; ++b)
        for (int n : prefill_reps)
          if ((kind[0] == 'd' && c == 1) || b == 1 || n == 2)
            add(fmt::format("{} + prefill {}", row_label(kind, b, c), n));
  // A later chunk after one token less than a full chunk: a long prompt whose first chunk ran
  // beside a decode row got max_num_batched_tokens - 1 tokens (the scheduler's token budget goes
  // to the decodes first), so its next chunk starts after a cached length of neither
  // specialization class of "continue N after C". N: 1 and each later-chunk length at which the
  // `continue` sweep reached a new key.
  if (chunk >= 2)
    for (int n : with_count(continue_reps, 1)) add(fmt::format("continue {} after {}", n, chunk - 1));
  // A later chunk beside running rows (decodes first, as above), after a full chunk and after
  // one token less; N from the `continue` sweep's key-changing lengths and 2.
  for (const char* kind : running)
    for (int c : {chunk, chunk - 1})
      for (int b = 1; b < e.max_num_seqs && c >= 1; ++b)
        for (int n : chunk_reps)
          add(fmt::format("{} {} + continue {} after {}", kind, b, n, c));
  // Two fresh prompts in one step (the scheduler admits waiting requests while the token budget
  // lasts): every ordered pair of the prefill sweep's key-changing lengths and 2, the second
  // prompt's rows starting at row N. A 1-token prompt is left out: the batch split takes it for
  // a decode row and puts it first (the decode-first mixed classes above).
  for (int n : prefill_reps)
    for (int m : prefill_reps)
      if (n >= 2 && m >= 2) add(fmt::format("prefill {} + prefill {}", n, m));
  // Three or more fresh prompts: S prompts of N tokens, S = 3 .. max_num_seqs, N each
  // key-changing length (the prompt count reaches keys through the batch metadata: number of
  // sequences, the last prompt's offset).
  for (int n : prefill_reps)
    for (int s = 3; n >= 2 && s <= e.max_num_seqs && s * n <= chunk; ++s)
      add(fmt::format("prefill {} x {}", n, s));
  // Running rows beside several prompts: B decode rows and S >= 2 prompts of the smallest mixed
  // length, every B and S the row limit allows; verify rows as one row beside every S, and every
  // B beside two prompts.
  for (const char* kind : running)
    for (int b = 1; b + 2 <= e.max_num_seqs; ++b)
      for (int s = 2; b + s <= e.max_num_seqs; ++s)
        if (kind[0] == 'd' || b == 1 || s == 2)
          add(fmt::format("{} {} + prefill 2 x {}", kind, b, s));
  // A later chunk beside a fresh prompt (the running chunked prompt first, then the waiting
  // one), alone and behind running rows: the chunk's key-changing lengths with a 2-token prompt
  // and each key-changing prompt length with a 2-token chunk (one length varied at a time, not
  // every pair: derived), after a full chunk and one token less; the running rows: one, or every
  // count with both lengths 2.
  for (int c : {chunk, chunk - 1}) {
    if (c < 1) continue;
    std::vector<std::pair<int, int>> pairs;  // (chunk tokens, prompt tokens)
    for (int n : chunk_reps) pairs.push_back({n, 2});
    for (int m : prefill_reps) pairs.push_back({2, m});
    for (const auto& [n, m] : pairs) {
      add(fmt::format("continue {} after {} + prefill {}", n, c, m));
      for (const char* kind : running)
        add(fmt::format("{} 1 + continue {} after {} + prefill {}", kind, n, c, m));
    }
    for (const char* kind : running)
      for (int b = 2; b + 2 <= e.max_num_seqs; ++b)
        add(fmt::format("{} {} + continue 2 after {} + prefill 2", kind, b, c));
  }
  return out;
}

/// Classes between the partial reports of a sweep (Engine::snapshot: a few ms each).
constexpr size_t kEnvelopeReportEvery = 512;

}  // namespace

void Engine::do_envelope() {
  if (mode() == DeviceMode::kCuda) {
    throw InputError("the serving envelope (replay --envelope) runs in compile-only mode only: "
                     "key-only steps launch nothing");
  }
  jit::JitRuntime& rt = *jit_;
  std::set<std::string> startup_keys;
  for (const jit::CompileRecord& r : rt.monitor().records()) startup_keys.insert(r.key);
  std::vector<EnvelopeClass> classes;
  // Expert parallelism: the count the dispatch routes to a rank follows the routing, not the
  // batch, so a batch class reaches whichever counts its draw gives. Every count class of this
  // rank's experts runs first, directly (each rank alone: no collective), so the MoE keys are
  // first reached by a class that reaches them whatever the routing: the one envelope-warmup
  // can rely on.
  for (int64_t m : model_->expert_token_classes(scenario_.engine.max_num_batched_tokens))
    classes.push_back({fmt::format("experts {}", m), {}, static_cast<int>(m), true});
  for (EnvelopeClass& c : envelope_classes(scenario_.engine)) classes.push_back(std::move(c));
  const size_t base_classes = classes.size();
  // The prefill lengths at which some key was reached first: the token-count classes the mixed
  // batches below take their prefill part from.
  std::vector<int> prefill_reps, continue_reps;
  std::vector<int64_t> new_key_at(base_classes, 0);  // 1: base class i reached a new key
  size_t reached_count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  rt.clear_reached_keys();
  rt.set_key_only(true);
  // The ranks' collectives carry no bytes in compile-only mode and nothing is timed here: each
  // rank sweeps at its own pace (the only collective that matters, below, resumes them). On 2
  // cores the 4 EP ranks spent most of a sweep waiting for each other's turn in ~48,000
  // all-reduces.
  dist::RankGroup* const ranks =
      options_.ranks != nullptr && options_.ranks->world() > 1 ? options_.ranks : nullptr;
  struct Resume {
    dist::RankGroup* g;
    ~Resume() {
      if (g) g->set_paused(false);
    }
  } resume{ranks};
  if (ranks) ranks->set_paused(true);
  nlohmann::json cold = nlohmann::json::array(), loaded = nlohmann::json::array();
  size_t done = 0;
  // Written whether the sweep ends or a class fails (a crash the engine raises in that step):
  // what the classes before it reached is kept, and the failing class is named.
  auto write = [&](const std::string& stopped_at, bool unfinished) {
    const std::vector<std::string> reached = rt.reached_keys();
    size_t covered = 0;
    for (const std::string& k : reached) covered += startup_keys.count(k);
    nlohmann::json e = {
        {"classes", classes.size()},
        {"classes_run", done},
        {"startup_keys", startup_keys.size()},
        {"reached_keys", reached.size()},
        {"covered_at_startup", covered},
        {"loaded_keys", loaded.size()},
        {"cold_keys", cold.size()},
        {"cold", cold},
        {"loaded", loaded},
        {"sweep_ms",
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}};
    // The classes that first reach the cold keys, in sweep order: what envelope-warmup runs
    // (engine.envelope_warmup_classes) to compile them at startup.
    std::vector<std::string> warm;
    for (const nlohmann::json& c : cold) {
      const std::string label = c["class"].get<std::string>();
      if (std::find(warm.begin(), warm.end(), label) == warm.end()) warm.push_back(label);
    }
    e["warmup_classes"] = warm;
    if (!stopped_at.empty()) e["stopped_at_class"] = stopped_at;
    if (unfinished) e["sweep_unfinished"] = true;
    result_.extra["envelope"] = std::move(e);
  };
  auto record = [&](const std::string& stopped_at) {
    rt.set_key_only(false);
    rt.monitor().set_step(StepContext{});
    write(stopped_at, false);
    // How many classes of each form the sweep holds ("decode N + prefill N": 3,600), so a
    // reader can trace `classes` to the enumeration rules.
    std::map<std::string, int> forms;
    for (const EnvelopeClass& c : classes) {
      std::string form;
      for (size_t p = 0; p < c.label.size(); ++p) {
        const bool digit = c.label[p] >= '0' && c.label[p] <= '9';
        if (!digit) form += c.label[p];
        else if (p == 0 || c.label[p - 1] < '0' || c.label[p - 1] > '9') form += 'N';
      }
      ++forms[form];
    }
    result_.extra["envelope"]["class_forms"] = forms;
  };
  for (size_t i = 0; i < classes.size(); ++i) {
    const EnvelopeClass c = classes[i];  // a copy: the mixed classes are appended below
    StepContext ctx;
    ctx.request = static_cast<int>(i);
    ctx.wave = 2;
    ctx.step = 0;
    ctx.batch_tokens = c.tokens;
    ctx.batch_seqs = static_cast<int>(c.seqs.size());
    rt.monitor().set_step(ctx);
    const size_t before = rt.monitor().num_records();
    // The keys this class reached first, from the monitor's records after `before`.
    auto take_new_keys = [&] {
      if (rt.monitor().num_records() == before) return;
      const std::vector<jit::CompileRecord> recs = rt.monitor().records();
      for (size_t k = before; k < recs.size(); ++k) {
        if (recs[k].source != "key" && recs[k].source != "disk") continue;
        (recs[k].source == "key" ? cold : loaded)
            .push_back({{"kernel", recs[k].kernel}, {"key", recs[k].key}, {"class", c.label},
                        {"class_index", i}, {"tokens", c.tokens}, {"seqs", c.seqs.size()}});
      }
    };
    try {
      if (c.experts_only)
        model_->run_local_experts(c.tokens);
      else
        run_step(c.seqs);
    } catch (...) {
      take_new_keys();  // what the failing step reached before it failed counts as reached
      record(c.label);
      log(fmt::format("envelope: stopped in class '{}' ({} of {} classes run)", c.label, done,
                      classes.size()));
      throw;
    }
    ++done;
    // What the sweep has reached so far goes to the parent now and then, so a watchdog timeout
    // or an interrupt keeps it (stopped_at_class: the last class run; sweep_unfinished).
    if (done % kEnvelopeReportEvery == 0) {
      write(c.label, true);
      snapshot();
    }
    if (i < base_classes) {
      const size_t now_reached = rt.reached_key_count();
      new_key_at[i] = now_reached > reached_count ? 1 : 0;
      reached_count = now_reached;
    }
    if (i + 1 == base_classes) {
      // Under engine.ranks: all every rank sweeps in its own process, and the ranks' steps meet
      // in collectives, so they must run the same classes: a length counts as key-changing when
      // it reached a new key on any rank (under expert parallelism each rank routes its own
      // tokens and reaches its own MoE keys).
      if (ranks) {
        ranks->set_paused(false);
        new_key_at = ranks->all_reduce(new_key_at, "envelope: key-changing lengths");
        ranks->set_paused(true);
      }
      for (size_t k = 0; k < base_classes; ++k) {
        if (new_key_at[k] == 0) continue;
        if (classes[k].label.rfind("prefill ", 0) == 0) prefill_reps.push_back(classes[k].tokens);
        if (classes[k].label.rfind("continue ", 0) == 0) continue_reps.push_back(classes[k].tokens);
      }
      for (EnvelopeClass& m : mixed_classes(scenario_.engine, prefill_reps, continue_reps))
        classes.push_back(std::move(m));
    }
    take_new_keys();  // most classes reach no new key: records are copied only when one did
  }
  record("");
  // What a cold process would spend compiling the keys startup left cold: each compiled once
  // now, outside key-only mode, through the runtime's usual path (the run's compile memo serves
  // a key another strategy compiled, with the time measured then, marked reused).
  {
    rt.monitor().set_phase(engine_detail::kEnvelopeCompilePhase);
    const size_t first = rt.monitor().num_records();
    const auto tc = std::chrono::steady_clock::now();
    rt.compile_key_only_misses();
    const double pass_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tc).count();
    rt.monitor().set_phase("envelope");
    std::map<std::string, std::pair<double, bool>> ms_of;  // key -> (compile_ms, reused)
    const std::vector<jit::CompileRecord> recs = rt.monitor().records();
    for (size_t k = first; k < recs.size(); ++k) ms_of[recs[k].key] = {recs[k].compile_ms, recs[k].reused};
    nlohmann::json& env = result_.extra["envelope"];
    double total = 0;
    size_t reused = 0;
    for (nlohmann::json& c : env["cold"]) {
      auto it = ms_of.find(c["key"].get<std::string>());
      if (it == ms_of.end()) continue;  // held by now (compiled by an earlier cold key's pass)
      c["compile_ms"] = it->second.first;
      c["compile_reused"] = it->second.second;
      total += it->second.first;
      reused += it->second.second;
    }
    env["cold_compile_ms"] = total;
    env["cold_compile_reused"] = reused;
    env["compile_pass_ms"] = pass_ms;
  }
  const nlohmann::json& e = result_.extra["envelope"];
  log(fmt::format("envelope: {} classes, {} keys reached, {} compiled at startup, {} on disk, "
                  "{} cold ({:.0f} ms to compile them)",
                  classes.size(), e["reached_keys"].get<size_t>(),
                  e["covered_at_startup"].get<size_t>(), loaded.size(), cold.size(),
                  e["cold_compile_ms"].get<double>()));
}

}  // namespace coldstart
