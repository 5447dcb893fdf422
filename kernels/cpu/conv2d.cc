// CPU 2-D convolution: im2col + GEMM, parallel over images or over column rows
// (OpenMP), with scratch that stays in each core's cache.
//
// Columns of one image: cols [C*R*S, P*Q], row (c, r, s) holding the P x Q
// window of input plane c shifted by (r, s); built from a zero-padded copy of
// the image so no tap needs a bounds check. The workspace holds `slots` such
// scratch areas (columns + padded image); a thread keeps reusing its slot.
//   Forward, each image i on some thread:  cols = im2col(x_i);
//     y_i [K, P*Q] = w [K, C*R*S] * cols + b    (GEMM straight into NCHW y)
//   Backward dw: the C*R*S rows are split into one range per thread; for each
//     image the thread builds only its rows and accumulates
//     dw[:, rows] (+)= dy_i [K, P*Q] * cols[rows]^T
//     (no partial sums to reduce, no thread writes another's columns).
//   Backward dx, each image i on some thread:
//     cols = w^T [C*R*S, K] * dy_i [K, P*Q];  dx_i = col2im(cols)
// GEMMs inside these loops run single-threaded (gemm.cc). With more threads
// than slots, images go in rounds of `slots`. The slot count is capped so the
// workspace stays bounded (kMaxColumnElems elements of columns) and does not
// depend on the thread count.
// Nothing here allocates: the caller passes Conv2dShape::WorkspaceElems() scratch.
// Float convolutions first go to oneDNN (onednn_conv.cc) when the build has it
// and the backend is kAuto; this file is the fallback and the reference.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/onednn_conv.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops.h"

namespace chorus::kernels {
namespace {

// ---- Window copies: the inner loops of im2col / col2im ----------------------
// Rows are short (P*Q windows of 14 or 28 floats for the CNN), so for float an
// AVX-512 version with masked tails does each row in one or two vector moves;
// it is compiled by target attribute and chosen at run time. Other CPUs and
// double use the plain loops.

// dst [rows, cols] (contiguous) = src rows of `cols` at stride src_stride.
template <typename T>
void CopyWindowPlain(const T* src, size_t src_stride, int rows, int cols, T* dst) {
  for (int p = 0; p < rows; ++p, src += src_stride, dst += cols) {
    for (int q = 0; q < cols; ++q) dst[q] = src[q];
  }
}

// dst rows of `cols` at stride dst_stride += src [rows, cols] (contiguous).
template <typename T>
void AddWindowPlain(const T* src, int rows, int cols, T* dst, size_t dst_stride) {
  for (int p = 0; p < rows; ++p, src += cols, dst += dst_stride) {
    for (int q = 0; q < cols; ++q) dst[q] += src[q];
  }
}

__attribute__((target("avx512f"))) void CopyWindowAvx512(const float* src, size_t src_stride,
                                                         int rows, int cols, float* dst) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (cols % 16)) - 1);
  const int full = cols / 16 * 16;
  for (int p = 0; p < rows; ++p, src += src_stride, dst += cols) {
    for (int q = 0; q < full; q += 16) _mm512_storeu_ps(dst + q, _mm512_loadu_ps(src + q));
    if (tail != 0) {
      _mm512_mask_storeu_ps(dst + full, tail, _mm512_maskz_loadu_ps(tail, src + full));
    }
  }
}

__attribute__((target("avx512f"))) void AddWindowAvx512(const float* src, int rows, int cols,
                                                        float* dst, size_t dst_stride) {
  const __mmask16 tail = static_cast<__mmask16>((1u << (cols % 16)) - 1);
  const int full = cols / 16 * 16;
  for (int p = 0; p < rows; ++p, src += cols, dst += dst_stride) {
    for (int q = 0; q < full; q += 16) {
      _mm512_storeu_ps(dst + q, _mm512_add_ps(_mm512_loadu_ps(dst + q), _mm512_loadu_ps(src + q)));
    }
    if (tail != 0) {
      const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, dst + full),
                                       _mm512_maskz_loadu_ps(tail, src + full));
      _mm512_mask_storeu_ps(dst + full, tail, sum);
    }
  }
}

