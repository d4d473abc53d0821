/*
 * roc_partition.cuh: the partition kernel's agent (RangeSorter): a stored
 * tile's keys staged by range of genuine levels in shared memory and written
 * to the ranges' segments, which the drain then counts (roc_partition.cu).
 * C++ only.
 */
#ifndef ROC_PARTITION_CUH
#define ROC_PARTITION_CUH

#include <stdint.h>

#include "roc_pass.cuh"

namespace roc_count {

/* the drain's index over a range's levels: 2^12 to 2^14 buckets, the most
 * that its shared memory leaves room for (roc_partition.cu's drain_bucket_bits) */
constexpr int kDrainBucketBitsMax = 14;
constexpr int kDrainBucketBitsMin = 12;

/* The partition kernel's work (roc_partition.cu): a stored tile's keys at
 * a time, held in registers, staged by range in shared memory and written to
 * the ranges' segments. For a launch each range has a run of the kStageSlots
 * staging slots, in proportion to the keys it drew since the last drain
 * (segment_kernel's stage layout): a key takes the next slot of its range's
 * run (one shared atomic) or, past the run's end, goes straight to its place
 * in the block's part of the segment. Then each warp writes 32 slots at a
 * time, a lane's slot's range read off a bitmap of the runs' starts. Sorted
 * by a histogram, a scan and a scatter instead, each key was looked up three
 * times and passed four barriers (dev/NOTES.md, partition/drain).
 * ROC_NO_KEY (below the lowest level) is skipped. */
class RangeSorter {
  public:
    static constexpr int kKeys = kSortKeys / kPartitionThreads; /* a thread's */
    /* the runs' bitmap; sink, fill, layout, left; the staged keys; the index */
    static constexpr size_t kSharedBytes =
        size_t(kStageWords + kHistogram) * sizeof(uint2) +
        size_t(3 * kHistogram + kStageSlots) * sizeof(uint32_t) +
        size_t(kRangeBuckets + 2) * sizeof(uint16_t);

    __device__ RangeSorter(const PassParams &p, uint32_t *shared) : p_(p), shared_(shared)
    {
        lowest_ = __ldg(p.levels);
        highest_ = __ldg(p.levels + p.n_levels - 1);
    }

    __device__ void begin_block()
    {
        for (int r = threadIdx.x; r < kHistogram; r += blockDim.x) {
            const bool real = r < p_.part.n_ranges;
            const uint32_t lay = real ? p_.part.stage_layout[r] : 0u;
            const uint32_t room = real ? p_.part.capacity[r] / uint32_t(p_.part.n_blocks) : 0u;
            const uint32_t next = real ? p_.part.offset[r] + blockIdx.x * room : 0u;
            layout()[r] = lay;
            fill()[r] = 0;
            sink()[r].y = next - (lay & 0xffffu);
            left()[r] = room;
        }
        for (int w = threadIdx.x; w < kStageWords; w += blockDim.x)
            owner()[w] = p_.part.stage_owner[w];
        for (int b = threadIdx.x; b <= kRangeBuckets; b += blockDim.x)
            range_index()[b] = p_.part.index[b];
        __syncthreads();
    }

