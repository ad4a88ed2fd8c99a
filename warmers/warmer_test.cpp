// Warmers against a fake warmup context, on the CPU: what each one warms (which mixers it runs,
// with which sequence shapes), what it reserves, when it skips, and that every mixer backend or
// kind a warmer asks for exists (a renamed backend would otherwise turn its warmer into a skip).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/target.h"
#include "harness/models/mixer.h"
#include "harness/runtime/workspace.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

// A mixer that records the sequences it ran and touches no kernel.
class FakeMixer final : public Mixer {
 public:
  FakeMixer(std::string backend, std::string kind, std::string config, int64_t max_ws,
            const MixerContext& ctx)
      : Mixer(spec_of(kind), ctx), backend_(std::move(backend)), config_(std::move(config)),
        max_ws_(max_ws) {}
  std::string backend() const override { return backend_; }
  CacheSpec cache_spec() const override { return {}; }
  void bind_cache(const CacheBinding&) override {}
  void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
               const ForwardBatch& batch) override {
    ASSERT_EQ(in.size(), spec().input_widths.size());
    ASSERT_GE(out.size(0), batch.num_tokens);
    calls.push_back(batch);
  }
  std::string compile_config() const override { return config_; }
  int64_t max_workspace_bytes() const override { return max_ws_; }

  std::vector<ForwardBatch> calls;

 private:
  static MixerSpec spec_of(const std::string& kind) {
    MixerSpec s;
    s.kind = kind;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 64;
    s.output_width = 256;
    s.input_widths = {256, 128, 128};
    s.input_row_strides = {512, 512, 512};
    return s;
  }
  std::string backend_, config_;
  int64_t max_ws_;
};

// What a warmer may see of the engine, on the CPU in compile-only mode; records what it asked.
class FakeContext final : public WarmupContext {
 public:
  FakeContext() : target_(target_for_arch("sm_90", 132)), workspace_(c10::Device(c10::kCPU)) {
    scenario_.engine.block_size = 16;
    scenario_.engine.cudagraph_capture_sizes = {1, 2, 4, 8, 16, 24, 32};
    mctx_.device = c10::Device(c10::kCPU);
  }
  FakeMixer& add(const std::string& backend, const std::string& kind, const std::string& config,
                 int64_t max_ws = 0) {
    layers_.push_back(std::make_unique<FakeMixer>(backend, kind, config, max_ws, mctx_));
    return *layers_.back();
  }

