/*
 * roc_tiles.cuh: the feature pass's tiles, device side: the operands of a
 * block of query rows against a chunk of gallery columns, which tiles a pass
 * walks and in which order, and which pairs of a stored tile count. The tile
 * product itself is roc_gemm.cuh's; roc_eval_tiles.cu stores tiles, and the
 * direct count (roc_eval_count.cu) and the partition (roc_partition.cu) read
 * them. C++ only.
 */
#ifndef ROC_TILES_CUH
#define ROC_TILES_CUH

#include <stdint.h>

#include "roc_gemm.cuh"
#include "roc_pass.cuh"

namespace roc_gpu {

using namespace roc_count;

constexpr int kGroupRows = 8;             /* feature pass: row tiles that share column tiles */
constexpr int64_t kTilePairs = int64_t(roc_gemm::kBM) * roc_gemm::kBN;
static_assert(roc_gemm::kBN == kTileColumns && roc_gemm::kBM == 2 * kHalfTileRows,
              "the count policies' view of a stored tile");
/* the feature pass's tile product (roc_gemm.cuh; dev/cuda/roc_gemm.cu chose it:
 * version 11, alone in its kernel since the count has its own) */
using FeatureTile = roc_gemm::PipelinedTile;

/* The operands of one feature pass: a block of query rows and a chunk of
 * gallery columns prepared k-major and padded (roc_gemm.cuh): column m - m_base
 * of A is query row m, column n - n_begin of B gallery entry n, for the
 * columns [n_begin, n_end) this pass counts. m_base is a multiple of kBM, the
 * first row of the tile that holds the pass's first row (over_feature_blocks):
 * the tiles start there. */
struct Operands {
    const float *a, *b;
    int64_t lda, ldb, k_pad;
    int64_t m_base, n_begin, n_end;
};

/* The feature pass's tiles over rows [p.row_begin, p.row_end) of `op`: tiles_m
 * rows of tiles (from the one holding row_begin, op.m_base) by tiles_n columns. */
__host__ __device__ inline int64_t feature_tiles(const Operands &op, const PassParams &p,
                                                 int64_t *tiles_m, int64_t *tiles_n)
{
    *tiles_m = (p.row_end - op.m_base + roc_gemm::kBM - 1) / roc_gemm::kBM;
    *tiles_n = (op.n_end - op.n_begin + roc_gemm::kBN - 1) / roc_gemm::kBN;
    return *tiles_m * *tiles_n;
}

/* Tile t of a feature pass over `op` (tiles_m x tiles_n tiles, in groups of
 * kGroupRows row tiles, column by column, so the blocks running together
 * share their gallery tiles in L2): its first row m0 and column n0, the
 * tiles' rows from first_row (op.m_base, see for_each_tile). False where one
 * set's unordered pairs skip it: every column at or left of every row, below
 * the diagonal. */
__device__ __forceinline__ bool feature_tile(const Operands &op, const PassParams &p,
                                             int64_t first_row, int64_t t, int64_t tiles_m,
                                             int64_t tiles_n, int64_t &m0, int64_t &n0)
{
    const int64_t group = t / (kGroupRows * tiles_n);
    const int64_t rows_in_group = min(int64_t(kGroupRows), tiles_m - group * kGroupRows);
    const int64_t in_group = t - group * kGroupRows * tiles_n;
    m0 = first_row + (group * kGroupRows + in_group % rows_in_group) * roc_gemm::kBM;
    n0 = op.n_begin + (in_group / rows_in_group) * roc_gemm::kBN;
    return !(p.same_set == ROC_SAME_SET_UNORDERED && n0 + roc_gemm::kBN - 1 <= p.row_offset + m0);
}

/* body(t, m0, n0) for this block's tiles of [p.tile_begin, p.tile_end)
 * that feature_tile does not skip: tile_kernel and count_tiles_kernel walk
 * the same ones. kFromBase: the tiles' first row as op.m_base, else as the
 * same row from p.row_begin. Only ptxas tells them apart: from p.row_begin,
 * the loop-invariant held a register through tile_kernel's product, and
 * ptxas put more of its FMAs' operands in one bank; from op.m_base, the
 * partition kernel spilled. dev/NOTES.md, tile product, "Version 11's loop
 * alone in tile_kernel". */
template <bool kFromBase = false, typename Body>
__device__ __forceinline__ void for_each_tile(const Operands &op, const PassParams &p, Body body)
{
    int64_t tiles_m, tiles_n;
    feature_tiles(op, p, &tiles_m, &tiles_n);
    const int64_t first_row = kFromBase ? op.m_base : p.row_begin / roc_gemm::kBM * roc_gemm::kBM;
    for (int64_t t = p.tile_begin + blockIdx.x; t < p.tile_end; t += gridDim.x) {
        int64_t m0, n0;
        if (feature_tile(op, p, first_row, t, tiles_m, tiles_n, m0, n0))
            body(t, m0, n0);
    }
}

/* Whether every pair of the tile at (m0, n0) is one of the pass's: inside
 * its rows and columns, and off one set's diagonal. */
__device__ __forceinline__ bool whole_tile(const Operands &op, const PassParams &p, int64_t m0,
                                           int64_t n0)
{
    const int64_t d0 = p.row_offset + m0; /* the set's rows of this tile: d0 .. */
    const bool off_diagonal = n0 >= d0 + roc_gemm::kBM ||
                              (p.same_set == ROC_SAME_SET_ORDERED && n0 + roc_gemm::kBN <= d0);
    return m0 >= p.row_begin && m0 + roc_gemm::kBM <= p.row_end &&
           n0 + roc_gemm::kBN <= op.n_end && (!p.same_set || off_diagonal);
}

/* Pairs (m0 + row, n0 + col + c) of a stored tile, c < 4, four columns of a
 * row: use[c] where the pair is one of the pass's and `left` (not counted
 * yet), whole where the tile's pairs all are. */
__device__ __forceinline__ void quad_pairs(const Operands &op, const PassParams &p, int64_t m0,
                                           int64_t n0, int row, int col, bool whole, bool left,
                                           int64_t (&rows)[4], int64_t (&cols)[4],
                                           bool (&use)[4])
{
#pragma unroll
    for (int c = 0; c < 4; c++) {
        rows[c] = m0 + row;
        cols[c] = n0 + col + c;
        use[c] = left && (whole || (rows[c] >= p.row_begin && rows[c] < p.row_end &&
                                    cols[c] < op.n_end && counted(p, rows[c], cols[c])));
    }
}

} // namespace roc_gpu

#endif /* ROC_TILES_CUH */
