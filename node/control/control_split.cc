// A cluster split in two (see control_plane_impl.h). A network partition
// leaves each side declaring the other dead and re-forming without it: two
// clusters of one job, each training its own model. When the cut heals
// nothing joins them again, since a member dials only the members of its
// view. So a member keeps, for a while, the addresses of the members its
// views dropped and probes them (a StateRequest, as a tool would) every few
// seconds. A formed cluster at such an address whose members share no name
// with our view is the other part: the part with more members wins, ties to
// the one whose coordinator's name sorts first. The losing part's members
// leave, each saying why (the node exits, and a supervisor starts it again:
// it joins the winning part like any late node); the one that found the
// other part tells its fellow members with a Redirect to the winner.
//
// A part smaller than half of the members that may still run does not
// re-form at all (InMinorityPart): the cut-off node leaves and joins again,
// so that a cut lasting to the end of the run leaves no second model.
#include <algorithm>

#include "common/log.h"
#include "node/control/control_plane_impl.h"

namespace chorus::node {
namespace {

// How often the departed members are probed, and for how long after they
// left: a partition heals within minutes or is an outage.
constexpr auto kSplitProbeEvery = std::chrono::seconds(2);
constexpr auto kDepartedKeptFor = std::chrono::minutes(10);
// The most departed members kept (the most recent).
constexpr size_t kMaxDeparted = 64;
constexpr auto kSplitDialTime = std::chrono::seconds(2);

}  // namespace

void ControlPlaneImpl::NoteDeparted(const msg::EpochView& next) {
  const Clock::time_point now = Clock::now();
  for (const Member& m : next.members) departed_.erase(m.name);
  if (!formed_) return;
  for (const Member& m : view_.members) {
    const bool kept = std::any_of(next.members.begin(), next.members.end(),
                                  [&](const Member& n) { return n.name == m.name; });
    if (kept || m.name == self_.name || m.control_address.empty()) continue;
    departed_[m.name] = Departed{m.control_address, now, false};
  }
  while (departed_.size() > kMaxDeparted) {
    auto oldest = std::min_element(departed_.begin(), departed_.end(),
                                   [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
    departed_.erase(oldest);
  }
}

void ControlPlaneImpl::ProbeDeparted(Clock::time_point now) {
  if (phase_ != Phase::kMember || now < next_split_probe_) return;
  next_split_probe_ = now + kSplitProbeEvery;
  for (auto it = departed_.begin(); it != departed_.end();) {
    if (now - it->second.since > kDepartedKeptFor || view_.Find(it->first)) {
      it = departed_.erase(it);
      continue;
    }
    Departed& d = it->second;
    const std::string name = it->first;
    ++it;
    if (d.probing) continue;
    d.probing = true;
    AsyncDial(io_, d.address, kSplitDialTime, [this, name](Result<asio::ip::tcp::socket> s, bool /*refused*/) {
      Locked([&] {
        auto found = departed_.find(name);
        if (!s || phase_ != Phase::kMember) {
          if (found != departed_.end()) found->second.probing = false;
          return;
        }
        split_probes_[StartDialed(std::move(*s))->id()] = name;
      });
    });
  }
}

void ControlPlaneImpl::HandleSplitProbeReply(const std::shared_ptr<Connection>& conn, const ControlMessage& message) {
  auto probe = split_probes_.find(conn->id());
  const std::string name = probe->second;
  split_probes_.erase(probe);
  conn->CloseAfterFlush(Status::Ok());
  if (auto d = departed_.find(name); d != departed_.end()) d->second.probing = false;
  const auto* state = std::get_if<msg::State>(&message);
  if (state == nullptr || !state->formed || phase_ != Phase::kMember) return;
  // Any member in common: not another part, but a view that one side has not
  // caught up with yet (the removed node learns it from the others).
  for (const Member& m : state->members) {
    if (view_.Find(m.name)) return;
  }
  const std::string ours = ExpectedCoordinator();
  const size_t our_size = view_.members.size();
  const size_t their_size = state->members.size();
  const bool theirs_wins = their_size > our_size || (their_size == our_size && state->coordinator < ours);
  const std::string parts = conn->Describe() + " is in another part of the cluster: " +
                            std::to_string(their_size) + " members at epoch " + std::to_string(state->epoch) +
                            ", coordinator " + state->coordinator + "; ours has " + std::to_string(our_size) +
                            ", coordinator " + ours;
  if (!theirs_wins) {
    CHORUS_LOG_WARN(Subsys::kControl, "the cluster split: ", parts, ". Ours goes on; theirs yields");
    return;
  }
  msg::Redirect target;
  target.coordinator_name = state->coordinator;
  target.formed = true;
  for (const Member& m : state->members) {
    if (m.name == state->coordinator) target.coordinator_address = m.control_address;
  }
  YieldToLargerPart("the cluster split: " + parts + ". Theirs is larger (or wins the tie)", target,
                    /*tell_members=*/true);
}

void ControlPlaneImpl::YieldToLargerPart(const std::string& why, const msg::Redirect& target, bool tell_members) {
  if (Terminal()) return;
  if (tell_members) {
    for (const auto& [name, conn] : peers_) {
      if (conn->established()) conn->Send(target);
    }
  }
  yielded_to_ = target.coordinator_address;
  EndAs(Phase::kRemoved, Aborted(self_.name + " leaves its part of the cluster (" + why + "): it can join " +
                                 target.coordinator_name + " at " + target.coordinator_address + " again"));
  CHORUS_LOG_ERROR(Subsys::kControl, failure_.message());
  view_.self_rank = -1;
  to_announce_.push_back(view_);  // self_rank -1: this node is out
  CloseAll();
  cv_.notify_all();
}

bool ControlPlaneImpl::InMinorityPart(size_t hearing) const {
  size_t may_run = 0;
  for (const Member& m : view_.members) {
    if (!left_.count(m.name) && !dead_for_sure_.count(m.name)) ++may_run;
  }
  return 2 * hearing < may_run;
}

void ControlPlaneImpl::LeaveAsCutOff(size_t hearing) {
  if (Terminal()) return;
  std::vector<std::string> silent;
  for (const Member& m : view_.members) {
    if (dead_.count(m.name) && !dead_for_sure_.count(m.name) && !left_.count(m.name)) silent.push_back(m.name);
  }
  EndAs(Phase::kRemoved,
        Aborted(self_.name + " is cut off from the cluster at epoch " + std::to_string(view_.epoch) + ": it hears " +
                std::to_string(hearing) + " of its " + std::to_string(view_.members.size()) +
                " members, and the silent ones (" + JoinNames(silent) +
                ") may go on without it; it leaves rather than train a second model, and joins again"));
  CHORUS_LOG_ERROR(Subsys::kControl, failure_.message());
  view_.self_rank = -1;
  to_announce_.push_back(view_);  // self_rank -1: this node is out
  CloseAll();
  cv_.notify_all();
}

}  // namespace chorus::node
