// The device choice of the trainer: the clear errors for a GPU that is not
// there (its "cpu" / "cuda" / "cuda:N" spelling: choices_test.cc) (this test runs everywhere; the GPU
// trainer itself is tested in tests/cuda/cuda_trainer_test.cc).
#include "trainer/device_model.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/availability.h"
#include "trainer/trainer.h"

namespace chorus::trainer {
namespace {

TrainerOptions GpuOptions(const std::string& device) {
  TrainerOptions o;
  o.model = ModelKind::kMlp;
  o.steps_per_epoch = 10;
  o.device = ParseDevice(device).value();
  return o;
}

TEST(TrainerDevice, AbsentGpuIsAClearError) {
  std::string why;
  const int gpus = kernels::cuda::DeviceCount(&why);
  // Without a GPU (CI) cuda:0 fails; with one, an ordinal past the last does.
  const std::string device = "cuda:" + std::to_string(gpus == 0 ? 0 : gpus + 3);
  auto trainer = Trainer::Create(GpuOptions(device));
  ASSERT_FALSE(trainer);
  const std::string message = trainer.error().message();
  EXPECT_NE(message.find(device), std::string::npos) << message;
  if (gpus == 0) {
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

TEST(TrainerDevice, Fp32OnAGpuIsRefused) {
  TrainerOptions o = GpuOptions("cuda:0");
  o.precision = Precision::kFp32;
  auto trainer = Trainer::Create(o);
  ASSERT_FALSE(trainer);
  // Without a GPU the missing device may be reported first; either names cuda:0.
  EXPECT_NE(trainer.error().message().find("cuda:0"), std::string::npos);
}

TEST(TrainerDevice, CpuTrainerSaysCpu) {
  auto trainer = Trainer::Create(GpuOptions("cpu"));
  ASSERT_TRUE(trainer) << trainer.error().ToString();
  EXPECT_FALSE((*trainer)->on_gpu());
  EXPECT_EQ((*trainer)->DeviceDescription(), "cpu");
  EXPECT_TRUE((*trainer)->SyncToHost().ok());
  EXPECT_TRUE((*trainer)->SyncToDevice().ok());
}

}  // namespace
}  // namespace chorus::trainer
