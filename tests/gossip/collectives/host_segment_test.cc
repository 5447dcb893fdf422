// Tests of the shared-memory collectives: HostSegment's attach, and the
// all-reduce (alone, through Collective, inside hierarchical) with N threads as
// the ranks of one host over a LocalHub (the hub carries only the attach).
// A member process that dies is covered by tests/integration/training_process_test.cc.
//
// Inputs as in allreduce_test.cc: x_r[i] = r + 1 + i % 7, whose sum over n
// ranks is n(n+1)/2 + n (i % 7), exact in FP32 and FP16 for these sizes.
#include <dirent.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/fp16.h"
#include "gossip/collectives/allreduce_shared_memory.h"
#include "gossip/collectives/collective.h"
#include "gossip/collectives/host_segment.h"
#include "gossip/collectives/host_segment_wire.h"
#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RunRanks;

float SegmentInput(int rank, size_t i) { return testing::ClosedFormInput(rank, i); }
float SegmentExpectedSum(int n, size_t i) { return testing::ClosedFormSum(n, i); }

std::vector<std::string> OneHost(int n) { return std::vector<std::string>(n, "host"); }

// Small slots, so that the longer buffers take several rounds.
HostSegmentOptions SmallSlots() {
  HostSegmentOptions o;
  o.slot_bytes = 4096;
  o.deadline = Deadline::AfterSeconds(30);
  return o;
}

// Runs a float all-reduce of `len` elements with `algorithm` on n threads, all
// on one host unless `keys` says otherwise, and checks the closed form.
void CheckAllreduce(int n, size_t len, AllreduceAlgorithm algorithm, std::vector<std::string> keys = {}) {
  if (keys.empty()) keys = OneHost(n);
  std::vector<std::vector<float>> results(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, keys, SmallSlots()));
    std::vector<float> data(len);
    for (size_t i = 0; i < len; ++i) data[i] = SegmentInput(r, i);
    AllreduceOptions o;
    o.algorithm = algorithm;
    o.deadline = Deadline::AfterSeconds(30);
    Status s = c.Allreduce(std::span<float>(data), o);
    results[r] = std::move(data);
    return s;
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(results[r][i], SegmentExpectedSum(n, i)) << "n " << n << " len " << len << " rank " << r << " element " << i;
    }
  }
}

TEST(SharedMemoryAllreduceTest, ClosedFormForWorldSizesAndLengths) {
  for (int n : {1, 2, 3, 5, 8}) {
    // Empty, one element, not divisible by n, one round exactly, several rounds
    // with a short last one.
    for (size_t len : {size_t{0}, size_t{1}, size_t{13}, size_t{1024}, size_t{10007}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " len " + std::to_string(len));
      CheckAllreduce(n, len, AllreduceAlgorithm::kSharedMemory);
    }
  }
}

