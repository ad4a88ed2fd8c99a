// Workspace manager semantics (DESIGN.md "workspace"), on the meta device and, when present, CPU
// memory: accounting does not depend on where the bytes live.
#include "harness/runtime/workspace.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace coldstart {
namespace {

class WorkspaceTest : public ::testing::TestWithParam<c10::DeviceType> {
 protected:
  WorkspaceManager ws_{c10::Device(GetParam())};
};

TEST_P(WorkspaceTest, StartsEmptyAndGrowsToExactlyTheRoundedSum) {
  EXPECT_EQ(ws_.current_bytes(), 0);
  // 100 floats = 400 B -> 512; 3 bf16 = 6 B -> 256: sum 768.
  auto v = ws_.get_simultaneous({{{100}, at::kFloat}, {{3}, at::kBFloat16}}, CS_HERE);
  EXPECT_EQ(ws_.current_bytes(), 768);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].sizes(), at::IntArrayRef({100}));
  EXPECT_EQ(v[0].scalar_type(), at::kFloat);
  EXPECT_EQ(v[1].scalar_type(), at::kBFloat16);
  // Second view starts at the 256-rounded end of the first.
  EXPECT_EQ(v[1].storage_offset() * 2, 512);
  EXPECT_EQ(ws_.peak_requested_bytes(), 768);
}

TEST_P(WorkspaceTest, NeverShrinksAndReusesTheBuffer) {
  ws_.get_simultaneous({{{1024}, at::kByte}}, CS_HERE);
  ws_.get_simultaneous({{{10}, at::kByte}}, CS_HERE);
  EXPECT_EQ(ws_.current_bytes(), 1024);
  EXPECT_EQ(ws_.peak_requested_bytes(), 1024);
}

TEST_P(WorkspaceTest, MultiDimensionalShapes) {
  auto v = ws_.get_simultaneous({{{2, 3, 4}, at::kFloat}}, CS_HERE);
  EXPECT_EQ(v[0].sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_EQ(ws_.current_bytes(), 256);  // 96 B -> 256
}

TEST_P(WorkspaceTest, LockedGrowthRaisesVllmText) {
  ws_.get_simultaneous({{{270000}, at::kByte}}, CS_HERE);  // 270080 B after rounding
  ws_.lock();
  EXPECT_TRUE(ws_.locked());
  EXPECT_EQ(ws_.locked_bytes(), 270080);
  // Within the locked size: fine.
  EXPECT_NO_THROW(ws_.get_simultaneous({{{1000}, at::kByte}}, CS_HERE));
  const SourceLocation where{"/a/b/turboquant_attn.py", 757, "_continuation_prefill"};
  try {
    ws_.get_simultaneous({{{1 << 20}, at::kBFloat16}}, where);  // 2 MiB
    FAIL() << "growth after lock must throw";
  } catch (const WorkspaceLockedError& e) {
    EXPECT_STREQ(e.what(),
                 "Workspace is locked but allocation from 'turboquant_attn.py:757:"
                 "_continuation_prefill' requires 2.00 MB, current size is 0.26 MB. Workspace "
                 "growth is not allowed after locking.");
    EXPECT_EQ(e.required_bytes, 2 << 20);
    EXPECT_EQ(e.current_bytes, 270080);
  }
  // The failed request still counts as the peak requested; the buffer did not change.
  EXPECT_EQ(ws_.peak_requested_bytes(), 2 << 20);
  EXPECT_EQ(ws_.current_bytes(), 270080);
}

TEST_P(WorkspaceTest, ReserveGrowsBeforeLockAndFailsAfter) {
  ws_.reserve(5000, CS_HERE);
  EXPECT_EQ(ws_.current_bytes(), 5000);  // reserve asks for exactly this many bytes
  ws_.lock();
  EXPECT_NO_THROW(ws_.reserve(4000, CS_HERE));
  EXPECT_THROW(ws_.reserve(6000, CS_HERE), WorkspaceLockedError);
}

TEST_P(WorkspaceTest, ZeroSizedRequestsCostNothing) {
  auto v = ws_.get_simultaneous({{{0}, at::kFloat}, {{4}, at::kFloat}}, CS_HERE);
  EXPECT_EQ(ws_.current_bytes(), 256);
  EXPECT_EQ(v[0].numel(), 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, WorkspaceTest, ::testing::Values(c10::kMeta, c10::kCPU),
                         [](const auto& info) { return c10::DeviceTypeName(info.param, true); });

TEST(WorkspaceSlots, EverySlotGrowsTogether) {
  WorkspaceManager ws(c10::Device(c10::kMeta), 2);
  ws.get_simultaneous({{{300}, at::kByte}}, CS_HERE);
  ws.set_slot(1);
  EXPECT_EQ(ws.current_bytes(), 512);
  EXPECT_THROW(ws.set_slot(2), Error);
}

TEST(WorkspaceOnCpu, ViewsAliasOneBufferWithoutOverlap) {
  WorkspaceManager ws(c10::Device(c10::kCPU));
  auto v = ws.get_simultaneous({{{64}, at::kFloat}, {{64}, at::kFloat}}, CS_HERE);
  v[0].fill_(1.0f);
  v[1].fill_(2.0f);
  EXPECT_EQ(v[0].sum().item<float>(), 64.0f);
  EXPECT_EQ(v[1].sum().item<float>(), 128.0f);
  EXPECT_EQ(v[0].storage().data(), v[1].storage().data());
}

TEST(FormatMb, TwoDecimalsOfMebibytes) {
  EXPECT_EQ(format_mb(2 << 20), "2.00");
  EXPECT_EQ(format_mb(270080), "0.26");
  EXPECT_EQ(format_mb(0), "0.00");
}

}  // namespace
}  // namespace coldstart