  const Scenario& scenario() const override { return scenario_; }
  DeviceMode mode() const override { return DeviceMode::kCompileOnly; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  const Target& target() const override { return target_; }
  jit::JitRuntime& jit() override {
    throw std::logic_error("the fake context has no JIT runtime: a warmer with nothing to warm "
                           "must not reach it");
  }
  WorkspaceManager& workspace() override { return workspace_; }
  std::vector<Mixer*> mixers(const MixerRef& ref) override {
    asked.insert(ref.name());
    std::vector<Mixer*> out;
    for (auto& m : layers_)
      if (ref.matches(*m)) out.push_back(m.get());
    return out;
  }
  ForwardBatch make_batch(const std::vector<SeqStep>& seqs) override {
    ForwardBatch b;
    b.num_reqs = static_cast<int>(seqs.size());
    for (const SeqStep& s : seqs) {
      b.query_start.push_back(b.num_tokens);
      b.query_lens.push_back(s.query_len);
      b.context_lens.push_back(s.context_len);
      b.num_tokens += s.query_len;
    }
    batches.push_back(seqs);
    return b;
  }
  std::vector<int64_t> dummy_run(const std::vector<SeqStep>& seqs) override {
    dummy_runs.push_back(seqs);
    return std::vector<int64_t>(seqs.size(), 0);
  }
  std::vector<int64_t> expert_token_classes() override { return expert_classes; }
  void run_local_experts(int64_t M) override { expert_runs.push_back(M); }
  void log(const std::string&) override {}
  void skip(const std::string& reason) override { skipped.push_back(reason); }
  void report(const std::string& summary, const nlohmann::json&) override {
    reports.push_back(summary);
  }

  Scenario scenario_;
  std::set<std::string> asked;
  std::vector<std::vector<SeqStep>> batches, dummy_runs;
  std::vector<int64_t> expert_classes, expert_runs;  ///< what expert_token_classes gives; M run
  std::vector<std::string> skipped, reports;

 private:
  Target target_;
  MixerContext mctx_;
  WorkspaceManager workspace_;
  std::vector<std::unique_ptr<FakeMixer>> layers_;
};

TEST(Warmers, EveryWarmerWithNothingToWarmSkipsWithAReason) {
  for (const std::string& name : warmer_names()) {
    if (name == "aot-prefill-warmup") continue;  // needs no layer of any kind (below)
    if (name == "test-ghost-warmer") continue;   // registered by a test below
    FakeContext ctx;
    ASSERT_NO_THROW(make_warmer(name)->run(ctx)) << name;
    ASSERT_EQ(ctx.skipped.size(), 1u) << name << " neither warmed nor skipped";
    EXPECT_FALSE(ctx.skipped[0].empty()) << name;
    EXPECT_TRUE(ctx.dummy_runs.empty() && ctx.batches.empty()) << name;
    EXPECT_EQ(ctx.workspace().current_bytes(), 0) << name;
  }
}

// Every backend or kind a warmer looks its layers up by is one it declares (mixers_used) and one
// the registry knows: a renamed backend must fail here and at load, not turn the warmer into a
// silent skip.
TEST(Warmers, EveryMixerNameAWarmerAsksForIsDeclaredAndRegistered) {
  size_t asked = 0;
  for (const std::string& name : warmer_names()) {
    if (name == "test-ghost-warmer") continue;  // registered by a test below
    FakeContext ctx;
    const std::unique_ptr<Warmer> w = make_warmer(name);
    w->run(ctx);
    const std::vector<std::string> declared = w->mixers_used();
    for (const std::string& n : ctx.asked) {
      ++asked;
      EXPECT_NE(std::find(declared.begin(), declared.end(), n), declared.end())
          << name << " looks up mixers '" << n << "' without declaring it in mixers_used()";
      EXPECT_TRUE(MixerRef(n).registered()) << name << " asks for mixers '" << n << "'";
    }
    EXPECT_TRUE(warmer_unresolved_mixers(name).empty()) << name;
  }
  EXPECT_GE(asked, 4u) << "the TurboQuant, GDN and Mamba2 warmers look their layers up by name";
}

// A warmer declaring a backend nobody registered is reported by name (replay refuses a scenario
// that lists it, exit 2, at its strategies key).
class GhostWarmer final : public Warmer {
 public:
  std::string name() const override { return "test-ghost-warmer"; }
  std::string description() const override { return "test only"; }
  void run(WarmupContext& ctx) override { ctx.mixers(MixerRef("no_such_backend")); }
  std::vector<std::string> mixers_used() const override { return {"no_such_backend", "gdn"}; }
};

TEST(Warmers, AnUnregisteredBackendIsNamed) {
  static const bool registered = register_warmer("test-ghost-warmer", [] {
    return std::unique_ptr<Warmer>(new GhostWarmer());
  });
  ASSERT_TRUE(registered);
  EXPECT_EQ(warmer_unresolved_mixers("test-ghost-warmer"), std::vector<std::string>{"no_such_backend"});
  EXPECT_FALSE(MixerRef("no_such_backend").registered());
  EXPECT_TRUE(MixerRef("turboquant_4bit_nc").registered());
  EXPECT_TRUE(MixerRef("mamba2").registered()) << "a kind counts as well as a name";
  EXPECT_THROW(warmer_unresolved_mixers("no-such-warmer"), InputError);
}

TEST(Warmers, AotPrefillRunsOneEagerStepLongerThanTheLargestCaptureSize) {
  FakeContext ctx;
  make_warmer("aot-prefill-warmup")->run(ctx);
  ASSERT_EQ(ctx.dummy_runs.size(), 1u);
  ASSERT_EQ(ctx.dummy_runs[0].size(), 1u);
  const SeqStep& s = ctx.dummy_runs[0][0];
  EXPECT_EQ(s.context_len, 0);
  EXPECT_EQ(s.query_len, 48) << "whole blocks of 16, past the largest capture size 32";
  EXPECT_EQ(s.blocks, std::vector<int32_t>(3, 0)) << "the null block only";

  FakeContext small;
  small.scenario_.engine.cudagraph_capture_sizes = {};
  make_warmer("aot-prefill-warmup")->run(small);
  ASSERT_EQ(small.dummy_runs.size(), 1u);
  EXPECT_EQ(small.dummy_runs[0][0].query_len, 16) << "one block without capture sizes";
}

TEST(Warmers, TqReserveMaxReservesTheLargestLayerAndRunsNothing) {
  FakeContext ctx;
  FakeMixer& a = ctx.add("turboquant_4bit_nc", "attention", "cfg-a", 1 << 20);
  FakeMixer& b = ctx.add("turboquant_4bit_nc", "attention", "cfg-b", 3 << 20);
  ctx.add("paged_bf16", "attention", "cfg-c", 64 << 20);  // another backend: not counted
  make_warmer("tq-reserve-max")->run(ctx);
  EXPECT_TRUE(ctx.skipped.empty());
  EXPECT_EQ(ctx.workspace().current_bytes(), int64_t{3} << 20);
  EXPECT_TRUE(a.calls.empty() && b.calls.empty()) << "reserves, compiles nothing";
}

TEST(Warmers, TqDecodeWarmupRunsEachDistinctConfigOnceWithDecodeAndContinuation) {
  FakeContext ctx;
  FakeMixer& a1 = ctx.add("turboquant_4bit_nc", "attention", "cfg-a");
  FakeMixer& a2 = ctx.add("turboquant_4bit_nc", "attention", "cfg-a");
  FakeMixer& b = ctx.add("turboquant_4bit_nc", "attention", "cfg-b");
  FakeMixer& other = ctx.add("paged_bf16", "attention", "cfg-a");
  make_warmer("tq-decode-warmup")->run(ctx);
  EXPECT_TRUE(ctx.skipped.empty());
  EXPECT_EQ(a1.calls.size(), 2u);
  EXPECT_TRUE(a2.calls.empty()) << "same compile config as the first layer";
  EXPECT_EQ(b.calls.size(), 2u);
  EXPECT_TRUE(other.calls.empty());
  ASSERT_EQ(ctx.batches.size(), 4u);
  for (size_t i = 0; i < ctx.batches.size(); i += 2) {
    const SeqStep& decode = ctx.batches[i].at(0);
    EXPECT_EQ(decode.query_len, 1);
    EXPECT_EQ(decode.context_len, 15) << "batch-1 decode inside one block";
    EXPECT_EQ(decode.blocks, std::vector<int32_t>{0});
    const SeqStep& cont = ctx.batches[i + 1].at(0);
    EXPECT_EQ(cont.query_len, 2);
    EXPECT_EQ(cont.context_len, 16) << "continuation prefill over one cached block";
    EXPECT_EQ(cont.blocks, std::vector<int32_t>(2, 0));
  }
}

/// The envelope class labels envelope-warmup and the coverage sweep share: rows, slots, cached
/// and new tokens of each form; anything else is nullopt.
TEST(Warmers, EnvelopeClassLabelsGiveTheirBatches) {
  auto steps = [](const char* label) { return envelope_class_steps(label, 16); };
  const auto mixed = steps("decode 2 after 17 + prefill 5");
  ASSERT_TRUE(mixed.has_value());
  ASSERT_EQ(mixed->size(), 3u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*mixed)[r].context_len, 17);
    EXPECT_EQ((*mixed)[r].query_len, 1);
    EXPECT_EQ((*mixed)[r].req_slot, r);
    EXPECT_EQ((*mixed)[r].blocks.size(), 2u);  // 18 tokens in 16-token blocks
  }
  EXPECT_EQ((*mixed)[2].context_len, 0);
  EXPECT_EQ((*mixed)[2].query_len, 5);
  EXPECT_EQ((*mixed)[2].req_slot, 2);
  const auto plain = steps("decode 2 + prefill 5");
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ((*plain)[0].context_len, 1);
  EXPECT_EQ((*plain)[2].query_len, 5);
  const auto after = steps("decode 3 after 16");
  ASSERT_TRUE(after.has_value());
  ASSERT_EQ(after->size(), 3u);
  EXPECT_EQ((*after)[2].context_len, 16);
  EXPECT_EQ((*after)[2].req_slot, 2);
  EXPECT_EQ(steps("decode 3")->at(0).context_len, 1);
  EXPECT_EQ(steps("continue 4 after 2048")->at(0).context_len, 2048);
  const auto two = steps("prefill 3 + prefill 20");
  ASSERT_TRUE(two.has_value());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].query_len, 3);
  EXPECT_EQ((*two)[1].query_len, 20);
  EXPECT_EQ((*two)[1].context_len, 0);
  EXPECT_EQ((*two)[1].req_slot, 1);
  const auto one = steps("prefill 3 + prefill 1");  // the 1-token prompt leads, as a decode row
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ((*one)[0].query_len, 1);
  EXPECT_EQ((*one)[0].req_slot, 0) << "slots follow the reordered rows (Engine::make_batch)";
  EXPECT_EQ((*one)[1].query_len, 3);
  EXPECT_EQ((*one)[1].req_slot, 1);
  const auto chunk = steps("decode 2 + continue 5 after 2047");
  ASSERT_TRUE(chunk.has_value());
  ASSERT_EQ(chunk->size(), 3u);
  EXPECT_EQ((*chunk)[1].context_len, 1);
  EXPECT_EQ((*chunk)[2].context_len, 2047);
  EXPECT_EQ((*chunk)[2].query_len, 5);
  EXPECT_EQ((*chunk)[2].req_slot, 2);
  EXPECT_EQ((*chunk)[2].blocks.size(), 129u);  // 2052 tokens in 16-token blocks
  // Three or more prompts, and a later chunk beside a prompt and decode rows.
  const auto three = steps("prefill 5 x 3");
  ASSERT_TRUE(three.has_value());
  ASSERT_EQ(three->size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ((*three)[r].query_len, 5);
    EXPECT_EQ((*three)[r].context_len, 0);
    EXPECT_EQ((*three)[r].req_slot, r);
  }
  const auto all = steps("decode 1 + continue 3 after 2048 + prefill 2 x 2");
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].query_len, 1);
  EXPECT_EQ((*all)[1].context_len, 2048);
  EXPECT_EQ((*all)[1].query_len, 3);
  EXPECT_EQ((*all)[3].query_len, 2);
  EXPECT_EQ((*all)[3].req_slot, 3);
  // A part written after a longer one still goes where the batch reorder puts it.
  const auto late = steps("prefill 7 + decode 2 after 16");
  ASSERT_TRUE(late.has_value());
  ASSERT_EQ(late->size(), 3u);
  EXPECT_EQ((*late)[0].context_len, 16);
  EXPECT_EQ((*late)[2].query_len, 7);
  EXPECT_EQ((*late)[2].req_slot, 2);
  // Verify rows: 1 + k tokens with k state pages more, only under speculative decoding, ahead of
  // decode rows and prompts.
  EXPECT_FALSE(steps("verify 2").has_value()) << "no verify rows without speculative decoding";
  const auto verify = envelope_class_steps("decode 1 + verify 2 after 17 + prefill 4", 16, 2);
  ASSERT_TRUE(verify.has_value());
  ASSERT_EQ(verify->size(), 4u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE((*verify)[r].verify);
    EXPECT_EQ((*verify)[r].query_len, 3);
    EXPECT_EQ((*verify)[r].context_len, 17);
    EXPECT_EQ((*verify)[r].state_pages.size(), 3u);
    EXPECT_EQ((*verify)[r].blocks.size(), 2u);  // 20 tokens in 16-token blocks
  }
  EXPECT_FALSE((*verify)[2].verify);
  EXPECT_EQ((*verify)[2].query_len, 1);
  EXPECT_EQ((*verify)[3].query_len, 4);
  EXPECT_EQ(envelope_class_steps("verify 3", 16, 1)->at(2).context_len, 1);
  for (const char* bad : {"verify 0", "verify 2 after 0", "verify 2 after 3x", "verify"})
    EXPECT_FALSE(envelope_class_steps(bad, 16, 2).has_value()) << bad;
  for (const char* bad : {"prefill 3 + prefill 0", "prefill 2 x 0", "prefill 2 x", "prefill 2 +",
                          "decode 1 + + prefill 2", "prefill 2 x 3 x 4", "decode 2 + continue 5", "decode 0 after 16",
                          "decode 2 after 0", "decode 2 after 16 + prefill 0",
                          "decode 2 + prefill 5 after 16", "decode 2 after 16x", "prefill"})
    EXPECT_FALSE(steps(bad).has_value()) << bad;
}