void CopyWindow(const float* src, size_t src_stride, int rows, int cols, float* dst) {
  if (cpu::CpuHasAvx512()) {
    CopyWindowAvx512(src, src_stride, rows, cols, dst);
  } else {
    CopyWindowPlain(src, src_stride, rows, cols, dst);
  }
}
void CopyWindow(const double* src, size_t src_stride, int rows, int cols, double* dst) {
  CopyWindowPlain(src, src_stride, rows, cols, dst);
}
void AddWindow(const float* src, int rows, int cols, float* dst, size_t dst_stride) {
  if (cpu::CpuHasAvx512()) {
    AddWindowAvx512(src, rows, cols, dst, dst_stride);
  } else {
    AddWindowPlain(src, rows, cols, dst, dst_stride);
  }
}
void AddWindow(const double* src, int rows, int cols, double* dst, size_t dst_stride) {
  AddWindowPlain(src, rows, cols, dst, dst_stride);
}

// ---- Convolution pieces --------------------------------------------------------

// Cap on the columns held by all slots, in elements (8 MiB of float): enough
// slots for a dozen threads on the CNN's conv2 (800 x 196 per image).
constexpr size_t kMaxColumnElems = size_t{1} << 21;
// Below this many elements of work an OpenMP region costs more than it saves.
constexpr size_t kParallelElems = size_t{1} << 15;

size_t ColumnRows(const Conv2dShape& s) { return static_cast<size_t>(s.c) * s.r * s.s; }
size_t OutPlane(const Conv2dShape& s) { return static_cast<size_t>(s.OutH()) * s.OutW(); }

// Zero-padded image [C, H + 2 pad, W + 2 pad]; none when pad is 0 (the image
// itself is read).
size_t PaddedImage(const Conv2dShape& s) {
  if (s.pad == 0) return 0;
  return static_cast<size_t>(s.c) * (s.h + 2 * s.pad) * (s.w + 2 * s.pad);
}

size_t SlotElems(const Conv2dShape& s) { return ColumnRows(s) * OutPlane(s) + PaddedImage(s); }

// Scratch slots: as many images' columns as fit in kMaxColumnElems, at least 1,
// at most N.
int Slots(const Conv2dShape& s) {
  const size_t per_image = std::max<size_t>(1, ColumnRows(s) * OutPlane(s));
  const size_t fit = std::max<size_t>(1, kMaxColumnElems / per_image);
  return static_cast<int>(std::min<size_t>(fit, static_cast<size_t>(std::max(1, s.n))));
}

bool ValidShape(const Conv2dShape& s) {
  return s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0 && s.k > 0 && s.r > 0 && s.s > 0 &&
         s.stride > 0 && s.pad >= 0 && s.OutH() > 0 && s.OutW() > 0;
}

// Copies channels [c0, c1) of x_i [C, H, W] into padded [C, H + 2 pad, W + 2 pad]
// (same channel offsets) with zero borders.
template <typename T>
void PadChannels(const Conv2dShape& s, const T* x, int c0, int c1, T* padded) {
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
  for (int c = c0; c < c1; ++c) {
    T* dst = padded + static_cast<size_t>(c) * hp * wp;
    const T* src = x + static_cast<size_t>(c) * s.h * s.w;
    std::fill(dst, dst + static_cast<size_t>(s.pad) * wp, T(0));
    for (int h = 0; h < s.h; ++h) {
      T* drow = dst + static_cast<size_t>(h + s.pad) * wp;
      std::fill(drow, drow + s.pad, T(0));
      std::copy(src + static_cast<size_t>(h) * s.w, src + static_cast<size_t>(h + 1) * s.w,
                drow + s.pad);
      std::fill(drow + s.pad + s.w, drow + wp, T(0));
    }
    std::fill(dst + static_cast<size_t>(s.h + s.pad) * wp, dst + static_cast<size_t>(hp) * wp,
              T(0));
  }
}

// Column rows [row0, row1) of image x_i into cols (row row0 first, P*Q each).
// `pad_buf` holds PaddedImage(s) elements.
template <typename T>
void Im2ColRows(const Conv2dShape& s, const T* x, size_t row0, size_t row1, T* pad_buf, T* cols) {
  if (row0 >= row1) return;
  const int out_h = s.OutH(), out_w = s.OutW();
  const size_t taps = static_cast<size_t>(s.r) * s.s;
  const T* src = x;
  if (s.pad > 0) {
    PadChannels(s, x, static_cast<int>(row0 / taps), static_cast<int>((row1 - 1) / taps + 1),
                pad_buf);
    src = pad_buf;
  }
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
  T* dst = cols;
  for (size_t row = row0; row < row1; ++row) {
    const size_t c = row / taps;
    const int r = static_cast<int>(row % taps) / s.s, f = static_cast<int>(row % taps) % s.s;
    const T* plane = src + c * hp * wp;
    if (s.stride == 1) {
      CopyWindow(plane + static_cast<size_t>(r) * wp + f, static_cast<size_t>(wp), out_h, out_w,
                 dst);
      dst += static_cast<size_t>(out_h) * out_w;
      continue;
    }
    for (int p = 0; p < out_h; ++p, dst += out_w) {
      const T* srow = plane + static_cast<size_t>(p * s.stride + r) * wp + f;
      for (int q = 0; q < out_w; ++q) dst[q] = srow[static_cast<size_t>(q) * s.stride];
    }
  }
}

