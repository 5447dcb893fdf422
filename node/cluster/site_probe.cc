// Site probe (see site_probe.h).
#include "node/cluster/site_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "gossip/collectives/collective.h"
#include "node/cluster/live_state.h"

namespace chorus::node {
namespace {

// The partner of `rank` in round `round` of a round robin over `m` (even)
// places: pairs sum to 2 * round modulo m - 1, and the one left over meets
// place m - 1. A partner at or past the real member count is a bye.
int Partner(int rank, int round, int m) {
  const int odd = m - 1;
  if (rank == odd) return round;
  if (rank == round % odd) return odd;
  return ((2 * round - rank) % odd + odd) % odd;
}

double Seconds(std::chrono::steady_clock::time_point from) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

// What a ping asks of the answerer.
enum : uint8_t { kPingDone = 0, kPingProbe = 1, kPingReady = 2 };

// The most probes a pair takes.
int MostProbes(const SiteProbeOptions& o) { return std::max({1, o.repeats, o.max_repeats}); }

// The cheapest and second cheapest of the probes so far.
struct TwoCheapest {
  double first = std::numeric_limits<double>::infinity();
  double second = std::numeric_limits<double>::infinity();
  void Add(double took) {
    if (took < first) {
      second = first;
      first = took;
    } else if (took < second) {
      second = took;
    }
  }
  // Two probes, the dearer of them within `agree` times the cheaper.
  bool Agree(double agree) const { return second <= agree * first; }
};

// One pair's probes, from the lower rank: the cheapest of `repeats`, or of
// more while the two cheapest disagree (up to max_repeats), or of fewer
// when one took repeat_below_s or more. An untimed round trip first
// waits until the answerer has finished its previous round (a pair across
// sites there) and has the connection up, so the first timed probe
// measures the link alone; each probe then starts with a ping of
// kPingProbe, and a ping of kPingDone ends them.
Result<PairProbe> Initiate(gossip::Transport& t, gossip::Rank peer, gossip::Tag tag, const SiteProbeOptions& o,
                           std::vector<std::byte>& payload, Deadline deadline) {
  static const std::byte kReady[1] = {std::byte{kPingReady}};
  static const std::byte kProbe[1] = {std::byte{kPingProbe}};
  static const std::byte kDone[1] = {std::byte{kPingDone}};
  std::byte one[1] = {std::byte{1}};
  std::vector<gossip::RequestPtr> sends;
  CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr ready, t.Isend(peer, tag + 0, kReady));
  sends.push_back(std::move(ready));
  CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(peer, tag + 1, one, deadline)));
  PairProbe pair{static_cast<int>(peer), 0.0, 0};
  TwoCheapest cheapest;
  for (int k = 0; k < MostProbes(o); ++k) {
    if (k >= o.repeats && cheapest.Agree(o.agree)) break;
    const auto start = std::chrono::steady_clock::now();
    CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr ping, t.Isend(peer, tag + 0, kProbe));
    sends.push_back(std::move(ping));
    CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(peer, tag + 1, one, deadline)));
    CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr data, t.Isend(peer, tag + 2, payload));
    sends.push_back(std::move(data));
    CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(peer, tag + 3, one, deadline)));
    const double took = Seconds(start);
    cheapest.Add(took);
    pair.cost_s = cheapest.first;
    ++pair.probes;
    if (took >= o.repeat_below_s) break;
  }
  CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr done, t.Isend(peer, tag + 0, kDone));
  sends.push_back(std::move(done));
  CHORUS_RETURN_IF_ERROR(gossip::WaitAll(sends, deadline));
  return pair;
}

// The higher rank's side: answer the ready ping and each probe until the
// ping that ends them.
Status Answer(gossip::Transport& t, gossip::Rank peer, gossip::Tag tag, const SiteProbeOptions& o,
              std::vector<std::byte>& payload, Deadline deadline) {
  static const std::byte kAnswer[1] = {std::byte{1}};
  std::byte ping[1] = {std::byte{kPingProbe}};
  std::vector<gossip::RequestPtr> sends;
  int pings = 0;
  while (true) {
    CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(peer, tag + 0, ping, deadline)));
    const auto what = static_cast<uint8_t>(ping[0]);
    if (what == kPingDone) break;
    if (++pings > MostProbes(o) + 1 || what > kPingReady) {
      CHORUS_RETURN_IF_ERROR(gossip::WaitAll(sends, deadline));
      return DataLoss("site probe: ping " + std::to_string(pings) + " (" + std::to_string(what) + "), more than " +
                      std::to_string(MostProbes(o)) + " probes after the ready one");
    }
    CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr pong, t.Isend(peer, tag + 1, kAnswer));
    sends.push_back(std::move(pong));
    if (what == kPingReady) continue;
    CHORUS_RETURN_IF_ERROR(StatusOf(t.Recv(peer, tag + 2, payload, deadline)));
    CHORUS_ASSIGN_OR_RETURN(gossip::RequestPtr ack, t.Isend(peer, tag + 3, kAnswer));
    sends.push_back(std::move(ack));
  }
  return gossip::WaitAll(sends, deadline);
}

