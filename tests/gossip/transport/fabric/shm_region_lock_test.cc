// ReleaseIfHeldThroughout on a region this test lays out as libfabric 1.17's
// shm does (version byte, creator pid, spin lock): what it finds in
// /proc/self/maps, the layout it insists on, and that only a lock held at
// every try is given back. The provider's own regions are covered by
// fabric_transport_test.cc (a process killed holding one).
#include "gossip/transport/fabric/shm_region_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

namespace chorus::gossip::fabric {
namespace {

constexpr size_t kBytes = 4096;
constexpr std::chrono::milliseconds kProof{20};

// A /dev/shm file laid out as an shm region made by `pid`, mapped here.
class FakeRegion {
 public:
  explicit FakeRegion(pid_t pid, uint8_t version = kShmRegionVersion)
      : name_("chorus-test-region-" + std::to_string(getpid())) {
    const int fd = shm_open(("/" + name_).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, kBytes), 0);
    base_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    EXPECT_NE(base_, MAP_FAILED);
    base_[0] = version;
    std::memcpy(base_ + kShmRegionPidOffset, &pid, sizeof(pid));
    pthread_spin_init(lock(), PTHREAD_PROCESS_SHARED);
  }
  ~FakeRegion() {
    munmap(base_, kBytes);
    shm_unlink(("/" + name_).c_str());
  }
  pthread_spinlock_t* lock() { return reinterpret_cast<pthread_spinlock_t*>(base_ + kShmRegionLockOffset); }
  void Unlink() { shm_unlink(("/" + name_).c_str()); }
  const std::string& name() const { return name_; }
  void* base() const { return base_; }

 private:
  std::string name_;
  uint8_t* base_ = nullptr;
};

TEST(ShmRegionLockTest, FindsTheMappingAlsoOnceUnlinked) {
  FakeRegion region(getpid());
  EXPECT_EQ(FindShmRegionMapping(region.name()), region.base());
  EXPECT_EQ(FindShmRegionMapping(region.name() + "x"), nullptr);
  EXPECT_EQ(FindShmRegionMapping(region.name().substr(1)), nullptr);
  region.Unlink();
  EXPECT_EQ(FindShmRegionMapping(region.name()), region.base());
}

TEST(ShmRegionLockTest, AHeldLockIsReleasedAndAFreeOneLeftAlone) {
  FakeRegion region(getpid());
  EXPECT_EQ(ReleaseIfHeldThroughout(region.name(), getpid(), kProof), ShmLockRelease::kFree);
  ASSERT_EQ(pthread_spin_trylock(region.lock()), 0);  // a holder that will never give it back
  EXPECT_EQ(ReleaseIfHeldThroughout(region.name(), getpid(), kProof), ShmLockRelease::kReleased);
  EXPECT_EQ(pthread_spin_trylock(region.lock()), 0) << "still held after the release";
  pthread_spin_unlock(region.lock());
}

TEST(ShmRegionLockTest, ALockGivenBackDuringTheProofIsLeftAlone) {
  FakeRegion region(getpid());
  ASSERT_EQ(pthread_spin_trylock(region.lock()), 0);
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pthread_spin_unlock(region.lock());
  });
  EXPECT_EQ(ReleaseIfHeldThroughout(region.name(), getpid(), std::chrono::seconds(5)), ShmLockRelease::kFree);
  holder.join();
}

TEST(ShmRegionLockTest, AnotherLayoutOrCreatorIsLeftAlone) {
  {
    FakeRegion region(getpid() + 1);
    ASSERT_EQ(pthread_spin_trylock(region.lock()), 0);
    EXPECT_EQ(ReleaseIfHeldThroughout(region.name(), getpid(), kProof), ShmLockRelease::kUnknownLayout);
    EXPECT_NE(pthread_spin_trylock(region.lock()), 0) << "a region of another creator was released";
  }
  {
    FakeRegion region(getpid(), kShmRegionVersion + 1);
    ASSERT_EQ(pthread_spin_trylock(region.lock()), 0);
    EXPECT_EQ(ReleaseIfHeldThroughout(region.name(), getpid(), kProof), ShmLockRelease::kUnknownLayout);
  }
  EXPECT_EQ(ReleaseIfHeldThroughout("chorus-test-no-such-region", getpid(), kProof), ShmLockRelease::kNotMapped);
}

}  // namespace
}  // namespace chorus::gossip::fabric