TEST(SharedMemoryAllreduceTest, AutoPicksItWhenEveryRankSharesTheHost) {
  CheckAllreduce(4, 3000, AllreduceAlgorithm::kAuto);
  auto statuses = RunRanks(3, 3, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective with, Collective::Create(t, OneHost(3), SmallSlots()));
    CHORUS_ASSIGN_OR_RETURN(Collective without, Collective::Create(t, OneHost(3)));
    EXPECT_NE(with.segment(), nullptr);
    EXPECT_EQ(without.segment(), nullptr);
    AllreduceOptions o;
    EXPECT_EQ(with.Resolve(o, 4 << 20), AllreduceAlgorithm::kSharedMemory);
    EXPECT_NE(without.Resolve(o, 4 << 20), AllreduceAlgorithm::kSharedMemory);
    // Without a segment the algorithm is refused, not run over the transport.
    std::vector<float> data(8, 1.0f);
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    Status s = without.Allreduce(std::span<float>(data), o);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(SharedMemoryAllreduceTest, HierarchicalSumsInsideEachHostThroughItsSegment) {
  // Hosts {0,1}, {2,3}, {4}: two segments and a rank alone on its host.
  for (int n : {2, 5}) {
    std::vector<std::string> keys;
    for (int r = 0; r < n; ++r) keys.push_back("host" + std::to_string(r / 2));
    for (size_t len : {size_t{1}, size_t{5000}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " len " + std::to_string(len));
      CheckAllreduce(n, len, AllreduceAlgorithm::kHierarchical, keys);
    }
  }
}

TEST(SharedMemoryAllreduceTest, HalfAndScalesAndIdenticalBitsOnEveryRank) {
  const int n = 5;
  const size_t len = 3001;
  std::vector<std::vector<uint16_t>> half(n);
  std::vector<std::vector<float>> random(n);
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, OneHost(n), SmallSlots()));
    AllreduceOptions o;
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    o.deadline = Deadline::AfterSeconds(30);
    half[r].resize(len);
    for (size_t i = 0; i < len; ++i) half[r][i] = FloatToHalfBits(SegmentInput(r, i));
    o.post_scale = 0.5f;
    CHORUS_RETURN_IF_ERROR(c.Allreduce(std::span<uint16_t>(half[r]), o));
    // Random inputs: every rank must end with the same bits (one summation order).
    random[r] = testing::RandomVector(7, r, len);
    o.pre_scale = 1.0f / n;
    o.post_scale = 1.0f;
    return c.Allreduce(std::span<float>(random[r]), o);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(HalfBitsToFloat(half[r][i]), 0.5f * SegmentExpectedSum(n, i)) << "rank " << r << " element " << i;
    }
    EXPECT_EQ(std::memcmp(random[r].data(), random[0].data(), len * sizeof(float)), 0) << "rank " << r;
  }
  std::vector<double> mean(len, 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> in = testing::RandomVector(7, r, len);
    for (size_t i = 0; i < len; ++i) mean[i] += in[i] / n;
  }
  for (size_t i = 0; i < len; ++i) ASSERT_NEAR(random[0][i], mean[i], 1e-6) << i;
}

TEST(SharedMemoryAllreduceTest, RanksInDifferentCallsGetAnErrorNotWrongSums) {
  auto statuses = RunRanks(2, 2, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, OneHost(2), SmallSlots()));
    AllreduceOptions o;
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    o.deadline = Deadline::AfterSeconds(10);
    o.tag_base = r == 0 ? 0 : kTagsPerCollective;  // rank 1 is in "the next bucket"
    std::vector<float> data(100, 1.0f);
    return c.Allreduce(std::span<float>(data), o);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kFailedPrecondition) << statuses[r].ToString();
    EXPECT_NE(statuses[r].ToString().find("rank " + std::to_string(1 - r) + " entered the call with tag"),
              std::string::npos)
        << statuses[r].ToString();
  }
}

// Ranks 0 and 1 of 3 on one host run a shared-memory all-reduce with
// `deadline`; rank 2 attaches, then runs `instead` and never calls. Returns
// ranks 0 and 1's results, checking they came within 10 s.
std::vector<Status> AllreduceWithoutRankTwo(Deadline deadline,
                                            const std::function<void(std::vector<Transport*>&)>& instead) {
  std::vector<Transport*> transports(3, nullptr);
  const auto started = Clock::now();
  auto statuses = RunRanks(3, 3, [&](int r, Transport& t) -> Status {
    transports[r] = &t;
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t, OneHost(3), SmallSlots()));
    if (r == 2) {
      instead(transports);
      return Status::Ok();
    }
    AllreduceOptions o;
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    o.deadline = deadline;
    std::vector<float> data(100, 1.0f);
    return c.Allreduce(std::span<float>(data), o);
  });
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  statuses.resize(2);
  return statuses;
}

TEST(SharedMemoryAllreduceTest, SilentRankFailsTheCallAtTheDeadlineNamingIt) {
  for (const Status& s :
       AllreduceWithoutRankTwo(Deadline::After(std::chrono::milliseconds(300)), [](std::vector<Transport*>&) {})) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.ToString().find("rank 2 did not post"), std::string::npos) << s.ToString();
  }
}

// Rank 2 lives on but never calls (it stopped at a failure elsewhere); the
// membership layer ends the epoch by marking it dead on the others'
// transports: their waits end then, not at the 30 s deadline.
TEST(SharedMemoryAllreduceTest, RankMarkedDeadOnTheTransportFailsTheCallAtOnce) {
  for (const Status& s : AllreduceWithoutRankTwo(Deadline::AfterSeconds(30), [](std::vector<Transport*>& t) {
         std::this_thread::sleep_for(std::chrono::milliseconds(200));
         t[0]->MarkPeerDead(2);
         t[1]->MarkPeerDead(2);
       })) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.ToString().find("rank 2 is marked dead"), std::string::npos) << s.ToString();
  }
}