// The name a measured site takes: the site most of its members named
// (ties: the first in order), else "site-" and its lowest rank's name.
std::string GroupName(const MembershipView& view, const topologies::LinkGroups& groups, int group) {
  std::map<std::string, int> named;
  std::string lowest;
  for (int r = 0; r < view.size(); ++r) {
    if (groups.group_of_rank[static_cast<size_t>(r)] != group) continue;
    if (lowest.empty()) lowest = view.members[r].name;
    if (view.members[r].site != kMeasuredSite) ++named[view.members[r].SiteKey()];
  }
  std::string best;
  int votes = 0;
  for (const auto& [site, count] : named) {
    if (count > votes) {
      best = site;
      votes = count;
    }
  }
  return votes > 0 ? best : "site-" + lowest;
}

// 16 bits of the view's random data salt (0 for a view without one).
int ViewId(const MembershipView& view) {
  if (view.data_salt.size() < 2) return 0;
  return (static_cast<int>(view.data_salt[0]) << 8) | static_cast<int>(view.data_salt[1]);
}

}  // namespace

size_t ProbeBytes(const SiteProbeOptions& options, int n) {
  const size_t transfers = static_cast<size_t>(std::max(1, n - 1)) * static_cast<size_t>(MostProbes(options));
  const size_t fit = options.max_bytes_per_node / transfers;
  return std::min(options.bytes, std::max(options.min_bytes, fit));
}

