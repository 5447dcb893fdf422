// Collective::Allgather: every rank's part on every rank, each exactly as its
// rank sent it, even when another rank alters everything it sends; and
// Collective::AgreedAllgather: the same parts on every honest rank even when
// one rank sends different parts to different ranks or lies in its echoes,
// from four ranks, or from three with every part signed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
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

// A member that sends each rank a different part in the phase `phase` (the
// first round's, or the echoes'): every float it sends rank d is multiplied
// by 1 + 1000 d.
class EquivocatingTransport final : public testing::ForwardingTransport {
 public:
  EquivocatingTransport(Transport& inner, CollectivePhase phase) : ForwardingTransport(inner), phase_(phase) {}
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    if (((tag >> kTagPhaseShift) & 0xf) != static_cast<Tag>(phase_)) return inner().Isend(dest, tag, data);
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::byte>& copy = kept_.emplace_back(data.begin(), data.end());
    for (size_t i = 0; i + sizeof(float) <= copy.size(); i += sizeof(float)) {
      float v;
      std::memcpy(&v, copy.data() + i, sizeof(float));
      v *= 1.0f + 1000.0f * static_cast<float>(dest);
      std::memcpy(copy.data() + i, &v, sizeof(float));
    }
    return inner().Isend(dest, tag, copy);
  }

 private:
  const CollectivePhase phase_;
  std::mutex mu_;
  std::deque<std::vector<std::byte>> kept_;
};

struct Gathered {
  std::vector<std::vector<float>> all;           // by rank
  std::vector<std::vector<int>> equivocators;    // by rank
};

