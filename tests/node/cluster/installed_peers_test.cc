// InstalledPeers: a member whose control connection closes is marked dead on
// the data plane under its rank in the view the transport has installed, also
// when the connection closes while a new view is being installed (the ranks
// change, and over shm the new endpoint has no peers until SetPeers).
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "node/cluster/installed_peers.h"
#include "tests/gossip/forwarding_transport.h"

namespace chorus::node {
namespace {

// Members (name, hub slot) in rank order; this node is node0.
MembershipView PeersView(uint64_t epoch, const std::vector<std::pair<std::string, int>>& members) {
  MembershipView view;
  view.epoch = epoch;
  view.self_rank = 0;
  for (const auto& [name, slot] : members) {
    Member m;
    m.rank = static_cast<int>(view.members.size());
    m.name = name;
    m.control_address = "127.0.0.1:" + std::to_string(4000 + slot);
    m.data_address = gossip::LocalHub::EncodeAddress(slot);
    view.members.push_back(m);
  }
  return view;
}

Status Install(InstalledPeers& installed, gossip::Transport& transport, const MembershipView& view,
               const std::vector<std::string>& lost_meanwhile = {}) {
  installed.BeginInstall(view);
  for (const std::string& name : lost_meanwhile) installed.ConnectionLost(name, transport);
  std::vector<gossip::PeerInfo> peers;
  for (const Member& m : view.members) peers.push_back({m.rank, m.data_address, m.name});
  CHORUS_RETURN_IF_ERROR(transport.SetPeers(view.self_rank, peers));
  installed.Installed(transport);
  return Status::Ok();
}

// What the control plane reports when it declares `name` dead by silence.
MemberFailure Declared(const std::string& name) { return {name, -1, MemberFailure::Kind::kDeclaredDead}; }

// kUnavailable at once for a peer marked dead; kDeadlineExceeded for a live one.
StatusCode ReceiveFrom(gossip::Transport& transport, gossip::Rank rank) {
  std::vector<std::byte> in(8);
  auto got = transport.Recv(rank, 7, in, Deadline::AfterSeconds(0.05));
  return got ? StatusCode::kOk : got.error().code();
}

// A transport that forwards to `inner` and records which peers were given
// the short release wait (PeerSilent).
class SilenceRecorder final : public gossip::testing::ForwardingTransport {
 public:
  explicit SilenceRecorder(gossip::Transport& inner) : ForwardingTransport(inner) {}
  void PeerSilent(gossip::Rank peer) override { silent.push_back(peer); }

  std::vector<gossip::Rank> silent;
};

class InstalledPeersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gossip::LocalHubOptions options;
    options.world_size = 4;
    hub_ = gossip::LocalHub::Create(options);
    auto t = hub_->MakeTransport(0);
    ASSERT_TRUE(t) << t.error().ToString();
    transport_ = std::move(*t);
    ASSERT_TRUE(Install(installed_, *transport_, PeersView(0, {{"node0", 0}, {"node1", 1}, {"node2", 2}})).ok());
  }

  std::shared_ptr<gossip::LocalHub> hub_;
  std::unique_ptr<gossip::LocalTransport> transport_;
  InstalledPeers installed_;
};

TEST_F(InstalledPeersTest, ALostConnectionMarksItsMemberDeadAtOnce) {
  installed_.ConnectionLost("node2", *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 2), StatusCode::kUnavailable);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  installed_.ConnectionLost("node0", *transport_);  // this node: ignored
  installed_.ConnectionLost("node9", *transport_);  // not a member: ignored
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
}

