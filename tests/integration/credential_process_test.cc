// Per-node credentials as a user meets them: `chorus credential` makes an
// issuer and two nodes' credentials, two `chorus node` processes started by
// hand train with them and end with one model, and a third process with a
// credential of another issuer (and the right token) is refused by the
// members' handshake and exits naming why.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/control_test_process.h"

namespace chorus::node {
namespace {

namespace fs = std::filesystem;
using testing::ChorusProcess;
using testing::CredentialCommand;
using testing::PortPicker;
using testing::ReadJson;

TEST(CredentialProcessTest, NodesWithTheIssuersCredentialsTrainAndAStrangersIsRefused) {
  if (!fs::exists(fs::path(testing::kDataDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no dataset";
  const std::string name = "credentials";
  const fs::path out = fs::temp_directory_path() / ("chorus-credential-test-" + std::to_string(getpid()));
  fs::create_directories(out);
  const std::string issuer = CredentialCommand({"issuer", (out / "issuer.toml").string()});
  const std::string stranger = CredentialCommand({"issuer", (out / "stranger.toml").string()});
  for (int i = 0; i < 2; ++i) {
    CredentialCommand({"issue", "--issuer", (out / "issuer.toml").string(), "--name", "node" + std::to_string(i),
                       (out / ("node" + std::to_string(i) + ".cred")).string()});
  }
  CredentialCommand({"issue", "--issuer", (out / "stranger.toml").string(), "--name", "node2",
                     (out / "node2.cred").string()});
  ASSERT_FALSE(issuer.empty() || stranger.empty());

  // `config check` reads the credential as the node would: the stranger's is not the issuer's.
  ChorusProcess check({"config", "check", std::string(testing::kConfigsDir) + "/allreduce-ring.toml", "--set",
                       "cluster.issuer=\"" + issuer + "\"", "--set",
                       "cluster.credential=\"" + (out / "node2.cred").string() + "\""});
  EXPECT_EQ(testing::ExitStatus(check, 30), 2) << check.Output();
  EXPECT_NE(check.Output().find("node2.cred: issued by " + stranger + ", not by cluster.issuer " + issuer),
            std::string::npos)
      << check.Output();

  PortPicker ports(static_cast<uint32_t>(getpid()) + 23);
  const int port0 = ports.Next();
  auto node = [&](int i, const std::string& issuer_key) {
    return std::make_unique<ChorusProcess>(testing::HandNodeArgs(
        "allreduce-ring.toml", i, port0, out.string(), name,
        {"cluster.min_nodes=2", "cluster.join_timeout_s=20", "cluster.issuer=\"" + issuer_key + "\"",
         "cluster.credential=\"" + (out / ("node" + std::to_string(i) + ".cred")).string() + "\"",
         "train.threads=1", "train.epochs=2", "train.eval_every_epochs=0", "train.slowdown=3.0",
         "data.train_limit=24000", "data.test_limit=1000"}));
  };
  std::vector<std::unique_ptr<ChorusProcess>> members;
  members.push_back(node(0, issuer));
  members.push_back(node(1, issuer));
  auto outputs = [&] {
    std::string all;
    for (size_t i = 0; i < members.size(); ++i) all += "---- node" + std::to_string(i) + "\n" + members[i]->Output();
    return all;
  };
  ASSERT_TRUE(members[0]->WaitFor("listening on", 60)) << outputs();

  // The token is right; the credential is another issuer's. It dials node0
  // while the members form or train (they train for seconds).
  std::unique_ptr<ChorusProcess> intruder = node(2, stranger);
  EXPECT_EQ(testing::ExitStatus(*intruder, 60), 1) << intruder->Output();
  EXPECT_NE(intruder->Output().find("'node2' showed no credential of this cluster's issuer"), std::string::npos)
      << intruder->Output();

  std::string checksum;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(testing::ExitStatus(*members[i], 300), 0) << outputs();
    const nlohmann::json summary = ReadJson(out / name / ("node" + std::to_string(i)) / "summary.json");
    ASSERT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << outputs();
    EXPECT_EQ(summary["world_size"].get<int>(), 2) << "node" << i;
    EXPECT_GT(summary["test_accuracy"].get<double>(), 0.6) << "node" << i;
    const std::string c = summary["parameter_checksum"].get<std::string>();
    if (checksum.empty()) checksum = c;
    EXPECT_EQ(c, checksum) << "node" << i << " ended with another model";
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace chorus::node
