// HostSegment (see host_segment.h).
#include "gossip/collectives/host_segment.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <random>
#include <thread>

#include "common/page_bytes.h"
#include "common/shm_names.h"
#include "gossip/collectives/host_segment_wire.h"

namespace chorus::gossip {

namespace {

constexpr uint64_t kMagic = 0x6765536f72686343ull;  // "ChroSeg" + version byte
constexpr uint32_t kVersion = 1;

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t members;
  uint64_t slot_bytes;
};

}  // namespace

struct alignas(64) HostSegment::Flags {
  std::atomic<uint64_t> posted;    // last round whose data is in this member's slot
  std::atomic<uint64_t> finished;  // last round this member finished its part of
  std::atomic<uint64_t> tag;       // tag of the call that posted `posted`
  std::atomic<int32_t> pid;        // the member's process, for "is it still there"
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "flags are shared between processes: they must be lock-free");

namespace {

size_t ControlBytes(int members) {
  return RoundUpToPage(sizeof(Header) + 64 + static_cast<size_t>(members) * 64);
}

size_t SegmentBytes(int members, size_t slot_bytes) {
  return ControlBytes(members) + (static_cast<size_t>(members) + 1) * slot_bytes;
}

std::string FreshName() {
  std::random_device rd;
  return std::string("/") + kSegmentNamePrefix + std::to_string(getpid()) + "-" +
         std::to_string((uint64_t{rd()} << 32) | rd());
}

Result<std::byte*> MapShared(int fd, size_t bytes, const std::string& what) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (fd < 0 ? MAP_ANONYMOUS : 0), fd, 0);
  if (p == MAP_FAILED) return Err(ErrnoStatus(errno, "mmap " + what));
  return static_cast<std::byte*>(p);
}

// The leader's side: a fresh named segment, header written.
Result<std::byte*> CreateNamed(const std::string& name, size_t bytes, int members, size_t slot_bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Err(ErrnoStatus(errno, "shm_open " + name));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Err(ErrnoStatus(err, "ftruncate " + name + " to " + std::to_string(bytes) + " bytes (is /dev/shm large enough?)"));
  }
  Result<std::byte*> base = MapShared(fd, bytes, name);
  close(fd);
  if (!base) {
    shm_unlink(name.c_str());
    return base;
  }
  auto* h = reinterpret_cast<Header*>(*base);
  h->magic = kMagic;
  h->version = kVersion;
  h->members = static_cast<uint32_t>(members);
  h->slot_bytes = slot_bytes;
  return base;
}

// A member's side: maps the leader's segment and checks its header.
Result<std::byte*> OpenNamed(const std::string& name, size_t bytes, int members, size_t slot_bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Err(ErrnoStatus(errno, "shm_open " + name));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return Err(FailedPrecondition("shared-memory segment " + name + " has " + std::to_string(st.st_size) +
                                  " bytes, expected " + std::to_string(bytes)));
  }
  Result<std::byte*> base = MapShared(fd, bytes, name);
  close(fd);
  if (!base) return base;
  const auto* h = reinterpret_cast<const Header*>(*base);
  if (h->magic != kMagic || h->version != kVersion || h->members != static_cast<uint32_t>(members) ||
      h->slot_bytes != slot_bytes) {
    munmap(*base, bytes);
    return Err(FailedPrecondition("shared-memory segment " + name + ": header does not match (" +
                                  std::to_string(h->members) + " members of " + std::to_string(h->slot_bytes) +
                                  " bytes, expected " + std::to_string(members) + " of " +
                                  std::to_string(slot_bytes) + ")"));
  }
  return base;
}

// A mapped segment and the name it was shared under.
struct Mapping {
  std::string name;
  std::byte* base = nullptr;
};

// What Attach's handshake needs of the call.
struct Handshake {
  const CollectiveGroup& local;
  Transport& transport;
  Tag name_tag;  // the name, then the verdict, leader to members
  Tag ack_tag;   // each member's "mapped it", members to leader
  Deadline deadline;
};

// The leader sends `wire` (the name, or empty when it could not create the
// segment) to every member; the first error stops it.
Status SendName(const Handshake& h, const std::array<std::byte, kSegmentNameBytes>& wire) {
  Status s = Status::Ok();
  for (int i = 1; i < h.local.size() && s.ok(); ++i) {
    s = h.transport.Send(h.local.RankAt(i), h.name_tag, wire, h.deadline);
  }
  return s;
}

// The leader waits for every member's answer: all mapped `name`, or the first failure.
Status CollectAcks(const Handshake& h, const std::string& name) {
  Status s = Status::Ok();
  for (int i = 1; i < h.local.size() && s.ok(); ++i) {
    char ack = 0;
    Result<Completion> c = h.transport.Recv(h.local.RankAt(i), h.ack_tag,
                                            std::as_writable_bytes(std::span(&ack, 1)), h.deadline);
    if (!c) {
      s = c.error();
    } else if (ack != 1) {
      s = FailedPrecondition("rank " + std::to_string(h.local.RankAt(i)) + " could not map " + name);
    }
  }
  return s;
}