// cols [C*R*S, P*Q] -> dx_i [C, H, W], fully written: each input element gets
// the sum of the taps that read it. Taps are added into a padded plane (no
// bounds checks), whose interior is then copied to dx_i.
template <typename T>
void Col2Im(const Conv2dShape& s, const T* cols, T* pad_buf, T* dx) {
  const int out_h = s.OutH(), out_w = s.OutW();
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
  T* acc = s.pad > 0 ? pad_buf : dx;
  std::fill(acc, acc + static_cast<size_t>(s.c) * hp * wp, T(0));
  const T* src = cols;
  for (int c = 0; c < s.c; ++c) {
    T* plane = acc + static_cast<size_t>(c) * hp * wp;
    for (int r = 0; r < s.r; ++r) {
      for (int f = 0; f < s.s; ++f) {
        if (s.stride == 1) {
          AddWindow(src, out_h, out_w, plane + static_cast<size_t>(r) * wp + f,
                    static_cast<size_t>(wp));
          src += static_cast<size_t>(out_h) * out_w;
          continue;
        }
        for (int p = 0; p < out_h; ++p, src += out_w) {
          T* drow = plane + static_cast<size_t>(p * s.stride + r) * wp + f;
          for (int q = 0; q < out_w; ++q) drow[static_cast<size_t>(q) * s.stride] += src[q];
        }
      }
    }
  }
  if (s.pad == 0) return;
  for (int c = 0; c < s.c; ++c) {
    for (int h = 0; h < s.h; ++h) {
      const T* srow = acc + (static_cast<size_t>(c) * hp + h + s.pad) * wp + s.pad;
      std::copy(srow, srow + s.w, dx + (static_cast<size_t>(c) * s.h + h) * s.w);
    }
  }
}

// Runs body(i, slot) for every image i in [0, n), in parallel when `parallel`.
// With no more threads than slots each thread uses its own slot for all its
// images; otherwise images go in rounds of `slots`, each with its own slot.
template <typename Body>
void ForEachImage(int n, int slots, bool parallel, const Body& body) {
  const int round = cpu::KernelThreads() <= slots ? n : slots;
  for (int n0 = 0; n0 < n; n0 += round) {
    const int nb = std::min(round, n - n0);
#pragma omp parallel for num_threads(cpu::KernelThreads()) schedule(static) if (parallel && nb > 1)
    for (int i = 0; i < nb; ++i) {
      const int slot = omp_get_num_threads() <= slots ? omp_get_thread_num() : i;
      body(n0 + i, slot);
    }
  }
}

}  // namespace

size_t Conv2dShape::WorkspaceElems() const {
  if (!ValidShape(*this)) return 0;
  return SlotElems(*this) * Slots(*this);
}

template <typename T>
void Conv2dForward(const Context& ctx, const Conv2dShape& shape, const T* x, const T* w, const T* b,
                   T* y, T* workspace) {
  if (!ValidShape(shape)) return;
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::OnednnConvForward(shape, x, w, b, y)) return;
  }
  const int crs = static_cast<int>(ColumnRows(shape));
  const int plane_out = static_cast<int>(OutPlane(shape));
  const size_t image_in = static_cast<size_t>(shape.c) * shape.h * shape.w;
  const size_t image_out = static_cast<size_t>(shape.k) * plane_out;
  const size_t slot_elems = SlotElems(shape);
  // A single image still gets a threaded GEMM (Gemm splits when not nested).
  const bool parallel = static_cast<size_t>(crs) * plane_out * shape.n >= cpu::ParallelMin(kParallelElems);
  ForEachImage(shape.n, Slots(shape), parallel, [&](int i, int slot) {
    T* cols = workspace + slot * slot_elems;
    Im2ColRows(shape, x + i * image_in, 0, crs, cols + static_cast<size_t>(crs) * plane_out, cols);
    T* y_i = y + i * image_out;
    T beta = T(0);
    if (b != nullptr) {
      for (int k = 0; k < shape.k; ++k) {
        std::fill(y_i + static_cast<size_t>(k) * plane_out,
                  y_i + static_cast<size_t>(k + 1) * plane_out, b[k]);
      }
      beta = T(1);
    }
    Gemm<T>(ctx, false, false, shape.k, plane_out, crs, T(1), w, crs, cols, plane_out, beta, y_i,
            plane_out);
  });
}