// Under expert parallelism moe-ep-warmup runs each of this rank's expert token-count classes
// directly (the routing decides which count a dummy step gives a rank), after its dummy steps;
// envelope-warmup runs an "experts M" class the same way, and leaves it out without EP.
TEST(Warmers, ExpertClassesRunThisRanksExpertsDirectly) {
  FakeContext ctx;
  ctx.scenario_.engine.max_num_batched_tokens = 64;
  ctx.scenario_.engine.tensor_parallel_size = 4;
  ctx.scenario_.engine.set_key("enable_expert_parallel", "true");
  ctx.expert_classes = {1, 8, 33};
  make_warmer("moe-ep-warmup")->run(ctx);
  EXPECT_EQ(ctx.dummy_runs.size(), 7u);  // 1, 2, 4, ..., 32, then 64
  EXPECT_EQ(ctx.expert_runs, (std::vector<int64_t>{1, 8, 33}));

  FakeContext env;
  env.scenario_.engine.max_num_batched_tokens = 64;
  env.scenario_.engine.max_num_seqs = 4;
  env.scenario_.engine.max_model_len = 256;
  env.scenario_.engine.set_key("envelope_warmup_classes",
                               "experts 8, decode 2, experts 80, decode 999999999");
  env.expert_classes = {1, 8};
  make_warmer("envelope-warmup")->run(env);
  EXPECT_EQ(env.expert_runs, (std::vector<int64_t>{8}));
  EXPECT_EQ(env.dummy_runs.size(), 1u);
  ASSERT_EQ(env.reports.size(), 1u);
  EXPECT_NE(env.reports[0].find("1 of them this rank's experts alone"), std::string::npos);
  // A 9-digit count is outside before its batch is built (B rows for "decode B").
  EXPECT_NE(env.reports[0].find("outside this server's envelope, not run: experts 80, decode "
                                "999999999"),
            std::string::npos) << env.reports[0];
  FakeContext no_ep;  // no expert parallelism: an "experts M" class has nothing to run
  no_ep.scenario_.engine.max_num_batched_tokens = 64;
  no_ep.scenario_.engine.set_key("envelope_warmup_classes", "experts 8");
  make_warmer("envelope-warmup")->run(no_ep);
  EXPECT_TRUE(no_ep.expert_runs.empty());
  ASSERT_EQ(no_ep.skipped.size(), 1u);
  EXPECT_NE(no_ep.skipped[0].find("no expert parallelism (experts 8)"), std::string::npos)
      << no_ep.skipped[0];
}

