// Thread count shared by the CPU kernels (internal to kernels/cpu). SetThreads
// (threads.cc) sets it for the whole process, whichever thread later runs the
// kernels; every OpenMP region in kernels/cpu asks for KernelThreads() threads.
// Must not start threads or depend on anything outside kernels/cpu.
#pragma once

#include <cstddef>

namespace chorus::kernels::cpu {

// The count given to SetThreads, or OpenMP's default before any call.
int KernelThreads();

// The smallest loop (in the caller's units) worth a parallel region: base, the
// size chosen where a region costs about 2 us (kReferenceRegionSeconds), scaled
// by how much more a region costs on this machine now (at most 64x). A region
// with waiting threads asleep (OMP_WAIT_POLICY=passive, which the binaries set)
// costs futex wakes: about 2 us where the sizes were chosen, 35-50 us in a
// 2-vCPU virtual machine, where the fixed sizes made 2 threads slower than 1.
// The cost is measured once per thread count, on first use (MeasureRegion in
// threads.cc: a few milliseconds).
// Results must not depend on it: elementwise loops give the same bits either
// way, Gemm runs the same blocks serially or in parallel (GemmThreads tests).
// Only SumSquares's per-thread partial sums differ in a double's last bits.
size_t ParallelMin(size_t base);
// The measured cost of a parallel region of KernelThreads() threads to a
// streaming loop (0 for one thread).
double RegionSeconds();
// Tests: RegionSeconds() returns seconds from now on (a negative value measures
// again), so that a test can force loops to split or not.
void OverrideRegionSeconds(double seconds);

}  // namespace chorus::kernels::cpu
