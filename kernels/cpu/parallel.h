// Thread count shared by the CPU kernels (internal to kernels/cpu). SetThreads
// (threads.cc) sets it for the whole process, whichever thread later runs the
// kernels; every OpenMP region in kernels/cpu asks for KernelThreads() threads.
// Must not start threads or depend on anything outside kernels/cpu.
#pragma once

namespace chorus::kernels::cpu {

// The count given to SetThreads, or OpenMP's default before any call.
int KernelThreads();

}  // namespace chorus::kernels::cpu
