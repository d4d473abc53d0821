/*
 * gelu_math.h: GELU and its first and second derivatives, one definition
 * shared by the CPU code (C) and the kernels (CUDA), for float
 * (gelu_value_f32, gelu_slope_f32, gelu_curvature_f32) and double (_f64).
 * Each type computes in its own precision, as torch does.
 *
 * With Phi the standard normal CDF and phi its density:
 *
 *   none     y = x Phi(x),  Phi(x) = 0.5 (1 + erf(x / sqrt 2))
 *            dy/dx = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 *            d2y/dx2 = phi(x) (2 - x^2)
 *   tanh     y = 0.5 x (1 + t),  t = tanh(z),  z = k (x + c x^3),
 *            k = sqrt(2 / pi), c = 0.044715,  z' = k (1 + 3 c x^2)
 *            dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) z'
 *            d2y/dx2 = (1 - t^2) (k (1 + 6 c x^2) - x t z'^2)
 *   sigmoid  y = x s,  s = sigmoid(a x),  a = 1.702
 *            dy/dx = s + a x s (1 - s)
 *            d2y/dx2 = a s (1 - s) (2 + a x (1 - 2 s))
 *
 * Each slope's second term, and each whole curvature, is a product with a
 * factor that is exactly 0 once the function has saturated (pdf, 1 - t^2,
 * s (1 - s)). Past that point the slope is the first term alone and the
 * curvature 0: multiplying would give inf * 0 = NaN where 1.702 x or x^2
 * overflows (|x| > FLT_MAX / 1.702 or sqrt(FLT_MAX) in float) and at x =
 * +-inf, whose slopes are 1 and 0 and whose curvature is 0.
 *
 * The curvature takes those factors from e = exp(-2 |z|) (tanh) or
 * exp(-1.702 |x|) (sigmoid), as 1 - t^2 = 4 e / (1 + e)^2, x t = |x| (1 - e)
 * / (1 + e), s (1 - s) = e / (1 + e)^2 and x (1 - 2 s) = -|x| (1 - e) / (1 +
 * e) (GELU'' is even in each factor's sign). 1 - t * t and s (1 - s) would
 * cancel where t or s rounds near 1, and the curvature multiplies that
 * factor by up to |x| z'^2: in float, 1 - t * t is 0 or 1.2e-7 at x = 5,
 * where the curvature is -3e-6.
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

#define GELU_DEFINE(sfx, T, ERF, TANH, EXP, FABS)                                             \
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
    }                                                                                         \
                                                                                              \
    GELU_HD T gelu_curvature_##sfx(T x, int approximate)                                     \
    {                                                                                         \
        T abs_x = FABS(x);                                                                    \
        if (approximate == GELU_TANH) {                                                       \
            T x_sq = x * x;                                                                   \
            T inner = (T)GELU_SQRT_2_PI * (abs_x + (T)GELU_TANH_CUBIC * x_sq * abs_x);       \
            T e = EXP((T)-2 * inner);                                                         \
            T sech_sq = (T)4 * e / (((T)1 + e) * ((T)1 + e));                                 \
            if (sech_sq == (T)0)                                                              \
                return (T)0;                                                                  \
            T x_t = abs_x * (((T)1 - e) / ((T)1 + e));                                        \
            T inner_slope = (T)GELU_SQRT_2_PI * ((T)1 + (T)(3 * GELU_TANH_CUBIC) * x_sq);    \
            T inner_part = (T)GELU_SQRT_2_PI * ((T)1 + (T)(6 * GELU_TANH_CUBIC) * x_sq);     \
            return sech_sq * (inner_part - x_t * inner_slope * inner_slope);                  \
        }                                                                                     \
        if (approximate == GELU_SIGMOID) {                                                    \
            T e = EXP(-(T)GELU_SIGMOID_SLOPE * abs_x);                                        \
            T s_slope = e / (((T)1 + e) * ((T)1 + e));                                        \
            if (s_slope == (T)0)                                                              \
                return (T)0;                                                                  \
            T x_sign_term = (T)GELU_SIGMOID_SLOPE * abs_x * (((T)1 - e) / ((T)1 + e));       \
            return (T)GELU_SIGMOID_SLOPE * s_slope * ((T)2 - x_sign_term);                    \
        }                                                                                     \
        T pdf = EXP((T)-0.5 * x * x) * (T)GELU_INV_SQRT_2PI;                                  \
        if (pdf == (T)0)                                                                      \
            return (T)0;                                                                      \
        return pdf * ((T)2 - x * x);                                                          \
    }

GELU_DEFINE(f32, float, erff, tanhf, expf, fabsf)
GELU_DEFINE(f64, double, erf, tanh, exp, fabs)

#endif /* GELU_MATH_H */
