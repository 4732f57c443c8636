// Kernel parameters shared by the host launch code and the CUDA kernels.
// Plain structs (no ATen) so the .cu files stay light to compile.
#pragma once

#include <cstdint>

#include "common/cuda/dtype.h"

namespace fptrain::attention::cuda {

using common::cuda::Dtype;  // the kernels take kBFloat16 and kFloat16

// A run of the packed stream that the kernels tile as if it were one sequence: one document,
// or (a spanning tile) several consecutive short documents of pack_max_len(D) tokens in all.
// Positions inside a segment are local to it; a query sees a key only inside its own document,
// whose bounds come from cu_seqlens (masking.cuh, doc_span).
struct Segment {
  int start;      // first token
  int len;        // tokens
  int first_doc;  // index into cu_seqlens of its first document
  int num_docs;   // > 1: a pack of short documents, masked at their boundaries
  // A pack's document starts: bit r (word r / 32) is set where a document starts at local row
  // r, so a row finds its document with a few bit operations (masking.cuh, pack_doc_span).
  unsigned doc_starts[4];
};

// One (segment, block) unit of work produced by the tile scheduler.
struct Tile {
  int seg;    // index into the tile list's segments
  int block;  // query block (forward, dQ) or key block (dK/dV)
};

// What every kernel needs to find a sequence and mask it.
struct VarlenShape {
  const int* cu_seqlens = nullptr;  // [B+1] on the device
  int batch = 0;                    // B
  int total_tokens = 0;             // T
  int heads_q = 0;                  // Hq
  int heads_kv = 0;                 // Hkv
  int head_dim = 0;                 // D (64, 128 or 256)
  bool causal = true;
  int window = 0;                   // 0: unlimited; else key j visible iff j > i - window
  float scale = 1.0f;               // softmax scale
  float softcap = 0.0f;             // > 0: the softmax sees softcap * tanh(scale * s / softcap)
};

static_assert(sizeof(Segment) == 32, "two 16-byte loads");

// Work list built on the device (no host sync): the stream cut into segments, tiles ordered
// longest segment first, each segment's blocks heaviest first, and a counter the persistent
// CTAs draw from.
struct TileList {
  Tile* tiles = nullptr;        // capacity: ceil(T / block) + B
  Segment* segments = nullptr;  // at most B
  int* num_tiles = nullptr;     // written by the scheduler kernel
  int* next_item = nullptr;     // atomic work counter, reset by the scheduler kernel
  int* scratch = nullptr;       // tile_list_scratch_ints(B) ints for the scheduler
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
