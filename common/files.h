// Whole files: read into memory with a size bound, and written atomically (a
// reader sees the old file or the new one, never half of one). Errors name the
// path; errno becomes a Status through ErrnoStatus.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/posix_io.h"  // AsBytes
#include "common/status.h"

namespace chorus {

// The bytes of `path`; ResourceExhausted naming the path when it is larger
// than `max_bytes`, NotFound when it does not exist.
[[nodiscard]] Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path,
                                                         uint64_t max_bytes = UINT64_MAX);
// The same as text.
[[nodiscard]] Result<std::string> ReadFileText(const std::string& path, uint64_t max_bytes = UINT64_MAX);

// Writes `bytes` to `path` through a temporary file beside it: write, fsync,
// rename over `path`, fsync of the folder. On any error the temporary file is
// removed and `path` is untouched. The folder must exist. A new file gets
// `mode` (0600 for secrets; the umask applies).
[[nodiscard]] Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes, int mode = 0644);


}  // namespace chorus
