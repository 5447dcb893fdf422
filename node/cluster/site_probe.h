// Site probe: the members of a view measure the links between them and
// group themselves into sites by it (exchange.site_probe).
//
// Every pair of members meets once, in a round-robin schedule (n - 1 rounds
// of disjoint pairs, a bye for an odd member): the lower rank times
// `repeats` probes of a one-byte round trip followed by a transfer of
// `bytes` and a one-byte answer, and keeps the cheapest (a transfer costs a
// round trip plus bytes over bandwidth, so it sees both a far link's latency
// and a slow link's bandwidth). The costs are gathered by every member, and
// topologies::GroupByLinkCost groups them: near pairs across the largest gap
// of at least `min_gap` form a site. Every member computes the same groups
// from the same gathered costs, so the sites they install agree without
// another message.
//
// A member whose cluster.site is "auto" takes its group's name: the site
// most of the group's members named, else "site-<name of the group's lowest
// rank>". A named site is kept, and what the measurements contradict
// (members of one named site measured apart, two named sites measured as
// one) is reported.
//
// Bounded: each member sends at most (n - 1) x max_repeats x (ProbeBytes + 2)
// bytes (max_bytes_per_node, unless min_bytes needs more past ~64
// members), all by `deadline`; it takes n - 1 rounds of max_repeats x two round
// trips and a transfer each, one of them for a pair whose first probe took
// repeat_below_s or more. Must not: decide membership.
//
// Pairs measured before are not measured again (KnownLinks): a re-form after
// departures measures nothing, and one with joiners only the pairs with a
// joiner. A pair is known when both its members ended the same last probe
// (the members first gather which view each one's last probe was over; a
// member that restarted has none), so both hold that probe's gathered matrix
// and agree without another message; its lower rank supplies the value.
// A joiner (a member with no last probe) is measured against one member of
// each group of the others' last probe, its lowest rank (each member
// gathers its group's lowest rank with its last view), and against the
// other joiners; its pairs with the rest of a group take the cost it
// measured with that group's lowest rank (inferred: the members of a group
// are near each other, so a joiner is near all of them or none). So a
// joiner's probe takes rounds for the sites and the joiners, not for every
// member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/transport/transport.h"
#include "node/control/membership.h"
#include "topologies/link_groups.h"

namespace chorus::node {

// The cluster.site that asks for measured sites.
inline constexpr const char* kMeasuredSite = "auto";

struct SiteProbeOptions {
  size_t bytes = 512 * 1024;  // each probe's transfer, at most
  // What one member sends in all: with many members each transfer shrinks
  // to fit (ProbeBytes), but not under min_bytes (a transfer that still
  // takes a slow link's bandwidth well above a fast link's round trip).
  size_t max_bytes_per_node = size_t{24} << 20;
  size_t min_bytes = 64 * 1024;
  int repeats = 3;       // probes per pair at least; the cheapest counts
  // More probes, up to max_repeats, while the two cheapest so far differ by
  // more than `agree` times: a cheapest seen once may be a lull in the
  // noise of a busy host, and one seen twice is the link's.
  int max_repeats = 6;
  double agree = 1.25;
  // A probe that took this long is not repeated: repeats filter a fast
  // link's noise, and a slow link (another site's) is slow every time, so
  // its repeats would only hold up the rounds after it.
  double repeat_below_s = 0.05;
  double min_gap = 3.0;  // the least ratio between far and near links that makes sites
};

// Each probe's transfer among n members: bytes, or less so that a member's
// (n - 1) x max_repeats transfers fit max_bytes_per_node, and at least
// min_bytes (and never more than bytes).
size_t ProbeBytes(const SiteProbeOptions& options, int n);

// A pair this member started: its peer's rank, its cheapest probe, and how
// many probes it took.
struct PairProbe {
  int peer = -1;
  double cost_s = 0.0;
  int probes = 0;
};

struct SiteProbe {
  std::vector<double> cost_s;  // [i * n + j]: pair (i, j)'s cheapest probe, seconds (0 on the diagonal)
  topologies::LinkGroups groups;
  double seconds = 0.0;  // what the probe took here
  size_t bytes = 0;      // each probe's transfer (ProbeBytes)
  int measured_pairs = 0;  // pairs probed this time, in the whole view
  int known_pairs = 0;     // pairs taken from the members' last probe
  int inferred_pairs = 0;  // a joiner's pairs taken from its pair with the group's lowest rank
  std::vector<PairProbe> started;  // the pairs this member measured, in round order
};

// The links of this member's last probe that ended: its epoch, and every pair
// of its view by the members' identities (LinkIdentity).
struct KnownLinks {
  int64_t epoch = -1;  // -1: none yet
  // 16 bits of that view's random data salt: two parts of a split cluster
  // may probe under the same epoch number, never under the same view.
  int view_id = 0;
  std::map<std::pair<std::string, std::string>, double> cost_s;  // identities in order
  std::map<std::string, int> group;  // by identity: its group in that probe

  // Remembers `probe`, which ended over `view`.
  void Remember(const SiteProbe& probe, const MembershipView& view);
  // The pair's cost, when known (either order of the identities).
  std::optional<double> Find(const Member& a, const Member& b) const;
};

// A member as the links know it: its name and data-plane address, so that
// a process restarted under the name is measured afresh.
std::string LinkIdentity(const Member& member);

// Collective over `view`'s members, once the transport's peers are theirs.
// `tag_base`: three ranges of gossip::kTagsPerCollective for this view alone.
// `known`: this member's last probe (KnownLinks), or null to measure every pair.
[[nodiscard]] Result<SiteProbe> ProbeSites(gossip::Transport& transport, const MembershipView& view,
                                           const SiteProbeOptions& options, gossip::Tag tag_base, Deadline deadline,
                                           const KnownLinks* known = nullptr);

// Gives every member of `view` whose site is kMeasuredSite its group's name,
// and returns what the measurement contradicts in the named sites, one line
// each (empty when nothing).
std::vector<std::string> ApplyMeasuredSites(const topologies::LinkGroups& groups, MembershipView* view);

// "; measured here: <peer> <ms> ms (<probes> probes), ..." for the pairs
// this member started, or "" when it started none.
std::string MeasuredHere(const SiteProbe& probe, const MembershipView& view);

// The probe as summary.json and the logs give it: the groups by name, the
// gap, the cheapest and dearest pair cost, and the pairs this member
// started (measured_here).
nlohmann::json SiteProbeJson(const SiteProbe& probe, const MembershipView& view,
                             const std::vector<std::string>& contradictions);

}  // namespace chorus::node
