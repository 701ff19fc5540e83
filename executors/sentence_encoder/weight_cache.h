// File: executors/sentence_encoder/weight_cache.h
//
// A converted copy of a safetensors file on disk (bfloat16 or float16), so
// that replicas which run the model in that dtype on CPU map one shared copy
// from the page cache instead of each converting the float32 weights into
// memory of its own. Written once, atomically (a temporary file renamed into
// place), and checked against the source's path, size, modification time,
// status-change time and inode before it is used again.
//
// Thread safety: the functions may be called from any thread and from
// several processes at once (each writes its own temporary file).
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_WEIGHT_CACHE_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_WEIGHT_CACHE_H_

#include <gantry/status.h>

#include <string>
#include <string_view>

#include "safetensors.h"

namespace gantry::sentence_encoder {

// Where converted weights go: $GANTRY_CACHE_DIR if set (empty turns the
// cache off), else $XDG_CACHE_HOME/gantry, else $HOME/.cache/gantry; empty
// when none of them is set.
std::string DefaultWeightCacheDir();

// The path of a copy of `source` in `cache_dir` whose floating tensors (F32,
// F16, BF16) are in `dtype` ("BF16" or "F16"); other tensors are copied
// as they are. Reuses a copy made earlier from the same source file; writes
// it otherwise. Errors name the directory or file that failed.
StatusOr<std::string> ConvertedWeights(const SafetensorsFile& source, std::string_view dtype,
                                       const std::string& cache_dir);

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_WEIGHT_CACHE_H_