// envelope-warmup runs every class form the sweep lists: verify rows (speculative decoding
// only), several prompts, a chunk beside a prompt; a class this server cannot be sent (a prompt
// of max_model_len tokens, more rows than max_num_seqs) is outside and named.
TEST(Warmers, EnvelopeWarmupRunsEveryClassForm) {
  FakeContext ctx;
  ctx.scenario_.engine.max_num_batched_tokens = 64;
  ctx.scenario_.engine.max_num_seqs = 4;
  ctx.scenario_.engine.max_model_len = 64;
  ctx.scenario_.engine.set_key("num_speculative_tokens", 2);
  ctx.scenario_.engine.set_key(
      "envelope_warmup_classes",
      "verify 2 + prefill 5, prefill 3 x 3, decode 1 + continue 2 after 32 + prefill 2, "
      "prefill 64, prefill 63, verify 5");
  make_warmer("envelope-warmup")->run(ctx);
  ASSERT_EQ(ctx.dummy_runs.size(), 4u) << (ctx.reports.empty() ? "" : ctx.reports[0]);
  const std::vector<SeqStep>& v = ctx.dummy_runs[0];
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[0].verify && v[1].verify && !v[2].verify);
  EXPECT_EQ(v[0].query_len, 3);
  EXPECT_EQ(v[0].state_pages.size(), 3u);
  EXPECT_EQ(v[2].query_len, 5);
  EXPECT_EQ(ctx.dummy_runs[1].size(), 3u);
  ASSERT_EQ(ctx.dummy_runs[2].size(), 3u);
  EXPECT_EQ(ctx.dummy_runs[2][1].context_len, 32);
  EXPECT_EQ(ctx.dummy_runs[3].at(0).query_len, 63);
  ASSERT_EQ(ctx.reports.size(), 1u);
  EXPECT_NE(ctx.reports[0].find("outside this server's envelope, not run: prefill 64, verify 5"),
            std::string::npos) << ctx.reports[0];

  FakeContext plain;  // no speculative decoding: no step of this server has verify rows
  plain.scenario_.engine.max_num_batched_tokens = 64;
  plain.scenario_.engine.max_num_seqs = 4;
  plain.scenario_.engine.max_model_len = 64;
  plain.scenario_.engine.set_key("envelope_warmup_classes", "verify 1, decode 1 + prefill 2");
  make_warmer("envelope-warmup")->run(plain);
  EXPECT_EQ(plain.dummy_runs.size(), 1u);
  ASSERT_EQ(plain.reports.size(), 1u);
  EXPECT_NE(plain.reports[0].find("not run: verify 1"), std::string::npos) << plain.reports[0];
  EXPECT_NE(plain.reports[0].find("1 envelope class, one dummy step"), std::string::npos)
      << plain.reports[0];

  FakeContext none;  // every class outside: the skip names them and why
  none.scenario_.engine.max_num_batched_tokens = 64;
  none.scenario_.engine.max_num_seqs = 4;
  none.scenario_.engine.max_model_len = 64;
  none.scenario_.engine.set_key("envelope_warmup_classes", "verify 1, prefill 65");
  make_warmer("envelope-warmup")->run(none);
  EXPECT_TRUE(none.dummy_runs.empty());
  ASSERT_EQ(none.skipped.size(), 1u);
  EXPECT_NE(none.skipped[0].find("no speculative decoding): verify 1, prefill 65"),
            std::string::npos) << none.skipped[0];

  FakeContext twice;  // parts in another order: the same batch, run once
  twice.scenario_.engine.max_num_batched_tokens = 64;
  twice.scenario_.engine.max_num_seqs = 4;
  twice.scenario_.engine.max_model_len = 64;
  twice.scenario_.engine.set_key(
      "envelope_warmup_classes",
      "decode 1 + prefill 2, prefill 2 + decode 1, prefill 3 + prefill 2, prefill 2 + prefill 3");
  make_warmer("envelope-warmup")->run(twice);
  EXPECT_EQ(twice.dummy_runs.size(), 3u) << "two prompts in either order are two batches";
  ASSERT_EQ(twice.reports.size(), 1u);
  EXPECT_NE(twice.reports[0].find("1 the same batch as an earlier class, run once: prefill 2 + "
                                  "decode 1 (as decode 1 + prefill 2)"),
            std::string::npos) << twice.reports[0];

  FakeContext many;  // thousands of classes outside: the report names 8 and counts the rest
  many.scenario_.engine.max_num_batched_tokens = 64;
  many.scenario_.engine.max_num_seqs = 4;
  many.scenario_.engine.max_model_len = 64;
  std::string big = "prefill 2";
  for (int n = 100; n < 2100; ++n) big += ", prefill " + std::to_string(n);
  many.scenario_.engine.set_key("envelope_warmup_classes", big);
  make_warmer("envelope-warmup")->run(many);
  EXPECT_EQ(many.dummy_runs.size(), 1u);
  ASSERT_EQ(many.reports.size(), 1u);
  EXPECT_NE(many.reports[0].find("2000 outside this server's envelope, not run: prefill 100, "
                                 "prefill 101, prefill 102, prefill 103, prefill 104, prefill 105, "
                                 "prefill 106, prefill 107, and 1992 more"),
            std::string::npos) << many.reports[0].substr(0, 400);
  EXPECT_LT(many.reports[0].size(), 400u);

  FakeContext empty;  // an empty value (as `--set engine.envelope_warmup_classes=` gives)
  empty.scenario_.engine.set_key("envelope_warmup_classes", "");
  make_warmer("envelope-warmup")->run(empty);
  EXPECT_TRUE(empty.dummy_runs.empty());
  ASSERT_EQ(empty.skipped.size(), 1u);
  EXPECT_NE(empty.skipped[0].find("is not set or is empty"), std::string::npos) << empty.skipped[0];
}

}  // namespace
}  // namespace coldstart
