#include "attention_tiles.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define GANTRY_ATTENTION_TILES_X86 1
#endif

#include "row_vectors.h"

namespace gantry::sentence_encoder::attention_tiles {

namespace {
constexpr std::int64_t kTileRows = 16;   // rows of a tile; keys of a score block
constexpr std::int64_t kTileWidth = 32;  // bfloat16 values in a tile row (64 bytes)
constexpr std::int64_t kMaxHeadDim = 128;
constexpr std::int64_t kMaxLength = kShortAttentionMaxLength;
constexpr std::int64_t kMaxKeyBlocks = kMaxLength / kTileRows;
constexpr std::int64_t kMaxKeyChunks = kMaxLength / kTileWidth;
static_assert(kMaxLength % kTileWidth == 0, "scratch holds whole 32-key chunks");
}  // namespace

bool TakesLayout(const HeadLayout& layout) {
  return layout.length >= 1 && layout.length <= kMaxLength && layout.head_dim >= kTileWidth &&
         layout.head_dim <= kMaxHeadDim && layout.head_dim % kTileWidth == 0 && layout.heads >= 1;
}

#if defined(GANTRY_ATTENTION_TILES_X86)
// GCC 12 warns inside its own AVX-512 headers that the "undefined" vector
// some intrinsics start from may be uninitialised (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

#define GANTRY_TILES_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// The tile instructions as inline assembly rather than GCC 12's intrinsics:
// those tell the compiler neither that a tile load reads memory nor that
// the configuration is 64 bytes, so it may move our stores past them.
// Tile numbers are part of the instruction, hence macros.
#define GANTRY_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define GANTRY_TILE_LOAD(t, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(stride) : "memory")
#define GANTRY_TILE_STORE(t, base, stride) \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(stride) : "memory")
// c += a b, a's rows of bfloat16 pairs against b's columns of pairs.
#define GANTRY_TILE_DOT(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

// Tile c = the sum over n in [0, count) of tile a, loaded from a_at (rows
// a_stride bytes apart), times tile 2, loaded from b_at (64-byte rows);
// then stored to dst, rows dst_stride bytes apart. a_at and b_at are
// expressions of n.
#define GANTRY_TILE_PRODUCT(c, a, count, a_at, a_stride, b_at, dst, dst_stride) \
  do {                                                                          \
    GANTRY_TILE_ZERO(c);                                                        \
    for (std::int64_t n = 0; n < (count); ++n) {                                \
      GANTRY_TILE_LOAD(a, (a_at), (a_stride));                                  \
      GANTRY_TILE_LOAD(2, (b_at), 64L);                                         \
      GANTRY_TILE_DOT(c, a, 2);                                                 \
    }                                                                           \
    GANTRY_TILE_STORE(c, (dst), (dst_stride));                                  \
  } while (false)

// Tiles: 0 and 1 the product and left operand of a full block of 16 rows,
// 3 and 4 those of the text's last, partial block, 2 the right operand.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "the layout ldtilecfg reads");

void LoadTileConfig(const TileConfig& config) {
  __asm__ volatile("ldtilecfg %0" ::"m"(config) : "memory");
}
void ReleaseTiles() { __asm__ volatile("tilerelease" ::: "memory"); }

// Each thread's operands, reused across calls: 39 KiB.
struct alignas(64) Scratch {
  // Keys as a right operand: block kb, 32-column chunk c, row r holds
  // column pair r of the block's 16 keys (a 16 x 16 transpose of pairs).
  std::uint32_t keys[kMaxKeyBlocks][kMaxHeadDim / kTileWidth][kTileRows][16];
  // Values as a right operand: 32-key chunk kc, 16-column block db, row r
  // holds keys 2r and 2r+1 interleaved, column by column.
  std::uint16_t values[kMaxKeyChunks][kMaxHeadDim / 16][kTileRows][kTileWidth];
  float scores[kTileRows][kMaxLength];
  std::uint16_t weights[kTileRows][kMaxLength];  // bfloat16, zero past the text's keys
  float context[kTileRows][16];
  float key_mask[kMaxLength];
};

// Rows become columns: out[c] holds element c of rows[0..15] (32-bit
// elements; here bfloat16 pairs).
GANTRY_TILES_TARGET inline void Transpose16x16(__m512i rows[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  // u[4g + e], lane l: element 4l + e of rows 4g..4g+3.
  __m512i u[16];
  for (std::ptrdiff_t g = 0; g < 4; ++g) {
    const __m512i* p = t + 4 * g;
    u[4 * g + 0] = _mm512_unpacklo_epi64(p[0], p[2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(p[0], p[2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(p[1], p[3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(p[1], p[3]);
  }
  // Then a 4 x 4 transpose of 128-bit lanes for each e.
  for (int e = 0; e < 4; ++e) {
    const __m512i a = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
    rows[e] = _mm512_shuffle_i32x4(a, c, 0x88);
    rows[4 + e] = _mm512_shuffle_i32x4(a, c, 0xDD);
    rows[8 + e] = _mm512_shuffle_i32x4(b, d, 0x88);
    rows[12 + e] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}

// Lanes of key block kb that are keys of the text.
inline __mmask16 KeyLanes(std::int64_t kb, std::int64_t length) {
  const std::int64_t keys = length - kb * kTileRows;
  return keys >= kTileRows ? static_cast<__mmask16>(0xFFFF)
                           : static_cast<__mmask16>((1U << keys) - 1U);
}

// Rows [0, rows) of scores become softmax weights in bfloat16.
GANTRY_TILES_TARGET inline void Softmax(Scratch& s, std::int64_t rows, std::int64_t length,
                                        float scale) {
  const std::int64_t key_blocks = (length + kTileRows - 1) / kTileRows;
  const __m512 scale_vector = _mm512_set1_ps(scale);
  for (std::int64_t i = 0; i < rows; ++i) {
    __m512 x[kMaxKeyBlocks];
    __m512 top = _mm512_set1_ps(-__builtin_inff());
    for (std::int64_t kb = 0; kb < key_blocks; ++kb) {
      x[kb] = _mm512_fmadd_ps(_mm512_load_ps(&s.scores[i][kb * kTileRows]), scale_vector,
                              _mm512_load_ps(&s.key_mask[kb * kTileRows]));
      top = _mm512_mask_max_ps(top, KeyLanes(kb, length), top, x[kb]);
    }
    const __m512 row_top = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    __m512 sum = _mm512_setzero_ps();
    for (std::int64_t kb = 0; kb < key_blocks; ++kb) {
      x[kb] = _mm512_maskz_mov_ps(KeyLanes(kb, length),
                                  row_vectors::ExpFloats(_mm512_sub_ps(x[kb], row_top)));
      sum = _mm512_add_ps(sum, x[kb]);
    }
    const __m512 inverse = _mm512_set1_ps(1.0F / _mm512_reduce_add_ps(sum));
    for (std::int64_t kb = 0; kb < key_blocks; ++kb) {
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(&s.weights[i][kb * kTileRows]),
          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(x[kb], inverse))));
    }
  }
}

// One head of one text. q, k, v: the head's first query, key and value
// column of the text's first token; rows `stride` elements apart.
GANTRY_TILES_TARGET void AttendHead(const std::uint16_t* q, const std::uint16_t* k,
                                    const std::uint16_t* v, std::int64_t stride,
                                    std::int64_t length, std::int64_t head_dim, float scale,
                                    std::uint16_t* out, std::int64_t out_stride, Scratch& s) {
  const std::int64_t key_blocks = (length + kTileRows - 1) / kTileRows;
  const std::int64_t key_chunks = (length + kTileWidth - 1) / kTileWidth;
  const std::int64_t full_blocks = length / kTileRows;
  const std::int64_t chunks = head_dim / kTileWidth;
  const std::int64_t column_blocks = head_dim / 16;
  const auto row_bytes = static_cast<long>(stride * 2);  // NOLINT(google-runtime-int): asm operand

  // The keys, transposed into right operands; keys past the text are 0.
  for (std::int64_t kb = 0; kb < key_blocks; ++kb) {
    for (std::int64_t c = 0; c < chunks; ++c) {
      __m512i rows[16];
      for (std::int64_t j = 0; j < kTileRows; ++j) {
        const std::int64_t key = kb * kTileRows + j;
        rows[j] = key < length ? _mm512_loadu_si512(k + key * stride + c * kTileWidth)
                               : _mm512_setzero_si512();
      }
      Transpose16x16(rows);
      for (int r = 0; r < 16; ++r) {
        _mm512_store_si512(s.keys[kb][c][r], rows[r]);
      }
    }
  }
  // The values, two keys interleaved a row; pairs past the text stay 0
  // (set once a call), and so does a last odd key's partner.
  const __m512i interleave =
      _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                       37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for (std::int64_t key = 0; key < length; key += 2) {
    for (std::int64_t db = 0; db < column_blocks; ++db) {
      const __m256i even =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + key * stride + db * 16));
      const __m256i odd = key + 1 < length ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                 v + (key + 1) * stride + db * 16))
                                           : _mm256_setzero_si256();
      _mm512_store_si512(s.values[key / kTileWidth][db][(key % kTileWidth) / 2],
                         _mm512_permutex2var_epi16(_mm512_zextsi256_si512(even), interleave,
                                                   _mm512_zextsi256_si512(odd)));
    }
  }

  for (std::int64_t qb = 0; qb < key_blocks; ++qb) {
    const bool partial = qb == full_blocks;
    const std::int64_t rows = partial ? length - qb * kTileRows : kTileRows;
    const std::uint16_t* q_block = q + qb * kTileRows * stride;
    // Scores: the block's queries against each block of keys.
    for (std::int64_t kb = 0; kb < key_blocks; ++kb) {
      float* scores = &s.scores[0][kb * kTileRows];
      constexpr long kScoreBytes = kMaxLength * 4;  // NOLINT(google-runtime-int)
      if (partial) {
        GANTRY_TILE_PRODUCT(4, 3, chunks, q_block + n * kTileWidth, row_bytes, s.keys[kb][n],
                            scores, kScoreBytes);
      } else {
        GANTRY_TILE_PRODUCT(0, 1, chunks, q_block + n * kTileWidth, row_bytes, s.keys[kb][n],
                            scores, kScoreBytes);
      }
    }
    Softmax(s, rows, length, scale);
    // Context: the weights against the values, 16 columns at a time.
    constexpr long kWeightBytes = kMaxLength * 2;  // NOLINT(google-runtime-int)
    for (std::int64_t db = 0; db < column_blocks; ++db) {
      if (partial) {
        GANTRY_TILE_PRODUCT(4, 3, key_chunks, &s.weights[0][n * kTileWidth], kWeightBytes,
                            s.values[n][db], s.context, 64L);
      } else {
        GANTRY_TILE_PRODUCT(0, 1, key_chunks, &s.weights[0][n * kTileWidth], kWeightBytes,
                            s.values[n][db], s.context, 64L);
      }
      for (std::int64_t i = 0; i < rows; ++i) {
        // Rounds to nearest even, as at::BFloat16 does.
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(out + (qb * kTileRows + i) * out_stride + db * 16),
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(s.context[i]))));
      }
    }
  }
}

}  // namespace

