// Expulsion: a member that sent poison is declared dead, and its name is
// refused for the rest of the run by every member. A member's check that
// names another is an accusation (Expel), which its heartbeats carry to every
// member; each member counts the accusers it heard itself, over their own
// authenticated connections, and convicts once cluster.expel_quorum distinct
// members accused the same name. So a lying member, alone, expels nobody.
// Convictions travel in views, so that whoever coordinates refuses the
// name's rejoin, also after the accusers have gone, and after the view
// dropped the name; with credentials each carries its accusers' signed
// words, which every member checks (accusation_proof.h). Reports that a
// member is dead are weighed the same way by the coordinator: one member's
// word removes nobody (JudgeDeathReports).
#include "node/control/control_plane_impl.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "common/fault_spec.h"
#include "node/control/accusation_proof.h"

namespace chorus::node {

void ControlPlaneImpl::Expel(const std::string& name, const std::string& why) {
  asio::post(io_, [this, name, why] {
    Locked([&] {
      if (name == self_.name) {
        expelled_self_ = why;
        return;
      }
      msg::Expulsion accusation{why};
      if (credentials_) accusation.proofs.push_back(SignAccusation(*credentials_, accusation_cluster_, name));
      const bool first = own_accusations_.emplace(name, accusation).second;
      Accuse(name, self_.name, accusation);
      // The word goes out now, not at the next heartbeat: until the quorum
      // hears it, every step the accused takes part in is abandoned.
      if (first && (phase_ == Phase::kMember || phase_ == Phase::kLeaving)) SendHeartbeat();
    });
  });
}

void ControlPlaneImpl::RequestReform(uint64_t epoch) {
  asio::post(io_, [this, epoch] {
    Locked([&] {
      if (phase_ != Phase::kMember || !formed_ || view_.epoch != epoch || reform_asked_ == epoch) return;
      reform_asked_ = epoch;
      CHORUS_LOG_WARN(Subsys::kControl, "asking ", ExpectedCoordinator(), " for epoch ", epoch + 1,
                      " over the same members: an exchange failed in epoch ", epoch, " and no member is gone");
      if (IsCoordinator()) {
        reform_requested_ = true;
        MaybePropose();
      }
      SendHeartbeat();  // now, not at the next tick: every member waits for that epoch
    });
  });
}

bool ControlPlaneImpl::EveryMemberAnswers(uint64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_ != Phase::kMember || !formed_ || view_.epoch != epoch) return false;
  return std::all_of(view_.members.begin(), view_.members.end(), [&](const Member& m) {
    return m.name == self_.name || (Answers(m.name) && !liveness_.IsDead(m.name));
  });
}

void ControlPlaneImpl::DeclareUnresponsive(const std::string& name, const std::string& why) {
  asio::post(io_, [this, name, why] {
    Locked([&] {
      const Member* m = view_.Find(name);
      if (phase_ != Phase::kMember || m == nullptr || name == self_.name || Gone(name)) return;
      DeclareDead(name, m->rank, why, /*gone=*/false);
      SendHeartbeat();  // the word goes out now: the coordinator weighs it
      MaybePropose();
    });
  });
}

void ControlPlaneImpl::NoteReformRequest(const msg::Heartbeat& h) {
  if (!h.reform || h.epoch != view_.epoch || !IsCoordinator() || reform_requested_) return;
  CHORUS_LOG_WARN(Subsys::kControl, h.sender, " asks for epoch ", view_.epoch + 1,
                  " over the same members: its exchange failed and no member is gone");
  reform_requested_ = true;
  MaybePropose();
}

void ControlPlaneImpl::SendHeartbeat() {
  msg::Heartbeat heartbeat{view_.epoch, self_.name, progress_samples_,
                           IsCoordinator() && !applicants_.empty() ? view_.epoch + 1 : 0};
  heartbeat.reform = reform_asked_ == view_.epoch;
  heartbeat.incarnation = incarnation_;
  heartbeat.counts = samples_.counts();
  heartbeat.accusations = own_accusations_;
  for (const Member& m : view_.members) {
    if (dead_.count(m.name)) heartbeat.dead.push_back(m.name);
  }
  ClaimDeadIfAsked(heartbeat);
  for (const auto& [name, conn] : peers_) {
    if (conn->established()) conn->Send(heartbeat);
  }
}

