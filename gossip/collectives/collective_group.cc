// CollectiveGroup (see collective_group.h).
#include "gossip/collectives/collective_group.h"

#include <algorithm>
#include <string>

namespace chorus::gossip {

Result<CollectiveGroup> CollectiveGroup::World(Transport& transport) {
  const int n = transport.size();
  std::vector<Rank> members(n);
  for (int r = 0; r < n; ++r) members[r] = r;
  return Of(transport, std::move(members));
}

Result<CollectiveGroup> CollectiveGroup::Of(Transport& transport, std::vector<Rank> members) {
  const Rank me = transport.rank();
  const int size = transport.size();
  int self = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const Rank r = members[i];
    if (r < 0 || r >= size) {
      return Err(InvalidArgument("collective group: rank " + std::to_string(r) +
                                 " is not a member of the transport (size " +
                                 std::to_string(size) + ")"));
    }
    if (std::count(members.begin(), members.end(), r) > 1) {
      return Err(InvalidArgument("collective group: rank " + std::to_string(r) + " is repeated"));
    }
    if (r == me) self = static_cast<int>(i);
  }
  if (self < 0) {
    return Err(FailedPrecondition("collective group: this endpoint (rank " + std::to_string(me) +
                                  ") is not one of its " + std::to_string(members.size()) +
                                  " members"));
  }
  return CollectiveGroup(&transport, std::move(members), self);
}

Result<CollectiveGroup> CollectiveGroup::Sub(const std::vector<int>& indices) const {
  std::vector<Rank> members;
  members.reserve(indices.size());
  for (int i : indices) {
    if (i < 0 || i >= size()) {
      return Err(InvalidArgument("collective group: index " + std::to_string(i) +
                                 " out of range [0, " + std::to_string(size()) + ")"));
    }
    members.push_back(members_[i]);
  }
  return Of(*transport_, std::move(members));
}

int CollectiveGroup::IndexOf(Rank rank) const {
  auto it = std::find(members_.begin(), members_.end(), rank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

}  // namespace chorus::gossip
