// File: executors/sentence_encoder/safetensors.h
//
// A strict reader of the safetensors format: u64 little-endian header length
// N, N bytes of JSON, then one data buffer that the tensors tile exactly.
// Every error names the file and, where there is one, the tensor.
//
// Thread safety: immutable after Open/Parse; safe for concurrent use.
#ifndef GANTRY_EXECUTORS_SENTENCE_ENCODER_SAFETENSORS_H_
#define GANTRY_EXECUTORS_SENTENCE_ENCODER_SAFETENSORS_H_

#include <gantry/status.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gantry::sentence_encoder {

// Bytes per element of a safetensors dtype ("F32" -> 4), 0 if unknown or not
// byte-addressable (F4, F6_*).
std::size_t SafetensorsItemSize(std::string_view dtype);

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "I64", ...
  std::vector<std::int64_t> shape;
  // Relative to the start of the data buffer; end is exclusive.
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // The reference reader's limit on the header size.
  static constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

  // Maps the file read-only (MAP_PRIVATE) and validates it; the mapping
  // lives as long as this object (or a copy). Reading it whole instead
  // raised a replica's start-up peak by the file's size.
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates `bytes`; `path` is used in messages only.
  static StatusOr<SafetensorsFile> Parse(std::string bytes, std::string path);

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr if absent.
  const SafetensorsEntry* Find(std::string_view name) const;
  // The raw little-endian bytes of `entry` (no alignment guarantee).
  const char* Data(const SafetensorsEntry& entry) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // What keeps Data() valid: hold it to use the bytes after this object is
  // gone (tensors made with from_blob over a mapped file).
  const std::shared_ptr<const void>& storage() const { return storage_; }

 private:
  SafetensorsFile() = default;
  // Validates `bytes`, which `storage` keeps alive.
  static StatusOr<SafetensorsFile> ParseView(std::string_view bytes,
                                             std::shared_ptr<const void> storage, std::string path);

  std::string path_;
  // The file's bytes: a mapping or a string, owned by storage_.
  std::shared_ptr<const void> storage_;
  std::string_view bytes_;
  std::size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Serializes tensors the way the reference writer does (header padded with
// spaces to a multiple of 8, data in the given order). `data[i]` holds the
// bytes of `entries[i]`; begin/end are filled in. For tests and tools.
std::string WriteSafetensors(std::vector<SafetensorsEntry> entries,
                             const std::vector<std::string>& data,
                             const std::map<std::string, std::string>& metadata = {});

}  // namespace gantry::sentence_encoder

#endif  // GANTRY_EXECUTORS_SENTENCE_ENCODER_SAFETENSORS_H_
