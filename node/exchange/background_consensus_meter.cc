// See background_consensus_meter.h.
#include "node/exchange/background_consensus_meter.h"

#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "gossip/collectives/collective.h"
#include "gossip/protocols/consensus.h"
#include "gossip/protocols/gossip_tags.h"

namespace chorus::node {

namespace {

// The node's transport as the measurement sees it: every call goes to the
// node's, and what the measurement posts is counted (a receive by the size
// it posted, which is what a collective receives). It installs no peers.
class CountingTransport final : public gossip::Transport {
 public:
  CountingTransport(gossip::Transport& inner, std::shared_ptr<BackgroundConsensusMeter::Counts> counts,
                    std::vector<bool> other_site)
      : inner_(inner), counts_(std::move(counts)), other_site_(std::move(other_site)) {}

  std::vector<uint8_t> LocalAddress() const override { return inner_.LocalAddress(); }
  Status SetPeers(gossip::Rank, std::span<const gossip::PeerInfo>) override {
    return FailedPrecondition("the consensus meter installs no peers");
  }
  gossip::Rank rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Result<gossip::RequestPtr> Isend(gossip::Rank dest, gossip::Tag tag, std::span<const std::byte> data) override {
    Result<gossip::RequestPtr> r = inner_.Isend(dest, tag, data);
    if (r) {
      counts_->sent += data.size();
      if (dest >= 0 && static_cast<size_t>(dest) < other_site_.size() && other_site_[dest]) {
        counts_->sent_across_sites += data.size();
      }
    }
    return r;
  }
  Result<gossip::RequestPtr> Irecv(gossip::Rank source, gossip::Tag tag, std::span<std::byte> data) override {
    Result<gossip::RequestPtr> r = inner_.Irecv(source, tag, data);
    if (r) counts_->received += data.size();
    return r;
  }
  void MarkPeerDead(gossip::Rank peer) override { inner_.MarkPeerDead(peer); }
  bool PeerMarkedDead(gossip::Rank peer) const override { return inner_.PeerMarkedDead(peer); }
  void Discard(gossip::TagFilter filter) override { inner_.Discard(filter); }
  bool NeedsPeersInstalledBeforeFirstSend() const override { return inner_.NeedsPeersInstalledBeforeFirstSend(); }
  int UnreleasedBuffers() const override { return inner_.UnreleasedBuffers(); }
  gossip::EventOrder* Order() override { return inner_.Order(); }
  gossip::TransportStats Stats() const override { return inner_.Stats(); }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  gossip::Transport& inner_;
  std::shared_ptr<BackgroundConsensusMeter::Counts> counts_;
  std::vector<bool> other_site_;
};

}  // namespace

// One measurement's buffers: the copy of the weights, and the two
// all-reduces' buffers.
struct BackgroundConsensusMeter::Run {
  std::vector<float> master, mean, distances;
  bool unreleased = false;  // a wait gave up while the provider held a buffer
};

BackgroundConsensusMeter::~BackgroundConsensusMeter() { Join(); }

void BackgroundConsensusMeter::Join() {
  if (thread_.joinable()) thread_.join();
}

bool BackgroundConsensusMeter::Start(gossip::Transport& transport, const MembershipView& view,
                                     std::span<const float> master, int64_t key, double timeout_s) {
  if (running_.load()) return false;
  Join();
  if (last_ != nullptr && last_->unreleased) kept_.push_back(std::move(last_));
  last_ = std::make_unique<Run>();
  last_->master.assign(master.begin(), master.end());
  Run* run = last_.get();
  const auto epoch = static_cast<uint32_t>(view.epoch);
  running_ = true;
  thread_ = std::thread([this, &transport, run, key, epoch, timeout_s, others = OtherSites(view)] {
    CountingTransport counting(transport, counts_, others);
    const int unreleased_before = transport.UnreleasedBuffers();
    const int64_t begin = NowMicros();
    Result<double> distance = [&]() -> Result<double> {
      CHORUS_ASSIGN_OR_RETURN(gossip::Collective world, gossip::Collective::Create(counting));
      gossip::AllreduceOptions o;
      o.deadline = Deadline::AfterSeconds(timeout_s);
      const gossip::Tag tag_base =
          gossip::GossipCollectiveTagBase(gossip::kBackgroundDistanceTagStream, epoch, 2 * static_cast<uint64_t>(key));
      return gossip::MeasureConsensusDistance(world, run->master, o, tag_base, &run->mean, &run->distances);
    }();
    run->unreleased = transport.UnreleasedBuffers() > unreleased_before;
    counts_->micros += static_cast<uint64_t>(NowMicros() - begin);
    if (!distance) {
      CHORUS_LOG_WARN(Subsys::kGossip, "consensus distance ", key, " not measured: ", distance.error().ToString());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.push_back({key, distance ? *distance : -1.0});
    }
    running_ = false;
  });
  return true;
}

std::vector<ConsensusMeasurement> BackgroundConsensusMeter::Take(bool wait) {
  if (wait) Join();
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(done_, {});
}

MeasureCost BackgroundConsensusMeter::cost() const {
  const Counts& c = *counts_;
  return {c.sent.load(), c.received.load(), c.sent_across_sites.load(), static_cast<double>(c.micros.load()) * 1e-6,
          last_ != nullptr};
}

}  // namespace chorus::node
