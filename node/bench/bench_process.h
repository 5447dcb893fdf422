// Byte I/O over the socketpair between a bench parent and the processes it
// fork()s (`chorus bench p2p`, `chorus bench allreduce`): whole-buffer reads and
// writes, length-prefixed blobs (fabric addresses), and the timed round of the
// standalone benches in bench/. `who` names the bench in error messages
// ("bench p2p").
//
// Must not: fork, open endpoints or know any frame format beyond the u32 length
// prefix of a blob and the timed round's ready / go bytes and double; raise
// SIGPIPE (a vanished process is an error Status).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gossip/transport/provider.h"

namespace chorus::node {

// The provider's name for printf (the names are string literals, so NUL-terminated).
inline const char* ProviderText(gossip::FabricProvider provider) { return gossip::ProviderName(provider).data(); }

// Largest blob ReadBlob accepts: a fabric address is far smaller.
inline constexpr uint32_t kMaxBlobBytes = 4096;

// Sends all `n` bytes to `fd` (common/posix_io.h's SendAll: no SIGPIPE).
Status SendBytes(int fd, const void* data, size_t n, std::string_view who);
// Reads exactly `n` bytes from `fd`; Unavailable if the other process closed it.
Status ReadBytes(int fd, void* data, size_t n, std::string_view who);
// Writes a u32 length, then the bytes.
Status WriteBlob(int fd, std::span<const uint8_t> blob, std::string_view who);
// Reads a blob written by WriteBlob; DataLoss if its length is 0 or over kMaxBlobBytes.
Result<std::vector<uint8_t>> ReadBlob(int fd, std::string_view who);

// A timed round: every process says it is ready (AwaitGo), the parent tells
// them all to go at once, and each sends back one double, its time.
// A process's side: ready, then wait for the go.
Status AwaitGo(int fd, std::string_view who);
// The parent's side; returns the largest time, the slowest process's.
Result<double> RunTimedRound(std::span<const int> fds, std::string_view who);

}  // namespace chorus::node
