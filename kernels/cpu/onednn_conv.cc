// Float convolutions through oneDNN (Debian's libdnnl, the library PyTorch's
// CPU convolutions run on). Its JIT kernels work on channel-blocked layouts
// (nChw16c on AVX-512) and beat im2col + GEMM on the CNN's convolutions,
// mostly because no column matrix goes through memory (docs/performance.md,
// "Single-node training against PyTorch").
//
// The op API stays NCHW: every call reorders the plain tensors it reads into
// the layouts the primitive chose (x, w, dy: small next to the convolution
// itself) and the results back (y, dx, dw). The C API is used, not dnnl.hpp,
// because the C++ API reports errors by throwing.
//
// Primitives are created once per (shape, thread count) and kept in a small
// per-thread cache with their blocked buffers: creating one JIT-compiles code
// (milliseconds), and a per-thread cache needs no lock even when many virtual
// nodes (chorus simulate) train at once on their own threads. oneDNN uses
// OpenMP, the kernels' only thread pool; the calling thread's OpenMP thread
// count is set to KernelThreads() before each call.
#include "kernels/cpu/onednn_conv.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "kernels/cpu/parallel.h"

#if CHORUS_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

namespace chorus::kernels {
namespace {

std::atomic<ConvBackend> conv_backend{ConvBackend::kAuto};
// Set after oneDNN failed once: from then on convolutions use im2col.
std::atomic<bool> onednn_failed{false};

}  // namespace

void SetConvBackend(ConvBackend backend) { conv_backend.store(backend, std::memory_order_relaxed); }

bool ConvUsesOnednn() {
  return CHORUS_HAVE_ONEDNN && conv_backend.load(std::memory_order_relaxed) == ConvBackend::kAuto &&
         !onednn_failed.load(std::memory_order_relaxed);
}

namespace cpu {

#if CHORUS_HAVE_ONEDNN
namespace {

struct PdDeleter {
  void operator()(dnnl_primitive_desc_t p) const { dnnl_primitive_desc_destroy(p); }
};
struct PrimitiveDeleter {
  void operator()(dnnl_primitive_t p) const { dnnl_primitive_destroy(p); }
};
struct MemoryDeleter {
  void operator()(dnnl_memory_t m) const { dnnl_memory_destroy(m); }
};
using PdPtr = std::unique_ptr<dnnl_primitive_desc, PdDeleter>;
using PrimitivePtr = std::unique_ptr<dnnl_primitive, PrimitiveDeleter>;
using MemoryPtr = std::unique_ptr<dnnl_memory, MemoryDeleter>;

// Logs the first failure and turns oneDNN off for the rest of the process.
bool Failed(const char* what, dnnl_status_t status) {
  if (!onednn_failed.exchange(true)) {
    CHORUS_LOG_WARN(Subsys::kKernels, "oneDNN: ", what, " failed (status ",
                    static_cast<int>(status), "); convolutions fall back to im2col + GEMM");
  }
  return false;
}

#define CHORUS_DNNL_OK(call)                                 \
  do {                                                       \
    const dnnl_status_t chorus_dnnl_status = (call);         \
    if (chorus_dnnl_status != dnnl_success) {                \
      return Failed(#call, chorus_dnnl_status);              \
    }                                                        \
  } while (false)

dnnl_engine_t Engine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return static_cast<dnnl_engine_t>(nullptr);
    return e;
  }();
  return engine;
}

dnnl_stream_t Stream() {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream != nullptr) dnnl_stream_destroy(stream);
    }
  };
  thread_local Holder holder;
  if (holder.stream == nullptr && Engine() != nullptr) {
    dnnl_stream_create(&holder.stream, Engine(), dnnl_stream_default_flags);
  }
  return holder.stream;
}

// One tensor argument of a primitive: a memory object over the caller's plain
// tensor (its handle set per call) and, when the primitive wants another
// layout, a library-owned buffer in that layout and the reorder between them
// (plain -> blocked for inputs, blocked -> plain for outputs).
struct Operand {
  MemoryPtr plain;
  MemoryPtr blocked;  // null when the primitive takes the plain layout
  PrimitivePtr reorder;

  dnnl_memory_t for_primitive() const { return blocked ? blocked.get() : plain.get(); }
};

