// SubgroupTransport (see subgroup_transport.h).
#include "gossip/transport/subgroup_transport.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace chorus::gossip {
namespace {

// A request of the underlying transport whose completion names the local rank.
class SubgroupRequest final : public Request {
 public:
  SubgroupRequest(RequestPtr inner, Rank local) : inner_(std::move(inner)), local_(local) {}
  bool Done() override { return inner_->Done(); }
  Result<Completion> Wait(Deadline deadline) override {
    Result<Completion> c = inner_->Wait(deadline);
    if (c) c->source = local_;
    return c;
  }
  void Cancel() override { inner_->Cancel(); }
  bool Release() override { return inner_->Release(); }

 private:
  RequestPtr inner_;
  Rank local_;
};

}  // namespace

Result<std::unique_ptr<SubgroupTransport>> SubgroupTransport::Create(Transport& world, std::vector<Rank> members) {
  std::vector<Rank> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return Err(InvalidArgument("subgroup transport: a rank is listed twice"));
  }
  for (Rank r : members) {
    if (r < 0 || r >= world.size()) {
      return Err(InvalidArgument("subgroup transport: rank " + std::to_string(r) + " is not one of the " +
                                 std::to_string(world.size()) + " ranks"));
    }
  }
  const auto self = std::find(members.begin(), members.end(), world.rank());
  if (self == members.end()) {
    return Err(InvalidArgument("subgroup transport: this endpoint (rank " + std::to_string(world.rank()) +
                               ") is not a member"));
  }
  const Rank local = static_cast<Rank>(self - members.begin());
  return std::unique_ptr<SubgroupTransport>(new SubgroupTransport(world, std::move(members), local));
}

Status SubgroupTransport::SetPeers(Rank /*self*/, std::span<const PeerInfo> /*peers*/) {
  return FailedPrecondition("subgroup transport: the peers are the underlying transport's");
}

Result<Rank> SubgroupTransport::Map(Rank local, const char* what) const {
  if (local < 0 || local >= size()) {
    return Err(InvalidArgument(std::string("subgroup transport: ") + what + " rank " + std::to_string(local) +
                               " outside the group of " + std::to_string(size())));
  }
  return WorldRank(local);
}

Result<RequestPtr> SubgroupTransport::Isend(Rank dest, Tag tag, std::span<const std::byte> data) {
  CHORUS_ASSIGN_OR_RETURN(const Rank to, Map(dest, "send to"));
  CHORUS_ASSIGN_OR_RETURN(RequestPtr r, world_.Isend(to, tag, data));
  return RequestPtr(std::make_unique<SubgroupRequest>(std::move(r), dest));
}

Result<RequestPtr> SubgroupTransport::Irecv(Rank source, Tag tag, std::span<std::byte> data) {
  CHORUS_ASSIGN_OR_RETURN(const Rank from, Map(source, "receive from"));
  CHORUS_ASSIGN_OR_RETURN(RequestPtr r, world_.Irecv(from, tag, data));
  return RequestPtr(std::make_unique<SubgroupRequest>(std::move(r), source));
}

void SubgroupTransport::MarkPeerDead(Rank peer) {
  if (peer >= 0 && peer < size()) world_.MarkPeerDead(WorldRank(peer));
}

bool SubgroupTransport::PeerMarkedDead(Rank peer) const {
  return peer >= 0 && peer < size() && world_.PeerMarkedDead(WorldRank(peer));
}

std::string SubgroupTransport::Describe() const {
  return std::to_string(size()) + " of " + world_.Describe();
}

}  // namespace chorus::gossip
