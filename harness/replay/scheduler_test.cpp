#include "harness/replay/scheduler.h"

#include <gtest/gtest.h>

#include "harness/common/error.h"

namespace coldstart {
namespace {

std::vector<SchedStep> run_all(Scheduler& s) {
  std::vector<SchedStep> steps;
  while (!s.done()) {
    steps.push_back(s.next());
    s.complete(steps.back());
    if (steps.size() > 10000) ADD_FAILURE() << "scheduler does not terminate";
  }
  return steps;
}

TEST(Scheduler, OneRequestChunksItsPromptThenDecodes) {
  Scheduler s({{0, 5000, 3, 0}}, 4, 2048, true);
  auto steps = run_all(s);
  ASSERT_EQ(steps.size(), 6u);  // 2048 + 2048 + 904, then 3 decodes
  EXPECT_EQ(steps[0].seqs[0].query_len, 2048);
  EXPECT_FALSE(steps[0].seqs[0].completes_prefill);
  EXPECT_EQ(steps[1].seqs[0].context_len, 2048);
  EXPECT_EQ(steps[2].seqs[0].query_len, 904);
  EXPECT_TRUE(steps[2].seqs[0].completes_prefill);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(steps[3 + d].seqs[0].decode_index, d);
    EXPECT_EQ(steps[3 + d].seqs[0].context_len, 5000 + d);
  }
}

TEST(Scheduler, LaterArrivalsJoinRunningDecodesInOneMixedStep) {
  // Request 0 prefills at step 0 and decodes from step 1; request 1 arrives at step 1, request 2
  // at step 2: both are admitted beside the running decodes, so steps 1 and 2 are mixed.
  Scheduler s({{0, 100, 5, 0}, {1, 300, 2, 1}, {2, 50, 2, 2}}, 4, 2048, true);
  auto steps = run_all(s);
  ASSERT_GE(steps.size(), 3u);
  EXPECT_EQ(steps[0].seqs.size(), 1u);
  ASSERT_EQ(steps[1].seqs.size(), 2u);
  EXPECT_EQ(steps[1].seqs[0].id, 0);
  EXPECT_EQ(steps[1].seqs[0].decode_index, 0);
  EXPECT_EQ(steps[1].seqs[1].id, 1);
  EXPECT_EQ(steps[1].seqs[1].query_len, 300);
  EXPECT_TRUE(steps[1].mixed());
  ASSERT_EQ(steps[2].seqs.size(), 3u);  // two decodes (0 and 1) + request 2's prefill
  EXPECT_EQ(steps[2].num_tokens(), 1 + 1 + 50);
  EXPECT_TRUE(steps[2].mixed());
  EXPECT_FALSE(steps[0].mixed());
}

TEST(Scheduler, TokenBudgetChunksTheHeadOfTheQueue) {
  Scheduler s({{0, 1000, 1, 0}, {1, 1000, 1, 0}}, 4, 1500, true);
  SchedStep a = s.next();
  ASSERT_EQ(a.seqs.size(), 2u);
  EXPECT_EQ(a.seqs[0].query_len, 1000);
  EXPECT_EQ(a.seqs[1].query_len, 500);  // chunked to what is left
  EXPECT_FALSE(a.seqs[1].completes_prefill);
  s.complete(a);
  SchedStep b = s.next();
  ASSERT_EQ(b.seqs.size(), 2u);
  EXPECT_EQ(b.seqs[0].decode_index, 0);      // running first
  EXPECT_EQ(b.seqs[1].context_len, 500);     // then the rest of the prompt
  EXPECT_EQ(b.seqs[1].query_len, 500);
}

TEST(Scheduler, MaxNumSeqsLimitsAdmission) {
  Scheduler s({{0, 10, 2, 0}, {1, 10, 2, 0}, {2, 10, 2, 0}}, 2, 2048, true);
  SchedStep a = s.next();
  EXPECT_EQ(a.seqs.size(), 2u);
  s.complete(a);
  auto rest = run_all(s);
  bool third_admitted = false;
  for (const auto& st : rest) {
    int n = 0;
    for (const auto& q : st.seqs) n += q.id == 2;
    third_admitted |= n > 0;
    EXPECT_LE(st.seqs.size(), 2u);
  }
  EXPECT_TRUE(third_admitted);
}

TEST(Scheduler, IdleStepsAreSkippedAndChunkedPrefillOffWaits) {
  Scheduler s({{0, 10, 0, 7}}, 1, 16, true);
  SchedStep a = s.next();
  EXPECT_EQ(a.index, 7);
  s.complete(a);
  EXPECT_TRUE(s.done());
  Scheduler off({{0, 100, 0, 0}}, 1, 16, false);
  EXPECT_THROW(off.next(), Error);
}

TEST(Scheduler, RequestsWaitForFreeBlocksAndGetThemBack) {
  // 10 free blocks; each request holds 6 while it runs: the second waits for the first to finish.
  Scheduler s({{0, 32, 2, 0, 6}, {1, 32, 2, 0, 6}}, 4, 2048, true, 10);
  auto steps = run_all(s);
  ASSERT_GE(steps.size(), 4u);
  for (const auto& q : steps[0].seqs) EXPECT_EQ(q.id, 0);
  size_t first_with_1 = 0;
  while (first_with_1 < steps.size() && steps[first_with_1].seqs.back().id != 1) ++first_with_1;
  ASSERT_LT(first_with_1, steps.size());
  for (size_t i = first_with_1; i < steps.size(); ++i)
    for (const auto& q : steps[i].seqs) EXPECT_EQ(q.id, 1) << "request 0 had finished";
  EXPECT_TRUE(s.finished(0));
  EXPECT_TRUE(s.finished(1));
  // A request larger than the whole cache can never run: refused, not waited on for ever.
  EXPECT_THROW(Scheduler({{0, 32, 2, 0, 11}}, 4, 2048, true, 10), InputError);
}

TEST(Scheduler, ArrivalStepsBeyondInt32DoNotOverflow) {
  Scheduler s({{0, 8, 2, 3000000000LL}}, 1, 16, true);
  auto steps = run_all(s);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].index, 3000000000LL);
  EXPECT_EQ(steps[2].index, 3000000002LL);
}


