// `chorus cluster` as separate processes on 127.0.0.1: four nodes agree on
// epoch 0; a wrong token is refused and both sides say why; kill -9 of the
// coordinator moves the survivors to a new epoch within the dead timeout;
// garbage on the control port closes only that connection; a version mismatch
// is logged naming both versions.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "node/control/control_auth.h"
#include "node/control/control_client.h"
#include "node/control/control_frame.h"
#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

using testing::ChorusProcess;
using testing::ExitStatus;
using testing::FastClusterSets;

// `sets` ("section.key=value") follow the fast cluster settings, so they win.
std::unique_ptr<ChorusProcess> StartNode(const std::string& name, int min_nodes, const std::string& bootstrap,
                                         const std::string& token = "process-test",
                                         const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"cluster", "--hold", "60", "--set", "run.node_name=\"" + name + "\"",
                                   "--set", "cluster.min_nodes=" + std::to_string(min_nodes),
                                   "--set", "cluster.listen=\"127.0.0.1:0\""};
  for (const std::string& s : FastClusterSets(token)) args.push_back(s);
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  if (!bootstrap.empty()) {
    args.push_back("--set");
    args.push_back("cluster.bootstrap=[\"" + bootstrap + "\"]");
  }
  return std::make_unique<ChorusProcess>(args);
}

std::string AddressOf(ChorusProcess& p) {
  auto m = p.WaitFor(R"(listening on (127\.0\.0\.1:\d+))", 10);
  EXPECT_TRUE(m.has_value()) << p.Output();
  return m ? (*m)[1].str() : std::string();
}

// The node's versions, as it logged them at start.
VersionInfo VersionsOf(ChorusProcess& p) {
  auto m = p.WaitFor(R"(chorus (\S+), libfabric (\S+), provider (\S+) (\S+))", 10);
  EXPECT_TRUE(m.has_value()) << p.Output();
  if (!m) return {};
  return VersionInfo{(*m)[1].str(), (*m)[2].str(), (*m)[3].str(), (*m)[4].str()};
}

TEST(ClusterProcessTest, FourProcessesAgreeOnEpochZeroAndRanks) {
  // Started in an order unrelated to their names: ranks follow the names.
  auto founder = StartNode("n2", 4, "");
  const std::string boot = AddressOf(*founder);
  ASSERT_FALSE(boot.empty());
  std::vector<std::unique_ptr<ChorusProcess>> nodes;
  nodes.push_back(std::move(founder));
  for (const char* name : {"n3", "n0", "n1"}) nodes.push_back(StartNode(name, 4, boot));

  std::vector<std::string> tables;
  for (auto& p : nodes) {
    auto m = p->WaitFor(R"(cluster: epoch 0, 4 members, this node is rank \d\n((  rank \d: .*\n){4}))", 15);
    ASSERT_TRUE(m.has_value()) << p->Output();
    tables.push_back((*m)[1].str());
    EXPECT_TRUE(p->WaitFor("epoch 0: members n0 n1 n2 n3", 1).has_value()) << p->Output();
  }
  for (const std::string& t : tables) EXPECT_EQ(t, tables[0]);
  EXPECT_NE(tables[0].find("  rank 0: n0 at 127.0.0.1:"), std::string::npos) << tables[0];
  EXPECT_NE(tables[0].find("  rank 3: n3 at 127.0.0.1:"), std::string::npos) << tables[0];
  const char* names[] = {"n2", "n3", "n0", "n1"};
  const int ranks[] = {2, 3, 0, 1};
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_TRUE(nodes[i]->WaitFor("this node is rank " + std::to_string(ranks[i]), 0).has_value()) << names[i];
  }
  for (auto& p : nodes) p->Signal(SIGTERM);
  for (auto& p : nodes) EXPECT_EQ(ExitStatus(*p, 10), 0) << p->Output();
}

