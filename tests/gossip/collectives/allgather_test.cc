// Collective::Allgather: every rank's part on every rank, each exactly as its
// rank sent it, even when another rank alters everything it sends.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "gossip/collectives/collective.h"
#include "tests/gossip/forwarding_transport.h"
#include "tests/gossip/gossip_test_util.h"

namespace chorus::gossip {
namespace {

using testing::RunRanks;

// Rank r's part: k distinct values.
std::vector<float> PartOf(int r, size_t k) {
  std::vector<float> part;
  for (size_t i = 0; i < k; ++i) part.push_back(static_cast<float>(100 * (r + 1) + i));
  return part;
}

TEST(AllgatherTest, EveryRankGetsEveryRanksPart) {
  for (int n : {2, 3, 4, 5}) {
    for (size_t k : {size_t{1}, size_t{6}, size_t{70}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      CollectiveOptions options;
      options.segment_bytes = 64;  // several segments a part at k = 70
      options.deadline = Deadline::AfterSeconds(30);
      std::vector<std::vector<float>> all(n, std::vector<float>(k * n, -1.0f));
      auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
        CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
        const std::vector<float> mine = PartOf(r, k);
        std::copy(mine.begin(), mine.end(), all[r].begin() + static_cast<std::ptrdiff_t>(r * k));
        return c.Allgather(std::span<float>(all[r]), options);
      });
      for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      for (int r = 0; r < n; ++r) {
        for (int j = 0; j < n; ++j) {
          const std::vector<float> want = PartOf(j, k);
          EXPECT_TRUE(std::equal(want.begin(), want.end(), all[r].begin() + static_cast<std::ptrdiff_t>(j * k)))
              << "rank " << r << "'s copy of rank " << j << "'s part";
        }
      }
    }
  }
}

TEST(AllgatherTest, PartsThatDoNotSplitEvenlyAreRefused) {
  auto statuses = RunRanks(2, 2, [&](int, Transport& t) -> Status {
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(t));
    std::vector<float> all(5);
    return c.Allgather(std::span<float>(all), CollectiveOptions{});
  });
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.ToString().find("5 floats"), std::string::npos) << s.ToString();
  }
}

// A member that multiplies every float it sends by 1000: what it says about
// itself is its own to misstate, but no other member's part may change.
class ScalingTransport final : public testing::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::byte>& copy = kept_.emplace_back(data.begin(), data.end());
    for (size_t i = 0; i + sizeof(float) <= copy.size(); i += sizeof(float)) {
      float v;
      std::memcpy(&v, copy.data() + i, sizeof(float));
      v *= 1000.0f;
      std::memcpy(copy.data() + i, &v, sizeof(float));
    }
    return inner().Isend(dest, tag, copy);
  }

 private:
  std::mutex mu_;
  std::deque<std::vector<std::byte>> kept_;  // outlive their sends
};

// How many (receiver, part) pairs of honest ranks differ from what the
// part's rank supplied when rank 0 scales what it sends and the parts are
// gathered by `gather`.
int AlteredHonestParts(int n, size_t k,
                       const std::function<Status(const Collective&, std::span<float>)>& gather) {
  std::vector<std::vector<float>> all(n, std::vector<float>(k * n, 0.0f));
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    ScalingTransport scaling(t);
    Transport& used = r == 0 ? static_cast<Transport&>(scaling) : t;
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(used));
    const std::vector<float> mine = PartOf(r, k);
    std::copy(mine.begin(), mine.end(), all[r].begin() + static_cast<std::ptrdiff_t>(r * k));
    return gather(c, std::span<float>(all[r]));
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  int altered = 0;
  for (int r = 1; r < n; ++r) {
    for (int j = 1; j < n; ++j) {
      const std::vector<float> want = PartOf(j, k);
      if (!std::equal(want.begin(), want.end(), all[r].begin() + static_cast<std::ptrdiff_t>(j * k))) ++altered;
    }
  }
  return altered;
}

TEST(AllgatherTest, AMemberThatAltersWhatItSendsChangesNoOtherMembersPart) {
  constexpr size_t k = 6;  // the contribution check's figures per member
  for (int n : {3, 4, 5, 8}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    CollectiveOptions options;
    options.deadline = Deadline::AfterSeconds(30);
    EXPECT_EQ(AlteredHonestParts(n, k, [&](const Collective& c, std::span<float> all) {
                return c.Allgather(all, options);
              }),
              0);
    if ((n & (n - 1)) != 0) continue;
    // The gather this replaced, an all-reduce of zero-padded parts: where
    // every rank forwards (a power of two under recursive doubling), the
    // altering member passes the others' parts on, and some members then
    // hold another honest member's figures a thousand times over.
    AllreduceOptions reduce;
    reduce.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
    reduce.deadline = Deadline::AfterSeconds(30);
    EXPECT_GT(AlteredHonestParts(n, k, [&](const Collective& c, std::span<float> all) {
                return c.Allreduce(all, reduce);
              }),
              0);
  }
}

}  // namespace
}  // namespace chorus::gossip
