// The tile order of the persistent grouped GEMMs (grouped_gemm_sm90_ws.cuh and _swap.cuh), shared
// with the host so that a CPU test can check it. Only built-in types: NVRTC compiles this
// with no system header.
//
// Tiles run expert by expert (an expert's row blocks are consecutive) and, inside an expert, band
// by band of up to `band` row blocks; a band's tiles go column block by column block, its row
// blocks fastest. The blocks that read one weight tile (one expert, one column block) are then at
// most `band` consecutive tiles, and those that read one row block's A rows are `rows` (<= band)
// tiles apart. The counter hands tiles out in order, so both groups run at nearly the same time
// and find the data in L2. band = 1 is column block fastest: A rows shared, but a weight tile's
// readers col_blocks tiles apart, long enough for L2 to lose it (on the H200, DeepSeek-V3's gate/up
// GEMM at T = 16384 read 50.7 GB from DRAM for 15.1 GB of weights; 24.3 GB with band 8).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RT_MOE_HOST_DEVICE __host__ __device__
#else
#define RT_MOE_HOST_DEVICE
#endif

namespace rt_moe {

struct BandTile {
  int m_block;  // row block (the first row block of the unit, with units of two)
  int n_block;  // column block
  int expert;   // block_expert[m_block]
};

// Tile `tile` of [0, num_units * col_blocks). A unit is `unit` consecutive row blocks (1; 2 for
// CTA pairs, which take row blocks 2 u and 2 u + 1 of unit u): the order walks units as it walks
// row blocks with `unit` 1, a unit belonging to the expert of its first row block, so a unit may
// end in the next expert's first block. block_expert: the expert of each row block;
// padded_offsets: expert e's first row (a multiple of block_m); num_units = ceil(num_blocks /
// unit), where num_blocks may cut the last expert's blocks short.
RT_MOE_HOST_DEVICE inline BandTile band_tile(int tile, int col_blocks, int band, int num_units,
                                             const int* block_expert, const int* padded_offsets,
                                             int block_m, int unit = 1) {
  const int slot = tile / col_blocks;  // a unit of the band that holds this tile
  BandTile t;
  t.expert = block_expert[slot * unit];
  // The units whose first row block is one of the expert's.
  const int first = (padded_offsets[t.expert] / block_m + unit - 1) / unit;
  int end = (padded_offsets[t.expert + 1] / block_m + unit - 1) / unit;
  if (end > num_units) end = num_units;
  const int band0 = first + (slot - first) / band * band;
  const int rows = end - band0 < band ? end - band0 : band;
  const int local = tile - band0 * col_blocks;
  t.n_block = local / rows;
  t.m_block = (band0 + local % rows) * unit;
  return t;
}

}  // namespace rt_moe