TEST(ClusterProcessTest, WrongTokenIsRefusedAndBothSidesSayWhy) {
  auto keeper = StartNode("keeper", 1, "", "right-token");
  const std::string boot = AddressOf(*keeper);
  ASSERT_FALSE(boot.empty());
  ASSERT_TRUE(keeper->WaitFor("epoch 0: members keeper", 10).has_value()) << keeper->Output();
  auto intruder = StartNode("intruder", 1, boot, "wrong-token");
  // Refused on its first attempt, long before cluster.join_timeout_s (15 s).
  EXPECT_EQ(ExitStatus(*intruder, 8), 1) << intruder->Output();
  const std::string said = intruder->Output();
  EXPECT_NE(said.find("refused by " + boot), std::string::npos) << said;
  EXPECT_NE(said.find("tokens differ"), std::string::npos) << said;
  auto logged = keeper->WaitFor("refusing 'intruder' at 127\\.0\\.0\\.1:\\d+: its hello does not verify under our "
                                "cluster token",
                                5);
  EXPECT_TRUE(logged.has_value()) << keeper->Output();
  EXPECT_TRUE(keeper->Running());
  // The token itself never appears, on either side.
  EXPECT_EQ(keeper->Output().find("right-token"), std::string::npos);
  EXPECT_EQ(said.find("wrong-token"), std::string::npos);
  keeper->Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(*keeper, 10), 0);
}

// CHORUS_LISTEN_FD is chorus launch's; a bad one stops the node naming it.
TEST(ClusterProcessTest, ABadInheritedListenFdIsNamed) {
  std::vector<std::string> args = {"cluster", "--hold", "1"};
  for (const std::string& s : FastClusterSets("fd")) args.push_back(s);
  ChorusProcess word(args, {"CHORUS_LISTEN_FD=three"});
  EXPECT_EQ(ExitStatus(word, 10), 1) << word.Output();
  EXPECT_NE(word.Output().find("environment variable CHORUS_LISTEN_FD=three: expected an integer >= 0"), std::string::npos)
      << word.Output();
  ChorusProcess closed(args, {"CHORUS_LISTEN_FD=999"});
  EXPECT_EQ(ExitStatus(closed, 10), 1) << closed.Output();
  EXPECT_NE(closed.Output().find("the listening socket handed over (fd 999)"), std::string::npos) << closed.Output();
}

// Four nodes; the first (n0, the coordinator) is the one the tests stop or
// kill. `sets` go to every node.
struct FourNodes {
  std::unique_ptr<ChorusProcess> n0;
  std::vector<std::unique_ptr<ChorusProcess>> survivors;  // n1 n2 n3
};

FourNodes StartFourNodes(const std::vector<std::string>& sets) {
  FourNodes nodes;
  nodes.n0 = StartNode("n0", 4, "", "process-test", sets);
  const std::string boot = AddressOf(*nodes.n0);
  if (boot.empty()) return nodes;
  for (const char* name : {"n1", "n2", "n3"}) nodes.survivors.push_back(StartNode(name, 4, boot, "process-test", sets));
  EXPECT_TRUE(nodes.n0->WaitFor("epoch 0: members n0 n1 n2 n3", 15).has_value()) << nodes.n0->Output();
  for (auto& p : nodes.survivors) EXPECT_TRUE(p->WaitFor("epoch 0: members", 15).has_value()) << p->Output();
  return nodes;
}