bool MakeOperand(const dnnl_memory_desc_t& plain_md, const dnnl_memory_desc_t* wanted,
                 bool input, Operand* out) {
  if (wanted == nullptr) return Failed("querying a memory descriptor", dnnl_runtime_error);
  dnnl_memory_t m = nullptr;
  CHORUS_DNNL_OK(dnnl_memory_create(&m, &plain_md, Engine(), DNNL_MEMORY_NONE));
  out->plain.reset(m);
  if (dnnl_memory_desc_equal(&plain_md, wanted)) return true;
  CHORUS_DNNL_OK(dnnl_memory_create(&m, wanted, Engine(), DNNL_MEMORY_ALLOCATE));
  out->blocked.reset(m);
  dnnl_primitive_desc_t pd = nullptr;
  CHORUS_DNNL_OK(input ? dnnl_reorder_primitive_desc_create(&pd, &plain_md, Engine(), wanted,
                                                            Engine(), nullptr)
                       : dnnl_reorder_primitive_desc_create(&pd, wanted, Engine(), &plain_md,
                                                            Engine(), nullptr));
  PdPtr owned(pd);
  dnnl_primitive_t reorder = nullptr;
  CHORUS_DNNL_OK(dnnl_primitive_create(&reorder, pd));
  out->reorder.reset(reorder);
  return true;
}

bool Execute(dnnl_primitive_t primitive, std::initializer_list<dnnl_exec_arg_t> args) {
  CHORUS_DNNL_OK(dnnl_primitive_execute(primitive, Stream(), static_cast<int>(args.size()),
                                        args.begin()));
  return true;
}

// Points an input operand at the caller's tensor and brings it into the
// primitive's layout.
bool Load(Operand& op, const float* data) {
  CHORUS_DNNL_OK(dnnl_memory_set_data_handle(op.plain.get(), const_cast<float*>(data)));
  if (!op.reorder) return true;
  return Execute(op.reorder.get(),
                 {{DNNL_ARG_FROM, op.plain.get()}, {DNNL_ARG_TO, op.blocked.get()}});
}

// Points an output operand at the caller's tensor (before the primitive runs).
bool Bind(Operand& op, float* data) {
  CHORUS_DNNL_OK(dnnl_memory_set_data_handle(op.plain.get(), data));
  return true;
}

// Brings an output operand back into the caller's plain layout.
bool Store(Operand& op) {
  if (!op.reorder) return true;
  return Execute(op.reorder.get(),
                 {{DNNL_ARG_FROM, op.blocked.get()}, {DNNL_ARG_TO, op.plain.get()}});
}

const dnnl_memory_desc_t* Query(const dnnl_primitive_desc_t pd, dnnl_query_t what) {
  return dnnl_primitive_desc_query_md(pd, what, 0);
}

// Forward, backward-weights and backward-data primitives of one shape, with
// their operands.
struct Plan {
  Conv2dShape shape;
  int threads = 0;
  PrimitivePtr fwd, bwd_weights, bwd_data;
  Operand fwd_x, fwd_w, fwd_y, fwd_b;
  Operand bww_x, bww_dy, bww_dw, bww_db;
  Operand bwd_dy, bwd_w, bwd_dx;
  bool bwd_dy_shared = false;  // backward-data takes dy in bww_dy's layout