TEST(Scheduler, SpeculativeDecodingSchedulesVerifyRowsAndAdvancesByAcceptedTokens) {
  // k = 2, one draft accepted per step: rows of 3 tokens, each step emits 2 tokens, so 5 output
  // tokens after the first take 3 verify steps (2 + 2 + 2 >= 5).
  Scheduler s({{0, 100, 5, 0}, {1, 40, 0, 1}}, 4, 2048, true);
  s.set_speculative(2, 1);
  auto steps = run_all(s);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].seqs[0].num_draft_tokens, 0);  // the prefill carries no drafts
  // Step 1: the verify row first, the arriving prefill after it (a mixed batch).
  ASSERT_EQ(steps[1].seqs.size(), 2u);
  EXPECT_EQ(steps[1].seqs[0].query_len, 3);
  EXPECT_EQ(steps[1].seqs[0].num_draft_tokens, 2);
  EXPECT_EQ(steps[1].seqs[0].decode_index, 0);
  EXPECT_EQ(steps[1].seqs[1].query_len, 40);
  EXPECT_TRUE(steps[1].mixed());
  EXPECT_EQ(steps[1].num_tokens(), 43);
  // The context grows by 1 + accepted per verify step.
  EXPECT_EQ(steps[2].seqs[0].context_len, 102);
  EXPECT_EQ(steps[3].seqs[0].context_len, 104);
  EXPECT_EQ(steps[3].seqs[0].decode_index, 2);
  EXPECT_TRUE(s.finished(0));
}

TEST(Scheduler, VerifyRowsAreCutToTheTokenBudgetAndBadSettingsAreRefused) {
  Scheduler s({{0, 8, 4, 0}, {1, 8, 4, 0}}, 4, 20, true);
  s.set_speculative(16, 16);
  auto steps = run_all(s);
  ASSERT_GE(steps.size(), 2u);
  // Step 1: the first verify row takes 17 of the 20 tokens, the second gets the 3 left.
  EXPECT_EQ(steps[1].seqs[0].query_len, 17);
  EXPECT_EQ(steps[1].seqs[1].query_len, 3);
  EXPECT_EQ(steps[1].seqs[1].num_draft_tokens, 2);
  // vLLM keeps a verify row's last position below max_model_len: prompt 10 + 3 output tokens
  // under max_model_len 14 cuts the second verify row (context 12) to 14 - 1 - 12 = 1 token.
  Scheduler capped({{0, 10, 3, 0}}, 4, 2048, true);
  capped.set_speculative(3, 1, 14);
  auto cut = run_all(capped);
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[1].seqs[0].query_len, 3);  // 14 - 1 - 10
  EXPECT_EQ(cut[2].seqs[0].context_len, 12);
  EXPECT_EQ(cut[2].seqs[0].query_len, 1);
  EXPECT_EQ(cut[2].seqs[0].num_draft_tokens, 0);
  Scheduler bad({{0, 8, 4, 0}}, 4, 20, true);
  EXPECT_THROW(bad.set_speculative(1, 2), Error);
  EXPECT_THROW(bad.set_speculative(-1, 0), Error);
}

}  // namespace
}  // namespace coldstart
