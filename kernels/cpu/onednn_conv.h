// Float convolutions through oneDNN (internal to kernels/cpu; see
// onednn_conv.cc). Each call returns false when it did not run: the build has
// no oneDNN, the backend is set to im2col, or oneDNN refused the shape. The
// caller (conv2d.cc) then runs its own im2col + GEMM path, so results never
// depend on whether oneDNN is there, only their last bits do.
#pragma once

#include "kernels/ops.h"

namespace chorus::kernels::cpu {

bool OnednnConvForward(const Conv2dShape& shape, const float* x, const float* w, const float* b,
                       float* y);
bool OnednnConvBackward(const Conv2dShape& shape, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db);

}  // namespace chorus::kernels::cpu