  bool Init(const Conv2dShape& s, int thread_count) {
    shape = s;
    threads = thread_count;
    const dnnl_dims_t x_dims = {s.n, s.c, s.h, s.w};
    const dnnl_dims_t w_dims = {s.k, s.c, s.r, s.s};
    const dnnl_dims_t b_dims = {s.k};
    const dnnl_dims_t y_dims = {s.n, s.k, s.OutH(), s.OutW()};
    const dnnl_dims_t strides = {s.stride, s.stride};
    const dnnl_dims_t pad_l = {s.pad, s.pad};
    // Right padding so that the output size matches OutH/OutW exactly.
    const dnnl_dims_t pad_r = {(s.OutH() - 1) * s.stride + s.r - s.h - s.pad,
                               (s.OutW() - 1) * s.stride + s.s - s.w - s.pad};
    dnnl_memory_desc_t x_md, w_md, b_md, y_md, x_any, w_any, y_any;
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&x_md, 4, x_dims, dnnl_f32, dnnl_nchw));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&w_md, 4, w_dims, dnnl_f32, dnnl_oihw));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&b_md, 1, b_dims, dnnl_f32, dnnl_x));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&y_md, 4, y_dims, dnnl_f32, dnnl_nchw));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&x_any, 4, x_dims, dnnl_f32, dnnl_format_tag_any));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&w_any, 4, w_dims, dnnl_f32, dnnl_format_tag_any));
    CHORUS_DNNL_OK(dnnl_memory_desc_init_by_tag(&y_any, 4, y_dims, dnnl_f32, dnnl_format_tag_any));

    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t raw = nullptr;
    CHORUS_DNNL_OK(dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training,
                                                      dnnl_convolution_direct, &x_any, &w_any,
                                                      &b_md, &y_any, strides, pad_l, pad_r));
    CHORUS_DNNL_OK(dnnl_primitive_desc_create(&raw, &desc, nullptr, Engine(), nullptr));
    PdPtr fwd_pd(raw);
    CHORUS_DNNL_OK(dnnl_convolution_backward_weights_desc_init(
        &desc, dnnl_convolution_direct, &x_any, &w_any, &b_md, &y_any, strides, pad_l, pad_r));
    CHORUS_DNNL_OK(dnnl_primitive_desc_create(&raw, &desc, nullptr, Engine(), fwd_pd.get()));
    PdPtr bww_pd(raw);
    CHORUS_DNNL_OK(dnnl_convolution_backward_data_desc_init(
        &desc, dnnl_convolution_direct, &x_any, &w_any, &y_any, strides, pad_l, pad_r));
    CHORUS_DNNL_OK(dnnl_primitive_desc_create(&raw, &desc, nullptr, Engine(), fwd_pd.get()));
    PdPtr bwd_pd(raw);

    dnnl_primitive_t p = nullptr;
    CHORUS_DNNL_OK(dnnl_primitive_create(&p, fwd_pd.get()));
    fwd.reset(p);
    CHORUS_DNNL_OK(dnnl_primitive_create(&p, bww_pd.get()));
    bwd_weights.reset(p);
    CHORUS_DNNL_OK(dnnl_primitive_create(&p, bwd_pd.get()));
    bwd_data.reset(p);

    return MakeOperand(x_md, Query(fwd_pd.get(), dnnl_query_src_md), true, &fwd_x) &&
           MakeOperand(w_md, Query(fwd_pd.get(), dnnl_query_weights_md), true, &fwd_w) &&
           MakeOperand(b_md, dnnl_primitive_desc_query_md(fwd_pd.get(), dnnl_query_weights_md, 1),
                       true, &fwd_b) &&
           MakeOperand(y_md, Query(fwd_pd.get(), dnnl_query_dst_md), false, &fwd_y) &&
           MakeOperand(x_md, Query(bww_pd.get(), dnnl_query_src_md), true, &bww_x) &&
           MakeOperand(y_md, Query(bww_pd.get(), dnnl_query_diff_dst_md), true, &bww_dy) &&
           MakeOperand(w_md, Query(bww_pd.get(), dnnl_query_diff_weights_md), false, &bww_dw) &&
           MakeOperand(b_md,
                       dnnl_primitive_desc_query_md(bww_pd.get(), dnnl_query_diff_weights_md, 1),
                       false, &bww_db) &&
           MakeBackwardDataOperands(bww_pd.get(), bwd_pd.get(), y_md, w_md, x_md);
  }

  bool MakeBackwardDataOperands(dnnl_primitive_desc_t bww_pd, dnnl_primitive_desc_t bwd_pd,
                                const dnnl_memory_desc_t& y_md, const dnnl_memory_desc_t& w_md,
                                const dnnl_memory_desc_t& x_md) {
    const dnnl_memory_desc_t* dy_bww = Query(bww_pd, dnnl_query_diff_dst_md);
    const dnnl_memory_desc_t* dy_bwd = Query(bwd_pd, dnnl_query_diff_dst_md);
    bwd_dy_shared = dy_bww != nullptr && dy_bwd != nullptr && dnnl_memory_desc_equal(dy_bww, dy_bwd);
    return (bwd_dy_shared || MakeOperand(y_md, dy_bwd, true, &bwd_dy)) &&
           MakeOperand(w_md, Query(bwd_pd, dnnl_query_weights_md), true, &bwd_w) &&
           MakeOperand(x_md, Query(bwd_pd, dnnl_query_diff_src_md), false, &bwd_dx);
  }

  bool Forward(const float* x, const float* w, const float* b, float* y) {
    if (!Load(fwd_x, x) || !Load(fwd_w, w) || !Load(fwd_b, b) || !Bind(fwd_y, y)) return false;
    return Execute(fwd.get(), {{DNNL_ARG_SRC, fwd_x.for_primitive()},
                               {DNNL_ARG_WEIGHTS, fwd_w.for_primitive()},
                               {DNNL_ARG_BIAS, fwd_b.for_primitive()},
                               {DNNL_ARG_DST, fwd_y.for_primitive()}}) &&
           Store(fwd_y);
  }

  bool Backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db) {
    if (!Load(bww_x, x) || !Load(bww_dy, dy) || !Bind(bww_dw, dw) || !Bind(bww_db, db)) {
      return false;
    }
    if (!Execute(bwd_weights.get(), {{DNNL_ARG_SRC, bww_x.for_primitive()},
                                     {DNNL_ARG_DIFF_DST, bww_dy.for_primitive()},
                                     {DNNL_ARG_DIFF_WEIGHTS, bww_dw.for_primitive()},
                                     {DNNL_ARG_DIFF_BIAS, bww_db.for_primitive()}}) ||
        !Store(bww_dw) || !Store(bww_db)) {
      return false;
    }
    if (dx == nullptr) return true;
    Operand& dy_op = bwd_dy_shared ? bww_dy : bwd_dy;
    if ((!bwd_dy_shared && !Load(bwd_dy, dy)) || !Load(bwd_w, w) || !Bind(bwd_dx, dx)) {
      return false;
    }
    return Execute(bwd_data.get(), {{DNNL_ARG_DIFF_DST, dy_op.for_primitive()},
                                    {DNNL_ARG_WEIGHTS, bwd_w.for_primitive()},
                                    {DNNL_ARG_DIFF_SRC, bwd_dx.for_primitive()}}) &&
           Store(bwd_dx);
  }
};

