// Local multi-process launcher (see launcher.h).
//
// One thread: a poll() loop over the children's stdout/stderr pipes and a
// self-pipe written by the SIGINT/SIGTERM handler, waking at least every 100 ms
// to reap children (waitpid WNOHANG), and at each late node's start time to
// fork it. Nothing spins. POSIX errors become Status through ErrnoStatus.
#include "node/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/posix_io.h"
#include "node/config/config_describe.h"
#include "node/config/config_parse.h"
#include "node/run/stop_signals.h"

namespace chorus::node {
namespace {

// SIGINT/SIGTERM to forward (StopSignals), and SIGPIPE ignored, for the
// lifetime of one launch.
class SignalForwarding {
 public:
  Status Install() {
    CHORUS_RETURN_IF_ERROR(stop_.Install().WithContext("launch"));
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe_);
    installed_ = true;
    return Status::Ok();
  }
  ~SignalForwarding() {
    if (installed_) sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  int read_fd() const { return stop_.read_fd(); }

 private:
  StopSignals stop_;
  bool installed_ = false;
  struct sigaction old_pipe_ {};
};

// Our environment without kListenFdEnv (only node0 gets one, its own).
std::vector<std::string> ChildEnvironment() {
  const std::string drop = std::string(kListenFdEnv) + "=";
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::string_view(*e).substr(0, drop.size()) != drop) env.emplace_back(*e);
  }
  return env;
}

// Our own output being gone leaves nothing sensible to do: the error is dropped.
void WriteText(int fd, const std::string& text) { (void)WriteAll(fd, AsBytes(text), "launch output"); }

struct Stream {
  int fd = -1;
  int out_fd = 1;  // where prefixed lines go
  std::string partial;
};

struct Child {
  std::string name;
  int index = 0;
  const std::function<void(int, std::string_view)>* on_line = nullptr;
  pid_t pid = -1;
  Stream streams[2];
  bool reaped = false;
  int wait_status = 0;
  bool formed = false;
  // A late node (--join-after): forked at start_at unless cancelled first.
  bool late = false;
  bool pending = false;            // late and neither started nor cancelled yet
  Clock::time_point start_at{};
  std::string not_started;         // why it was never started ("" = it was, or is pending)
  bool not_started_fails = false;  // that counts as this node failing
};

constexpr std::string_view kFormedMarker = "epoch 0: members";

// Copies complete lines of `data` with the child's prefix; keeps the rest.
void EmitLines(Child& child, Stream& s, std::string_view data, bool flush) {
  s.partial.append(data);
  size_t start = 0;
  std::string out;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(s.partial.data() + start, nl - start);
    if (line.find(kFormedMarker) != std::string_view::npos) child.formed = true;
    if (child.on_line != nullptr && *child.on_line) (*child.on_line)(child.index, line);
    out += "[" + child.name + "] ";
    out.append(line);
    out += '\n';
  }
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) {
    if (s.partial.find(kFormedMarker) != std::string::npos) child.formed = true;
    out += "[" + child.name + "] " + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) WriteText(s.out_fd, out);
}

const std::string& NodeHost(const LaunchOptions& o, int index) {
  return o.node_hosts.empty() ? o.host : o.node_hosts[static_cast<size_t>(index)];
}

// The executable children run: when wrapped (ip netns exec ...), /proc/self/exe
// would name the wrapper, so it is resolved first.
std::string ResolvedExecutable(const LaunchOptions& o) {
  if (o.executable != "/proc/self/exe") return o.executable;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return o.executable;
  return std::string(buf, static_cast<size_t>(n));
}

bool IsWrapped(const LaunchOptions& o, int index) {
  return !o.node_wrappers.empty() && !o.node_wrappers[static_cast<size_t>(index)].empty();
}