// The leader's side: creates the segment, shares its name, collects the
// members' answers, unlinks the name and tells every member the verdict.
Result<Mapping> LeadAttach(const Handshake& h, size_t bytes, size_t slot_bytes) {
  const int n = h.local.size();
  UnlinkShmNamesOfDeadProcesses(kSegmentNamePrefix, '-');  // a leader that died between creating and unlinking
  Mapping mapping;
  mapping.name = FreshName();
  const std::string& name = mapping.name;
  Result<std::byte*> created = CreateNamed(name, bytes, n, slot_bytes);
  // Empty: "I could not create it", so members fail at once.
  const std::array<std::byte, kSegmentNameBytes> wire = EncodeSegmentName(created ? name : std::string());
  Status s = SendName(h, wire);
  if (!created) return Err(created.error().WithContext("creating the host's shared memory"));
  mapping.base = *created;
  if (s.ok()) s = CollectAcks(h, name);
  shm_unlink(name.c_str());  // from now on the memory lives as long as a mapping does
  // The verdict, so that every member ends with a segment or none does (a
  // member that could not map it would otherwise leave the others resolving
  // `auto` differently from it).
  const char verdict = s.ok() ? 1 : 0;
  for (int i = 1; i < n; ++i) {
    (void)h.transport.Send(h.local.RankAt(i), h.name_tag, std::as_bytes(std::span(&verdict, 1)), h.deadline);
  }
  if (!s.ok()) {
    munmap(mapping.base, bytes);
    return Err(s.WithContext("attaching shared memory " + name));
  }
  return mapping;
}

// A member's side: receives the name, maps the segment, answers, and waits
// for the leader's verdict.
Result<Mapping> JoinAttach(const Handshake& h, size_t bytes, size_t slot_bytes) {
  const Rank leader = h.local.RankAt(0);
  std::array<std::byte, kSegmentNameBytes> wire{};
  CHORUS_ASSIGN_OR_RETURN(Completion c, h.transport.Recv(leader, h.name_tag, wire, h.deadline));
  Result<std::string> decoded = DecodeSegmentName(std::span<const std::byte>(wire).first(c.bytes));
  if (!decoded) return Err(decoded.error().WithContext("from rank " + std::to_string(leader)));
  Mapping mapping;
  mapping.name = std::move(*decoded);
  const std::string& name = mapping.name;
  if (name.empty()) {
    return Err(FailedPrecondition("rank " + std::to_string(leader) +
                                  " could not create the host's shared memory (its log says why)"));
  }
  Result<std::byte*> mapped = OpenNamed(name, bytes, h.local.size(), slot_bytes);
  const char ack = mapped ? 1 : 0;
  Status s = h.transport.Send(leader, h.ack_tag, std::as_bytes(std::span(&ack, 1)), h.deadline);
  if (!mapped) return Err(mapped.error().WithContext("attaching the shared memory of rank " +
                                                     std::to_string(leader)));
  mapping.base = *mapped;
  char verdict = 0;
  if (s.ok()) {
    Result<Completion> v = h.transport.Recv(leader, h.name_tag, std::as_writable_bytes(std::span(&verdict, 1)),
                                            h.deadline);
    s = StatusOf(v);
    if (s.ok() && verdict != 1) s = FailedPrecondition("another rank of the host could not map it");
  }
  if (!s.ok()) {
    munmap(mapping.base, bytes);
    return Err(s.WithContext("attaching shared memory " + name));
  }
  return mapping;
}

}  // namespace

HostSegment::HostSegment(std::vector<Rank> ranks, int self, size_t slot_bytes, std::string name)
    : ranks_(std::move(ranks)), self_(self), slot_bytes_(slot_bytes), name_(std::move(name)) {}

HostSegment::~HostSegment() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

size_t DefaultSlotBytes(int members) {
  constexpr size_t kRoundBytes = size_t{2} << 20;
  return std::clamp<size_t>(kRoundBytes / static_cast<size_t>(std::max(members, 1)), size_t{256} << 10,
                            size_t{1} << 20);
}

