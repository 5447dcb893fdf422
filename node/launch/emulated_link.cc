// Network namespaces + veth + tc for emulated links (see emulated_link.h).
#include "node/launch/emulated_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>

#include "common/posix_io.h"

namespace chorus::node {
namespace {

std::string JoinArgs(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string TcRate(double bytes_per_s) {
  // tc takes bits per second; whole bits are plenty.
  return std::to_string(static_cast<long long>(bytes_per_s * 8.0)) + "bit";
}

std::string TcTime(double seconds) {
  return std::to_string(static_cast<long long>(seconds * 1e6)) + "us";
}

// A process-unique 0..255 index, so two comparisons at once do not collide.
int NextIndex() {
  static std::atomic<int> counter{0};
  return (static_cast<int>(getpid()) * 7 + counter.fetch_add(1)) % 250;
}

}  // namespace

Result<std::string> RunCommand(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Err(ErrnoStatus(errno, "pipe for " + argv[0]));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Err(ErrnoStatus(err, "pipe for " + argv[0]));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return Err(ErrnoStatus(err, "fork for " + argv[0]));
  }
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string out, err;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (RetryOnEintr([&] { return poll(fds, 2, -1); }) < 0) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = RetryOnEintr([&] { return read(fds[k].fd, buf, sizeof(buf)); });
      if (n > 0) {
        (k == 0 ? out : err).append(buf, static_cast<size_t>(n));
      } else {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  RetryOnEintr([&] { return waitpid(pid, &status, 0); });
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && err.empty()) err = "not found on PATH";
  return Err(Unavailable("`" + JoinArgs(argv) + "` failed" +
                         (WIFEXITED(status) ? " (exit " + std::to_string(WEXITSTATUS(status)) + ")" : "") +
                         (err.empty() ? "" : ": " + err)));
}

namespace {

// RunCommand for a step of building links, whose output nobody reads.
Status Run(const std::vector<std::string>& argv) { return StatusOf(RunCommand(argv)); }

}  // namespace

Status EmulatedLink::Available() {
  if (geteuid() != 0) {
    return PermissionDenied("link emulation needs root (network namespaces and tc); running as uid " +
                            std::to_string(geteuid()));
  }
  for (const char* tool : {"ip", "tc"}) {
    Result<std::string> r = RunCommand({tool, "-V"});
    if (!r) return Unavailable(std::string("link emulation needs `") + tool + "` (Debian package iproute2): " +
                               r.error().message());
  }
  const std::string probe = "chorusprobe" + std::to_string(getpid());
  Result<std::string> add = RunCommand({"ip", "netns", "add", probe});
  if (!add) return Unavailable("cannot create network namespaces here: " + add.error().message());
  (void)RunCommand({"ip", "netns", "del", probe});
  return Status::Ok();
}

namespace {

Status CheckSites(int nodes, const SiteLinks& sites) {
  if (static_cast<int>(sites.site_of_node.size()) != nodes) {
    return InvalidArgument("link emulation: sites place " + std::to_string(sites.site_of_node.size()) + " nodes of " +
                           std::to_string(nodes));
  }
  const int num_sites = 1 + *std::max_element(sites.site_of_node.begin(), sites.site_of_node.end());
  if (num_sites > 99) return InvalidArgument("link emulation: at most 99 sites");
  std::vector<int> count(static_cast<size_t>(num_sites), 0);
  for (int i = 0; i < nodes; ++i) {
    const int s = sites.site_of_node[static_cast<size_t>(i)];
    if (s < 0) return InvalidArgument("link emulation: node " + std::to_string(i) + " has site " + std::to_string(s));
    ++count[static_cast<size_t>(s)];
  }
  for (int s = 0; s < num_sites; ++s) {
    if (count[static_cast<size_t>(s)] == 0) {
      return InvalidArgument("link emulation: site " + std::to_string(s) + " has no node (sites are 0.." +
                             std::to_string(num_sites - 1) + ")");
    }
  }
  if (!(sites.between.bytes_per_s > 0.0) || !(sites.between.latency_s >= 0.0)) {
    return InvalidArgument("link emulation: the link between sites needs a bandwidth > 0");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<EmulatedLink>> EmulatedLink::Create(int nodes, const LinkShape& shape, const SiteLinks* sites) {
  if (nodes < 1 || nodes > 250) return Err(InvalidArgument("link emulation: nodes must be in 1..250"));
  if (!(shape.bytes_per_s >= 0.0) || (shape.bytes_per_s == 0.0 && shape.latency_s != 0.0)) {
    return Err(InvalidArgument("link emulation: bandwidth must be > 0 (or 0, unshaped, without latency)"));
  }
  if (sites != nullptr) CHORUS_RETURN_IF_ERROR(CheckSites(nodes, *sites));
  std::unique_ptr<EmulatedLink> link(new EmulatedLink());
  Status s = link->Build(nodes, shape, sites);
  if (!s.ok()) return Err(s);  // the destructor removes what was made
  return link;
}

void EmulatedLink::ProbeNetem() {
  // On a veth pair, which the links are made of anyway (a kernel may lack dummy devices).
  const std::string dev = "c" + std::to_string(index_) + "p0", peer = "c" + std::to_string(index_) + "p1";
  Result<std::string> r = RunCommand({"ip", "-n", switch_ns_, "link", "add", dev, "type", "veth", "peer", "name", peer});
  if (r) {
    r = RunCommand({"tc", "-n", switch_ns_, "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"});
    (void)RunCommand({"ip", "-n", switch_ns_, "link", "del", dev});
  }
  netem_ = r.has_value();
  if (!netem_) latency_note_ = "latency not emulated: " + r.error().message() + " (this kernel has no sch_netem)";
}

Status EmulatedLink::ShapeDevice(const std::string& ns, const std::string& dev, const LinkShape& shape,
                                 double latency_share) {
  // tbf needs a bucket of at least one maximal (GSO) packet; 2 ms of traffic
  // keeps the average rate exact without large bursts.
  const std::string burst = std::to_string(static_cast<long long>(std::max(shape.bytes_per_s * 0.002, 131072.0)));
  if (shape.latency_s > 0.0 && netem_) {
    CHORUS_RETURN_IF_ERROR(Run({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay",
                                TcTime(shape.latency_s * latency_share), "limit", "100000"}));
    return Run({"tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "tbf", "rate",
                TcRate(shape.bytes_per_s), "burst", burst, "latency", "100ms"});
  }
  return Run({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", TcRate(shape.bytes_per_s), "burst",
              burst, "latency", "100ms"});
}

// A site's uplink from its bridge to the core bridge br0: one veth pair
// shaped with the site link (half its latency on each end, under netem), or,
// without netem and with a latency, two veth pairs whose loose ends a
// DelayForwarder joins with half the latency each way (bandwidth still on
// the bridge ends).
Status EmulatedLink::BuildUplink(int s) {
  const std::string k = std::to_string(index_), bridge = "site" + std::to_string(s);
  const std::string site_end = "c" + k + "u" + std::to_string(s), core_end = "c" + k + "w" + std::to_string(s);
  const bool forward = between_.latency_s > 0.0 && !netem_;
  const std::string site_loose = "c" + k + "x" + std::to_string(s), core_loose = "c" + k + "y" + std::to_string(s);
  CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "add", site_end, "type", "veth", "peer", "name",
                              forward ? site_loose : core_end}));
  if (forward) {
    CHORUS_RETURN_IF_ERROR(
        Run({"ip", "-n", switch_ns_, "link", "add", core_end, "type", "veth", "peer", "name", core_loose}));
    for (const std::string& loose : {site_loose, core_loose}) {
      CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "set", loose, "up"}));
    }
  }
  CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "set", site_end, "master", bridge, "up"}));
  CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "set", core_end, "master", "br0", "up"}));
  // Out of the site on site_end, into the other site on its core_end: half the latency each.
  CHORUS_RETURN_IF_ERROR(ShapeDevice(switch_ns_, site_end, between_, 0.5));
  CHORUS_RETURN_IF_ERROR(ShapeDevice(switch_ns_, core_end, between_, 0.5));
  if (!forward) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<DelayForwarder> f,
                          DelayForwarder::Start(switch_ns_, site_loose, core_loose, between_.latency_s * 0.5,
                                                between_.latency_s * 0.5));
  forwarders_.push_back(std::move(f));
  return Status::Ok();
}