// `restart_sets` (a restart: listen and bootstrap, then the caller's settings)
// come last, so they win over the first start's.
std::vector<std::string> ChildArgs(const LaunchOptions& o, int index, uint16_t port0,
                                   const std::vector<std::string>& restart_sets = {}) {
  const std::string bootstrap = NodeHost(o, 0) + ":" + std::to_string(port0);
  std::vector<std::string> args;
  if (IsWrapped(o, index)) {
    const auto& wrapper = o.node_wrappers[static_cast<size_t>(index)];
    args.insert(args.end(), wrapper.begin(), wrapper.end());
    args.push_back(ResolvedExecutable(o));
  } else {
    args.push_back("chorus");
  }
  args.push_back(o.command);
  if (!o.config_path.empty()) args.push_back(o.config_path);
  auto set = [&](const std::string& assignment) {
    args.push_back("--set");
    args.push_back(assignment);
  };
  set("cluster.listen=" + TomlQuote(index == 0 ? bootstrap : NodeHost(o, index) + ":0"));
  set("cluster.bootstrap=[" + TomlQuote(bootstrap) + "]");
  set("run.node_name=" + TomlQuote("node" + std::to_string(index)));
  set("cluster.min_nodes=" + std::to_string(o.num_nodes - static_cast<int>(o.join_after.size())));
  set("cluster.rank_hint=" + std::to_string(index));
  set("fabric.port=0");  // a file's fixed data port would be taken by every node of one host
  for (const std::string& s : o.overrides) set(s);
  for (const auto& [node, s] : o.node_overrides) {
    if (node == index) set(s);
  }
  for (const std::string& s : restart_sets) set(s);
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  return args;
}

// Starts one child running `args` in environment `env`: args[0] looked up on
// PATH when `wrapped`, else `o.executable`. Its lines go to out_fd / err_fd;
// `inherit_fd` (when >= 0) stays open in it across exec.
Status SpawnChild(const LaunchOptions& o, const std::vector<std::string>& args, bool wrapped,
                  const std::vector<std::string>& env, int inherit_fd, int out_fd, int err_fd,
                  Child& child) {
  const std::string program = wrapped ? args[0] : o.executable;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "launch: pipe for " + child.name);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return ErrnoStatus(err, "launch: pipe for " + child.name);
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return ErrnoStatus(err, "launch: fork for " + child.name);
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    setpgid(0, 0);  // a terminal's Ctrl-C reaches the launcher only; it forwards once
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (inherit_fd >= 0) fcntl(inherit_fd, F_SETFD, 0);
    if (wrapped) {
      execvpe(program.c_str(), argv.data(), envp.data());
    } else {
      execve(program.c_str(), argv.data(), envp.data());
    }
    const char msg[] = "launch: exec failed\n";
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  child.pid = pid;
  child.streams[0] = Stream{out_pipe[0], out_fd, {}};
  child.streams[1] = Stream{err_pipe[0], err_fd, {}};
  return Status::Ok();
}