// Every rank's table after gathering PartOf(r, k) over `n` ranks, rank 0
// sending through an EquivocatingTransport of `phase` (none: honest), with
// AgreedAllgather (`agreed`) or Allgather.
// `signer_of(r)`: rank r's signer (none: unsigned).
Gathered GatherWithRankZero(int n, size_t k, std::optional<CollectivePhase> phase, bool agreed,
                            const Collective::PartFor& bend = nullptr,
                            const std::function<const PartSigner*(int)>& signer_of = nullptr) {
  Gathered g{std::vector<std::vector<float>>(n, std::vector<float>(k * n, 0.0f)), std::vector<std::vector<int>>(n)};
  auto statuses = RunRanks(n, n, [&](int r, Transport& t) -> Status {
    std::optional<EquivocatingTransport> lying;
    if (r == 0 && phase) lying.emplace(t, *phase);
    CHORUS_ASSIGN_OR_RETURN(Collective c, Collective::Create(lying ? static_cast<Transport&>(*lying) : t));
    const std::vector<float> mine = PartOf(r, k);
    std::copy(mine.begin(), mine.end(), g.all[r].begin() + static_cast<std::ptrdiff_t>(r * k));
    CollectiveOptions options;
    options.deadline = Deadline::AfterSeconds(30);
    if (!agreed) return c.Allgather(std::span<float>(g.all[r]), options);
    return c.AgreedAllgather(std::span<float>(g.all[r]), options, &g.equivocators[r], r == 0 ? bend : nullptr,
                             signer_of ? signer_of(r) : nullptr);
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].ToString();
  return g;
}

// Whether every rank but 0 holds the same table, bit for bit (NaN included).
bool HonestRanksAgree(const Gathered& g) {
  for (size_t r = 2; r < g.all.size(); ++r) {
    if (std::memcmp(g.all[r].data(), g.all[1].data(), g.all[1].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// Whether honest rank r holds every honest rank's part as it was sent.
bool HonestPartsIntact(const Gathered& g, int r, size_t k) {
  for (size_t j = 1; j < g.all.size(); ++j) {
    const std::vector<float> want = PartOf(static_cast<int>(j), k);
    if (!std::equal(want.begin(), want.end(), g.all[r].begin() + static_cast<std::ptrdiff_t>(j * k))) return false;
  }
  return true;
}

// A signer for the tests: rank r's signature is a hash of (r, the gather's
// tag, the part) in its first two floats, so that what the
// EquivocatingTransport alters on the way fails the check.
class HashSigner final : public PartSigner {
 public:
  explicit HashSigner(Rank self) : self_(self) {}
  size_t SignatureFloats() const override { return 4; }
  void Sign(Tag gather, std::span<const float> part, std::span<float> signature) const override {
    SignAs(self_, gather, part, signature);
  }
  bool Verify(Rank sender, Tag gather, std::span<const float> part,
              std::span<const float> signature) const override {
    std::vector<float> want(SignatureFloats());
    SignAs(sender, gather, part, want);
    return signature.size() == want.size() && std::memcmp(signature.data(), want.data(), 2 * sizeof(float)) == 0;
  }

 private:
  static void SignAs(Rank r, Tag gather, std::span<const float> part, std::span<float> signature) {
    uint64_t h = 1469598103934665603ull ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r + 1));
    auto mix = [&](const void* p, size_t bytes) {
      const auto* b = static_cast<const unsigned char*>(p);
      for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    mix(&gather, sizeof(gather));
    mix(part.data(), part.size_bytes());
    std::fill(signature.begin(), signature.end(), 0.0f);
    // The hash as two floats of 16 bits each way: exact, never NaN.
    signature[0] = static_cast<float>(h & 0xffff);
    signature[1] = static_cast<float>((h >> 16) & 0xffff);
  }
  const Rank self_;
};

// GatherWithRankZero in agreement with every part signed (HashSigner).
Gathered SignedGather(int n, size_t k, std::optional<CollectivePhase> phase,
                      const Collective::PartFor& bend = nullptr) {
  std::vector<HashSigner> signers;
  for (int r = 0; r < n; ++r) signers.emplace_back(r);
  return GatherWithRankZero(n, k, phase, /*agreed=*/true, bend, [&](int r) { return &signers[r]; });
}

// Unsigned and signed alike.
TEST(AgreedAllgatherTest, EveryRankGetsEveryRanksPartAndNobodyIsNamed) {
  for (const auto& [n, sign] : std::vector<std::pair<int, bool>>{{2, false}, {3, false}, {4, false}, {5, false},
                                                                 {7, false}, {2, true}, {3, true}, {4, true},
                                                                 {5, true}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + (sign ? " signed" : ""));
    const Gathered g = sign ? SignedGather(n, 6, std::nullopt) : GatherWithRankZero(n, 6, std::nullopt, true);
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < n; ++j) {
        const std::vector<float> want = PartOf(j, 6);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), g.all[r].begin() + static_cast<std::ptrdiff_t>(j * 6)))
            << "rank " << r << "'s copy of rank " << j << "'s part";
      }
      EXPECT_TRUE(g.equivocators[r].empty());
    }
  }
}

// Rank 0 sends every rank a different part. The one-round gather leaves the
// honest ranks with different tables (so they would judge rank 0
// differently); in agreement they hold the same, rank 0's part NaN and rank
// 0 named on each, every honest part as sent.
TEST(AgreedAllgatherTest, AMemberThatSendsEachRankADifferentPartIsNamedAlikeByAll) {
  constexpr size_t k = 6;
  for (int n : {4, 5, 8}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    EXPECT_FALSE(HonestRanksAgree(GatherWithRankZero(n, k, CollectivePhase::kDirectGather, /*agreed=*/false)));
    const Gathered g = GatherWithRankZero(n, k, CollectivePhase::kDirectGather, /*agreed=*/true);
    EXPECT_TRUE(HonestRanksAgree(g));
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(g.equivocators[r], std::vector<int>({0})) << "rank " << r;
      EXPECT_TRUE(std::isnan(g.all[r][0])) << "rank " << r;
      EXPECT_TRUE(HonestPartsIntact(g, r, k)) << "rank " << r;
    }
  }
}

// At 3 ranks no agreement tolerates a liar without signatures: a plain gather.
TEST(AgreedAllgatherTest, ThreeRanksGatherInOneRoundAndNameNobody) {
  const Gathered g = GatherWithRankZero(3, 6, CollectivePhase::kDirectGather, /*agreed=*/true);
  for (int r = 1; r < 3; ++r) {
    EXPECT_TRUE(g.equivocators[r].empty());
    EXPECT_TRUE(HonestPartsIntact(g, r, 6));
  }
  EXPECT_FALSE(HonestRanksAgree(g));
}