bool Available() {
  static const bool available = [] {
    unsigned eax = 0;
    unsigned ebx = 0;
    unsigned ecx = 0;
    unsigned edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) {
      return false;
    }
    constexpr unsigned kAmxBFloat16 = 1U << 22;
    constexpr unsigned kAmxTile = 1U << 24;
    if ((edx & kAmxBFloat16) == 0 || (edx & kAmxTile) == 0 ||
        __builtin_cpu_supports("avx512f") == 0 || __builtin_cpu_supports("avx512bw") == 0 ||
        __builtin_cpu_supports("avx512vl") == 0 || __builtin_cpu_supports("avx512dq") == 0 ||
        __builtin_cpu_supports("avx512bf16") == 0) {
      return false;
    }
    // Linux gives a process the tile registers' state only once it asks
    // (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); oneDNN asks too, and
    // asking again is harmless.
    constexpr long kArchRequestComponentPermission = 0x1023;  // NOLINT(google-runtime-int)
    constexpr long kTileDataFeature = 18;                     // NOLINT(google-runtime-int)
    return syscall(SYS_arch_prctl, kArchRequestComponentPermission, kTileDataFeature) == 0;
  }();
  return available;
}

GANTRY_TILES_TARGET
void AttentionFromQkvBFloat16(const std::uint16_t* qkv, const HeadLayout& layout, const float* mask,
                              float scale, std::int64_t begin, std::int64_t end,
                              std::uint16_t* out) {
  if (begin >= end) {
    return;
  }
  // Allocated by the threads that run the kernel only, not in every
  // thread's static TLS.
  thread_local const std::unique_ptr<Scratch> scratch = std::make_unique<Scratch>();
  Scratch& s = *scratch;
  const std::int64_t length = layout.length;
  const std::int64_t hidden = layout.heads * layout.head_dim;
  const std::int64_t stride = 3 * hidden;
  // Operands past the text's keys must be 0, not stale: the tiles multiply
  // whole 32-key chunks.
  std::memset(s.weights, 0, sizeof s.weights);
  std::memset(s.values, 0, sizeof s.values);

  const std::int64_t rem = length % kTileRows;
  TileConfig config;
  for (int t = 0; t < 5; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = kTileRows;
  }
  if (rem != 0) {
    config.rows[3] = static_cast<std::uint8_t>(rem);
    config.rows[4] = static_cast<std::uint8_t>(rem);
  }
  LoadTileConfig(config);
  for (std::int64_t b = begin; b < end; ++b) {
    for (std::int64_t j = 0; j < length; ++j) {
      s.key_mask[j] = mask != nullptr ? mask[b * length + j] : 0.0F;
    }
    const std::uint16_t* text = qkv + b * length * stride;
    for (std::int64_t h = 0; h < layout.heads; ++h) {
      const std::uint16_t* q = text + h * layout.head_dim;
      AttendHead(q, q + hidden, q + 2 * hidden, stride, length, layout.head_dim, scale,
                 out + b * length * hidden + h * layout.head_dim, hidden, s);
    }
  }
  ReleaseTiles();
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else

bool Available() { return false; }

void AttentionFromQkvBFloat16(const std::uint16_t*, const HeadLayout&, const float*, float,
                              std::int64_t, std::int64_t, std::uint16_t*) {}

#endif

}  // namespace gantry::sentence_encoder::attention_tiles
