// Deterministic ranks, view descriptions and the liveness table (see membership.h).
// Pure functions of their arguments: no clocks read here, no I/O.
#include "node/control/membership.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "common/enum_names.h"
#include "node/config/host_port.h"

namespace chorus::node {

const Member* MembershipView::Find(const std::string& name) const {
  for (const Member& m : members) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string MembershipView::Describe() const {
  std::ostringstream out;
  out << "epoch " << epoch << ": members";
  for (const Member& m : members) out << ' ' << m.name;
  if (!departed.empty() || !joined.empty()) {
    out << " (";
    if (!departed.empty()) {
      out << "departed ranks";
      for (size_t i = 0; i < departed.size(); ++i) out << (i == 0 ? " " : ",") << departed[i];
    }
    if (!joined.empty()) {
      if (!departed.empty()) out << "; ";
      out << "joined";
      for (size_t i = 0; i < joined.size(); ++i) out << (i == 0 ? " " : ",") << joined[i];
    }
    out << ')';
  }
  if (reform) out << " (re-formed after a failed exchange)";
  return out.str();
}

bool AddressBefore(const std::string& a, const std::string& b) {
  Result<HostPort> pa = ParseHostPort(a);
  Result<HostPort> pb = ParseHostPort(b);
  if (pa.has_value() != pb.has_value()) return pa.has_value();
  if (!pa) return a < b;
  return std::tie(pa->host, pa->port) < std::tie(pb->host, pb->port);
}

bool RanksBefore(const Member& a, const Member& b) {
  // Hinted members first: key (0, hint) for hinted, (1, 0) for the others.
  auto key = [](const Member& m) {
    return std::make_tuple(m.rank_hint >= 0 ? 0 : 1, m.rank_hint >= 0 ? m.rank_hint : 0,
                           std::cref(m.name), std::cref(m.control_address));
  };
  return key(a) < key(b);
}

std::vector<Member> AssignInitialRanks(std::vector<Member> candidates) {
  std::sort(candidates.begin(), candidates.end(), RanksBefore);
  for (size_t i = 0; i < candidates.size(); ++i) candidates[i].rank = static_cast<int>(i);
  return candidates;
}

std::vector<Member> AssignNextRanks(std::vector<Member> survivors, std::vector<Member> joiners) {
  std::sort(joiners.begin(), joiners.end(), RanksBefore);
  survivors.insert(survivors.end(), joiners.begin(), joiners.end());
  for (size_t i = 0; i < survivors.size(); ++i) survivors[i].rank = static_cast<int>(i);
  return survivors;
}

void LivenessTable::Reset(const std::vector<std::string>& names, Clock::time_point now) {
  std::map<std::string, Entry> next;
  for (const std::string& name : names) {
    Entry entry{now};
    auto old = entries_.find(name);
    if (old != entries_.end() && !old->second.dead) {
      entry.lost = old->second.lost;
      entry.refused_dials = old->second.refused_dials;
    }
    next[name] = entry;
  }
  entries_ = std::move(next);
}

void LivenessTable::Heard(const std::string& name, Clock::time_point now) {
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.dead) return;
  it->second.last_heard = std::max(it->second.last_heard, now);
  it->second.lost = false;
  it->second.refused_dials = 0;
}

void LivenessTable::HeardAll(Clock::time_point now) {
  for (auto& [name, entry] : entries_) {
    if (!entry.dead) entry.last_heard = std::max(entry.last_heard, now);
  }
}

void LivenessTable::ConnectionLost(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.dead || it->second.lost) return;
  it->second.lost = true;
  it->second.refused_dials = 0;
}

void LivenessTable::DialRefused(const std::string& name) {
  auto it = entries_.find(name);
  if (it != entries_.end() && it->second.lost) ++it->second.refused_dials;
}