std::string LinkIdentity(const Member& member) {
  static const char kHex[] = "0123456789abcdef";
  std::string id = member.name + "@";
  for (uint8_t b : member.data_address) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

void KnownLinks::Remember(const SiteProbe& probe, const MembershipView& view) {
  const int n = view.size();
  epoch = static_cast<int64_t>(view.epoch);
  view_id = ViewId(view);
  cost_s.clear();
  group.clear();
  for (int i = 0; i < n; ++i) {
    group[LinkIdentity(view.members[i])] = probe.groups.group_of_rank[static_cast<size_t>(i)];
    for (int j = i + 1; j < n; ++j) {
      std::pair<std::string, std::string> key{LinkIdentity(view.members[i]), LinkIdentity(view.members[j])};
      if (key.second < key.first) std::swap(key.first, key.second);
      cost_s[key] = probe.cost_s[static_cast<size_t>(i * n + j)];
    }
  }
}

std::optional<double> KnownLinks::Find(const Member& a, const Member& b) const {
  std::pair<std::string, std::string> key{LinkIdentity(a), LinkIdentity(b)};
  if (key.second < key.first) std::swap(key.first, key.second);
  auto it = cost_s.find(key);
  if (it == cost_s.end()) return std::nullopt;
  return it->second;
}

namespace {

// Which pairs of a view a probe measures, from every member's gathered last
// probe: (epoch, view id, its group's lowest rank in this view or -1), the
// same on every member.
class PairPlan {
 public:
  explicit PairPlan(std::vector<float> last) : last_(std::move(last)) {}
  // Both members ended the same last probe.
  bool Known(int i, int j) const {
    return Epoch(i) >= 0 && Epoch(i) == Epoch(j) && last_[3 * At(i) + 1] == last_[3 * At(j) + 1];
  }
  // For a joiner's pair with a member of a group that has another lowest
  // rank: that rank, whose cost with the joiner the pair takes; else -1.
  int InferredFrom(int i, int j) const {
    if (Known(i, j) || (Epoch(i) < 0) == (Epoch(j) < 0)) return -1;
    const int old = Epoch(i) < 0 ? j : i;
    const int lowest = Lowest(old);
    // The lowest rank must have ended the same probe, so that it counts
    // itself its group's lowest and measures its pair with the joiner.
    return lowest >= 0 && lowest != old && Known(old, lowest) && Lowest(lowest) == lowest ? lowest : -1;
  }
  // Of a pair InferredFrom names a rank for: its member with no last probe.
  int JoinerOf(int i, int j) const { return Epoch(i) < 0 ? i : j; }

 private:
  static size_t At(int rank) { return static_cast<size_t>(rank); }
  float Epoch(int rank) const { return last_[3 * At(rank)]; }
  int Lowest(int rank) const { return static_cast<int>(last_[3 * At(rank) + 2]); }
  std::vector<float> last_;
};

// What this member gathers for PairPlan: its last probe's epoch and view id
// and its group's lowest rank among the members of `view` that ended that
// probe too (by identity); -1s without one.
std::vector<float> LastProbeOf(const MembershipView& view, const KnownLinks* known) {
  if (known == nullptr || known->epoch < 0) return {-1.0f, 0.0f, -1.0f};
  auto group_of = [&](int r) {
    auto it = known->group.find(LinkIdentity(view.members[static_cast<size_t>(r)]));
    return it == known->group.end() ? -1 : it->second;
  };
  const int mine = group_of(view.self_rank);
  int lowest = -1;
  for (int r = 0; r < view.size() && lowest < 0 && mine >= 0; ++r) {
    // A member of this group in the last probe is also in this view only if
    // its identity is: it ended that probe too.
    if (group_of(r) == mine) lowest = r;
  }
  return {static_cast<float>(known->epoch), static_cast<float>(known->view_id), static_cast<float>(lowest)};
}

}  // namespace

Result<SiteProbe> ProbeSites(gossip::Transport& transport, const MembershipView& view,
                             const SiteProbeOptions& options, gossip::Tag tag_base, Deadline deadline,
                             const KnownLinks* known) {
  const int n = view.size(), self = view.self_rank;
  if (options.bytes < 1 || options.repeats < 1) return Err(InvalidArgument("site probe: bytes and repeats must be >= 1"));
  const auto start = std::chrono::steady_clock::now();
  SiteProbe probe;
  probe.bytes = ProbeBytes(options, n);
  CHORUS_ASSIGN_OR_RETURN(gossip::Collective world, gossip::Collective::Create(transport, HostKeys(view)));
  // Every member decides alike from the gathered last probes (exact in
  // floats: epochs and ranks up to 2^24); only a known pair's own members
  // look the value up, and both hold it.
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> last,
                          GatherFromEveryRank(world, LastProbeOf(view, known),
                                              tag_base + 2 * gossip::kTagsPerCollective, deadline));
  const PairPlan plan(std::move(last));
  std::vector<float> row(static_cast<size_t>(n), 0.0f);
  std::vector<std::byte> payload(probe.bytes, std::byte{0x5a});
  const int m = n % 2 == 0 ? n : n + 1;
  for (int round = 0; round < m - 1; ++round) {
    const int peer = Partner(self, round, m);
    if (peer >= n || plan.InferredFrom(self, peer) >= 0) continue;  // a bye, or filled in below
    if (plan.Known(self, peer)) {
      const std::optional<double> cost = known->Find(view.members[self], view.members[peer]);
      if (!cost) return Err(Internal("site probe: the link with " + view.members[peer].name +
                                     " is missing from this member's last probe"));
      if (self < peer) row[static_cast<size_t>(peer)] = static_cast<float>(*cost);
      continue;
    }
    const gossip::Tag tag = tag_base + static_cast<gossip::Tag>(round) * 4;
    if (self < peer) {
      Result<PairProbe> pair = Initiate(transport, peer, tag, options, payload, deadline);
      if (!pair) return Err(pair.error().WithContext("site probe with " + view.members[peer].name));
      row[static_cast<size_t>(peer)] = static_cast<float>(pair->cost_s);
      probe.started.push_back(*pair);
    } else {
      Status s = Answer(transport, peer, tag, options, payload, deadline);
      if (!s.ok()) return Err(s.WithContext("site probe from " + view.members[peer].name));
    }
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<float> all,
                          GatherFromEveryRank(world, row, tag_base + gossip::kTagsPerCollective, deadline));
  // Measured (or known) by i, the lower rank.
  auto pair_cost = [&](int i, int j) { return all[static_cast<size_t>(std::min(i, j) * n + std::max(i, j))]; };
  probe.cost_s.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      const int from = plan.InferredFrom(i, j);
      const double c = from < 0 ? pair_cost(i, j) : pair_cost(plan.JoinerOf(i, j), from);
      probe.cost_s[static_cast<size_t>(i * n + j)] = c;
      probe.cost_s[static_cast<size_t>(j * n + i)] = c;
      ++(plan.Known(i, j) ? probe.known_pairs : from >= 0 ? probe.inferred_pairs : probe.measured_pairs);
    }
  }
  CHORUS_ASSIGN_OR_RETURN(probe.groups, topologies::GroupByLinkCost(probe.cost_s, n, options.min_gap));
  probe.seconds = Seconds(start);
  return probe;
}