void ControlPlaneImpl::LearnAccusations(const msg::Expulsions& accused, const std::string& accuser) {
  for (const auto& [name, accusation] : accused) {
    if (credentials_) {
      // Only the sender's own proof counts here; it must hold.
      msg::Expulsion own{accusation.why};
      for (const msg::AccusationProof& p : accusation.proofs) {
        if (p.accuser == accuser) own.proofs.push_back(p);
      }
      Status s = own.proofs.empty() ? PermissionDenied("it carries no proof signed by " + accuser)
                                    : CheckAccusation(*credentials_, accusation_cluster_, name, own.proofs[0]);
      if (!s.ok()) {
        if (refused_accusations_.emplace(name, accuser).second) {
          CHORUS_LOG_ERROR(Subsys::kControl, "refusing ", accuser, "'s accusation of ", name, ": ", s.message());
        }
        continue;
      }
      Accuse(name, accuser, own);
      continue;
    }
    Accuse(name, accuser, msg::Expulsion{accusation.why});
  }
}

void ControlPlaneImpl::Accuse(const std::string& name, const std::string& accuser, const msg::Expulsion& accusation) {
  if (expelled_.count(name)) return;
  std::map<std::string, msg::Expulsion>& by = accusations_[name];
  if (!by.emplace(accuser, accusation).second) return;
  const int quorum = std::max(1, config_.expel_quorum);
  std::string accusers;
  for (const auto& [who, _] : by) accusers += (accusers.empty() ? "" : ", ") + who;
  const std::string& why = accusation.why;
  if (static_cast<int>(by.size()) < quorum) {
    CHORUS_LOG_WARN(Subsys::kControl, accuser, " asks to expel ", name, ": ", why, " (", by.size(), " of the ",
                    quorum, " members needed)");
    return;
  }
  msg::Expulsion verdict{why + " (named by " + accusers + ")"};
  for (const auto& [who, a] : by) verdict.proofs.insert(verdict.proofs.end(), a.proofs.begin(), a.proofs.end());
  if (name == self_.name) {
    expelled_self_ = verdict.why;
    return;
  }
  // Recorded even when the view has dropped the name already (it died, or a
  // view from elsewhere came first): the name must stay refused.
  expelled_.emplace(name, verdict);
  RefuseExpelledApplicants();
  const Member* m = view_.Find(name);
  if (m == nullptr || dead_.count(name)) return;
  DeclareDead(name, m->rank, "expelled: " + verdict.why, /*gone=*/false);
}

bool ControlPlaneImpl::ProvenExpulsion(const std::string& name, const msg::Expulsion& e, const std::string& from) {
  if (!credentials_) return true;
  const ProvenAccusers proven = CheckAccusations(*credentials_, accusation_cluster_, name, e.proofs);
  const size_t quorum = static_cast<size_t>(std::max(1, config_.expel_quorum));
  if (proven.accusers.size() >= quorum) return true;
  if (refused_accusations_.emplace(name, from).second) {
    CHORUS_LOG_ERROR(Subsys::kControl, "refusing ", from, "'s word that ", name,
                     " was expelled: it carries the signed accusations of ", proven.accusers.size(), " of the ",
                     quorum, " members needed", proven.refused.empty() ? "" : " (" + proven.refused + ")");
  }
  return false;
}

void ControlPlaneImpl::AdoptRun(const msg::EpochView& v) {
  if (v.run_salt.empty() || v.run_salt == run_salt_) return;
  if (!run_salt_.empty()) {
    CHORUS_LOG_ERROR(Subsys::kControl, v.proposer, "'s view of epoch ", v.epoch,
                     " names another run than the one this node joined; keeping this node's (accusations signed in "
                     "another run do not count in this one)");
    return;
  }
  run_salt_ = v.run_salt;
  accusation_cluster_ = key_->Tag("chorus accusations", run_salt_);
}

void ControlPlaneImpl::LearnExpulsions(const msg::Expulsions& expelled, const std::string& from) {
  for (const auto& [name, e] : expelled) {
    if (!ProvenExpulsion(name, e, from)) continue;
    const std::string& why = e.why;
    if (name == self_.name) {
      if (expelled_self_.empty()) {
        CHORUS_LOG_ERROR(Subsys::kControl, "member ", from, " reports that the cluster expelled this node: ", why);
      }
      expelled_self_ = why;
      continue;
    }
    if (!expelled_.emplace(name, e).second) continue;
    CHORUS_LOG_WARN(Subsys::kControl, "member ", from, " reports that ", name, " was expelled: ", why,
                    "; its name is refused from now on");
    const Member* m = view_.Find(name);
    if (!IsCoordinator() || m == nullptr || Gone(name)) continue;
    DeclareDead(name, m->rank, "expelled by " + from + ": " + why, /*gone=*/false);
  }
  RefuseExpelledApplicants();
}

