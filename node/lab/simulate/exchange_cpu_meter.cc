// Charging the exchanges' CPU work to virtual clocks (see exchange_cpu_meter.h).
#include "node/lab/simulate/exchange_cpu_meter.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace chorus::node {
namespace {

// Where one thread stands with one meter's slot: its CPU clock at the last
// charge, and whether it is charged now (always for a helper thread; inside
// windows for the node's own thread).
struct ThreadMark {
  uint64_t meter = 0;
  int slot = -1;
  bool own_thread = false;
  bool open = false;
  double mark = 0.0;
};

// A thread meets a few meters' slots in its life (one, for the simulator's
// threads, which live for one method).
thread_local std::vector<ThreadMark> marks;

ThreadMark* FindMark(uint64_t meter, int slot) {
  for (ThreadMark& m : marks) {
    if (m.meter == meter && m.slot == slot) return &m;
  }
  return nullptr;
}

std::atomic<uint64_t> next_meter_id{1};

}  // namespace

ExchangeCpuMeter::ExchangeCpuMeter(int slots, double scale)
    : id_(next_meter_id.fetch_add(1)), scale_(scale), charged_(static_cast<size_t>(std::max(slots, 0)), 0.0) {}

void ExchangeCpuMeter::Install(gossip::LocalVirtualTime* virtual_time) {
  virtual_time->cpu_charge = [this](int slot) { return Charge(slot); };
  virtual_time->cpu_resume = [this](int slot) { Resume(slot); };
}

void ExchangeCpuMeter::AdoptThread(int slot) {
  ThreadMark* m = FindMark(id_, slot);
  if (m == nullptr) {
    marks.push_back(ThreadMark{id_, slot});
    m = &marks.back();
  }
  m->own_thread = true;
  m->open = false;
}

void ExchangeCpuMeter::OpenWindow(int slot) {
  ThreadMark* m = FindMark(id_, slot);
  if (m == nullptr || !m->own_thread) return;
  m->open = true;
  m->mark = ThreadCpuSeconds();
}

double ExchangeCpuMeter::CloseWindow(int slot) {
  ThreadMark* m = FindMark(id_, slot);
  if (m == nullptr || !m->open) return 0.0;
  const double seconds = scale_ * std::max(0.0, ThreadCpuSeconds() - m->mark);
  m->open = false;
  Record(slot, seconds);
  return seconds;
}

double ExchangeCpuMeter::Charge(int slot) {
  ThreadMark* m = FindMark(id_, slot);
  if (m == nullptr) {
    // A helper thread's first call: its work is charged from the call's end on.
    marks.push_back(ThreadMark{id_, slot, /*own_thread=*/false, /*open=*/true, 0.0});
    return 0.0;
  }
  if (!m->open) return 0.0;
  const double seconds = scale_ * std::max(0.0, ThreadCpuSeconds() - m->mark);
  Record(slot, seconds);
  return seconds;
}

void ExchangeCpuMeter::Resume(int slot) {
  ThreadMark* m = FindMark(id_, slot);
  if (m != nullptr && m->open) m->mark = ThreadCpuSeconds();
}

void ExchangeCpuMeter::Record(int slot, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot >= 0 && slot < static_cast<int>(charged_.size())) charged_[static_cast<size_t>(slot)] += seconds;
}

double ExchangeCpuMeter::Charged(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot >= 0 && slot < static_cast<int>(charged_.size()) ? charged_[static_cast<size_t>(slot)] : 0.0;
}

MeteredExchange::MeteredExchange(std::unique_ptr<Exchange> inner, ExchangeCpuMeter* meter, gossip::LocalHub* hub,
                                 int slot)
    : inner_(std::move(inner)), meter_(meter), hub_(hub), slot_(slot) {}

template <typename Hook>
auto MeteredExchange::Metered(Hook&& hook) -> decltype(hook()) {
  meter_->OpenWindow(slot_);
  auto result = hook();
  hub_->AdvanceVirtual(slot_, meter_->CloseWindow(slot_));
  return result;
}

Status MeteredExchange::BeforeStep(int64_t step) {
  return Metered([&] { return inner_->BeforeStep(step); });
}

Status MeteredExchange::AfterBackward(int64_t step, int local_samples) {
  return Metered([&] { return inner_->AfterBackward(step, local_samples); });
}

Status MeteredExchange::AfterUpdate(int64_t step) {
  return Metered([&] { return inner_->AfterUpdate(step); });
}

Status MeteredExchange::Finish() {
  return Metered([&] { return inner_->Finish(); });
}

Result<std::vector<double>> MeteredExchange::GatherFromMembers(double mine) {
  return Metered([&] { return inner_->GatherFromMembers(mine); });
}

}  // namespace chorus::node