Status EmulatedLink::Build(int nodes, const LinkShape& shape, const SiteLinks* sites) {
  shape_ = shape;
  const int k = NextIndex();
  index_ = k;
  const std::string prefix = "chorus" + std::to_string(k);
  switch_ns_ = prefix + "sw";
  // A leftover from a killed run with the same index goes first.
  (void)RunCommand({"ip", "netns", "del", switch_ns_});
  CHORUS_RETURN_IF_ERROR(Run({"ip", "netns", "add", switch_ns_}));
  namespaces_.push_back(switch_ns_);
  auto add_bridge = [&](const std::string& name) -> Status {
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "add", name, "type", "bridge"}));
    return Run({"ip", "-n", switch_ns_, "link", "set", name, "up"});
  };
  CHORUS_RETURN_IF_ERROR(add_bridge("br0"));
  if (shape.latency_s > 0.0 || (sites != nullptr && sites->between.latency_s > 0.0)) ProbeNetem();

  // Each site's bridge, and its uplink to the core bridge br0.
  std::vector<std::string> node_bridge(static_cast<size_t>(nodes), "br0");
  if (sites != nullptr) {
    site_of_node_ = sites->site_of_node;
    between_ = sites->between;
    const int num_sites = 1 + *std::max_element(site_of_node_.begin(), site_of_node_.end());
    for (int s = 0; s < num_sites; ++s) {
      CHORUS_RETURN_IF_ERROR(add_bridge("site" + std::to_string(s)));
      CHORUS_RETURN_IF_ERROR(BuildUplink(s));
    }
    for (int i = 0; i < nodes; ++i) node_bridge[static_cast<size_t>(i)] = "site" + std::to_string(site_of_node_[i]);
  }

  for (int i = 0; i < nodes; ++i) {
    const std::string ns = prefix + "n" + std::to_string(i);
    const std::string node_dev = "c" + std::to_string(k) + "n" + std::to_string(i);
    const std::string switch_dev = "c" + std::to_string(k) + "s" + std::to_string(i);
    const std::string host = "10.213." + std::to_string(k) + "." + std::to_string(i + 1);
    (void)RunCommand({"ip", "netns", "del", ns});
    CHORUS_RETURN_IF_ERROR(Run({"ip", "netns", "add", ns}));
    namespaces_.push_back(ns);
    // Created inside the switch namespace, so the root namespace never sees it.
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "add", switch_dev, "type", "veth", "peer", "name",
                                node_dev, "netns", ns}));
    CHORUS_RETURN_IF_ERROR(
        Run({"ip", "-n", switch_ns_, "link", "set", switch_dev, "master", node_bridge[static_cast<size_t>(i)], "up"}));
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", node_dev, "name", "eth0"}));
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", ns, "addr", "add", host + "/24", "dev", "eth0"}));
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", "eth0", "up"}));
    CHORUS_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", "lo", "up"}));
    if (shape.bytes_per_s > 0.0) {
      CHORUS_RETURN_IF_ERROR(ShapeDevice(ns, "eth0", shape, 0.5));
      CHORUS_RETURN_IF_ERROR(ShapeDevice(switch_ns_, switch_dev, shape, 0.5));
    }
    hosts_.push_back(host);
  }
  return Status::Ok();
}

