// The graph memory ledger (graph_ledger.h) and the workspace policies that move buffers under it
// (workspace.h), on the meta device and in CPU memory: generations, not addresses, decide.
#include "harness/runtime/graph_ledger.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "harness/runtime/workspace.h"

namespace coldstart {
namespace {

TEST(GraphLedger, AGraphIsFreshUntilABufferItTouchedMoves) {
  GraphLedger ledger;
  const auto ws = ledger.add_buffer("the workspace (slot 0)", 1 << 20, 0);
  const auto kv = ledger.add_buffer("KV cache tensor 0", 64 << 20, 0);
  ledger.begin_capture("full decode graph at capture size 4");
  ledger.touch(ws);
  ledger.touch(kv);
  const auto g = ledger.end_capture();
  EXPECT_FALSE(ledger.stale(g).has_value());
  ledger.set_where([] {
    StepContext s;
    s.request = 0;
    s.step = 1;
    return LedgerWhere{"continuation_prefill", s};
  });
  ledger.move(ws, BufferMove::kReallocated, 2 << 20, 0);
  const auto stale = ledger.stale(g);
  ASSERT_TRUE(stale.has_value());
  EXPECT_EQ(stale->buffer, "the workspace (slot 0)");
  EXPECT_EQ(stale->captured_bytes, 1 << 20);
  EXPECT_EQ(stale->new_bytes, 2 << 20);
  EXPECT_EQ(stale->moves_since, 1);
  const std::string text = GraphLedger::stale_text(*stale);
  EXPECT_NE(text.find("full decode graph at capture size 4"), std::string::npos) << text;
  EXPECT_NE(text.find("at 1.00 MB"), std::string::npos) << text;
  EXPECT_NE(text.find("continuation_prefill (request 0, step 1) reallocated it at 2.00 MB"),
            std::string::npos)
      << text;
}

TEST(GraphLedger, OnlyTouchesInsideACaptureCountAndAGraphCapturedAfterTheMoveIsFresh) {
  GraphLedger ledger;
  const auto ws = ledger.add_buffer("ws", 256, 0);
  ledger.touch(ws);  // outside any capture: recorded nowhere
  ledger.begin_capture("before");
  const auto before = ledger.end_capture();  // touched nothing
  ledger.begin_capture("uses ws");
  ledger.touch(ws);
  ledger.touch(ws);  // once per generation
  const auto uses = ledger.end_capture();
  ledger.move(ws, BufferMove::kResizedInPlace, 512, 0);
  ledger.move(ws, BufferMove::kResizedInPlace, 1024, 0);
  ledger.begin_capture("after");
  ledger.touch(ws);
  const auto after = ledger.end_capture();
  EXPECT_FALSE(ledger.stale(before).has_value());
  EXPECT_FALSE(ledger.stale(after).has_value());
  const auto s = ledger.stale(uses);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->move, BufferMove::kResizedInPlace);
  EXPECT_EQ(s->new_bytes, 512);  // the first move after capture
  EXPECT_EQ(s->moves_since, 2);
  const std::string text = GraphLedger::stale_text(*s);
  EXPECT_NE(text.find("resized it in place to 0.00 MB (2 moves since capture, now 0.00 MB)"), std::string::npos)
      << text;
  const nlohmann::json j = ledger.to_json();
  EXPECT_EQ(j["graphs"], 3);
  ASSERT_EQ(j["moved_buffers"].size(), 1u);
  EXPECT_EQ(j["moved_buffers"][0]["generation"], 2);
  EXPECT_EQ(j["moved_buffers"][0]["graph_references"], 2);
}

TEST(GraphLedger, MisuseIsAnError) {
  GraphLedger ledger;
  EXPECT_THROW(ledger.touch(0), Error);
  EXPECT_THROW(ledger.end_capture(), Error);
  ledger.begin_capture("a");
  EXPECT_THROW(ledger.begin_capture("b"), Error);
  ledger.abort_capture();
  EXPECT_FALSE(ledger.capturing());
  EXPECT_THROW(ledger.stale(0), Error);
}

/// A workspace under `policy` reporting to a ledger, with one graph captured over its first
/// 1 KiB request; then a 4 KiB request.
struct PolicyRun {
  GraphLedger ledger;
  WorkspaceManager ws;
  GraphLedger::GraphId graph = -1;
  PolicyRun(WorkspacePolicy policy, c10::DeviceType device, int64_t fixed_bytes = 0)
      : ws(c10::Device(device), 1, policy, fixed_bytes) {
    ws.set_ledger(&ledger);
    ws.get_simultaneous({{{1024}, at::kByte}}, CS_HERE);  // eager warmup before capture
    ledger.begin_capture("full decode graph at capture size 1");
    ws.get_simultaneous({{{1024}, at::kByte}}, CS_HERE);
    graph = ledger.end_capture();
  }
};

TEST(WorkspacePolicies, LockRaisesVllmsAssertionAndLeavesGraphsFresh) {
  PolicyRun run(WorkspacePolicy::kLock, c10::kMeta);
  run.ws.lock();
  EXPECT_THROW(run.ws.get_simultaneous({{{4096}, at::kByte}}, CS_HERE), WorkspaceLockedError);
  EXPECT_FALSE(run.ledger.stale(run.graph).has_value());
}

TEST(WorkspacePolicies, GrowAndResizeLeaveTheCapturedGraphStale) {
  for (WorkspacePolicy p : {WorkspacePolicy::kGrow, WorkspacePolicy::kResize}) {
    for (c10::DeviceType d : {c10::kMeta, c10::kCPU}) {
      PolicyRun run(p, d);
      run.ws.lock();  // only kLock refuses growth after lock()
      auto v = run.ws.get_simultaneous({{{4096}, at::kByte}}, CS_HERE);
      EXPECT_EQ(run.ws.current_bytes(), 4096);
      const auto s = run.ledger.stale(run.graph);
      ASSERT_TRUE(s.has_value()) << workspace_policy_name(p);
      EXPECT_EQ(s->move, p == WorkspacePolicy::kResize ? BufferMove::kResizedInPlace
                                                       : BufferMove::kReallocated);
      EXPECT_EQ(s->captured_bytes, 1024);
      EXPECT_EQ(s->new_bytes, 4096);
    }
  }
}

TEST(WorkspacePolicies, ResizeKeepsTheTensorButMovesItsStorage) {
  WorkspaceManager ws(c10::Device(c10::kCPU), 1, WorkspacePolicy::kResize);
  auto small = ws.get_simultaneous({{{64}, at::kFloat}}, CS_HERE);
  const void* before = small[0].storage().data();
  auto big = ws.get_simultaneous({{{1 << 16}, at::kFloat}}, CS_HERE);
  // The earlier view shares the resized storage (it follows the move); the old block is gone.
  EXPECT_EQ(small[0].storage().data(), big[0].storage().data());
  EXPECT_NE(big[0].storage().data(), before);
}

TEST(WorkspacePolicies, FixedAllocatesOnFirstUseAndOverflowRaises) {
  {
    WorkspaceManager ws(c10::Device(c10::kMeta), 2, WorkspacePolicy::kFixed, 2048);
    EXPECT_EQ(ws.current_bytes(), 0);  // nothing before the first request
    ws.get_simultaneous({{{16}, at::kByte}}, CS_HERE);
    EXPECT_EQ(ws.current_bytes(), 2048);  // the whole buffer, in every slot
    ws.set_slot(1);
    EXPECT_EQ(ws.current_bytes(), 2048);
  }
  PolicyRun run(WorkspacePolicy::kFixed, c10::kMeta, 2048);
  EXPECT_EQ(run.ws.current_bytes(), 2048);
  EXPECT_NO_THROW(run.ws.get_simultaneous({{{2048}, at::kByte}}, CS_HERE));
  try {
    run.ws.get_simultaneous({{{4096}, at::kByte}}, CS_HERE);
    FAIL() << "no overflow";
  } catch (const WorkspaceOverflowError& e) {
    EXPECT_EQ(e.required_bytes, 4096);
    EXPECT_EQ(e.current_bytes, 2048);
    EXPECT_NE(std::string(e.what()).find("graph_ledger_test.cpp:"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run.ws.reserve(4096, CS_HERE), WorkspaceOverflowError);
  EXPECT_FALSE(run.ledger.stale(run.graph).has_value());  // a fixed buffer never moves
  EXPECT_THROW(WorkspaceManager(c10::Device(c10::kMeta), 1, WorkspacePolicy::kFixed, 0), Error);
}

TEST(WorkspacePolicies, NamesRoundTrip) {
  for (WorkspacePolicy p : {WorkspacePolicy::kLock, WorkspacePolicy::kGrow, WorkspacePolicy::kFixed,
                            WorkspacePolicy::kResize})
    EXPECT_EQ(workspace_policy_from_name(workspace_policy_name(p)), p);
  EXPECT_THROW(workspace_policy_from_name("locked"), Error);
}

}  // namespace
}  // namespace coldstart