// Plans of the calling thread, most recently created last. A model uses a few
// shapes (each conv layer at the training and the evaluation batch, and a short
// last batch), so a handful is enough.
constexpr size_t kMaxPlans = 8;

Plan* PlanFor(const Conv2dShape& shape) {
  if (Engine() == nullptr || Stream() == nullptr) return nullptr;
  const int threads = KernelThreads();
  // oneDNN sizes its parallel work by the calling thread's OpenMP setting.
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  thread_local std::vector<std::unique_ptr<Plan>> plans;
  for (const auto& plan : plans) {
    if (plan->threads == threads && plan->shape == shape) return plan.get();
  }
  auto plan = std::make_unique<Plan>();
  if (!plan->Init(shape, threads)) return nullptr;
  if (plans.size() >= kMaxPlans) plans.erase(plans.begin());
  plans.push_back(std::move(plan));
  return plans.back().get();
}

}  // namespace

bool OnednnConvForward(const Conv2dShape& shape, const float* x, const float* w, const float* b,
                       float* y) {
  if (!ConvUsesOnednn() || b == nullptr) return false;
  Plan* plan = PlanFor(shape);
  return plan != nullptr && plan->Forward(x, w, b, y);
}

bool OnednnConvBackward(const Conv2dShape& shape, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db) {
  if (!ConvUsesOnednn() || dw == nullptr || db == nullptr) return false;
  Plan* plan = PlanFor(shape);
  return plan != nullptr && plan->Backward(x, w, dy, dx, dw, db);
}

#else  // !CHORUS_HAVE_ONEDNN

bool OnednnConvForward(const Conv2dShape&, const float*, const float*, const float*, float*) {
  return false;
}

bool OnednnConvBackward(const Conv2dShape&, const float*, const float*, const float*, float*,
                        float*, float*) {
  return false;
}

#endif

}  // namespace cpu
}  // namespace chorus::kernels