// Names this process's segments in /dev/shm (there should be none once attached).
int OwnSegmentNames() {
  const std::string prefix = "chorus-seg-" + std::to_string(getpid()) + "-";
  int count = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) count += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(dir);
  }
  return count;
}

TEST(HostSegmentTest, AttachLeavesNoNameBehindAndMapsOneSegment) {
  std::vector<std::byte*> slots(4);
  auto statuses = RunRanks(4, 4, [&](int r, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup world, CollectiveGroup::World(t));
    HostSegmentOptions o = SmallSlots();
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<HostSegment> segment, HostSegment::Attach(world, o));
    EXPECT_EQ(segment->size(), 4);
    EXPECT_EQ(segment->self(), r);
    EXPECT_EQ(segment->slot_bytes(), 4096u);
    // Every rank writes its slot; rank 0 reads them all back through its own mapping.
    std::memset(segment->Slot(r), r + 1, segment->slot_bytes());
    segment->Post(1, 0);
    CHORUS_RETURN_IF_ERROR(segment->WaitPosted(1, 0, o.deadline));
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(static_cast<int>(segment->Slot(j)[100]), j + 1) << "rank " << r << " slot " << j;
    }
    segment->Finish(1);
    return segment->WaitFinished(1, o.deadline);
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(OwnSegmentNames(), 0);
}

TEST(HostSegmentTest, SlotSizeIsRoundedToAPage) {
  auto statuses = RunRanks(2, 2, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup world, CollectiveGroup::World(t));
    HostSegmentOptions o;
    o.slot_bytes = 5000;
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<HostSegment> segment, HostSegment::Attach(world, o));
    EXPECT_EQ(segment->slot_bytes(), 8192u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(segment->Slot(1)) % 4096, 0u);
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(HostSegmentTest, DefaultSlotSizeShrinksWithTheMemberCount) {
  EXPECT_EQ(DefaultSlotBytes(1), size_t{1} << 20);
  EXPECT_EQ(DefaultSlotBytes(2), size_t{1} << 20);
  EXPECT_EQ(DefaultSlotBytes(3), (size_t{2} << 20) / 3);
  EXPECT_EQ(DefaultSlotBytes(4), size_t{512} << 10);
  EXPECT_EQ(DefaultSlotBytes(8), size_t{256} << 10);
  EXPECT_EQ(DefaultSlotBytes(64), size_t{256} << 10);
  // Options that leave the size at 0 get it, rounded to a page.
  auto statuses = RunRanks(3, 3, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(CollectiveGroup world, CollectiveGroup::World(t));
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<HostSegment> segment, HostSegment::Attach(world, {}));
    EXPECT_EQ(segment->slot_bytes(), 700416u);  // 2 MiB / 3 = 699050.67, up to a page
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
}

// A segment's name, and the empty name of a leader that had none, travel back.
TEST(HostSegmentWireTest, NameRoundTrips) {
  for (const std::string& name : {std::string("/chorus-seg-1234-567890123"), std::string()}) {
    auto read = DecodeSegmentName(EncodeSegmentName(name));
    ASSERT_TRUE(read.has_value()) << read.error().ToString();
    EXPECT_EQ(*read, name);
  }
}

// Only "/chorus-seg-" and digits reach shm_open: another name, a name
// without its NUL, bytes after it, or a short message are refused.
TEST(HostSegmentWireTest, RefusesOtherNames) {
  EXPECT_FALSE(DecodeSegmentName(EncodeSegmentName("/etc-passwd")).has_value());
  EXPECT_FALSE(DecodeSegmentName(EncodeSegmentName("/chorus-seg-1/../x")).has_value());
  EXPECT_FALSE(DecodeSegmentName(EncodeSegmentName("/chorus-seg-")).has_value());
  auto full = EncodeSegmentName("/chorus-seg-1-2");
  full.back() = std::byte{'7'};
  auto unterminated = DecodeSegmentName(full);
  ASSERT_FALSE(unterminated.has_value());
  EXPECT_NE(unterminated.error().message().find("byte 63"), std::string::npos) << unterminated.error().message();
  full.back() = std::byte{0};
  EXPECT_FALSE(DecodeSegmentName(std::span<const std::byte>(full).first(32)).has_value());
}

}  // namespace
}  // namespace chorus::gossip