// Rank 0 gathers honestly but relays every part altered, differently to each
// rank: unsigned, one lying copy among n - 1 outvoted; signed, from three
// ranks, one honest copy against one lie, and the lie fails its signature.
// Either way nobody named, every honest part as sent.
TEST(AgreedAllgatherTest, ALiarsEchoesAreOutvotedOrFailTheirSignatures) {
  for (const auto& [n, sign] : std::vector<std::pair<int, bool>>{{4, false}, {5, false}, {8, false}, {3, true},
                                                                 {4, true}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + (sign ? " signed" : ""));
    const Gathered g = sign ? SignedGather(n, 6, CollectivePhase::kEchoGather)
                            : GatherWithRankZero(n, 6, CollectivePhase::kEchoGather, /*agreed=*/true);
    EXPECT_TRUE(HonestRanksAgree(g));
    for (int r = 1; r < n; ++r) {
      EXPECT_TRUE(g.equivocators[r].empty()) << "rank " << r;
      EXPECT_TRUE(HonestPartsIntact(g, r, 6)) << "rank " << r;
      const std::vector<float> zero = PartOf(0, 6);
      EXPECT_TRUE(std::equal(zero.begin(), zero.end(), g.all[r].begin())) << "rank " << r << "'s copy of rank 0's";
    }
  }
}

// A part altered for one rank only (through `bend`): the others' copies
// outvote it, so every honest rank holds the part most got, and nobody is
// named (the equivocation changed nothing).
TEST(AgreedAllgatherTest, APartAlteredForOneRankIsOutvoted) {
  const Gathered g = GatherWithRankZero(5, 6, std::nullopt, /*agreed=*/true, [](int dest, std::span<float> part) {
    if (dest == 2) part[0] = -1.0f;
  });
  EXPECT_TRUE(HonestRanksAgree(g));
  for (int r = 1; r < 5; ++r) {
    EXPECT_TRUE(g.equivocators[r].empty());
    EXPECT_EQ(g.all[r][0], PartOf(0, 6)[0]) << "rank " << r;
  }
}

// Rank 0 signs a different part for each rank (a liar holds its own key).
// At three ranks, unsigned, nothing can tell it from a relayer that lies;
// signed, both honest ranks hold both of its signed parts after the echoes
// and name it alike, with every honest part as sent. A part altered for one
// rank alone is the same proof.
TEST(SignedAgreedAllgatherTest, ThreeRanksNameAMemberThatSignsEachADifferentPart) {
  const Collective::PartFor each = [](int dest, std::span<float> part) { part[0] += 1000.0f * dest; };
  const Collective::PartFor one = [](int dest, std::span<float> part) {
    if (dest == 2) part[0] = -1.0f;
  };
  for (int n : {3, 4, 5}) {
    for (const Collective::PartFor* bend : {&each, &one}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (bend == &each ? " each" : " one"));
      const Gathered g = SignedGather(n, 6, std::nullopt, *bend);
      EXPECT_TRUE(HonestRanksAgree(g));
      for (int r = 1; r < n; ++r) {
        EXPECT_EQ(g.equivocators[r], std::vector<int>({0})) << "rank " << r;
        EXPECT_TRUE(std::isnan(g.all[r][0])) << "rank " << r;
        EXPECT_TRUE(HonestPartsIntact(g, r, 6)) << "rank " << r;
      }
    }
  }
}

// Rank 0's own parts arrive altered (on the wire, signature and all): no
// copy carries its valid signature, so every honest rank names it alike.
TEST(SignedAgreedAllgatherTest, AMemberWithoutAValidSignatureIsNamedByAll) {
  const Gathered g = SignedGather(3, 6, CollectivePhase::kDirectGather);
  EXPECT_TRUE(HonestRanksAgree(g));
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(g.equivocators[r], std::vector<int>({0})) << "rank " << r;
    EXPECT_TRUE(HonestPartsIntact(g, r, 6)) << "rank " << r;
  }
}

}  // namespace
}  // namespace chorus::gossip
