// What the in-process ControlPlane tests share: a node's description and a
// cluster configuration with short timeouts.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "node/control/control_plane.h"

namespace chorus::node::testing {

// Short timeouts keep the tests fast; the heartbeats stay ~5 apart within the
// suspect timeout so a loaded 2-core CI machine does not produce false
// suspicions. Listens on `listen` (port 0: any free one).
inline ClusterConfig ControlTestConfig(std::string listen, int min_nodes, std::vector<std::string> bootstrap,
                                       double dead_timeout_s = 1.0, std::string token = "t0k3n") {
  ClusterConfig c;
  c.listen = std::move(listen);
  c.bootstrap = std::move(bootstrap);
  c.token = std::move(token);
  c.min_nodes = min_nodes;
  c.join_timeout_s = 10;
  c.heartbeat_interval_s = 0.1;
  c.suspect_timeout_s = dead_timeout_s / 2;
  c.dead_timeout_s = dead_timeout_s;
  return c;
}

// ControlTestConfig on any free port of 127.0.0.1, with a 1 s dead timeout.
inline ClusterConfig TestConfig(int min_nodes, std::vector<std::string> bootstrap, std::string token = "t0k3n") {
  return ControlTestConfig("127.0.0.1:0", min_nodes, std::move(bootstrap), 1.0, std::move(token));
}

inline LocalNodeInfo Local(const std::string& name, const std::string& chorus_version = "0.1.0") {
  LocalNodeInfo info;
  info.name = name;
  info.data_address = {1, 2, 3, static_cast<uint8_t>(name.size())};
  info.batch_size = 32;
  info.host_group = "h";
  info.chorus_version = chorus_version;
  info.libfabric_version = "1.17";
  info.provider = "tcp;ofi_rxm";
  info.provider_version = "117.0";
  return info;
}

// Starts a control plane; a failure fails the test and gives null.
inline std::unique_ptr<ControlPlane> StartOrDie(const ClusterConfig& config, LocalNodeInfo local) {
  Result<std::unique_ptr<ControlPlane>> cp = ControlPlane::Start(config, std::move(local));
  EXPECT_TRUE(cp.has_value()) << cp.error().ToString();
  return cp ? std::move(*cp) : nullptr;
}

}  // namespace chorus::node::testing