std::string DescribeExit(const Child& c) {
  if (!c.not_started.empty()) return c.name + " was not started: " + c.not_started;
  if (WIFEXITED(c.wait_status)) return c.name + " exited with status " + std::to_string(WEXITSTATUS(c.wait_status));
  if (WIFSIGNALED(c.wait_status)) {
    const int sig = WTERMSIG(c.wait_status);
    return c.name + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return c.name + " ended with wait status " + std::to_string(c.wait_status);
}

int ExitCode(const Child& c) {
  if (!c.not_started.empty()) return -1;
  if (WIFEXITED(c.wait_status)) return WEXITSTATUS(c.wait_status);
  if (WIFSIGNALED(c.wait_status)) return 128 + WTERMSIG(c.wait_status);
  return 255;
}

// Where children's lines and launch's messages go: our stdout/stderr, or one file.
class OutputSink {
 public:
  Status Open(const std::string& path) {
    if (path.empty()) return Status::Ok();
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoStatus(errno, "launch: opening " + path);
    file_ = fdopen(dup(fd_), "a");
    if (file_ == nullptr) return ErrnoStatus(errno, "launch: opening " + path);
    setvbuf(file_, nullptr, _IOLBF, 0);
    return Status::Ok();
  }
  ~OutputSink() {
    if (file_ != nullptr) fclose(file_);
    if (fd_ >= 0) close(fd_);
  }
  int out_fd() const { return fd_ >= 0 ? fd_ : STDOUT_FILENO; }
  int err_fd() const { return fd_ >= 0 ? fd_ : STDERR_FILENO; }
  FILE* messages() const { return file_ != nullptr ? file_ : stderr; }

 private:
  int fd_ = -1;
  FILE* file_ = nullptr;
};

Status CheckLaunchOptions(const LaunchOptions& options) {
  if (options.num_nodes < 1) return InvalidArgument("launch: -n must be >= 1, got " + std::to_string(options.num_nodes));
  const size_t n = static_cast<size_t>(options.num_nodes);
  if ((!options.node_hosts.empty() && options.node_hosts.size() != n) ||
      (!options.node_wrappers.empty() && options.node_wrappers.size() != n)) {
    return InvalidArgument("launch: node_hosts / node_wrappers must name all " + std::to_string(n) + " nodes");
  }
  std::vector<bool> late(n, false);
  for (const auto& [node, seconds] : options.join_after) {
    if (node < 1 || node >= options.num_nodes || !(seconds >= 0)) {
      return InvalidArgument("launch: join_after {" + std::to_string(node) + ", " + std::to_string(seconds) +
                             "}: expected a node in 1.." + std::to_string(options.num_nodes - 1) +
                             " and seconds >= 0");
    }
    if (late[static_cast<size_t>(node)]) {
      return InvalidArgument("launch: join_after names node" + std::to_string(node) + " twice");
    }
    late[static_cast<size_t>(node)] = true;
  }
  return Status::Ok();
}

// One launch: its children, where their lines go, the signals it forwards,
// and what it saw (formation, the first failure, signals).
class LaunchRun final : public LaunchControl {
 public:
  LaunchRun(const LaunchOptions& options, LaunchResult* result)
      : options_(options), result_(result), children_(static_cast<size_t>(options.num_nodes)) {}

  int num_nodes() const override { return options_.num_nodes; }
  bool Running(int node) const override {
    const Child& c = children_.at(static_cast<size_t>(node));
    return c.pid > 0 && !c.reaped;
  }
  pid_t Pid(int node) const override { return children_.at(static_cast<size_t>(node)).pid; }
  bool Signal(int node, int sig) override { return Running(node) && kill(Pid(node), sig) == 0; }
  void SignalAll(int sig) override { SignalNodes(sig); }
  int WaitStatus(int node) const override { return children_.at(static_cast<size_t>(node)).wait_status; }
  bool Interrupted() const override { return first_signal_ != 0; }

  Status Restart(int node, const std::vector<std::string>& bootstrap,
                 const std::vector<std::string>& extra_sets) override {
    if (node < 0 || node >= options_.num_nodes) return InvalidArgument("launch: no node" + std::to_string(node));
    Child& c = children_[static_cast<size_t>(node)];
    if (Running(node) || c.pending) return FailedPrecondition("launch: " + c.name + " is running");
    for (Stream& s : c.streams) {
      if (s.fd >= 0) CloseStream(c, s);
    }
    std::string list;
    for (const std::string& address : bootstrap) list += (list.empty() ? "" : ", ") + TomlQuote(address);
    std::vector<std::string> sets = {"cluster.listen=" + TomlQuote(NodeHost(options_, node) + ":0"),
                                     "cluster.bootstrap=[" + list + "]"};
    sets.insert(sets.end(), extra_sets.begin(), extra_sets.end());
    const Status spawned = SpawnChild(options_, ChildArgs(options_, node, port0_, sets), IsWrapped(options_, node),
                                      env_, -1, sink_.out_fd(), sink_.err_fd(), c);
    if (!spawned.ok()) return spawned;
    c.reaped = false;
    c.wait_status = 0;
    c.not_started.clear();
    all_reaped_at_ = {};
    std::fprintf(messages_, "launch: restarted %s (pid %d)\n", c.name.c_str(), static_cast<int>(c.pid));
    return Status::Ok();
  }

  // node0's listening socket, the output sink and signal forwarding.
  Status Open() {
    // node0's socket, handed over when node0 runs in our network namespace. A
    // node0 in a namespace of its own must bind there: it only gets a port,
    // below the ephemeral range (PortBelowEphemeralRange), else one found
    // free here.
    const bool node0_here = !IsWrapped(options_, 0);
    const uint16_t below = node0_here ? 0 : PortBelowEphemeralRange();
    if (below != 0) {
      listen_fd_ = std::make_unique<OwnedFd>();
      port0_ = below;
    } else {
      Result<std::pair<int, uint16_t>> listener =
          ListenOnFreePort(node0_here ? NodeHost(options_, 0) : "127.0.0.1");
      if (!listener) return listener.error().WithContext("launch");
      listen_fd_ = std::make_unique<OwnedFd>(listener->first);
      port0_ = listener->second;
      if (!node0_here) listen_fd_->Reset();
    }
    CHORUS_RETURN_IF_ERROR(sink_.Open(options_.output_file));
    messages_ = sink_.messages();
    return signals_.Install();
  }

  // Forks every on-time node; the late ones wait for their time
  // (StartDueNodes). After a failed start the ones started are told to stop.
  void StartNodes() {
    env_ = ChildEnvironment();
    std::vector<std::string> env0 = env_;
    if (listen_fd_->get() >= 0) env0.push_back(std::string(kListenFdEnv) + "=" + std::to_string(listen_fd_->get()));
    start_ = Clock::now();
    for (int i = 0; i < options_.num_nodes; ++i) {
      Child& c = children_[static_cast<size_t>(i)];
      c.name = "node" + std::to_string(i);
      c.index = i;
      c.on_line = &options_.on_line;
    }
    for (const auto& [node, seconds] : options_.join_after) {
      Child& c = children_[static_cast<size_t>(node)];
      c.late = c.pending = true;
      c.start_at = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    }
    for (int i = 0; i < options_.num_nodes; ++i) {
      Child& c = children_[static_cast<size_t>(i)];
      if (c.late) continue;
      if (!Spawn(i, i == 0 ? env0 : env_)) break;
      std::fprintf(messages_, "launch: started %s (pid %d)\n", c.name.c_str(), static_cast<int>(c.pid));
    }
    if (!spawn_error_.ok()) return StopAfterFailedStart();
    for (const auto& [node, seconds] : options_.join_after) {
      std::fprintf(messages_, "launch: node%d starts %s s after launch and joins the running cluster (--join-after)\n",
                   node, SecondsText(seconds).c_str());
    }
  }

  // Until every child is reaped and its output read: starts late nodes when
  // their time comes, forwards signals, copies lines, reaps, stops the others
  // when one fails before epoch 0, and says when the cluster formed.
  Status Supervise() {
    while (true) {
      StartDueNodes();
      if (options_.on_tick) options_.on_tick(*this);
      PollSet set = CollectFds();
      if (AllDone(set)) break;
      const int ready = RetryOnEintr([&] { return poll(set.fds.data(), set.fds.size(), PollTimeoutMs()); });
      if (ready < 0) return ErrnoStatus(errno, "launch: poll");
      if (ready > 0) {
        if (set.fds[0].revents & POLLIN) ForwardSignals();
        CopyOutput(set);
      }
      ReapChildren();
      StopOthersIfOneFailedUnformed();
      AnnounceFormation();
    }
    return Status::Ok();
  }

  // Ok when every node exited 0, else Aborted saying which failed and why.
  Status Outcome() const {
    if (!spawn_error_.ok()) return spawn_error_;
    std::string failures;
    for (const Child& c : children_) {
      if (result_) result_->exit_codes.push_back(ExitCode(c));
      if (!c.not_started.empty() && !c.not_started_fails) continue;  // stopped before its time: said above
      if (ExitCode(c) != 0) failures += (failures.empty() ? "" : "; ") + DescribeExit(c);
    }
    if (failures.empty()) return Status::Ok();
    if (failed_unformed_ != nullptr) {
      return Aborted("launch: " + DescribeExit(*failed_unformed_) +
                     " before the cluster formed (its error is above); the other nodes were stopped");
    }
    // Every node stopped for the signal we forwarded (`chorus node`: after its
    // step, with a checkpoint): say so, and how to go on, not "node0 exited...".
    const bool all_stopped = first_signal_ != 0 && std::all_of(children_.begin(), children_.end(), [&](const Child& c) {
      return !c.not_started.empty() || ExitCode(c) == 128 + first_signal_;
    });
    if (all_stopped) {
      return Aborted("launch: stopped by " + SignalName(first_signal_) + ": all " + std::to_string(StartedNodes()) +
                     " nodes exited with status " + std::to_string(128 + first_signal_) +
                     "; the same launch with `-- --resume` continues the run from their checkpoints");
    }
    return Aborted("launch: " + failures);
  }

 private:
  // The signal pipe first, then every open stream of every child.
  struct PollSet {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, Stream*>> owners;
    bool all_reaped = true;
  };

  PollSet CollectFds() {
    PollSet set;
    set.fds.push_back({signals_.read_fd(), POLLIN, 0});
    set.owners.push_back({nullptr, nullptr});
    for (Child& c : children_) {
      set.all_reaped &= !c.pending && (c.reaped || c.pid <= 0);
      for (Stream& s : c.streams) {
        if (s.fd >= 0) {
          set.fds.push_back({s.fd, POLLIN, 0});
          set.owners.push_back({&c, &s});
        }
      }
    }
    return set;
  }

  // Every child reaped and its streams closed. A grandchild may hold a pipe
  // open: a second after the last child ended, its streams are closed anyway.
  bool AllDone(PollSet& set) {
    if (!set.all_reaped) return false;
    if (set.fds.size() == 1) return true;
    if (all_reaped_at_ == Clock::time_point{}) all_reaped_at_ = Clock::now();
    if (Clock::now() - all_reaped_at_ <= std::chrono::seconds(1)) return false;
    for (size_t i = 1; i < set.fds.size(); ++i) CloseStream(*set.owners[i].first, *set.owners[i].second);
    return true;
  }

  void CloseStream(Child& child, Stream& s) {
    EmitLines(child, s, {}, true);
    close(s.fd);
    s.fd = -1;
  }

  // The first signal goes to every node as it is; a second one kills them.
  void ForwardSignals() {
    unsigned char sigs[16];
    const ssize_t n = read(signals_.read_fd(), sigs, sizeof(sigs));
    for (ssize_t k = 0; k < n; ++k) {
      ++signals_seen_;
      if (first_signal_ == 0) first_signal_ = sigs[k];
      if (result_) result_->interrupted = true;
      const int sig = signals_seen_ > 1 ? SIGKILL : sigs[k];
      std::fprintf(messages_, "launch: forwarding %s to the nodes\n", SignalName(sig).c_str());
      SignalNodes(sig);
      CancelLateNodes("launch was stopped by " + SignalName(first_signal_) + " before its --join-after time",
                      /*fails=*/false);
    }
  }

  void CopyOutput(PollSet& set) {
    for (size_t i = 1; i < set.fds.size(); ++i) {
      if (!(set.fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = *set.owners[i].second;
      char buf[65536];
      const ssize_t n = RetryOnEintr([&] { return read(s.fd, buf, sizeof(buf)); });
      if (n > 0) {
        EmitLines(*set.owners[i].first, s, std::string_view(buf, static_cast<size_t>(n)), false);
      } else if (n == 0 || errno != EAGAIN) {
        CloseStream(*set.owners[i].first, s);
      }
    }
  }

  void ReapChildren() {
    for (Child& c : children_) {
      if (c.pid <= 0 || c.reaped) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.reaped = true;
        c.wait_status = status;
      }
    }
  }

  // Every on-time node is needed for epoch 0 (cluster.min_nodes is their
  // number): once one has failed before it, the others would wait out their
  // join timeout (a minute by default) for nothing.
  void StopOthersIfOneFailedUnformed() {
    if (announced_formed_ || failed_unformed_ != nullptr || signals_seen_ != 0) return;
    for (const Child& c : children_) {
      if (c.late || !c.reaped || c.formed || ExitCode(c) == 0) continue;
      failed_unformed_ = &c;
      std::fprintf(messages_, "launch: %s before the cluster formed; stopping the other nodes (epoch 0 needs all %d)\n",
                   DescribeExit(c).c_str(), OnTimeNodes());
      SignalNodes(SIGTERM);
      CancelLateNodes("the cluster did not form", /*fails=*/false);
      return;
    }
  }

  void AnnounceFormation() {
    if (announced_formed_) return;
    if (!std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.late || c.formed; })) return;
    announced_formed_ = true;
    const double s = std::chrono::duration<double>(Clock::now() - start_).count();
    if (result_) result_->formed_after_s = s;
    std::fprintf(messages_, "launch: all %d %snodes are in epoch 0, %.3f s after launch\n", OnTimeNodes(),
                 options_.join_after.empty() ? "" : "on-time ", s);
  }

  // Forks node `index` with `env`; false (spawn_error_ says why) when that failed.
  bool Spawn(int index, const std::vector<std::string>& env) {
    Child& c = children_[static_cast<size_t>(index)];
    spawn_error_ = SpawnChild(options_, ChildArgs(options_, index, port0_), IsWrapped(options_, index), env,
                              index == 0 ? listen_fd_->get() : -1, sink_.out_fd(), sink_.err_fd(), c);
    if (index == 0) listen_fd_->Reset();  // node0 has its own copy now (or failed to start)
    if (!spawn_error_.ok()) c.reaped = true;
    return spawn_error_.ok();
  }

  void StopAfterFailedStart() {
    SignalNodes(SIGTERM);
    CancelLateNodes("another node failed to start", /*fails=*/false);
  }

  // Forks the late nodes whose time has come. Once every on-time node has
  // exited (node0, the bootstrap, among them) there is no cluster to join:
  // the late nodes still waiting are never started, and count as failed.
  void StartDueNodes() {
    if (!spawn_error_.ok()) return;
    const bool any_pending = std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.pending; });
    if (!any_pending) return;
    if (std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.late || c.reaped; })) {
      return CancelLateNodes("the cluster finished before its --join-after time", /*fails=*/true);
    }
    if (!announced_formed_) return;  // a late node joins the cluster, never forms it
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < options_.num_nodes; ++i) {
      Child& c = children_[static_cast<size_t>(i)];
      if (!c.pending || c.start_at > now) continue;
      c.pending = false;
      if (!Spawn(i, env_)) return StopAfterFailedStart();
      std::fprintf(messages_, "launch: started %s (pid %d), %.3f s after launch (--join-after)\n", c.name.c_str(),
                   static_cast<int>(c.pid), std::chrono::duration<double>(now - start_).count());
    }
  }

  // The late nodes still waiting will never start, for `reason`.
  void CancelLateNodes(const std::string& reason, bool fails) {
    for (Child& c : children_) {
      if (!c.pending) continue;
      c.pending = false;
      c.not_started = reason;
      c.not_started_fails = fails;
      std::fprintf(messages_, "launch: %s\n", DescribeExit(c).c_str());
    }
  }

  // 100 ms (to reap children), or until the next late node is due if sooner
  // (once the cluster formed: before, no late node starts).
  int PollTimeoutMs() const {
    int64_t ms = 100;
    const Clock::time_point now = Clock::now();
    for (const Child& c : children_) {
      if (!c.pending || !announced_formed_) continue;
      ms = std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(c.start_at - now).count(), 0, ms);
    }
    return static_cast<int>(ms);
  }

  int OnTimeNodes() const { return options_.num_nodes - static_cast<int>(options_.join_after.size()); }
  int StartedNodes() const {
    return static_cast<int>(
        std::count_if(children_.begin(), children_.end(), [](const Child& c) { return c.not_started.empty(); }));
  }

  // `sig` to every node still running.
  void SignalNodes(int sig) {
    for (Child& c : children_) {
      if (c.pid > 0 && !c.reaped) kill(c.pid, sig);
    }
  }

  const LaunchOptions& options_;
  LaunchResult* result_;
  std::vector<Child> children_;
  std::unique_ptr<OwnedFd> listen_fd_;
  uint16_t port0_ = 0;
  OutputSink sink_;
  FILE* messages_ = stderr;
  SignalForwarding signals_;
  std::vector<std::string> env_;  // every child's but node0's
  Clock::time_point start_{};
  Status spawn_error_;
  bool announced_formed_ = false;
  const Child* failed_unformed_ = nullptr;  // failed before epoch 0: the others were told to stop
  int signals_seen_ = 0;
  int first_signal_ = 0;  // the first one forwarded
  Clock::time_point all_reaped_at_{};
};

}  // namespace

