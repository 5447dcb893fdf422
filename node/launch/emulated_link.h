// Emulated links for local clusters: one network namespace per node, joined by
// veth pairs to a bridge in a "switch" namespace, shaped with tc. Node i gets
// address 10.213.<k>.<i+1>/24 on `eth0` inside namespace chorus<k>n<i>;
// `chorus compare` runs node i under `ip netns exec chorus<k>n<i>` and makes it
// listen there, so its traffic crosses a link of the given bandwidth (both
// directions: tbf on the node's side and the switch's side of its veth) and,
// where the kernel has sch_netem, the given latency (half on each side). A
// shape of 0 bytes/s leaves the links unshaped (namespaces only: `chorus chaos`
// partitions nodes through them).
//
// Sites: with a SiteLinks, each site has its own bridge in the switch
// namespace, its nodes' veths join it, and each site bridge reaches a core
// bridge over an uplink (a veth pair inside the switch namespace) shaped with
// the site link's bandwidth on both ends and half its latency on each end:
// traffic inside a site crosses the node links only; traffic between two
// sites crosses both sites' uplinks too (latency the site link's one-way
// latency, bandwidth the site link's, shared by everything a site sends out).
// Without sch_netem the uplinks' latency comes from a DelayForwarder in the
// switch namespace (delay_forwarder.h); the nodes' own links then have
// bandwidth only.
//
// Root only (CAP_NET_ADMIN); Available() says why not. Everything created is
// removed by the destructor (deleting a namespace deletes its veth ends), and a
// failed Create removes what it made. Needs `ip` and `tc` from iproute2.
//
// Must not: touch the host's own namespace beyond creating and deleting
// namespaces (no interface of the root namespace is created or changed).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "node/launch/delay_forwarder.h"

namespace chorus::node {

struct LinkShape {
  double bytes_per_s = 0.0;  // 0: unshaped (and latency_s must be 0)
  double latency_s = 0.0;    // one-way; 0 = none
};

// Nodes grouped into sites with a slower link between sites (see above).
struct SiteLinks {
  std::vector<int> site_of_node;  // [node] -> site, 0..sites-1, every site non-empty
  LinkShape between;              // bytes_per_s > 0
};

class EmulatedLink {
 public:
  // Ok when this process may create namespaces and shape links here; otherwise
  // why not (not root, no `ip`/`tc`, namespaces refused).
  [[nodiscard]] static Status Available();

  // `shape`: each node's own link. `sites`: none (one switch), or the sites
  // and the link between them.
  [[nodiscard]] static Result<std::unique_ptr<EmulatedLink>> Create(int nodes, const LinkShape& shape,
                                                                    const SiteLinks* sites = nullptr);
  ~EmulatedLink();
  EmulatedLink(const EmulatedLink&) = delete;
  EmulatedLink& operator=(const EmulatedLink&) = delete;

  // Node i's IPv4 address and the argv prefix that runs a command in its namespace.
  const std::string& host(int i) const { return hosts_[static_cast<size_t>(i)]; }
  std::vector<std::string> Wrapper(int i) const;
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::string& ns(int i) const { return namespaces_[static_cast<size_t>(i) + 1]; }

  // Cuts node i off from every other node (its switch-side veth goes down:
  // packets both ways are dropped, connects time out rather than fail), and
  // joins it again. Cutting a cut node, or healing a joined one, is a no-op.
  [[nodiscard]] Status Cut(int i);
  [[nodiscard]] Status Heal(int i);

  // Whether every latency asked for is emulated: the nodes' own links need
  // sch_netem (without it their bandwidth is shaped, their latency is not);
  // the link between sites uses netem, else a DelayForwarder.
  bool latency_emulated() const { return netem_ || shape_.latency_s == 0.0; }
  bool site_latency_emulated() const { return netem_ || !forwarders_.empty() || between_.latency_s == 0.0; }
  // "4 nodes, 1 Gbit/s, 1 ms one-way (netem)" or "... latency not emulated: ...".
  std::string Describe() const;

 private:
  EmulatedLink() = default;
  Status Build(int nodes, const LinkShape& shape, const SiteLinks* sites);
  // Shapes `dev` in namespace `ns` to `shape` (tbf, under netem when
  // shape.latency_s > 0 and the kernel has it); `latency_share` of the
  // one-way latency goes on this end.
  Status ShapeDevice(const std::string& ns, const std::string& dev, const LinkShape& shape, double latency_share);

  Status SetSwitchPort(int i, bool up);
  // Whether tc takes netem here (netem_; latency_note_ says why not).
  void ProbeNetem();
  Status BuildUplink(int site);

  std::string switch_ns_;
  int index_ = 0;  // k in the names above
  std::vector<std::string> namespaces_;  // created, in order; removed in reverse
  std::vector<std::string> hosts_;
  LinkShape shape_;
  std::vector<int> site_of_node_;  // empty: one switch
  LinkShape between_;
  bool netem_ = false;
  std::string latency_note_;
  std::vector<std::unique_ptr<DelayForwarder>> forwarders_;  // site uplinks' latency without netem
};

// Runs `argv` (argv[0] looked up on PATH), waits, and returns its stdout; a
// non-zero exit is an error quoting the command and its stderr.
[[nodiscard]] Result<std::string> RunCommand(const std::vector<std::string>& argv);

}  // namespace chorus::node
