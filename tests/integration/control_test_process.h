// Test helper: runs the built `chorus` binary (CHORUS_BINARY) as a child
// process with its stdout and stderr in a temporary file, and waits for lines
// in that output. Waits poll the file every 20 ms (sleeping, never spinning).
// Also what the multi-process tests share: ports for nodes started by hand,
// reading a node's JSON output. Used by the tests in tests/integration/ only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace chorus::node::testing {

// Where the process tests find Fashion-MNIST (Debian's dataset-fashion-mnist)
// and the repository's example configs.
inline constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kConfigsDir = CHORUS_SOURCE_DIR "/configs";

class ChorusProcess {
 public:
  // Runs the chorus binary with `args`; `extra_env` ("NAME=value") is added to
  // our environment. `netns`: the network namespace to run it in (as `ip netns
  // exec` does; the child exits 126 when it cannot enter), or none.
  explicit ChorusProcess(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
                         const std::string& netns = "") {
    std::vector<std::string> env_text(extra_env);
    for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    char path[] = "/tmp/chorus_test_outXXXXXX";
    const int fd = mkstemp(path);
    output_path_ = path;
    std::vector<std::string> full = {CHORUS_BINARY};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string netns_path = netns.empty() ? "" : "/var/run/netns/" + netns;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      if (!netns_path.empty()) {
        const int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
        if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(126);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fd);
  }
  ~ChorusProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(output_path_.c_str());
  }
  ChorusProcess(const ChorusProcess&) = delete;
  ChorusProcess& operator=(const ChorusProcess&) = delete;

  pid_t pid() const { return pid_; }

  std::string Output() const {
    std::ifstream in(output_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Waits until the output matches `pattern`; returns the first match's groups.
  std::optional<std::smatch> WaitFor(const std::string& pattern, double timeout_s) {
    const std::regex re(pattern);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (true) {
      output_cache_ = Output();
      std::smatch m;
      if (std::regex_search(output_cache_, m, re)) return m;
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void Signal(int sig) { kill(pid_, sig); }

  bool Running() {
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }

  // The wait status once the process ended within `timeout_s`.
  std::optional<int> Wait(double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (Running()) {
      if (std::chrono::steady_clock::now() >= end) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::string output_path_;
  std::string output_cache_;
  bool exited_ = false;
  int status_ = 0;
};

// The exit status, or the shell's 128 + signal, of a process that ended within
// `timeout_s`; -1 when it had not ended by then.
inline int ExitStatus(ChorusProcess& p, double timeout_s) {
  std::optional<int> status = p.Wait(timeout_s);
  if (!status) return -1;
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

// `chorus node CONFIG` as node<i> of a hand-started cluster: run `name`
// under `out`, node0 listening on `port0` (the others on any port), all
// bootstrapping from it with `name` as the token, no progress display; then
// each of `sets` (KEY=VALUE) as --set.
inline std::vector<std::string> HandNodeArgs(const std::string& config, int i, int port0,
                                             const std::string& out, const std::string& name,
                                             const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"node", std::string(kConfigsDir) + "/" + config};
  const std::string listen = i == 0 ? "127.0.0.1:" + std::to_string(port0) : "127.0.0.1:0";
  std::vector<std::string> all = {"run.node_name=\"node" + std::to_string(i) + "\"", "run.output_dir=\"" + out + "\"",
                                  "run.name=\"" + name + "\"", "run.progress=\"off\"",
                                  "cluster.listen=\"" + listen + "\"",
                                  "cluster.bootstrap=[\"127.0.0.1:" + std::to_string(port0) + "\"]",
                                  "cluster.token=\"" + name + "\""};
  all.insert(all.end(), sets.begin(), sets.end());
  for (const std::string& s : all) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

// Runs `chorus credential ARGS...` to its end; the printed cluster.issuer
// (empty, with a test failure, when it printed none).
inline std::string CredentialCommand(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"credential"};
  all.insert(all.end(), args.begin(), args.end());
  ChorusProcess p(all);
  EXPECT_EQ(ExitStatus(p, 30), 0) << p.Output();
  std::smatch m;
  const std::string out = p.Output();
  if (!std::regex_search(out, m, std::regex("issuer = \"([0-9a-f]{64})\""))) {
    ADD_FAILURE() << "no issuer in\n" << out;
    return "";
  }
  return m[1].str();
}

// An issuer in `dir`/issuer.toml and credentials `dir`/node<i>.cred for
// node0..node<n-1>; the --set values that make node i use its own.
inline std::vector<std::vector<std::string>> IssueNodeCredentials(const std::filesystem::path& dir, int n) {
  std::filesystem::create_directories(dir);
  const std::string issuer = CredentialCommand({"issuer", (dir / "issuer.toml").string()});
  std::vector<std::vector<std::string>> sets;
  for (int i = 0; i < n; ++i) {
    const std::string name = "node" + std::to_string(i);
    const std::string path = (dir / (name + ".cred")).string();
    (void)CredentialCommand({"issue", "--issuer", (dir / "issuer.toml").string(), "--name", name, path});
    sets.push_back({"cluster.issuer=\"" + issuer + "\"", "cluster.credential=\"" + path + "\""});
  }
  return sets;
}

// Short cluster timeouts as --set arguments (heartbeat 0.1 s, suspect 0.5 s, dead 1 s).
inline std::vector<std::string> FastClusterSets(const std::string& token) {
  return {"--set", "cluster.token=\"" + token + "\"",   "--set", "cluster.heartbeat_interval_s=0.1",
          "--set", "cluster.suspect_timeout_s=0.5",     "--set", "cluster.dead_timeout_s=1.0",
          "--set", "cluster.join_timeout_s=15",         "--set", "fabric.provider=\"tcp;ofi_rxm\""};
}

// Ports for nodes that start later, picked below the ephemeral range: a port
// from that range, merely bound and closed, could be taken by an outgoing
// connection (another node's probe) before its node binds it.
class PortPicker {
 public:
  explicit PortPicker(uint32_t seed) : rng_(seed) {
    int low = 32768;
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    range >> low;
    hi_ = std::clamp(low, 2048, 65535);
    lo_ = std::max(1024, hi_ - 10000);
  }

  // A port of 127.0.0.1 nothing is bound to now, not handed out before.
  uint16_t Next() {
    while (true) {
      const auto port = static_cast<uint16_t>(std::uniform_int_distribution<int>(lo_, hi_ - 1)(rng_));
      if (used_.count(port) || !Free(port)) continue;
      used_.insert(port);
      return port;
    }
  }

 private:
  static bool Free(uint16_t port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return ok;
  }

  std::mt19937 rng_;
  int lo_ = 0;
  int hi_ = 0;
  std::set<uint16_t> used_;
};

// A node's JSON output (summary.json, compare.json); a null value when it is
// missing or not JSON.
inline nlohmann::json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Metrics records of one node that trained steps (they carry a loss and a
// throughput); 0 while the file is missing.
inline int TrainedRecords(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("samples_per_s")) ++records;
  }
  return records;
}

// The lines of `output` that contain any of `needles` (e.g. "launch:" and
// "[node3]"): put before a whole launch's output in a failure message, they
// say what one node did where the whole output is cut short.
inline std::string LinesWith(const std::string& output, const std::vector<std::string>& needles) {
  std::istringstream in(output);
  std::string picked;
  for (std::string line; std::getline(in, line);) {
    if (std::any_of(needles.begin(), needles.end(),
                    [&](const std::string& n) { return line.find(n) != std::string::npos; })) {
      picked += line + "\n";
    }
  }
  return picked;
}

// Waits for each of `nodes` to end (300 s at most) and reads its summary.json
// under `run` (node i's in `run`/node<i>): by node, an object where it exited
// 0 and wrote one; a failure names any other (with `outputs`), and its entry
// is not an object.
inline std::vector<nlohmann::json> Summaries(std::vector<std::unique_ptr<ChorusProcess>>& nodes,
                                             const std::filesystem::path& run,
                                             const std::function<std::string()>& outputs) {
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::optional<int> status = nodes[i]->Wait(300);
    const bool ok = status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
    EXPECT_TRUE(ok) << "node" << i << "\n" << outputs();
    nlohmann::json summary = ReadJson(run / ("node" + std::to_string(i)) / "summary.json");
    EXPECT_TRUE(summary.is_object()) << "node" << i << " wrote no summary\n" << outputs();
    out.push_back(ok && summary.is_object() ? std::move(summary) : nlohmann::json());
  }
  return out;
}

// Every node of `summaries` trained (test accuracy above 0.70) to one model.
inline void ExpectOneTrainedModel(const std::vector<nlohmann::json>& summaries, const std::string& outputs) {
  std::string checksum;
  for (size_t i = 0; i < summaries.size(); ++i) {
    if (!summaries[i].is_object()) continue;  // Summaries failed it
    EXPECT_GT(summaries[i]["test_accuracy"].get<double>(), 0.70) << "node" << i;
    const std::string c = summaries[i]["parameter_checksum"].get<std::string>();
    if (checksum.empty()) checksum = c;
    EXPECT_EQ(c, checksum) << "node" << i << " ended with another model\n" << outputs;
  }
}

}  // namespace chorus::node::testing