    /* A tile's keys (kSortKeys), kKeys a thread; every thread calls it.
     * kScoreAxis: whether the index's buckets are even in the score
     * (p.part.scale > 0), chosen once a kernel so that a lookup does not
     * test it. */
    template <bool kScoreAxis> __device__ void sort(const uint32_t (&key)[kKeys])
    {
        /* kLook lookups at once so that their reads overlap */
        constexpr int kLook = 4;
#pragma unroll
        for (int u0 = 0; u0 < kKeys; u0 += kLook) {
            int slot[kLook];
            uint32_t pos[kLook], lay[kLook], past = 0;
            histogram_slots<kScoreAxis>(key + u0, slot);
#pragma unroll
            for (int u = 0; u < kLook; u++)
                pos[u] = atomicAdd(&fill()[slot[u]], 1u);
#pragma unroll
            for (int u = 0; u < kLook; u++)
                lay[u] = layout()[slot[u]];
#pragma unroll
            for (int u = 0; u < kLook; u++) {
                if (pos[u] < lay[u] >> 16)
                    staged()[(lay[u] & 0xffffu) + pos[u]] = key[u0 + u];
                else /* past its run (kDiscard's is empty) */
                    past |= uint32_t(slot[u] != kDiscard) << u;
            }
            if (past) /* one branch for the group: a branch a key cost ~3 instructions */
#pragma unroll
                for (int u = 0; u < kLook; u++)
                    if (past >> u & 1)
                        place(slot[u], pos[u] + (lay[u] & 0xffffu), key[u0 + u]);
        }
        __syncthreads();
        /* the slot where the keys of each range's run that its part has room
         * for end; whether a run holds keys past it */
        bool full = false;
        for (int r = threadIdx.x; r < p_.part.n_ranges; r += blockDim.x) {
            const uint32_t lay = layout()[r], in_run = min(fill()[r], lay >> 16);
            sink()[r].x = (lay & 0xffffu) + min(in_run, left()[r]);
            full = full || in_run > left()[r];
        }
        if (__syncthreads_or(full))
            write_staged<true>();
        else
            write_staged<false>();
        __syncthreads(); /* every slot written, every sink read */
        for (int r = threadIdx.x; r < kHistogram; r += blockDim.x) {
            const uint32_t n = fill()[r];
            sink()[r].y += n;
            left()[r] = left()[r] > n ? left()[r] - n : 0u;
            fill()[r] = 0;
        }
        __syncthreads(); /* zero before the next keys' atomics */
    }

    /* What the block's parts of the segments hold, and what it asked for. */
    __device__ void end_block()
    {
        __syncthreads();
        for (int r = threadIdx.x; r < p_.part.n_ranges; r += blockDim.x) {
            const uint32_t room = p_.part.capacity[r] / uint32_t(p_.part.n_blocks);
            const uint32_t first = p_.part.offset[r] + blockIdx.x * room;
            const uint32_t n = sink()[r].y + (layout()[r] & 0xffffu) - first;
            p_.part.block_used[size_t(blockIdx.x) * p_.part.n_ranges + r] = min(n, room);
            if (n)
                atomicAdd(&p_.part.reserved[r], n);
        }
    }

  private:
    /* owner[w]: bit i set where a range's run starts at slot 32 w + i, and
     * the runs that start before slot 32 w, less one */
    __device__ uint2 *owner() const { return reinterpret_cast<uint2 *>(shared_); }
    /* a range's: x, the slot where the keys of its run that its part has
     * room for end; y, where staged slot t goes in the keys' buffer: y + t */
    __device__ uint2 *sink() const { return owner() + kStageWords; }
    __device__ uint32_t *fill() const { return reinterpret_cast<uint32_t *>(sink() + kHistogram); }
    /* a range's run: its first slot, and in the top 16 bits its slots */
    __device__ uint32_t *layout() const { return fill() + kHistogram; }
    /* the keys the block's part of the range's segment still has room for */
    __device__ uint32_t *left() const { return fill() + 2 * kHistogram; }
    __device__ uint32_t *staged() const { return fill() + 3 * kHistogram; }
    __device__ uint16_t *range_index() const
    {
        return reinterpret_cast<uint16_t *>(staged() + kStageSlots);
    }

    /* Key of range r that would be staged at `slot` (past its run) to its
     * place in the block's part, or counted directly where the part is full. */
    __device__ void place(int r, uint32_t slot, uint32_t key) const
    {
        if (slot - (layout()[r] & 0xffffu) < left()[r])
            p_.part.keys[sink()[r].y + slot] = key;
        else
            count_directly(p_, key, highest_);
    }

    /* The staged keys to their segments, a warp 32 slots at a time (a bitmap
     * word's), kWrite words a warp at once, then the words left one at a
     * time. kFull: some run holds keys past its part's room, to be counted
     * directly (a test of every empty slot for them had cost a tenth of the
     * partition's instructions at 3.5M levels). */
    template <bool kFull> __device__ void write_staged() const
    {
        constexpr int kWrite = 4, kWarps = kPartitionThreads / 32;
        constexpr int kWhole = kStageWords / (kWrite * kWarps) * (kWrite * kWarps);
        const int warp = threadIdx.x / 32;
        for (int w0 = warp; w0 < kWhole; w0 += kWrite * kWarps)
            write_words<kFull, kWrite, kWarps>(w0);
        for (int w = kWhole + warp; w < kStageWords; w += kWarps)
            write_words<kFull, 1, kWarps>(w);
    }

