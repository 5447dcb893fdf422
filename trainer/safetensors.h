// Safetensors files (the format PyTorch users load), written from the spec:
// 8-byte little-endian header length N, then N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, padded with spaces to a multiple of 8,
// then the raw little-endian tensor bytes. Used for the exported model and for
// checkpoints. Files are written atomically (temp file, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace chorus::trainer {

struct NamedTensor {
  std::string name;
  std::string dtype;             // "F32", "F16", "I32", "I64", "F64", "U8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;    // little-endian, row-major; size = prod(shape) * dtype size
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  const NamedTensor* Find(const std::string& name) const;
};

// Writes atomically: `path`.tmp, fsync, rename over `path`, fsync the directory.
[[nodiscard]] Status WriteSafetensors(const std::string& path, std::span<const NamedTensor> tensors,
                                      const std::map<std::string, std::string>& metadata);
// Parses and validates (header size, JSON, dtypes, offsets within the file and
// consistent with shapes); errors name the path and what is wrong.
[[nodiscard]] Result<SafetensorsFile> ReadSafetensors(const std::string& path);

// The same in memory (a checkpoint sent to another node): the bytes a file
// would hold, and their parse; `what` names them in errors as a path would.
[[nodiscard]] Result<std::vector<uint8_t>> EncodeSafetensors(const std::string& what,
                                                             std::span<const NamedTensor> tensors,
                                                             const std::map<std::string, std::string>& metadata);
[[nodiscard]] Result<SafetensorsFile> DecodeSafetensors(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace chorus::trainer
