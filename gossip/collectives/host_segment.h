// HostSegment: one POSIX shared-memory segment mapped by every rank of one host
// group, for collectives that move data through memory instead of the transport
// (allreduce_shared_memory.h).
//
// Layout: a header, one cache line of flags per member, then one slot of
// slot_bytes per member and one result slot, each starting on a page.
//
// Attach is itself a collective over the host group and goes through the
// transport: the leader (index 0) creates the segment under a fresh name
// (/chorus-seg-<pid>-<random>), sends the name to every member, each member maps
// it and answers, the leader unlinks the name and tells every member whether
// all of them mapped it (so that all end with a segment or none does). From then on the memory
// lives exactly as long as some member maps it: a crash leaks nothing. A name
// left by a leader that died between create and unlink is removed by the next
// Attach on the host (its pid no longer runs).
//
// Calls are numbered: every member runs the same calls in the same order, each
// taking sequence numbers from NextSequence(). A call posts its number (and its
// tag, so that ranks that entered different calls get an error instead of
// wrong sums) in its flags; waits poll the others' flags with back-off (spin,
// then yield, then short sleeps: 8 ranks on 2 cores stay live) until the
// deadline, and fail early, naming the rank, when a member's process is gone
// or the transport has marked it dead (the membership layer ended the epoch:
// a member that stopped at a failure elsewhere never posts again).
//
// Must not: see a transport implementation, or be used by two calls at once
// (callers hold Lock()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "gossip/collectives/collective_group.h"
#include "gossip/transport/transport.h"

namespace chorus::gossip {

struct HostSegmentOptions {
  // Bytes of each member's slot (and of the result slot): the most a call moves
  // per round; larger buffers go in rounds. Rounded up to a page. 0: by the
  // member count, DefaultSlotBytes.
  size_t slot_bytes = 0;
  // The attach handshake's tags: tag_base .. tag_base + 1 (collective_options.h).
  Tag tag_base = 0;
  Deadline deadline = Deadline::AfterSeconds(60);
};

// The slot size for `members` members when the options leave it at 0: a
// round's slots and result slot together about 2 MiB, each between 256 KiB and
// 1 MiB (2 members: 1 MiB; 4: 512 KiB; 8: 256 KiB). Fewer, larger rounds pay
// at small world sizes, where a round's fixed costs (two waits, and each
// member's copies restarting on another member's freshly written lines) are
// a larger share. Measured: docs/performance.md ("2026-11-24: segment sizes").
size_t DefaultSlotBytes(int members);

class HostSegment {
 public:
  // Collective over `local` (one host's ranks, leader first); every member calls
  // it with the same options. A group of one maps a private segment.
  static Result<std::shared_ptr<HostSegment>> Attach(const CollectiveGroup& local,
                                                     const HostSegmentOptions& options);
  ~HostSegment();
  HostSegment(const HostSegment&) = delete;
  HostSegment& operator=(const HostSegment&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  int self() const { return self_; }
  Rank RankAt(int index) const { return ranks_[index]; }
  size_t slot_bytes() const { return slot_bytes_; }
  std::byte* Slot(int index) const;
  std::byte* ResultSlot() const;

  // Serialises this process's calls on the segment.
  std::unique_lock<std::mutex> Lock() const { return std::unique_lock<std::mutex>(mu_); }
  // The next call round's number (1, 2, ...); the same on every member when
  // all run the same calls.
  uint64_t NextSequence() { return ++sequence_; }

  // This member's slot holds round `seq`'s data (release).
  void Post(uint64_t seq, Tag tag);
  // This member finished its part of round `seq` (reading others' slots, writing
  // its share of the result).
  void Finish(uint64_t seq);
  // Waits until member `only` (every member when -1) has posted `seq`;
  // FailedPrecondition if one posted it with another tag.
  Status WaitPosted(uint64_t seq, Tag tag, Deadline deadline, int only = -1) const;
  // Waits until every member (but `except`) has finished `seq`.
  Status WaitFinished(uint64_t seq, Deadline deadline, int except = -1) const;

  // Where the memory came from, for logs: "/chorus-seg-<pid>-<n> (4 x 1 MiB)".
  std::string Describe() const;

 private:
  struct Flags;
  HostSegment(std::vector<Rank> ranks, int self, size_t slot_bytes, std::string name);
  Flags* FlagsOf(int index) const;
  // Members [first, last) but `except` and self.
  Status Wait(uint64_t seq, Deadline deadline, int first, int last, int except, bool posted, Tag tag) const;

  std::vector<Rank> ranks_;
  const Transport* transport_ = nullptr;  // the attach's; outlives the segment (Collective holds both)
  int self_;
  size_t slot_bytes_;
  std::string name_;
  std::byte* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint64_t sequence_ = 0;
  mutable std::mutex mu_;
};

}  // namespace chorus::gossip
