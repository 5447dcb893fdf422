// IDX data files (plain or gzip): ReadIdxFile accepts or names the defect and
// never crashes; what it accepts holds as many bytes as its dimensions say.
#include <cstdint>
#include <functional>
#include <numeric>

#include "fuzz/fuzz_util.h"
#include "trainer/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = chorus::fuzz::WriteTemp(data, size, ".idx");
  for (uint32_t magic : {0x00000803u, 0x00000801u}) {
    auto array = chorus::trainer::ReadIdxFile(path, magic);
    if (!array) continue;
    const uint64_t count = std::accumulate(array->dims.begin(), array->dims.end(), uint64_t{1},
                                           std::multiplies<uint64_t>());
    if (count != array->bytes.size()) chorus::fuzz::Broken("dimensions and bytes disagree");
  }
  return 0;
}