EmulatedLink::~EmulatedLink() {
  forwarders_.clear();  // their threads stop before their interfaces go
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    Result<std::string> r = RunCommand({"ip", "netns", "del", *it});
    if (!r) std::fprintf(stderr, "link emulation: %s\n", r.error().message().c_str());
  }
}

Status EmulatedLink::SetSwitchPort(int i, bool up) {
  if (i < 0 || i >= static_cast<int>(hosts_.size())) {
    return InvalidArgument("link emulation: no node " + std::to_string(i));
  }
  const std::string dev = "c" + std::to_string(index_) + "s" + std::to_string(i);
  return StatusOf(RunCommand({"ip", "-n", switch_ns_, "link", "set", dev, up ? "up" : "down"}));
}

Status EmulatedLink::Cut(int i) { return SetSwitchPort(i, false); }

Status EmulatedLink::Heal(int i) { return SetSwitchPort(i, true); }

std::vector<std::string> EmulatedLink::Wrapper(int i) const {
  return {"ip", "netns", "exec", namespaces_[static_cast<size_t>(i) + 1]};
}

std::string EmulatedLink::Describe() const {
  char rate[64];
  std::snprintf(rate, sizeof(rate), "%.3g Gbit/s", shape_.bytes_per_s * 8.0 / 1e9);
  std::string s = std::to_string(hosts_.size()) + " nodes in network namespaces, " +
                  (shape_.bytes_per_s > 0.0 ? std::string(rate) + " per node" : std::string("unshaped"));
  if (shape_.latency_s > 0.0) {
    char lat[64];
    std::snprintf(lat, sizeof(lat), "%.3g ms", shape_.latency_s * 1e3);
    s += netem_ ? std::string(", ") + lat + " one-way (netem)" : "; " + latency_note_ + ", bandwidth only";
  }
  if (!site_of_node_.empty()) {
    const int num_sites = 1 + *std::max_element(site_of_node_.begin(), site_of_node_.end());
    char between[96];
    std::snprintf(between, sizeof(between), "%.3g Mbit/s, %.3g ms one-way", between_.bytes_per_s * 8.0 / 1e6,
                  between_.latency_s * 1e3);
    s += "; " + std::to_string(num_sites) + " sites joined by " + between;
    if (between_.latency_s > 0.0 && !netem_) s += " (the latency by a delay in user space)";
  }
  return s;
}

}  // namespace chorus::node
