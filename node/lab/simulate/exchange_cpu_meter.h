// The CPU work of the exchanges in `chorus simulate`'s virtual time.
//
// ExchangeCpuMeter measures the thread CPU time (CLOCK_THREAD_CPUTIME_ID) that
// virtual nodes spend on their exchanges and hands it to the LocalHub as its
// cpu_charge callback (local_transport.h), which adds it to the node's clock
// before the transport call that follows the work. Two kinds of threads work
// for a node's exchange:
//
//   - the node's own thread, inside the exchange's hooks only (BeforeStep,
//     AfterBackward, AfterUpdate, Finish, and GatherFromMembers of load
//     balancing: MeteredExchange opens a window at a hook's start and closes
//     it at its end). Outside them the thread trains,
//     which the compute model prices, or evaluates, which costs nothing.
//   - every other thread that calls the node's transport (the fusion engine's
//     communication thread, which runs the all-reduce and its sums): all of
//     its CPU time between calls is the exchange's.
//
// Each call charges the calling thread's CPU time since its previous call
// returned (the calls' own work, copying messages between mailboxes, is the
// link model's); closing a window charges what is left. The seconds are multiplied by
// `scale` (the simulated node's CPU against this one's). Thread CPU time
// leaves out time spent blocked, so waiting for peers costs nothing here (the
// link model prices it); it includes the cache misses of many threads on few
// cores, so virtual times move a little from run to run.
//
// Must not: read another thread's clock, or charge anything outside a window
// on a node's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "node/exchange/exchange.h"

namespace chorus::node {

// Thread-safe; one per simulated method, shared by its nodes.
class ExchangeCpuMeter {
 public:
  // `slots` nodes; `scale` > 0.
  ExchangeCpuMeter(int slots, double scale);

  // Sets the cpu_charge and cpu_resume of the method's hub's `virtual_time`.
  // The meter must outlive the hub's use of them.
  void Install(gossip::LocalVirtualTime* virtual_time);

  // Called on node `slot`'s own thread before its first transport call:
  // from then on this thread is charged only inside windows.
  void AdoptThread(int slot);
  // A hook starts / ends on node `slot`'s own thread; CloseWindow returns the
  // seconds not yet charged, for the caller to add to the node's clock.
  void OpenWindow(int slot);
  [[nodiscard]] double CloseWindow(int slot);

  // Every second charged to `slot` so far (after `scale`).
  double Charged(int slot) const;

 private:
  double Charge(int slot);
  void Resume(int slot);
  void Record(int slot, double seconds);

  const uint64_t id_;  // tells this meter's marks from another's on the same thread
  const double scale_;
  mutable std::mutex mu_;
  std::vector<double> charged_;
};

// The exchange of a virtual node whose hooks run inside the meter's windows
// and whose leftover CPU time moves the node's clock. Forwards every virtual
// of Exchange to `inner` (a virtual added to Exchange must be forwarded here).
// SetLiveState reaches only this wrapper: the inner exchange has none, as no
// node joins a simulation.
class MeteredExchange final : public Exchange {
 public:
  MeteredExchange(std::unique_ptr<Exchange> inner, ExchangeCpuMeter* meter, gossip::LocalHub* hub, int slot);

  std::string Describe() const override { return inner_->Describe(); }
  // Unmetered: no membership changes in a simulation.
  MembershipTransitions& Transitions() override { return inner_->Transitions(); }
  Status BeforeStep(int64_t step) override;
  Status AfterBackward(int64_t step, int local_samples) override;
  Status AfterUpdate(int64_t step) override;
  Status Finish() override;
  Weighting SampleWeighting() const override { return inner_->SampleWeighting(); }
  void SetMemberShares(const std::vector<int>& shares) override { inner_->SetMemberShares(shares); }
  Result<std::vector<double>> GatherFromMembers(double mine) override;
  nlohmann::json Metrics() const override { return inner_->Metrics(); }
  Result<double> ExactConsensusDistance(int64_t step) override { return inner_->ExactConsensusDistance(step); }
  std::map<std::string, std::vector<float>> SavedState() const override { return inner_->SavedState(); }
  Status RestoreSavedState(const std::map<std::string, std::vector<float>>& state) override {
    return inner_->RestoreSavedState(state);
  }

 private:
  // Runs `hook` inside a window and charges what is left when it returns.
  template <typename Hook>
  auto Metered(Hook&& hook) -> decltype(hook());

  std::unique_ptr<Exchange> inner_;
  ExchangeCpuMeter* meter_;
  gossip::LocalHub* hub_;
  const int slot_;
};

}  // namespace chorus::node
