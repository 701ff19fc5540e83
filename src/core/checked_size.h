// Size arithmetic on numbers that come from clients (tensor shapes, counts,
// string lengths, nesting depths). Every such size goes through these
// helpers before anything is allocated, so that a crafted request is an
// InvalidArgument error instead of a wrapped-around product, a huge
// allocation or a stack overflow.
//
// Thread safety: stateless functions, safe for concurrent use.
#ifndef GANTRY_CORE_CHECKED_SIZE_H_
#define GANTRY_CORE_CHECKED_SIZE_H_

#include <gantry/status.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace gantry::internal {

// a * b, or InvalidArgument naming `subject` when the product does not fit
// in 64 bits.
StatusOr<std::uint64_t> CheckedMul(std::uint64_t a, std::uint64_t b, std::string_view subject);

// a + b, or InvalidArgument naming `subject` on 64-bit overflow.
StatusOr<std::uint64_t> CheckedAdd(std::uint64_t a, std::uint64_t b, std::string_view subject);

// `size` if it is at most `cap`; else InvalidArgument:
// "<subject>: <size> bytes exceeds the <cap>-byte message cap".
StatusOr<std::uint64_t> CheckedCap(std::uint64_t size, std::uint64_t cap, std::string_view subject);

// The number of bytes a dense tensor of `shape` with `itemsize`-byte
// elements holds: the product of the dimensions times `itemsize`. A 0-d
// shape is one element; a zero dimension makes it empty. Negative
// dimensions, an unknown dtype (`itemsize` 0), a product that overflows 64
// bits and a size above `cap` are InvalidArgument; the message names the
// shape and `dtype` ("shape [1000000000] of float32 needs 4000000000 bytes,
// over the 67108864-byte message cap").
StatusOr<std::uint64_t> TensorByteSize(std::span<const std::int64_t> shape, std::size_t itemsize,
                                       std::string_view dtype, std::uint64_t cap);

// Checks that a buffer of `buffer_bytes` is exactly a tensor of `shape` and
// `dtype` within `cap`: TensorByteSize's errors, plus "shape [3] of float32
// needs 12 bytes, buffer has 11".
Status CheckTensorBuffer(std::span<const std::int64_t> shape, std::string_view dtype,
                         std::uint64_t buffer_bytes, std::uint64_t cap);

// OK while `depth` (0 at the top level) is at most `max_depth`; else
// InvalidArgument "<subject>: nested deeper than <max_depth> levels".
Status CheckDepth(int depth, std::string_view subject, int max_depth = kMaxNestingDepth);

// "[2, 384]"
std::string ShapeToString(std::span<const std::int64_t> shape);

// numpy's name for a dtype string ("<f4" -> "float32"); the string itself
// when it is not a dtype we know.
std::string DTypeName(std::string_view dtype);

}  // namespace gantry::internal

#endif  // GANTRY_CORE_CHECKED_SIZE_H_
