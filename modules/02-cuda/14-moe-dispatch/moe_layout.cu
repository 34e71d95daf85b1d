// cuda-14: MoE dispatch/combine layout kernels (the on-GPU part of DeepEP-style dispatch and combine).
//
// One MoE layer on one GPU: T tokens X (T x H fp32, row-major); the router's choice topk_idx (T x k
// int32: an expert id in [0, E), or -1 for a dropped slot, as DeepEP allows) and topk_weights (T x k
// fp32). Slot s = t*k + j is token t's j-th choice; there are S = T*k slots and N valid ones.
//
// Dispatch layout: one expert-major buffer `permuted` (N x H). Expert e owns the rows
// offsets[e] .. offsets[e+1]-1, and inside an expert the rows are in increasing slot order: the
// slots are STABLY sorted by expert. So the layout is a pure function of topk_idx, the same bits on
// every run whatever order threads and blocks run in (a row's place never comes from which thread
// won an atomic). Four launches; tile b of a B-thread launch is slots b*B .. b*B+B-1 (thread i of
// block b owns slot b*B+i), G = ceil(S / B), B a multiple of 32 (32 .. 1024):
//   1. moe_count    grid G, block B, shared E ints
//        block_counts[b*E + e] = number of slots of tile b that chose expert e (every entry written)
//   2. moe_offsets  grid 1, block any multiple of 32, shared E ints (optional)
//        counts[e]  = sum over b of block_counts[b*E + e]               (tokens per expert)
//        offsets[e] = counts[0] + ... + counts[e-1];  offsets[E] = N     (exclusive prefix, E + 1 entries)
//        block_offsets[b*E + e] = offsets[e] + sum over b' < b of block_counts[b'*E + e]
//                                  (the row where tile b's first slot of expert e goes)
//   3. moe_permute  grid G, block B, shared ((B/32)*E + B) ints
//        pos[s] = row of slot s in `permuted` (-1 for a dropped slot), src_slot[pos[s]] = s,
//        permuted[pos[s]] = X[s / k]
//   4. moe_combine  grid T, block any multiple of 32
//        out[t] = sum over valid j in increasing j of topk_weights[t*k + j] * Y[pos[t*k + j]]
//        (Y = the experts' outputs in the permuted layout, N x H; 0 for a token with no valid slot)

#define FULL_MASK 0xffffffffu

// Inclusive scan of one int per thread over the whole block (blockDim.x a multiple of 32, at most
// 1024): returns v[0] + ... + v[threadIdx.x] and stores the block's sum in *total. Every thread of
// the block must call it (it holds barriers); calls may follow one another.
__device__ int block_inclusive_scan(int v, int* total) {
    __shared__ int warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int d = 1; d < 32; d <<= 1) {  // scan inside the warp
        const int u = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += u;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {  // scan of the warp totals, by the first warp
        int w = lane < nwarps ? warp_sums[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(FULL_MASK, w, d);
            if (lane >= d) w += u;
        }
        if (lane < nwarps) warp_sums[lane] = w;
    }
    __syncthreads();
    const int r = v + (warp > 0 ? warp_sums[warp - 1] : 0);
    *total = warp_sums[nwarps - 1];
    __syncthreads();  // warp_sums is free again for the next call
    return r;
}

// 1. Tokens per expert, per tile: a private histogram in shared memory (contention stays inside the
// block), written out as the block's row of the G x E matrix. No global atomics are needed: every
// block owns its row.
__global__ void moe_count(const int* topk_idx, int S, int E, int* block_counts) {
    extern __shared__ int hist[];  // E ints
    // HINT: zero the E private bins (E may exceed blockDim.x), count this block's valid slots (expert >= 0), write all E bins of row blockIdx.x; barriers between the phases.
    // BEGIN SOLUTION
    for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
    __syncthreads();  // every bin is zero before anyone counts
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < S) {
        const int e = topk_idx[s];
        if (e >= 0) atomicAdd(&hist[e], 1);  // integer adds commute: the count does not depend on the order
    }
    __syncthreads();  // the histogram is complete
    for (int e = threadIdx.x; e < E; e += blockDim.x) block_counts[blockIdx.x * E + e] = hist[e];
    // END SOLUTION
}