std::vector<LivenessTable::Event> LivenessTable::Check(Clock::time_point now) {
  std::vector<Event> events;
  for (auto& [name, entry] : entries_) {
    if (entry.dead) continue;
    const Duration silent = now > entry.last_heard ? now - entry.last_heard : Duration::zero();
    const double silent_s = std::chrono::duration<double>(silent).count();
    const bool refused = entry.lost && entry.refused_dials >= kRefusedDialsForDead;
    if (refused || silent >= dead_after_) {
      entry.dead = true;
      events.push_back({name, Change::kDead, silent_s, refused ? entry.refused_dials : 0});
    } else if (silent >= suspect_after_) {
      if (!entry.suspect) {
        entry.suspect = true;
        events.push_back({name, Change::kSuspect, silent_s});
      }
    } else if (entry.suspect) {
      entry.suspect = false;
      events.push_back({name, Change::kRecovered, silent_s});
    }
  }
  return events;
}

bool LivenessTable::IsDead(const std::string& name) const {
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.dead;
}

bool LivenessTable::IsSuspect(const std::string& name) const {
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.suspect && !it->second.dead;
}

bool LivenessTable::IsLost(const std::string& name) const {
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.lost && !it->second.dead;
}

std::vector<std::string> HostKeys(const MembershipView& view) {
  std::vector<std::string> keys;
  for (const Member& m : view.members) keys.push_back(m.HostKey());
  return keys;
}

std::vector<std::string> SiteKeys(const MembershipView& view, bool link_aware) {
  if (!link_aware) return {};
  std::vector<std::string> keys;
  for (const Member& m : view.members) keys.push_back(m.SiteKey());
  return keys;
}

std::vector<bool> OtherSites(const MembershipView& view) {
  std::vector<bool> other(view.members.size(), false);
  if (view.self_rank < 0 || view.self_rank >= view.size()) return other;
  const std::string& mine = view.members[static_cast<size_t>(view.self_rank)].SiteKey();
  for (size_t i = 0; i < view.members.size(); ++i) other[i] = view.members[i].SiteKey() != mine;
  return other;
}

std::vector<DeathVerdict> JudgeDeathReports(std::map<std::string, DeathReport>& reports,
                                            const CoordinatorJudgement& judge, Clock::time_point now) {
  std::vector<DeathVerdict> verdicts;
  std::set<std::string> condemned;
  auto condemn = [&](const std::string& name, std::string why) {
    if (condemned.insert(name).second) verdicts.push_back({name, std::move(why)});
  };
  const size_t quorum = static_cast<size_t>(std::max(1, judge.quorum));
  for (auto it = reports.begin(); it != reports.end();) {
    const std::string& name = it->first;
    const DeathReport& report = it->second;
    const std::string by = "declared dead by " + JoinNames({report.reporters.begin(), report.reporters.end()}) +
                           ", which ended this epoch's operations with it";
    const Duration heard_for = now - std::max(report.first_at, judge.heard_since);
    if (judge.lost_here(name)) {
      condemn(name, by + " (its connection here is lost too)");
    } else if (report.reporters.size() >= quorum) {
      const size_t n = report.reporters.size();
      condemn(name, by + " (" + std::to_string(n) + (n == 1 ? " member)" : " members)"));
    } else if (heard_for >= judge.grace) {
      if (judge.silent_here(name)) {
        condemn(name, by + " (silent here too)");
      } else if (!condemned.count(name)) {
        // Of two members that declared each other dead, the first judged goes.
        for (const std::string& reporter : report.reporters) {
          condemn(reporter, "it alone declared " + name + " dead, whom this coordinator has heard for the " +
                                SecondsText(heard_for) +
                                " s since: one member's word removes nobody, and the epoch cannot go on with both");
        }
      }
    } else if (now - report.first_at >= kStalledGraces * judge.grace) {
      condemn(name, by + " (this coordinator kept stalling and cannot judge)");
    } else {
      ++it;
      continue;
    }
    it = reports.erase(it);
  }
  return verdicts;
}

}  // namespace chorus::node