// node1 left; node2 (rank 2, then rank 1) loses its connection while epoch 1
// is being installed. Marking rank 1 then would hit node1 in the old peers;
// the mark waits for SetPeers and lands on node2's new rank.
TEST_F(InstalledPeersTest, ALossDuringAnInstallIsMarkedUnderTheNewRank) {
  std::vector<std::byte> in(8);
  auto pending = transport_->Irecv(1, 7, in);  // from node1, in epoch 0's ranks
  ASSERT_TRUE(pending);
  installed_.BeginInstall(PeersView(1, {{"node0", 0}, {"node2", 2}}));
  installed_.ConnectionLost("node2", *transport_);
  EXPECT_FALSE((*pending)->Done()) << "marked under a rank of the new view before it was installed";
  std::vector<gossip::PeerInfo> peers = {{0, gossip::LocalHub::EncodeAddress(0), "node0"},
                                         {1, gossip::LocalHub::EncodeAddress(2), "node2"}};
  ASSERT_TRUE(transport_->SetPeers(0, peers).ok());
  installed_.Installed(*transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
}

// The connection closed before the install began, while the transport still
// had the old view (the survivor was still in its failed operation): the next
// view still names the member, which the control plane has not yet declared
// dead, and its rank there is marked too.
TEST_F(InstalledPeersTest, ALossBeforeAnInstallIsMarkedInTheNextViewThatNamesIt) {
  installed_.ConnectionLost("node2", *transport_);
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(1, {{"node0", 0}, {"node2", 2}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  // Once a view without it is installed, the death is forgotten: a process
  // that later joins under the same name has another address and is alive.
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(2, {{"node0", 0}, {"node1", 1}})).ok());
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(3, {{"node0", 0}, {"node1", 1}, {"node2", 3}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ReceiveFrom(*transport_, 2), StatusCode::kDeadlineExceeded);
}

// A re-form at epoch 1 waits on members that moved on to epoch 2 (they failed
// their attempt at 1 when another member died): epoch 2's arrival ends it.
TEST_F(InstalledPeersTest, ANewerEpochEndsAReformAtAnOlderOne) {
  const MembershipView epoch1 = PeersView(1, {{"node0", 0}, {"node1", 1}, {"node2", 2}});
  // Outside a re-form a newer view changes nothing (joins arrive that way).
  installed_.ViewChanged(epoch1, *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);

  installed_.SetRecovery(InstalledPeers::Recovery::kReforming);
  ASSERT_TRUE(Install(installed_, *transport_, epoch1).ok());
  std::vector<std::byte> in(8);
  auto pending = transport_->Irecv(1, 7, in);
  ASSERT_TRUE(pending);
  EXPECT_FALSE((*pending)->Done());
  installed_.ViewChanged(PeersView(2, {{"node0", 0}, {"node1", 1}}), *transport_);
  auto ended = (*pending)->Wait(Deadline::AfterSeconds(5));
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().code(), StatusCode::kUnavailable);

  // The newer view came before the install finished: the attempt ends as
  // soon as it is installed.
  installed_.ViewChanged(PeersView(3, {{"node0", 0}, {"node1", 1}}), *transport_);
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(2, {{"node0", 0}, {"node1", 1}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  installed_.SetRecovery(InstalledPeers::Recovery::kTraining);
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(3, {{"node0", 0}, {"node1", 1}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
}

// node2 is declared dead: node1 is alive, but its part of the epoch's
// collectives stops with the failure, so operations with it end too.
TEST_F(InstalledPeersTest, ADeclaredDeathEndsTheInstalledEpochWithEveryMember) {
  installed_.MemberDead(Declared("node0"), *transport_);  // this node: ignored
  installed_.MemberDead(Declared("node9"), *transport_);  // not a member: ignored
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  installed_.MemberDead(Declared("node2"), *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  EXPECT_EQ(ReceiveFrom(*transport_, 2), StatusCode::kUnavailable);
  // The next view without node2 is a fresh start.
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(1, {{"node0", 0}, {"node1", 1}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
}

// Declared dead while a view that still names it is being installed: the
// epoch ends once it is; a view without it is not ended.
TEST_F(InstalledPeersTest, ADeathDeclaredDuringAnInstallEndsThatEpochIfItNamesTheMember) {
  installed_.BeginInstall(PeersView(1, {{"node0", 0}, {"node1", 1}, {"node2", 2}}));
  installed_.MemberDead(Declared("node2"), *transport_);
  std::vector<gossip::PeerInfo> peers;
  for (int r = 0; r < 3; ++r) peers.push_back({r, gossip::LocalHub::EncodeAddress(r), "node" + std::to_string(r)});
  ASSERT_TRUE(transport_->SetPeers(0, peers).ok());
  installed_.Installed(*transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);

  installed_.BeginInstall(PeersView(2, {{"node0", 0}, {"node1", 1}}));
  installed_.MemberDead(Declared("node2"), *transport_);  // not in the view being installed
  ASSERT_TRUE(transport_->SetPeers(0, std::span(peers).first(2)).ok());
  installed_.Installed(*transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
}

// A node that has failed already and waits to re-form is left alone (its
// operations ended with the failure); the death still ends a view it then
// installs that names the member.
TEST_F(InstalledPeersTest, ADeathDeclaredWhileRecoveringMarksNothingUntilAnInstall) {
  installed_.SetRecovery(InstalledPeers::Recovery::kWaiting);
  installed_.MemberDead(Declared("node2"), *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(Install(installed_, *transport_, PeersView(1, {{"node0", 0}, {"node1", 1}, {"node2", 2}})).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  installed_.SetRecovery(InstalledPeers::Recovery::kTraining);
}

// At their own pace the nodes follow a join's view between steps: every
// member ends the old epoch's operations at once, so what the provider holds
// of them is given up after a silent peer's short wait, not the cancel
// timeout (a join pauses nobody). In lock step a newer view changes nothing
// while training, and a re-form keeps the full wait.
TEST_F(InstalledPeersTest, AtTheirOwnPaceANewerViewEndsTheEpochWithTheShortWait) {
  SilenceRecorder recorder(*transport_);
  const MembershipView joined = PeersView(1, {{"node0", 0}, {"node1", 1}, {"node2", 2}, {"node3", 3}});
  installed_.SetRecovery(InstalledPeers::Recovery::kReforming);
  installed_.ViewChanged(joined, recorder);
  EXPECT_TRUE(recorder.silent.empty());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  installed_.SetRecovery(InstalledPeers::Recovery::kTraining);
  ASSERT_TRUE(Install(installed_, *transport_, joined).ok());
  installed_.SetFollowsViewsOnItsOwn(true);
  installed_.ViewChanged(PeersView(2, {{"node0", 0}, {"node1", 1}, {"node2", 2}, {"node3", 3}}), recorder);
  EXPECT_EQ(recorder.silent, (std::vector<gossip::Rank>{1, 2, 3}));
  EXPECT_EQ(ReceiveFrom(*transport_, 3), StatusCode::kUnavailable);
}

// A view without this node (the others removed it) ends the installed
// epoch's operations with every member at once, whatever the recovery: none
// of them waits for this node any more.
TEST_F(InstalledPeersTest, AViewWithoutThisNodeEndsTheInstalledEpoch) {
  SilenceRecorder recorder(*transport_);
  std::vector<std::byte> in(8);
  auto pending = transport_->Irecv(2, 7, in);
  ASSERT_TRUE(pending);
  // An older or equal view without it changes nothing.
  MembershipView stale = PeersView(0, {{"node1", 1}, {"node2", 2}});
  stale.self_rank = -1;
  installed_.ViewChanged(stale, recorder);
  EXPECT_FALSE((*pending)->Done());
  MembershipView removed = PeersView(1, {{"node1", 1}, {"node2", 2}});
  removed.self_rank = -1;
  installed_.ViewChanged(removed, recorder);
  auto ended = (*pending)->Wait(Deadline::AfterSeconds(5));
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  EXPECT_EQ(recorder.silent, (std::vector<gossip::Rank>{1, 2}));
}

// A view a member asked for over the same members (its exchange failed,
// nobody is gone) ends the installed epoch while training, as a death does,
// also when it came while another view was being installed; a node already
// waiting to re-form is left alone, and the view it asked for is not ended
// once installed.
TEST_F(InstalledPeersTest, AViewAskedForOverTheSameMembersEndsTheEpochWhileTraining) {
  MembershipView asked = PeersView(1, {{"node0", 0}, {"node1", 1}, {"node2", 2}});
  asked.reform = true;
  installed_.SetRecovery(InstalledPeers::Recovery::kWaiting);
  installed_.ViewChanged(asked, *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  installed_.SetRecovery(InstalledPeers::Recovery::kReforming);
  ASSERT_TRUE(Install(installed_, *transport_, asked).ok());
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kDeadlineExceeded);
  installed_.SetRecovery(InstalledPeers::Recovery::kTraining);

  MembershipView again = PeersView(2, {{"node0", 0}, {"node1", 1}, {"node2", 2}});
  again.reform = true;
  installed_.ViewChanged(again, *transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
  EXPECT_EQ(ReceiveFrom(*transport_, 2), StatusCode::kUnavailable);

  MembershipView third = PeersView(4, {{"node0", 0}, {"node1", 1}, {"node2", 2}});
  third.reform = true;
  installed_.BeginInstall(PeersView(3, {{"node0", 0}, {"node1", 1}, {"node2", 2}}));
  installed_.ViewChanged(third, *transport_);
  std::vector<gossip::PeerInfo> peers;
  for (int r = 0; r < 3; ++r) peers.push_back({r, gossip::LocalHub::EncodeAddress(r), "node" + std::to_string(r)});
  ASSERT_TRUE(transport_->SetPeers(0, peers).ok());
  installed_.Installed(*transport_);
  EXPECT_EQ(ReceiveFrom(*transport_, 1), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace chorus::node
