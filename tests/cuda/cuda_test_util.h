// GPU test helpers: a fixture that opens cuda:0 or skips (no GPU in CI), host
// <-> device copies of vectors, FP16 rounding of host data, and comparisons
// with a tolerance that the test states.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/availability.h"
#include "kernels/cuda/device.h"
#include "kernels/ops.h"

namespace chorus::kernels::cuda::testing {

// Opens cuda:0 once per test; skips the test (with the reason) without a GPU.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
    auto device = Device::Open(0);
    ASSERT_TRUE(device.has_value()) << device.error().ToString();
    device_ = std::move(*device);
  }
  Device& device() { return *device_; }

  template <typename T>
  DeviceArray<T> Upload(const std::vector<T>& host) {
    auto array = DeviceArray<T>::Create(*device_, host.size());
    EXPECT_TRUE(array.has_value());
    EXPECT_TRUE(device_->CopyToDevice(array->data(), host.data(), host.size() * sizeof(T)).ok());
    return std::move(*array);
  }
  template <typename T>
  DeviceArray<T> Zeros(size_t count) {
    auto array = DeviceArray<T>::Create(*device_, count);
    EXPECT_TRUE(array.has_value());
    EXPECT_TRUE(device_->Zero(array->data(), count * sizeof(T)).ok());
    return std::move(*array);
  }
  template <typename T>
  std::vector<T> Download(const DeviceArray<T>& array) {
    std::vector<T> host(array.size());
    EXPECT_TRUE(device_->CopyToHost(host.data(), array.data(), array.bytes()).ok());
    const Status s = device_->Synchronize("test download");
    EXPECT_TRUE(s.ok()) << s.ToString();
    return host;
  }

 private:
  std::unique_ptr<Device> device_;
};

// n floats uniform in [-scale, scale), rounded to FP16 values.
inline std::vector<float> RandomHalfValues(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  ::chorus::kernels::RoundToHalf(v.data(), v.size());
  return v;
}

inline std::vector<uint16_t> ToHalf(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  ::chorus::kernels::FloatToHalf(v.data(), h.data(), v.size());
  return h;
}

inline std::vector<float> ToFloat(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  ::chorus::kernels::HalfToFloat(h.data(), v.data(), h.size());
  return v;
}

// One FP16 rounding step relative to the value: 2^-10 (the gap between FP16
// neighbours is 2^-10 of the value at worst).
inline constexpr double kHalfRel = 1.0 / 1024.0;

inline double MaxAbs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

inline std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }
inline std::vector<float> ToFloatVec(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Every |got - want| <= abs_tol + rel_tol * |want|; reports the first few misses.
inline ::testing::AssertionResult AllClose(const std::vector<float>& got,
                                           const std::vector<float>& want, double abs_tol,
                                           double rel_tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = abs_tol + rel_tol * std::fabs(want[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      if (bad < 5) {
        first += " [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                 std::to_string(want[i]) + ";";
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " outside tolerance:"
                                       << first;
}

}  // namespace chorus::kernels::cuda::testing
