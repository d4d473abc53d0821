/*
 * trilinear_math.h: the trilinear weights of one point and their derivatives,
 * one definition shared by the CPU code (C) and the kernels (CUDA), for float
 * (_f32) and double (_f64).
 *
 * A point p in [-1, 1]^3 becomes u, v, w = (p + 1) / 2. Corners 0..3 sit at
 * u = 0 and 4..7 at u = 1; within each four, a = (1-v)(1-w), b = (1-v)w,
 * c = v(1-w) and d = 1 - a - b - c weight corners 0, 1, 2, 3 (the seed's
 * formula; d equals vw). So, at one feature index with corner values f0..f7,
 *
 *   out = (1-u) lo + u hi,   lo = a f0 + b f1 + c f2 + d f3,
 *                            hi = a f4 + b f5 + c f6 + d f7
 *
 * and its slopes (d = vw, so dd/dv = w and dd/dw = v):
 *
 *   d out / du = hi - lo
 *   d out / dv = (1-u) [(1-w)(f2 - f0) + w (f3 - f1)] + u [(1-w)(f6 - f4) + w (f7 - f5)]
 *   d out / dw = (1-u) [(1-v)(f1 - f0) + v (f3 - f2)] + u [(1-v)(f5 - f4) + v (f7 - f6)]
 *
 * A gradient with respect to p is half the one with respect to (u, v, w).
 */
#ifndef TRILINEAR_MATH_H
#define TRILINEAR_MATH_H

#ifdef __CUDACC__
#define TRILINEAR_HD __host__ __device__ __forceinline__
#else
#define TRILINEAR_HD static inline
#endif

#define TRILINEAR_DEFINE(sfx, T)                                                              \
    /* u, v, w of one point and the weights of its 8 corners */                              \
    typedef struct {                                                                          \
        T u, v, w;                                                                            \
        T a, b, c, d;                                                                         \
        T corner[8];                                                                          \
    } trilinear_point_##sfx;                                                                  \
                                                                                              \
    TRILINEAR_HD trilinear_point_##sfx trilinear_point_##sfx##_at(const T *p)                 \
    {                                                                                         \
        trilinear_point_##sfx q;                                                              \
        q.u = (p[0] + (T)1) / (T)2;                                                           \
        q.v = (p[1] + (T)1) / (T)2;                                                           \
        q.w = (p[2] + (T)1) / (T)2;                                                           \
        q.a = ((T)1 - q.v) * ((T)1 - q.w);                                                    \
        q.b = ((T)1 - q.v) * q.w;                                                             \
        q.c = q.v * ((T)1 - q.w);                                                             \
        q.d = (T)1 - q.a - q.b - q.c;                                                         \
        q.corner[0] = ((T)1 - q.u) * q.a;                                                     \
        q.corner[1] = ((T)1 - q.u) * q.b;                                                     \
        q.corner[2] = ((T)1 - q.u) * q.c;                                                     \
        q.corner[3] = ((T)1 - q.u) * q.d;                                                     \
        q.corner[4] = q.u * q.a;                                                              \
        q.corner[5] = q.u * q.b;                                                              \
        q.corner[6] = q.u * q.c;                                                              \
        q.corner[7] = q.u * q.d;                                                              \
        return q;                                                                             \
    }                                                                                         \
                                                                                              \
    /* out at one feature index; f holds the 8 corner values */                              \
    TRILINEAR_HD T trilinear_value_##sfx(const trilinear_point_##sfx *q, const T *f)         \
    {                                                                                         \
        T lo = q->a * f[0] + q->b * f[1] + q->c * f[2] + q->d * f[3];                         \
        T hi = q->a * f[4] + q->b * f[5] + q->c * f[6] + q->d * f[7];                         \
        return ((T)1 - q->u) * lo + q->u * hi;                                                \
    }                                                                                         \
                                                                                              \
    /* slope[0..2] = d out / d (u, v, w) at one feature index */                             \
    TRILINEAR_HD void trilinear_slopes_##sfx(const trilinear_point_##sfx *q, const T *f,     \
                                             T *slope)                                        \
    {                                                                                         \
        const T u0 = (T)1 - q->u, v0 = (T)1 - q->v, w0 = (T)1 - q->w;                         \
        T lo = q->a * f[0] + q->b * f[1] + q->c * f[2] + q->d * f[3];                         \
        T hi = q->a * f[4] + q->b * f[5] + q->c * f[6] + q->d * f[7];                         \
        slope[0] = hi - lo;                                                                   \
        slope[1] = u0 * (w0 * (f[2] - f[0]) + q->w * (f[3] - f[1])) +                         \
                   q->u * (w0 * (f[6] - f[4]) + q->w * (f[7] - f[5]));                        \
        slope[2] = u0 * (v0 * (f[1] - f[0]) + q->v * (f[3] - f[2])) +                         \
                   q->u * (v0 * (f[5] - f[4]) + q->v * (f[7] - f[6]));                        \
    }

TRILINEAR_DEFINE(f32, float)
TRILINEAR_DEFINE(f64, double)

#endif /* TRILINEAR_MATH_H */
