// Checkpoints as a joiner receives them (live state) or --resume reads them:
// RestoreCheckpoint into an MLP trainer accepts or names the defect and never
// crashes.
#include <cstdint>
#include <memory>
#include <span>

#include "trainer/checkpoint.h"
#include "trainer/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::trainer;
  static std::unique_ptr<Trainer> trainer = [] {
    TrainerOptions o;
    o.model = ModelKind::kMlp;
    o.steps_per_epoch = 1;
    o.batch_size = 8;
    return std::move(*Trainer::Create(o));
  }();
  auto info = RestoreCheckpoint(std::span<const uint8_t>(data, size), "fuzz", trainer.get());
  (void)info;
  return 0;
}
