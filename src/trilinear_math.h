/*
 * trilinear_math.h: the trilinear weights of one point and their first and
 * second derivatives, one definition shared by the CPU code (C) and the
 * kernels (CUDA), for float (_f32) and double (_f64).
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
 *
 * The double backward needs each corner weight's derivatives in p. Corner k
 * = 4 i + 2 j + l (i, j, l in {0, 1}) has weight W_k = f_i(u) f_j(v) f_l(w)
 * with f_0(x) = 1 - x and f_1(x) = x (d = vw makes corner 3 and 7 such
 * products too), so dW_k / dp is half the product's derivative, and its
 * second derivatives in p have a zero diagonal (each factor is linear):
 * d2 W_k / dp_u dp_v = 1/4 f_i' f_j' f_l(w), and so on.
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
    }                                                                                         \
                                                                                              \
    /* What the double backward needs of corner k at one point, for the      */               \
    /* direction dp (3 values: the gradient reaching grad_points[n], or 0):  */               \
    /* its weight W_k (the product of factors: the forward's corner weight   */               \
    /* up to rounding), slope[i] = dW_k / dp_i, along = sum_j dp_j slope[j], */               \
    /* and bend[i] = sum_j dp_j d2 W_k / dp_i dp_j.                          */               \
    typedef struct {                                                                          \
        T weight, along;                                                                      \
        T slope[3], bend[3];                                                                  \
    } trilinear_corner_terms_##sfx;                                                           \
                                                                                              \
    TRILINEAR_HD trilinear_corner_terms_##sfx trilinear_corner_terms_##sfx##_at(              \
        const trilinear_point_##sfx *q, const T *dp, int k)                                   \
    {                                                                                         \
        const T coord[3] = {q->u, q->v, q->w};                                                \
        T factor[3], factor_slope[3]; /* f(coord) and df / dp: +-1/2 */                       \
        for (int i = 0; i < 3; i++) {                                                         \
            const int bit = (k >> (2 - i)) & 1;                                               \
            factor[i] = bit ? coord[i] : (T)1 - coord[i];                                     \
            factor_slope[i] = bit ? (T)0.5 : (T)-0.5;                                         \
        }                                                                                     \
        trilinear_corner_terms_##sfx c;                                                       \
        c.weight = factor[0] * factor[1] * factor[2];                                         \
        c.along = (T)0;                                                                       \
        for (int i = 0; i < 3; i++) {                                                         \
            const int j = (i + 1) % 3, l = (i + 2) % 3;                                       \
            c.slope[i] = factor_slope[i] * factor[j] * factor[l];                             \
            c.bend[i] = factor_slope[i] * (factor_slope[j] * factor[l] * dp[j] +              \
                                           factor_slope[l] * factor[j] * dp[l]);              \
            c.along += dp[i] * c.slope[i];                                                    \
        }                                                                                     \
        return c;                                                                             \
    }

TRILINEAR_DEFINE(f32, float)
TRILINEAR_DEFINE(f64, double)

#endif /* TRILINEAR_MATH_H */
