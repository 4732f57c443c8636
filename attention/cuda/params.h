// Kernel parameters shared by the host launch code and the CUDA kernels.
// Plain structs (no ATen) so the .cu files stay light to compile.
#pragma once

#include <cstdint>

namespace fptrain::attention::cuda {

enum class DType { kBF16, kFP16 };

// One (sequence, block) unit of work produced by the tile scheduler.
struct Tile {
  int seq;    // index into cu_seqlens
  int block;  // query block (forward, dQ) or key block (dK/dV)
};

// What every kernel needs to find a sequence and mask it.
struct VarlenShape {
  const int* cu_seqlens = nullptr;  // [B+1] on the device
  int batch = 0;                    // B
  int total_tokens = 0;             // T
  int heads_q = 0;                  // Hq
  int heads_kv = 0;                 // Hkv
  int head_dim = 0;                 // D (64 or 128)
  bool causal = true;
  int window = 0;                   // 0: unlimited; else key j visible iff j > i - window
  float scale = 1.0f;               // softmax scale
};

// Work list built on the device (no host sync): tiles ordered longest sequence first,
// each sequence's blocks heaviest first, and a counter the persistent CTAs draw from.
struct TileList {
  Tile* tiles = nullptr;     // capacity: ceil(T / block) + B
  int* num_tiles = nullptr;  // written by the scheduler kernel
  int* next_item = nullptr;  // atomic work counter, reset by the scheduler kernel
  int* scratch = nullptr;    // 2 * B ints for the scheduler
  int capacity = 0;
};

struct FwdParams {
  VarlenShape shape;
  const void* q = nullptr;  // [T, Hq, D]
  const void* k = nullptr;  // [T, Hkv, D]
  const void* v = nullptr;  // [T, Hkv, D]
  void* o = nullptr;        // [T, Hq, D]
  float* lse = nullptr;     // [Hq, T], natural log
  TileList tiles;
  int num_ctas = 0;         // persistent grid size
};

struct BwdParams {
  VarlenShape shape;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;  // [T, Hq, D]
  const float* lse = nullptr;  // [Hq, T]
  float* dsum = nullptr;       // [Hq, T]: rowsum(dO * O), from the preprocess kernel
  float* dq_accum = nullptr;   // [T, Hq, D] fp32 (atomic mode)
  unsigned char* dq_via_buffer = nullptr;  // [T] atomic mode: 1 where the token's dQ goes through dq_accum
  void* dq = nullptr;          // [T, Hq, D]
  void* dk = nullptr;          // [T, Hkv, D]
  void* dv = nullptr;          // [T, Hkv, D]
  bool deterministic = false;
  TileList kv_tiles;  // key blocks for the dK/dV kernel
  TileList q_tiles;   // query blocks for the deterministic dQ kernel
  int num_ctas_kv = 0;
  int num_ctas_q = 0;
};

}  // namespace fptrain::attention::cuda