template <typename T>
void Conv2dBackward(const Context& ctx, const Conv2dShape& shape, const T* x, const T* w,
                    const T* dy, T* dx, T* dw, T* db, T* workspace) {
  if (!ValidShape(shape)) return;
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::OnednnConvBackward(shape, x, w, dy, dx, dw, db)) return;
  }
  const int crs = static_cast<int>(ColumnRows(shape));
  const int plane_out = static_cast<int>(OutPlane(shape));
  const size_t image_in = static_cast<size_t>(shape.c) * shape.h * shape.w;
  const size_t image_out = static_cast<size_t>(shape.k) * plane_out;
  const size_t slot_elems = SlotElems(shape);
  const int slots = Slots(shape);
  const bool parallel = static_cast<size_t>(crs) * plane_out * shape.n >= cpu::ParallelMin(kParallelElems);

  if (db != nullptr) {
#pragma omp parallel for num_threads(cpu::KernelThreads()) \
    schedule(static) if (image_out * shape.n >= cpu::ParallelMin(kParallelElems))
    for (int k = 0; k < shape.k; ++k) {
      double sum = 0.0;  // N*P*Q terms: accumulate in double
      for (int i = 0; i < shape.n; ++i) {
        const T* src = dy + i * image_out + static_cast<size_t>(k) * plane_out;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < plane_out; ++j) sum += static_cast<double>(src[j]);
      }
      db[k] = static_cast<T>(sum);
    }
  }

  // dw: one range of column rows per thread (at most one per slot).
  const int parts = parallel ? std::max(1, std::min({cpu::KernelThreads(), slots, crs})) : 1;
#pragma omp parallel num_threads(parts) if (parts > 1)
  {
    const int part = omp_get_thread_num(), nparts = omp_get_num_threads();
    const size_t row0 = static_cast<size_t>(crs) * part / nparts;
    const size_t row1 = static_cast<size_t>(crs) * (part + 1) / nparts;
    T* cols = workspace + part * slot_elems;
    T* pad_buf = cols + static_cast<size_t>(crs) * plane_out;
    for (int i = 0; i < shape.n && row0 < row1; ++i) {
      Im2ColRows(shape, x + i * image_in, row0, row1, pad_buf, cols);
      // dw[:, row0:row1] (+)= dy_i [K, PQ] * cols[row0:row1]^T; image 0 overwrites.
      Gemm<T>(ctx, false, true, shape.k, static_cast<int>(row1 - row0), plane_out, T(1),
              dy + i * image_out, plane_out, cols, plane_out, i == 0 ? T(0) : T(1), dw + row0, crs);
    }
  }

  if (dx == nullptr) return;
  ForEachImage(shape.n, slots, parallel, [&](int i, int slot) {
    // cols [CRS, PQ] = w^T [CRS, K] * dy_i [K, PQ], then scatter-add into dx_i.
    T* cols = workspace + slot * slot_elems;
    Gemm<T>(ctx, true, false, crs, plane_out, shape.k, T(1), w, crs, dy + i * image_out, plane_out,
            T(0), cols, plane_out);
    Col2Im(shape, cols, cols + static_cast<size_t>(crs) * plane_out, dx + i * image_in);
  });
}

#define CHORUS_INSTANTIATE_CONV(T)                                                                 \
  template void Conv2dForward<T>(const Context&, const Conv2dShape&, const T*, const T*, const T*, \
                                 T*, T*);                                                          \
  template void Conv2dBackward<T>(const Context&, const Conv2dShape&, const T*, const T*,          \
                                  const T*, T*, T*, T*, T*);
CHORUS_INSTANTIATE_CONV(float)
CHORUS_INSTANTIATE_CONV(double)
#undef CHORUS_INSTANTIATE_CONV

}  // namespace chorus::kernels
