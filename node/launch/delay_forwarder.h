// DelayForwarder: a link's latency where the kernel has no sch_netem. It
// moves Ethernet frames between two interfaces of one network namespace that
// nothing else joins (each the loose end of a veth pair whose other end is a
// bridge port), holding every frame for a fixed time in each direction:
// frames that reach `a` leave on `b` `a_to_b_s` later, and the other way
// round. Order is kept (a constant delay per direction); bandwidth stays
// tc's job on the veth ends. Frames keep their offload metadata (packet
// sockets with a virtio-net header), so TCP's large segments cross whole.
//
// One thread, in the namespace, polling both interfaces and sleeping until
// the next frame is due; a frame that cannot be sent is dropped and counted,
// as on a lossy link. Root only (packet sockets, setns).
//
// Must not: touch any interface but the two it is given.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace chorus::node {

class DelayForwarder {
 public:
  // Starts forwarding between `a` and `b` of network namespace `netns` (a
  // name under /run/netns); returns once both are open, or why not.
  [[nodiscard]] static Result<std::unique_ptr<DelayForwarder>> Start(const std::string& netns, const std::string& a,
                                                                     const std::string& b, double a_to_b_s,
                                                                     double b_to_a_s);
  // Stops the thread (frames still held are dropped).
  ~DelayForwarder();
  DelayForwarder(const DelayForwarder&) = delete;
  DelayForwarder& operator=(const DelayForwarder&) = delete;

  uint64_t frames_forwarded() const { return forwarded_.load(std::memory_order_relaxed); }
  uint64_t frames_dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  DelayForwarder() = default;
  void Run(int fd_a, int fd_b, double a_to_b_s, double b_to_a_s);

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace chorus::node