Result<std::pair<int, std::string>> ParseNodeSet(std::string_view text, int num_nodes) {
  const std::string what = "--node-set '" + std::string(text) + "': expected NODE:KEY=VALUE with NODE in 0.." +
                           std::to_string(num_nodes - 1);
  const size_t colon = text.find(':');
  if (colon == 0 || colon == std::string_view::npos || text.find('=', colon) == std::string_view::npos) {
    return Err(InvalidArgument(what));
  }
  int node = -1;
  const std::string_view digits = text.substr(0, colon);
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
  if (error != std::errc() || end != digits.data() + digits.size() || node < 0 || node >= num_nodes) {
    return Err(InvalidArgument(what));
  }
  return std::pair<int, std::string>{node, std::string(text.substr(colon + 1))};
}

Result<std::pair<int, double>> ParseJoinAfter(std::string_view text, int num_nodes) {
  const std::string what = "--join-after '" + std::string(text) + "': expected NODE:SECONDS with NODE in 1.." +
                           std::to_string(num_nodes - 1) + " (node0 holds the bootstrap port) and SECONDS >= 0";
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return Err(InvalidArgument(what));
  int node = -1;
  const std::string_view digits = text.substr(0, colon);
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || node < 1 ||
      node >= num_nodes) {
    return Err(InvalidArgument(what));
  }
  const std::string_view seconds_text = text.substr(colon + 1);
  double seconds = -1;
  const auto [seconds_end, seconds_error] =
      std::from_chars(seconds_text.data(), seconds_text.data() + seconds_text.size(), seconds);
  if (seconds_error != std::errc() || seconds_end != seconds_text.data() + seconds_text.size() ||
      !std::isfinite(seconds) || seconds < 0) {
    return Err(InvalidArgument(what));
  }
  return std::pair<int, double>{node, seconds};
}

Status Launch(const LaunchOptions& options, LaunchResult* result) {
  CHORUS_RETURN_IF_ERROR(CheckLaunchOptions(options));
  LaunchRun run(options, result);
  CHORUS_RETURN_IF_ERROR(run.Open());
  run.StartNodes();
  CHORUS_RETURN_IF_ERROR(run.Supervise());
  return run.Outcome();
}

}  // namespace chorus::node
