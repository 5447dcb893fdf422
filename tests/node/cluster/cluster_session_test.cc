// ClusterSession::InstallPeers over the in-process transport: moving to a
// later membership epoch drops the messages the left epoch leaves behind, in
// both tag layouts (gossip's, and the node's collectives'), and nothing of the
// new epoch.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "gossip/protocols/gossip_tags.h"
#include "gossip/transport/local/local_transport.h"
#include "node/cluster/cluster_session.h"

namespace chorus::node {
namespace {

MembershipView SessionView(uint64_t epoch, int self_rank) {
  MembershipView view;
  view.epoch = epoch;
  view.self_rank = self_rank;
  for (int r = 0; r < 2; ++r) {
    Member m;
    m.rank = r;
    m.name = "node" + std::to_string(r);
    m.control_address = "127.0.0.1:" + std::to_string(4000 + r);
    m.data_address = gossip::LocalHub::EncodeAddress(r);
    view.members.push_back(m);
  }
  return view;
}

TEST(ClusterSessionTest, NewEpochDiscardsWhatTheLeftEpochLeftBehind) {
  gossip::LocalHubOptions options;
  options.world_size = 2;
  auto hub = gossip::LocalHub::Create(options);
  auto sender = hub->MakeTransport(0);
  ASSERT_TRUE(sender) << sender.error().ToString();
  auto receiver = hub->MakeTransport(1);
  ASSERT_TRUE(receiver) << receiver.error().ToString();
  ClusterSession session;
  session.transport = std::move(*receiver);
  ASSERT_TRUE(session.InstallPeers(SessionView(0, 1), Deadline::AfterSeconds(5)).ok());

  const std::vector<std::byte> payload(64, std::byte{1});
  const gossip::Tag left_behind[] = {
      gossip::GossipTag(gossip::GossipMessageKind::kDpsgd, 0, 0, 7),  // a round nobody finished
      EpochTagBase(0) + 5,                                            // an all-reduce step
  };
  const gossip::Tag kept[] = {
      gossip::GossipTag(gossip::GossipMessageKind::kDpsgd, 0, 1, 7),  // the new epoch's
      EpochTagBase(1) + 5,
  };
  for (gossip::Tag tag : left_behind) ASSERT_TRUE((*sender)->Send(1, tag, payload, Deadline::AfterSeconds(5)).ok());
  for (gossip::Tag tag : kept) ASSERT_TRUE((*sender)->Send(1, tag, payload, Deadline::AfterSeconds(5)).ok());

  ASSERT_TRUE(session.InstallPeers(SessionView(1, 1), Deadline::AfterSeconds(5)).ok());
  EXPECT_EQ(session.transport->Stats().messages_discarded, 2u);
  std::vector<std::byte> in(64);
  for (gossip::Tag tag : kept) {
    auto got = session.transport->Recv(0, tag, in, Deadline::AfterSeconds(5));
    EXPECT_TRUE(got) << "tag " << tag << ": " << got.error().ToString();
  }
  // Late arrivals of the left epoch are dropped too.
  ASSERT_TRUE((*sender)->Send(1, left_behind[0], payload, Deadline::AfterSeconds(5)).ok());
  EXPECT_EQ(session.transport->Stats().messages_discarded, 3u);
}

}  // namespace
}  // namespace chorus::node