    /* Words w0, w0 + kStep, .. (kN of them) of the staged slots; a lane's
     * slot's range off the bitmap. */
    template <bool kFull, int kN, int kStep>
    __device__ __forceinline__ void write_words(int w0) const
    {
        const int lane = threadIdx.x % 32;
        const uint32_t at_or_below = (2u << lane) - 1u; /* lanes 0 .. lane */
        uint32_t t[kN], key[kN];
        uint2 to[kN];
        int r[kN];
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const uint2 word = owner()[w0 + u * kStep];
            t[u] = uint32_t(w0 + u * kStep) * 32u + uint32_t(lane);
            r[u] = int(word.y + __popc(word.x & at_or_below));
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            to[u] = sink()[r[u]];
            key[u] = staged()[t[u]];
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            if (t[u] < to[u].x) {
                p_.part.keys[to[u].y + t[u]] = key[u];
            } else if (kFull) { /* a key past a full part, or an empty slot */
                const uint32_t lay = layout()[r[u]];
                if (t[u] < (lay & 0xffffu) + min(fill()[r[u]], lay >> 16))
                    count_directly(p_, key[u], highest_);
            }
        }
    }

    /* The histogram slots of keys key[0 .. kN): each one's range, or
     * kDiscard below the lowest level (ROC_NO_KEY among them). Each key is
     * clamped to the levels' span and looked up without a branch; the few
     * whose bucket a range starts inside (kAmbiguous) then bisect, behind one
     * test for all kN. A lookup had taken ~29 instructions, most of them
     * branches around the rare cases (dev/NOTES.md, partition/drain). */
    template <bool kScoreAxis, int kN>
    __device__ __forceinline__ void histogram_slots(const uint32_t *key, int (&slot)[kN]) const
    {
        int ambiguous = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const int entry = range_index()[bucket_of<kScoreAxis>(key[u])];
            slot[u] = key[u] >= lowest_ ? entry : kDiscard;
            ambiguous |= slot[u];
        }
        if (ambiguous & kAmbiguous) {
#pragma unroll
            for (int u = 0; u < kN; u++)
                if (slot[u] & kAmbiguous)
                    slot[u] = settle(min(key[u], highest_), slot[u]);
        }
    }

    /* The index's bucket of a key clamped to the levels' span (a key above
     * the highest level is in the last range, as the highest level is). */
    template <bool kScoreAxis> __device__ __forceinline__ uint32_t bucket_of(uint32_t key) const
    {
        const uint32_t k = min(max(key, lowest_), highest_);
        const uint32_t axis = kScoreAxis ? score_axis(k, p_.part.scale) : k;
        return (axis - p_.part.base) >> p_.part.shift;
    }

    /* The range of a key between the lowest and the highest level whose
     * bucket's index entry, `entry`, is kAmbiguous: a range starts inside the
     * bucket, so the key's is the last range between the entry's and the
     * next bucket's whose lowest level is at or below the key (the next
     * bucket's, where it starts with that bucket, has its lowest level there:
     * above the key). Rare: the ranges' lowest levels are read from global
     * memory (L1), not kept in shared. */
    __device__ int settle(uint32_t key, int entry) const
    {
        const uint32_t bucket = (range_axis(key, p_.part.scale) - p_.part.base) >> p_.part.shift;
        int lo = entry & ~kAmbiguous, hi = range_index()[bucket + 1] & ~kAmbiguous;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (__ldg(p_.part.starts + mid) <= key)
                lo = mid;
            else
                hi = mid - 1;
        }
        return lo;
    }

    const PassParams &p_;
    uint32_t *shared_;
    uint32_t lowest_ = 0, highest_ = 0;
};

} // namespace roc_count

#endif /* ROC_PARTITION_CUH */