// 2. Offsets: a column sum of block_counts per expert, an exclusive scan over experts, and a running
// prefix down each column over the tiles. One block; E may exceed blockDim.x (DeepSeek-V3 has 256
// routed experts per layer), so the experts are scanned in chunks of blockDim.x with a carry.
__global__ void moe_offsets(const int* block_counts, int G, int E, int* counts, int* offsets, int* block_offsets) {
    // HINT: chunks of blockDim.x experts; per expert: column total over the G tiles, then the exclusive scan over experts (+ the carry of the earlier chunks), then walk the column again to give each tile its start; offsets[E] = the grand total.
    // BEGIN SOLUTION
    int carry = 0;  // tokens of all experts in earlier chunks
    for (int base = 0; base < E; base += blockDim.x) {  // every thread runs every chunk (the scan has barriers)
        const int e = base + threadIdx.x;
        int c = 0;
        if (e < E)
            for (int b = 0; b < G; ++b) c += block_counts[b * E + e];  // consecutive e: coalesced
        int chunk_total;
        const int incl = block_inclusive_scan(c, &chunk_total);
        if (e < E) {
            int start = carry + incl - c;  // exclusive: experts before e
            counts[e] = c;
            offsets[e] = start;
            for (int b = 0; b < G; ++b) {  // tile b starts after the earlier tiles' rows of expert e
                block_offsets[b * E + e] = start;
                start += block_counts[b * E + e];
            }
        }
        carry += chunk_total;
    }
    if (threadIdx.x == 0) offsets[E] = carry;
    // END SOLUTION
}

// 3. Permute (the dispatch layout): slot s goes to row block_offsets[b*E + e] + (number of slots of
// the same tile before s that chose the same expert e). Shared memory: warp_counts[(B/32) * E]
// (free for the rank computation) and tile_pos[B] (the row of each slot of the tile, -1 if dropped),
// which the row copy at the end reads.
__global__ void moe_permute(const float* X, const int* topk_idx, const int* block_offsets, int S, int k, int H,
                            int E, float* permuted, int* pos, int* src_slot) {
    extern __shared__ int smem[];
    int* warp_counts = smem;
    int* tile_pos = smem + (blockDim.x >> 5) * E;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int s = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's slot (may be >= S in the last tile)
    // HINT: rank of slot s = how many slots of this tile BEFORE s chose the same expert (earlier warps + earlier lanes of its warp); never take it from the order in which atomics arrive. Write pos[s] (s < S), src_slot[row] and tile_pos[threadIdx.x] (-1 if dropped or s >= S) for every thread; all threads reach every barrier.
    // BEGIN SOLUTION
    for (int i = threadIdx.x; i < nwarps * E; i += blockDim.x) warp_counts[i] = 0;
    const int e = s < S ? topk_idx[s] : -1;
    // the lanes of this warp that chose the same expert (all 32 lanes take part, dropped ones too)
    const unsigned peers = __match_any_sync(FULL_MASK, e);
    const int rank_in_warp = __popc(peers & ((1u << lane) - 1u));  // peers on lower lanes
    __syncthreads();  // warp_counts is zero
    if (e >= 0 && rank_in_warp == 0) warp_counts[warp * E + e] = __popc(peers);  // one writer per (warp, expert)
    __syncthreads();  // every warp's counts are in
    int p = -1;
    if (e >= 0) {
        p = block_offsets[blockIdx.x * E + e] + rank_in_warp;
        for (int w = 0; w < warp; ++w) p += warp_counts[w * E + e];  // same expert in earlier warps of the tile
        src_slot[p] = s;
    }
    if (s < S) pos[s] = p;
    tile_pos[threadIdx.x] = p;
    // END SOLUTION
    __syncthreads();  // tile_pos is complete
    // Row copy, one warp per slot: lanes stride the row, so loads and stores are coalesced; each lane
    // issues four loads before its four stores, so more bytes are in flight per warp.
    for (int i = warp; i < blockDim.x; i += nwarps) {
        const int row = tile_pos[i];
        if (row < 0) continue;
        const float* __restrict__ src = X + (size_t)((blockIdx.x * blockDim.x + i) / k) * H;
        float* __restrict__ dst = permuted + (size_t)row * H;
        int h = lane;
        for (; h + 96 < H; h += 128) {
            const float a = src[h], b = src[h + 32], c = src[h + 64], d = src[h + 96];
            dst[h] = a;
            dst[h + 32] = b;
            dst[h + 64] = c;
            dst[h + 96] = d;
        }
        for (; h < H; h += 32) dst[h] = src[h];
    }
}

// 4. Combine (un-permute with the top-k weights): a gather. Block t owns token t and sums its valid
// slots' expert outputs in increasing j, so every output element has one fixed fp32 summation order.
__global__ void moe_combine(const float* Y, const int* pos, const float* topk_weights, int k, int H, float* out) {
    const int t = blockIdx.x;
    // HINT: threads stride the H columns of row t; for each column sum over j = 0 .. k-1 the weighted rows of the valid slots (pos >= 0), starting from 0.0f; write every column, also for a token with no valid slot.
    // BEGIN SOLUTION
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const int p = pos[t * k + j];
            if (p >= 0) acc += topk_weights[t * k + j] * Y[(size_t)p * H + h];
        }
        out[(size_t)t * H + h] = acc;
    }
    // END SOLUTION
}