msg::Expulsions ControlPlaneImpl::ExpelledForViews() const {
  msg::Expulsions out = expelled_;
  const char* forged = std::getenv("CHORUS_FAULT_FORGE_EXPULSION");
  if (forged == nullptr || *forged == '\0' || out.count(forged)) return out;
  msg::Expulsion e{"fault injection: a forged conviction"};
  if (credentials_) {
    e.proofs.push_back(SignAccusation(*credentials_, accusation_cluster_, forged));
    msg::AccusationProof other = e.proofs.back();  // another member's name on this node's signature
    other.accuser = other.accuser == "node1" ? "node2" : "node1";
    e.proofs.push_back(other);
  }
  out.emplace(forged, e);
  return out;
}

std::string ControlPlaneImpl::ExpelledSelf() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expelled_self_;
}

std::string ControlPlaneImpl::ExpelledReason(const std::string& name) const {
  auto out = expelled_.find(name);
  if (out == expelled_.end()) return std::string();
  return "node name '" + name + "' was expelled from this cluster: " + out->second.why;
}

void ControlPlaneImpl::RefuseExpelledApplicants() {
  for (auto it = applicants_.begin(); it != applicants_.end();) {
    const std::string reason = ExpelledReason(it->info.name);
    if (reason.empty()) {
      ++it;
      continue;
    }
    CHORUS_LOG_WARN(Subsys::kControl, "refusing the waiting join of ", it->conn->Describe(), ": ", reason);
    it->conn->Send(msg::Reject{RejectCode::kExpelled, reason});
    it->conn->CloseAfterFlush(Status::Ok());
    it = applicants_.erase(it);
  }
}

void ControlPlaneImpl::NoteDeathReport(const std::string& name, const std::string& reporter, Clock::time_point now) {
  if (name == self_.name || view_.Find(name) == nullptr || Gone(name)) return;
  auto [it, fresh] = death_reports_.try_emplace(name);
  if (fresh) it->second.first_at = now;
  if (!it->second.reporters.insert(reporter).second) return;  // heartbeats repeat it
  CHORUS_LOG_INFO(Subsys::kControl, reporter, " declared ", name, " dead (", it->second.reporters.size(),
                  " member(s) so far)");
}

void ControlPlaneImpl::JudgeDeaths(Clock::time_point now) {
  for (auto it = death_reports_.begin(); it != death_reports_.end();) {
    std::set<std::string>& reporters = it->second.reporters;
    std::erase_if(reporters, [&](const std::string& r) { return Gone(r) || view_.Find(r) == nullptr; });
    if (reporters.empty() || Gone(it->first) || view_.Find(it->first) == nullptr) {
      it = death_reports_.erase(it);
    } else {
      ++it;
    }
  }
  if (death_reports_.empty()) return;
  CoordinatorJudgement judge;
  judge.lost_here = [&](const std::string& name) { return liveness_.IsLost(name); };
  judge.silent_here = [&](const std::string& name) { return liveness_.IsSuspect(name); };
  judge.heard_since = stalled_at_;
  judge.quorum = config_.expel_quorum;
  judge.grace = dead_after_;
  for (const DeathVerdict& v : JudgeDeathReports(death_reports_, judge, now)) {
    const Member* m = view_.Find(v.name);
    if (m == nullptr || Gone(v.name)) continue;
    DeclareDead(v.name, m->rank, v.why, /*gone=*/false);
  }
}

void ControlPlaneImpl::ClaimDeadIfAsked(msg::Heartbeat& heartbeat) const {
  static const std::optional<NameAtStep> fault = ParseNameAtStep(std::getenv("CHORUS_FAULT_CLAIM_DEAD"));
  if (!fault || progress_step_ < fault->step) return;
  const std::string& name = fault->name;
  if (name == self_.name || view_.Find(name) == nullptr || Gone(name)) return;
  if (std::find(heartbeat.dead.begin(), heartbeat.dead.end(), name) == heartbeat.dead.end()) {
    heartbeat.dead.push_back(name);
  }
}

}  // namespace chorus::node
