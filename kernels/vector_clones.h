// CHORUS_VECTOR_CLONES: compile a plain loop three times (AVX-512, AVX2 and
// the x86-64 baseline) and pick one at load time by the CPU (GCC's
// target_clones, resolved through an ifunc). The build targets the x86-64
// baseline, whose SSE2 does 4 floats per instruction; the elementwise loops of
// the optimizer and the mixed-precision passes run 2-4x more lanes on the
// machines we train on. No FMA is contracted (-ffp-contract=off, top-level
// CMakeLists.txt), so every clone gives the same bits.
//
// Use on non-template functions with internal linkage, whose loops the
// compiler vectorises on its own (no intrinsics).
#pragma once

// Not under ThreadSanitizer: GCC instruments the ifunc resolver, which the
// dynamic loader runs before the sanitizer's runtime is up (a crash at load).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && \
    !defined(__SANITIZE_THREAD__)
#define CHORUS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CHORUS_VECTOR_CLONES
#endif