Result<std::shared_ptr<HostSegment>> HostSegment::Attach(const CollectiveGroup& local,
                                                         const HostSegmentOptions& options) {
  const int n = local.size();
  const size_t slot_bytes =
      RoundUpToPage(options.slot_bytes > 0 ? options.slot_bytes : DefaultSlotBytes(n));
  const size_t bytes = SegmentBytes(n, slot_bytes);
  std::vector<Rank> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(local.RankAt(i));
  const Handshake handshake{local, local.transport(), options.tag_base, options.tag_base + 1, options.deadline};
  Mapping mapping;
  if (n == 1) {
    CHORUS_ASSIGN_OR_RETURN(mapping.base, MapShared(-1, bytes, "private segment"));
    mapping.name = "private";
  } else if (local.self() == 0) {
    CHORUS_ASSIGN_OR_RETURN(mapping, LeadAttach(handshake, bytes, slot_bytes));
  } else {
    CHORUS_ASSIGN_OR_RETURN(mapping, JoinAttach(handshake, bytes, slot_bytes));
  }
  auto segment = std::shared_ptr<HostSegment>(
      new HostSegment(std::move(ranks), local.self(), slot_bytes, std::move(mapping.name)));
  segment->base_ = mapping.base;
  segment->mapped_bytes_ = bytes;
  segment->transport_ = &handshake.transport;
  segment->FlagsOf(local.self())->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  return segment;
}

HostSegment::Flags* HostSegment::FlagsOf(int index) const {
  return reinterpret_cast<Flags*>(base_ + 64) + index;
}

std::byte* HostSegment::Slot(int index) const {
  return base_ + ControlBytes(size()) + static_cast<size_t>(index) * slot_bytes_;
}

std::byte* HostSegment::ResultSlot() const { return Slot(size()); }

void HostSegment::Post(uint64_t seq, Tag tag) {
  Flags* f = FlagsOf(self_);
  f->tag.store(tag, std::memory_order_relaxed);
  f->posted.store(seq, std::memory_order_release);
}

void HostSegment::Finish(uint64_t seq) { FlagsOf(self_)->finished.store(seq, std::memory_order_release); }

Status HostSegment::WaitPosted(uint64_t seq, Tag tag, Deadline deadline, int only) const {
  return only < 0 ? Wait(seq, deadline, 0, size(), -1, /*posted=*/true, tag)
                  : Wait(seq, deadline, only, only + 1, -1, /*posted=*/true, tag);
}

Status HostSegment::WaitFinished(uint64_t seq, Deadline deadline, int except) const {
  return Wait(seq, deadline, 0, size(), except, /*posted=*/false, 0);
}

// Polls with back-off: a few spins, then sched_yield (the member we wait for
// may need this core) for about 200 us, then sleeps growing to 50 us. The pids
// are checked every few milliseconds of waiting so that a member that died
// fails the call at once instead of at the deadline.
Status HostSegment::Wait(uint64_t seq, Deadline deadline, int first, int last, int except, bool posted,
                         Tag tag) const {
  int i = first;  // members before i are done
  uint32_t iter = 0;
  Clock::time_point started{};
  Clock::time_point next_pid_check{};
  while (true) {
    for (; i < last; ++i) {
      if (i == except || i == self_) continue;
      const Flags* f = FlagsOf(i);
      if ((posted ? f->posted : f->finished).load(std::memory_order_acquire) < seq) break;
      if (posted && f->tag.load(std::memory_order_relaxed) != tag) {
        return FailedPrecondition("shared-memory collective: rank " + std::to_string(ranks_[i]) +
                                  " entered the call with tag " + std::to_string(f->tag.load()) +
                                  ", this rank with tag " + std::to_string(tag) +
                                  " (ranks must run their collectives in the same order)");
      }
    }
    if (i == last) return Status::Ok();
    ++iter;
    if (iter <= 64) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (iter == 65) {
      started = now;
      next_pid_check = now + std::chrono::milliseconds(5);
    }
    if (now >= deadline.when()) {
      return DeadlineExceeded("shared-memory collective: rank " + std::to_string(ranks_[i]) + " did not " +
                              (posted ? "post" : "finish") + " round " + std::to_string(seq) +
                              " before the deadline");
    }
    if (now >= next_pid_check) {
      next_pid_check = now + std::chrono::milliseconds(5);
      const int32_t pid = FlagsOf(i)->pid.load(std::memory_order_acquire);
      if (ProcessIsGone(pid)) {
        return Unavailable("shared-memory collective: rank " + std::to_string(ranks_[i]) + " (pid " +
                           std::to_string(pid) + ") is gone");
      }
      if (transport_ != nullptr && transport_->PeerMarkedDead(ranks_[i])) {
        return Unavailable("shared-memory collective: rank " + std::to_string(ranks_[i]) +
                           " is marked dead (its membership epoch ended)");
      }
    }
    const auto waited = now - started;
    if (waited < std::chrono::microseconds(200)) {
      sched_yield();
    } else {
      const auto us = std::min<int64_t>(50, std::chrono::duration_cast<std::chrono::microseconds>(waited).count() / 100);
      std::this_thread::sleep_for(std::chrono::microseconds(std::max<int64_t>(us, 2)));
    }
  }
}

std::string HostSegment::Describe() const {
  return name_ + " (" + std::to_string(size()) + " x " + std::to_string(slot_bytes_ >> 10) + " KiB)";
}

}  // namespace chorus::gossip
