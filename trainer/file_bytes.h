// Reading a whole file into memory, with a size bound and errno mapped to a
// Status naming the path. Shared by the IDX reader and the safetensors reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::trainer {

// kResourceExhausted (naming the path) when the file is larger than max_bytes.
[[nodiscard]] Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path,
                                                         uint64_t max_bytes = UINT64_MAX);

}  // namespace chorus::trainer