// Waits up to `timeout_s` for every survivor to install epoch 1 without n0;
// returns the seconds since `since`, or -1.
double SurvivorsMoveOn(FourNodes& nodes, std::chrono::steady_clock::time_point since, double timeout_s) {
  for (auto& p : nodes.survivors) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    auto m = p->WaitFor(R"(epoch 1: members n1 n2 n3 \(departed ranks 0\))", std::max(left, 0.0));
    EXPECT_TRUE(m.has_value()) << p->Output();
    if (!m) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void StopSurvivors(FourNodes& nodes) {
  for (auto& p : nodes.survivors) p->Signal(SIGTERM);
  for (auto& p : nodes.survivors) EXPECT_EQ(ExitStatus(*p, 10), 0) << p->Output();
}

// Sends `sig` to n0; expects every survivor in epoch 1 within `timeout_s`, and
// n1 to log why n0 is dead (`why`, a regex). Returns the seconds it took, or -1.
double CoordinatorDiesOf(FourNodes& nodes, int sig, double timeout_s, const std::string& why) {
  const auto at = std::chrono::steady_clock::now();
  nodes.n0->Signal(sig);
  const double took = SurvivorsMoveOn(nodes, at, timeout_s);
  if (took < 0) return took;
  std::printf("survivors agreed on epoch 1 %.2f s after %s\n", took, strsignal(sig));
  EXPECT_TRUE(nodes.survivors[0]->WaitFor(R"(member n0 \(rank 0\) is dead: )" + why, 0).has_value())
      << nodes.survivors[0]->Output();
  return took;
}

// kill -9 closes the coordinator's connections and its listening port: the
// survivors' dials are refused, which declares it dead long before the
// 30 s of silence configured here. Two refused dials a heartbeat (0.1 s)
// apart, the ack round and a loaded 2-core machine: well under 5 s.
TEST(ClusterProcessTest, KillNineOfTheCoordinatorMovesSurvivorsToANewEpoch) {
  FourNodes nodes = StartFourNodes({"cluster.suspect_timeout_s=20", "cluster.dead_timeout_s=30"});
  ASSERT_EQ(nodes.survivors.size(), 3u);
  EXPECT_GE(CoordinatorDiesOf(nodes, SIGKILL, 5, "its control connection closed and 2 dials in a row were refused"),
            0);
  StopSurvivors(nodes);
}

// The survivors dial a member as soon as its connection closes, and again
// 0.1 s after a refusal, rather than at their next heartbeats: with ticks
// 2 s apart, kill -9 still moves them on within one tick.
TEST(ClusterProcessTest, KillNineIsDecidedByRefusedDialsBetweenTicks) {
  FourNodes nodes = StartFourNodes(
      {"cluster.heartbeat_interval_s=2", "cluster.suspect_timeout_s=20", "cluster.dead_timeout_s=30"});
  ASSERT_EQ(nodes.survivors.size(), 3u);
  const double took =
      CoordinatorDiesOf(nodes, SIGKILL, 10, "its control connection closed and 2 dials in a row were refused");
  EXPECT_GE(took, 0);
  EXPECT_LT(took, 2.0) << "two ticks' dials would take 2 to 4 s; n1, n2, n3 said:\n"
                        << nodes.survivors[0]->Output() << nodes.survivors[1]->Output()
                        << nodes.survivors[2]->Output();
  StopSurvivors(nodes);
}

// SIGSTOP keeps the coordinator's port listening (the kernel still accepts
// connections): only silence for dead_timeout_s (1 s) declares it dead; 2.5 s
// more covers a heartbeat of detection skew, the ack round and a loaded host.
TEST(ClusterProcessTest, StoppedCoordinatorIsDeclaredDeadBySilence) {
  FourNodes nodes = StartFourNodes({});
  ASSERT_EQ(nodes.survivors.size(), 3u);
  EXPECT_GE(CoordinatorDiesOf(nodes, SIGSTOP, 3.5, "silent for"), 1.0);
  StopSurvivors(nodes);
}

// The coordinator (n0) and n1 freeze together; n0 wakes after 2 s and n1
// after 3.8 s. n2 and n3 declare n1 dead at 3 s of silence and end their
// epoch with it; n0, judging the others afresh after its own stall, would
// not until 5 s, by which time n1 answers again. n2's heartbeat tells n0
// whom it declared dead, and n0 drops n1: without that, n2 and n3 waited
// for an epoch n0 never proposed.
TEST(ClusterProcessTest, TheCoordinatorDropsAMemberTheOthersDeclaredDeadWhileItWasFrozen) {
  FourNodes nodes = StartFourNodes({"cluster.suspect_timeout_s=1", "cluster.dead_timeout_s=3"});
  ASSERT_EQ(nodes.survivors.size(), 3u);
  ChorusProcess& n1 = *nodes.survivors[0];
  const auto at = std::chrono::steady_clock::now();
  nodes.n0->Signal(SIGSTOP);
  n1.Signal(SIGSTOP);
  std::this_thread::sleep_until(at + std::chrono::milliseconds(2000));
  nodes.n0->Signal(SIGCONT);
  std::this_thread::sleep_until(at + std::chrono::milliseconds(3800));
  n1.Signal(SIGCONT);
  const std::string epoch1 = R"(epoch 1: members n0 n2 n3 \(departed ranks 1\))";
  for (ChorusProcess* p : {nodes.n0.get(), nodes.survivors[1].get(), nodes.survivors[2].get()}) {
    EXPECT_TRUE(p->WaitFor(epoch1, 15).has_value()) << p->Output();
  }
  EXPECT_TRUE(nodes.n0->WaitFor(R"(member n1 \(rank 1\) is dead: declared dead by n[23])", 0).has_value())
      << nodes.n0->Output();
  for (ChorusProcess* p : {nodes.n0.get(), nodes.survivors[1].get(), nodes.survivors[2].get()}) p->Signal(SIGTERM);
  for (ChorusProcess* p : {nodes.n0.get(), nodes.survivors[1].get(), nodes.survivors[2].get()}) {
    EXPECT_EQ(ExitStatus(*p, 10), 0) << p->Output();
  }
  n1.Signal(SIGKILL);
}

// A raw TCP connection to the node: sends `bytes`, then waits until the node
// closes it (read returns 0 or an error). Returns our local "ip:port".
std::string SendRaw(const std::string& address, const std::vector<uint8_t>& bytes, bool half_close) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  const std::string me = "127.0.0.1:" + std::to_string(ntohs(local.sin_port));
  if (!bytes.empty()) {
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  if (half_close) shutdown(fd, SHUT_WR);
  timeval tv{5, 0};  // the node answers garbage at once; 5 s only bounds a broken test
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "the node did not close the connection of " << me;
  close(fd);
  return me;
}

TEST(ClusterProcessTest, GarbageOnTheControlPortClosesOnlyThatConnection) {
  const std::string token = "garbage-test";
  auto node = StartNode("sturdy", 1, "", token);
  const std::string address = AddressOf(*node);
  ASSERT_FALSE(address.empty());
  ASSERT_TRUE(node->WaitFor("epoch 0: members sturdy", 10).has_value()) << node->Output();
  const VersionInfo versions = VersionsOf(*node);

  std::mt19937 rng(1234);
  std::vector<uint8_t> random(4096);
  for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
  random[2] = 0xff;  // make sure the length header is over the 1 MiB limit
  const std::string c1 = SendRaw(address, random, false);
  const std::string c2 = SendRaw(address, {0x40, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, true);  // truncated
  std::vector<uint8_t> bad_mac = {16, 0, 0, 0};
  bad_mac.resize(4 + 16 + 32, 0x5a);
  const std::string c3 = SendRaw(address, bad_mac, false);
  // Authentic (right handshake key) but not a capnp message.
  ASSERT_TRUE(InitSodium().ok());
  FrameSealer sealer(ClusterKey::FromToken(token).HandshakeKey(Direction::kDialerToAcceptor));
  const std::string c4 = SendRaw(address, sealer.Seal(std::vector<uint8_t>(24, 0xee)), false);

  EXPECT_TRUE(node->WaitFor("closing connection with " + c1 + ": .*over the limit", 5).has_value())
      << node->Output();
  EXPECT_TRUE(node->WaitFor("closing connection with " + c2 + ": .*inside a frame", 5).has_value())
      << node->Output();
  EXPECT_TRUE(node->WaitFor("closing connection with " + c3 + ": .*does not verify", 5).has_value())
      << node->Output();
  EXPECT_TRUE(node->WaitFor("closing connection with " + c4 + ": DATA_LOSS", 5).has_value()) << node->Output();

  // Still alive, still answering a proper hello.
  ASSERT_TRUE(node->Running());
  Result<ProbeResult> probe = ProbeNode(address, token, versions, "prober", Deadline::AfterSeconds(5));
  ASSERT_TRUE(probe.has_value()) << probe.error().ToString();
  EXPECT_EQ(probe->peer_name, "sturdy");
  EXPECT_TRUE(probe->state.formed);
  ASSERT_EQ(probe->state.members.size(), 1u);
  EXPECT_EQ(probe->state.members[0].name, "sturdy");
  node->Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(*node, 10), 0);
}

TEST(ClusterProcessTest, VersionMismatchIsRefusedAndLoggedWithBothVersions) {
  auto node = StartNode("stable", 1, "", "versions");
  const std::string address = AddressOf(*node);
  ASSERT_FALSE(address.empty());
  VersionInfo other = VersionsOf(*node);
  const VersionInfo ours = other;
  other.libfabric = "9.99";
  Result<ProbeResult> probe = ProbeNode(address, "versions", other, "newer", Deadline::AfterSeconds(5));
  ASSERT_FALSE(probe.has_value());
  EXPECT_EQ(probe.error().code(), StatusCode::kFailedPrecondition) << probe.error().ToString();
  EXPECT_NE(probe.error().message().find("libfabric 9.99"), std::string::npos) << probe.error().message();
  EXPECT_NE(probe.error().message().find("libfabric " + ours.libfabric), std::string::npos)
      << probe.error().message();
  auto logged = node->WaitFor("version mismatch with newer .*: ours " + std::string(".*libfabric ") + ours.libfabric +
                                  ".*; theirs .*libfabric 9\\.99",
                              5);
  EXPECT_TRUE(logged.has_value()) << node->Output();
  // A SIGTERM before the node has formed its cluster exits at once (143), by design.
  ASSERT_TRUE(node->WaitFor("epoch 0: members stable", 10).has_value()) << node->Output();
  node->Signal(SIGTERM);
  EXPECT_EQ(ExitStatus(*node, 10), 0);
}

}  // namespace
}  // namespace chorus::node
