// Times the local work of one gossip round on a flat parameter vector (the
// MLP's 235,146 by default) with two neighbours, as a ring gives: D-PSGD's mix
// and CHOCO's step towards the public copies, each blocked (mix_blocks.h)
// beside the element-at-a-time loop they replace, alternated; and the sign
// codec's encode and decode. Prints the median microseconds per call and the
// ratios. A benchmark, not a test: asserts nothing.
//
// Usage: bench_mix [elements=235146] [repetitions=200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "gossip/codecs/codec.h"
#include "gossip/protocols/mix_blocks.h"

namespace {

using chorus::gossip::MixRows;

double Micros(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The loops StepTowards and MixWeighted replace, as they were.
void ElementwiseMix(float* x, size_t n, double self_weight, const MixRows& rows, double* diff2, double* norm2) {
  for (size_t i = 0; i < n; ++i) {
    const double xi = x[i];
    double acc = self_weight * xi, mean = 0.0;
    for (size_t k = 0; k < rows.count; ++k) {
      acc += rows.weights[k] * static_cast<double>(rows.rows[k][i]);
      mean += rows.rows[k][i];
    }
    const double d = xi - mean / static_cast<double>(rows.count);
    *diff2 += d * d;
    *norm2 += xi * xi;
    x[i] = static_cast<float>(acc);
  }
}

void ElementwiseStep(float* x, size_t n, const float* own, double gamma, const MixRows& rows, double* diff2,
                     double* norm2) {
  for (size_t i = 0; i < n; ++i) {
    double step = 0.0, mean = 0.0;
    for (size_t k = 0; k < rows.count; ++k) {
      const double h = rows.rows[k][i];
      step += rows.weights[k] * (h - static_cast<double>(own[i]));
      mean += h;
    }
    const double xi = x[i];
    const double d = xi - mean / static_cast<double>(rows.count);
    *diff2 += d * d;
    *norm2 += xi * xi;
    x[i] = static_cast<float>(xi + gamma * step);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 235146;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 200;
  std::vector<float> x(n), own(n), a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    own[i] = x[i] * 0.9f;
    a[i] = x[i] + 0.001f * static_cast<float>(i % 13);
    b[i] = x[i] - 0.002f * static_cast<float>(i % 7);
  }
  const float* rows[] = {a.data(), b.data()};
  const double weights[] = {1.0 / 3, 1.0 / 3};
  const MixRows mix_rows{rows, weights, 2};
  double sink = 0.0;

  std::vector<double> old_mix, new_mix, old_step, new_step;
  for (int r = 0; r < repetitions; ++r) {
    double d2 = 0, n2 = 0;
    old_mix.push_back(Micros([&] { ElementwiseMix(x.data(), n, 1.0 / 3, mix_rows, &d2, &n2); }));
    new_mix.push_back(Micros([&] { sink += chorus::gossip::MixWeighted(x.data(), n, 1.0 / 3, mix_rows).diff2; }));
    old_step.push_back(Micros([&] { ElementwiseStep(x.data(), n, own.data(), 0.6, mix_rows, &d2, &n2); }));
    new_step.push_back(
        Micros([&] { sink += chorus::gossip::StepTowards(x.data(), n, own.data(), 0.6, mix_rows).diff2; }));
    sink += d2 + n2;
  }
  std::printf("elements=%zu neighbours=2 repetitions=%d (median us per call)\n", n, repetitions);
  std::printf("d-psgd mix:   elementwise %8.1f  blocked %8.1f  ratio %.2f\n", Median(old_mix), Median(new_mix),
              Median(old_mix) / Median(new_mix));
  std::printf("choco step:   elementwise %8.1f  blocked %8.1f  ratio %.2f\n", Median(old_step), Median(new_step),
              Median(old_step) / Median(new_step));

  chorus::gossip::CodecOptions options;
  options.kind = chorus::gossip::CodecKind::kSign;
  auto codec = chorus::gossip::MakeCodec(options);
  if (!codec) {
    std::fprintf(stderr, "%s\n", codec.error().ToString().c_str());
    return 1;
  }
  std::vector<std::byte> wire;
  std::vector<float> decoded(n);
  std::vector<double> encode, decode;
  for (int r = 0; r < repetitions; ++r) {
    encode.push_back(Micros([&] { (void)(*codec)->Encode(x, 0, &wire); }));
    decode.push_back(Micros([&] { (void)(*codec)->Decode(wire, decoded); }));
  }
  std::printf("sign(chunk=256): encode %8.1f  decode %8.1f\n", Median(encode), Median(decode));
  return sink == 42.0 ? 2 : 0;
}
