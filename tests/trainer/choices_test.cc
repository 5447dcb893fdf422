// The trainer's named choices (choices.h): every name of the tables maps back
// to its value, unknown names are not found, and devices parse as "cpu",
// "cuda" or "cuda:N" only, naming the accepted forms.
#include "trainer/choices.h"

#include <gtest/gtest.h>

#include <string>

namespace chorus::trainer {
namespace {

TEST(Choices, NamesRoundTripAndUnknownNamesAreNotFound) {
  for (const auto& n : kModelNames) EXPECT_EQ(FromName(kModelNames, n.name), n.value);
  for (const auto& n : kPrecisionNames) EXPECT_EQ(FromName(kPrecisionNames, n.name), n.value);
  for (const auto& n : kOptimizerNames) EXPECT_EQ(FromName(kOptimizerNames, n.name), n.value);
  EXPECT_EQ(ModelName(ModelKind::kCnnBn), "cnn-bn");
  EXPECT_EQ(JoinNames(NamesOf(kModelNames), ", "), "mlp, cnn, cnn-bn");
  EXPECT_FALSE(FromName(kModelNames, "transformer"));
  EXPECT_FALSE(FromName(kModelNames, "resnet50"));
  EXPECT_FALSE(FromName(kPrecisionNames, "fp8"));
  EXPECT_FALSE(FromName(kPrecisionNames, "bf16"));
  EXPECT_FALSE(FromName(kOptimizerNames, "adam"));
  EXPECT_EQ(FromName(kOptimizerNames, "sgd"), OptimizerKind::kSgd);
}

TEST(ParseDevice, AcceptsCpuCudaAndOrdinals) {
  EXPECT_EQ(ParseDevice("cpu").value(), Device::Cpu());
  EXPECT_EQ(ParseDevice("cuda").value(), Device::Cuda(0));
  EXPECT_EQ(ParseDevice("cuda:0").value(), Device::Cuda(0));
  EXPECT_EQ(ParseDevice("cuda:7").value(), Device::Cuda(7));
  EXPECT_EQ(ParseDevice("cuda:7")->Name(), "cuda:7");
  EXPECT_EQ(ParseDevice("cpu")->Name(), "cpu");
}

TEST(ParseDevice, RejectsOtherFormsNamingThem) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA:0", "cuda:0 ", ""}) {
    auto parsed = ParseDevice(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_NE(parsed.error().message().find("cuda:N"), std::string::npos);
  }
}

}  // namespace
}  // namespace chorus::trainer
