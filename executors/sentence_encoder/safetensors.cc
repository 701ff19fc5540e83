#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

namespace gantry::sentence_encoder {

std::size_t SafetensorsItemSize(std::string_view dtype) {
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E5M2" ||
      dtype == "F8_E4M3" || dtype == "F8_E8M0" || dtype == "F8_E4M3FNUZ" ||
      dtype == "F8_E5M2FNUZ") {
    return 1;
  }
  if (dtype == "I16" || dtype == "U16" || dtype == "F16" || dtype == "BF16") {
    return 2;
  }
  if (dtype == "I32" || dtype == "U32" || dtype == "F32") {
    return 4;
  }
  if (dtype == "I64" || dtype == "U64" || dtype == "F64" || dtype == "C64") {
    return 8;
  }
  return 0;
}

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    n *= d;
  }
  return n;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFoundError(path + ": cannot open safetensors file: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return Status(StatusCode::kDataLoss, path + ": cannot stat: " + std::strerror(error));
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return Parse(std::string(), path);  // too short: Parse says so
  }
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) {
    return Status(StatusCode::kDataLoss, path + ": cannot map: " + std::strerror(map_error));
  }
  std::shared_ptr<const void> storage(mapped, [size](const void* p) {
    ::munmap(const_cast<void*>(p), size);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  });
  return ParseView(std::string_view(static_cast<const char*>(mapped), size), std::move(storage),
                   path);
}

namespace {

// Shape entries must be non-negative integers whose product does not
// overflow; returns false otherwise.
bool ParseShape(const nlohmann::json& j, std::vector<std::int64_t>* shape) {
  if (!j.is_array()) {
    return false;
  }
  std::int64_t numel = 1;
  for (const nlohmann::json& d : j) {
    if (!d.is_number_unsigned()) {
      return false;
    }
    const std::uint64_t v = d.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
      return false;
    }
    const auto dim = static_cast<std::int64_t>(v);
    if (dim != 0 && numel > std::numeric_limits<std::int64_t>::max() / dim) {
      return false;
    }
    numel *= dim;
    shape->push_back(dim);
  }
  return true;
}

}  // namespace

StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes, std::string path) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  const std::string_view view(*owned);
  return ParseView(view, std::move(owned), std::move(path));
}

StatusOr<SafetensorsFile> SafetensorsFile::ParseView(std::string_view bytes,
                                                     std::shared_ptr<const void> storage,
                                                     std::string path) {
  auto error = [&path](const std::string& what) {
    return InvalidArgumentError(path + ": invalid safetensors file: " + what);
  };
  if (bytes.size() < 8) {
    return error("file is " + std::to_string(bytes.size()) +
                 " bytes, too short for the 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) {
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  }
  if (n > kMaxHeaderSize) {
    return error("header length " + std::to_string(n) + " exceeds the limit of " +
                 std::to_string(kMaxHeaderSize));
  }
  if (n + 8 > bytes.size()) {
    return error("header length " + std::to_string(n) + " runs past the end of the file (" +
                 std::to_string(bytes.size()) + " bytes; truncated?)");
  }
  const std::string_view header(bytes.data() + 8, n);
  if (header.empty() || header.front() != '{') {
    return error("header does not start with '{'");
  }

  // nlohmann keeps the last of duplicate keys silently; the format forbids them.
  std::set<std::string> seen;
  std::string duplicate;
  const nlohmann::json::parser_callback_t on_event =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
            !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      };
  const nlohmann::json doc = nlohmann::json::parse(header, on_event, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return error("header is not a valid JSON object");
  }
  if (!duplicate.empty()) {
    return error("tensor '" + duplicate + "' appears twice in the header");
  }

  SafetensorsFile file;
  file.data_start_ = 8 + n;
  const std::uint64_t buffer_size = bytes.size() - file.data_start_;
  for (const auto& [name, info] : doc.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) {
        return error("__metadata__ is not an object");
      }
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return error("__metadata__." + key + " is not a string");
        }
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    // A named reference: clang (before 16) cannot capture a structured binding.
    const std::string& tensor_name = name;
    auto tensor_error = [&](const std::string& what) {
      return error("tensor '" + tensor_name + "': " + what);
    };
    if (!info.is_object()) {
      return tensor_error("entry is not an object");
    }
    SafetensorsEntry entry;
    entry.name = name;
    const auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string()) {
      return tensor_error("missing string 'dtype'");
    }
    entry.dtype = dtype->get<std::string>();
    const std::size_t item_size = SafetensorsItemSize(entry.dtype);
    if (item_size == 0) {
      return tensor_error("unsupported dtype '" + entry.dtype + "'");
    }
    const auto shape = info.find("shape");
    if (shape == info.end() || !ParseShape(*shape, &entry.shape)) {
      return tensor_error("'shape' must be an array of non-negative integers");
    }
    const auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return tensor_error("'data_offsets' must be [BEGIN, END] with non-negative integers");
    }
    entry.begin = (*offsets)[0].get<std::uint64_t>();
    entry.end = (*offsets)[1].get<std::uint64_t>();
    if (entry.begin > entry.end || entry.end > buffer_size) {
      return tensor_error("data_offsets [" + std::to_string(entry.begin) + ", " +
                          std::to_string(entry.end) + "] out of range of the " +
                          std::to_string(buffer_size) + "-byte data buffer (truncated file?)");
    }
    const std::uint64_t want = static_cast<std::uint64_t>(entry.numel()) * item_size;
    if (entry.end - entry.begin != want) {
      return tensor_error("data_offsets span " + std::to_string(entry.end - entry.begin) +
                          " bytes but dtype " + entry.dtype + " and its shape need " +
                          std::to_string(want));
    }
    file.entries_.push_back(std::move(entry));
  }

  // The tensors must tile the buffer: no gaps, no overlaps, nothing after.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : file.entries_) {
    by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t expected = 0;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < expected) {
      return error("tensor '" + e->name + "' overlaps the previous tensor (begins at " +
                   std::to_string(e->begin) + ", previous ends at " + std::to_string(expected) +
                   ")");
    }
    if (e->begin > expected) {
      return error("gap in the data buffer before tensor '" + e->name + "' (bytes " +
                   std::to_string(expected) + ".." + std::to_string(e->begin) + ")");
    }
    expected = e->end;
  }
  if (expected != buffer_size) {
    return error("data buffer is " + std::to_string(buffer_size) + " bytes but the tensors cover " +
                 std::to_string(expected) + " (truncated or trailing bytes)");
  }

  std::sort(file.entries_.begin(), file.entries_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  file.path_ = std::move(path);
  file.storage_ = std::move(storage);
  file.bytes_ = bytes;
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  if (it == entries_.end() || it->name != name) {
    return nullptr;
  }
  return &*it;
}

const char* SafetensorsFile::Data(const SafetensorsEntry& entry) const {
  return bytes_.data() + data_start_ + entry.begin;
}

std::string WriteSafetensors(std::vector<SafetensorsEntry> entries,
                             const std::vector<std::string>& data,
                             const std::map<std::string, std::string>& metadata) {
  if (entries.size() != data.size()) {
    throw std::invalid_argument("WriteSafetensors: entries and data differ in length");
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    SafetensorsEntry& e = entries[i];
    e.begin = offset;
    e.end = offset + data[i].size();
    offset = e.end;
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  }
  out += json;
  for (const std::string& d : data) {
    out += d;
  }
  return out;
}

}  // namespace gantry::sentence_encoder
