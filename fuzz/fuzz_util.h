// What the fuzz targets share: a temporary file for parsers that read paths,
// and the crash that tells libFuzzer a contract broke.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

namespace chorus::fuzz {

// A broken contract (not a rejected input): libFuzzer keeps the input.
[[noreturn]] inline void Broken(const std::string& what) {
  std::fprintf(stderr, "contract broken: %s\n", what.c_str());
  std::abort();
}

// `data` written to a file of this process (replaced on every call), for
// parsers that take a path; its name ends in `suffix`.
inline std::string WriteTemp(const uint8_t* data, size_t size, const std::string& suffix) {
  const std::string path = "/tmp/chorus-fuzz-" + std::to_string(getpid()) + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  return path;
}

}  // namespace chorus::fuzz
