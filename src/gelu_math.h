/*
 * gelu_math.h: GELU and its derivative, one definition shared by the CPU code
 * (C) and the kernels (CUDA), for float (gelu_value_f32, gelu_slope_f32) and
 * double (_f64). Each type computes in its own precision, as torch does.
 *
 * With Phi the standard normal CDF and phi its density:
 *
 *   none     y = x Phi(x),  Phi(x) = 0.5 (1 + erf(x / sqrt 2))
 *            dy/dx = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 *   tanh     y = 0.5 x (1 + t),  t = tanh(k (x + 0.044715 x^3)),  k = sqrt(2 / pi)
 *            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)
 *   sigmoid  y = x s,  s = sigmoid(1.702 x)
 *            dy/dx = s + 1.702 x s (1 - s)
 *
 * Each slope's second term is the product of x (or x^2) with a factor that
 * is exactly 0 once the first term has saturated (pdf, 1 - t^2, s (1 - s)).
 * Past that point the slope is the first term alone: multiplying would give
 * inf * 0 = NaN where 1.702 x or x^2 overflows (|x| > FLT_MAX / 1.702 or
 * sqrt(FLT_MAX) in float) and at x = +-inf, whose slopes are 1 and 0.
 */
#ifndef GELU_MATH_H
#define GELU_MATH_H

#include <math.h>

#include "gelu.h"

#ifdef __CUDACC__
#define GELU_HD __host__ __device__ __forceinline__
#else
#define GELU_HD static inline
#endif

#define GELU_SQRT1_2 0.70710678118654752440       /* 1 / sqrt(2) */
#define GELU_INV_SQRT_2PI 0.39894228040143267794  /* 1 / sqrt(2 pi) */
#define GELU_SQRT_2_PI 0.79788456080286535588     /* sqrt(2 / pi) */
#define GELU_TANH_CUBIC 0.044715
#define GELU_SIGMOID_SLOPE 1.702

#define GELU_DEFINE(sfx, T, ERF, TANH, EXP)                                                   \
    GELU_HD T gelu_value_##sfx(T x, int approximate)                                         \
    {                                                                                         \
        if (approximate == GELU_TANH) {                                                       \
            T inner = (T)GELU_SQRT_2_PI * (x + (T)GELU_TANH_CUBIC * x * x * x);              \
            return (T)0.5 * x * ((T)1 + TANH(inner));                                         \
        }                                                                                     \
        if (approximate == GELU_SIGMOID)                                                      \
            return x / ((T)1 + EXP(-(T)GELU_SIGMOID_SLOPE * x));                              \
        return (T)0.5 * x * ((T)1 + ERF(x * (T)GELU_SQRT1_2));                                \
    }                                                                                         \
                                                                                              \
    GELU_HD T gelu_slope_##sfx(T x, int approximate)                                         \
    {                                                                                         \
        if (approximate == GELU_TANH) {                                                       \
            T x_sq = x * x;                                                                   \
            T t = TANH((T)GELU_SQRT_2_PI * (x + (T)GELU_TANH_CUBIC * x_sq * x));             \
            T sech_sq = (T)1 - t * t;                                                         \
            if (sech_sq == (T)0)                                                              \
                return (T)0.5 * ((T)1 + t);                                                   \
            T inner_slope = (T)GELU_SQRT_2_PI * ((T)1 + (T)(3 * GELU_TANH_CUBIC) * x_sq);    \
            return (T)0.5 * ((T)1 + t) + (T)0.5 * x * sech_sq * inner_slope;                  \
        }                                                                                     \
        if (approximate == GELU_SIGMOID) {                                                    \
            T s = (T)1 / ((T)1 + EXP(-(T)GELU_SIGMOID_SLOPE * x));                            \
            T s_slope = s * ((T)1 - s);                                                       \
            if (s_slope == (T)0)                                                              \
                return s;                                                                     \
            return s + (T)GELU_SIGMOID_SLOPE * x * s_slope;                                   \
        }                                                                                     \
        T cdf = (T)0.5 * ((T)1 + ERF(x * (T)GELU_SQRT1_2));                                   \
        T pdf = EXP((T)-0.5 * x * x) * (T)GELU_INV_SQRT_2PI;                                  \
        if (pdf == (T)0)                                                                      \
            return cdf;                                                                       \
        return cdf + x * pdf;                                                                 \
    }

GELU_DEFINE(f32, float, erff, tanhf, expf)
GELU_DEFINE(f64, double, erf, tanh, exp)

#endif /* GELU_MATH_H */