std::vector<std::string> ApplyMeasuredSites(const topologies::LinkGroups& groups, MembershipView* view) {
  std::vector<std::string> contradictions;
  const int n = view->size();
  // Named sites: their members' groups.
  std::map<std::string, std::map<int, std::vector<int>>> named;  // site -> group -> ranks
  for (int r = 0; r < n; ++r) {
    const Member& member = view->members[r];
    if (member.site != kMeasuredSite) named[member.SiteKey()][groups.group_of_rank[static_cast<size_t>(r)]].push_back(r);
  }
  auto names = [&](const std::vector<int>& ranks) {
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + view->members[r].name;
    return s;
  };
  for (const auto& [site, by_group] : named) {
    if (by_group.size() < 2) continue;
    std::string parts;
    for (const auto& [group, ranks] : by_group) parts += (parts.empty() ? "" : "; ") + names(ranks);
    contradictions.push_back("site \"" + site + "\" is measured as " + std::to_string(by_group.size()) +
                             " sites: " + parts + " (the links between them are far slower than inside each)");
  }
  std::map<int, std::set<std::string>> sites_of_group;
  for (const auto& [site, by_group] : named) {
    for (const auto& entry : by_group) sites_of_group[entry.first].insert(site);
  }
  for (const auto& [group, sites] : sites_of_group) {
    if (sites.size() < 2) continue;
    std::string list;
    for (const std::string& s : sites) list += (list.empty() ? "\"" : ", \"") + s + "\"";
    contradictions.push_back("sites " + list + " are measured as one site (their links are as fast as inside one)");
  }
  std::vector<std::string> measured(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) measured[static_cast<size_t>(r)] = GroupName(*view, groups, groups.group_of_rank[static_cast<size_t>(r)]);
  for (int r = 0; r < n; ++r) {
    if (view->members[r].site == kMeasuredSite) view->members[r].site = measured[static_cast<size_t>(r)];
  }
  return contradictions;
}

std::string MeasuredHere(const SiteProbe& probe, const MembershipView& view) {
  std::string text;
  for (const PairProbe& pair : probe.started) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f", pair.cost_s * 1e3);
    text += (text.empty() ? "; measured here: " : ", ") + view.members[static_cast<size_t>(pair.peer)].name + " " +
            ms + " ms (" + std::to_string(pair.probes) + " probes)";
  }
  return text;
}

nlohmann::json SiteProbeJson(const SiteProbe& probe, const MembershipView& view,
                             const std::vector<std::string>& contradictions) {
  nlohmann::json groups = nlohmann::json::array();
  for (int g = 0; g < probe.groups.groups; ++g) {
    nlohmann::json names = nlohmann::json::array();
    for (int r = 0; r < view.size(); ++r) {
      if (probe.groups.group_of_rank[static_cast<size_t>(r)] == g) names.push_back(view.members[r].name);
    }
    groups.push_back(std::move(names));
  }
  double cheapest = 0.0, dearest = 0.0;
  for (double c : probe.cost_s) {
    if (c <= 0.0) continue;
    cheapest = cheapest == 0.0 ? c : std::min(cheapest, c);
    dearest = std::max(dearest, c);
  }
  nlohmann::json started = nlohmann::json::array();
  for (const PairProbe& pair : probe.started) {
    started.push_back({{"peer", view.members[static_cast<size_t>(pair.peer)].name},
                       {"cost_s", pair.cost_s},
                       {"probes", pair.probes}});
  }
  return {{"groups", groups},
          {"gap", probe.groups.gap},
          {"threshold_s", probe.groups.threshold},
          {"cheapest_pair_s", cheapest},
          {"dearest_pair_s", dearest},
          {"seconds", probe.seconds},
          {"bytes_per_probe", probe.bytes},
          {"measured_pairs", probe.measured_pairs},
          {"known_pairs", probe.known_pairs},
          {"inferred_pairs", probe.inferred_pairs},
          {"measured_here", started},
          {"contradictions", contradictions}};
}

}  // namespace chorus::node
