#include "weight_cache.h"

#include <ATen/ops/empty.h>
#include <gantry/heap.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace gantry::sentence_encoder {
namespace {

namespace fs = std::filesystem;

StatusOr<at::ScalarType> FloatType(std::string_view dtype) {
  if (dtype == "F32") {
    return at::kFloat;
  }
  if (dtype == "F16") {
    return at::kHalf;
  }
  if (dtype == "BF16") {
    return at::kBFloat16;
  }
  return InvalidArgumentError("dtype " + std::string(dtype) + " is not a floating dtype");
}

// What a cached copy must say about its source to be reused. Size and
// modification time alone missed a checkpoint replaced by one of the same
// size whose mtime was kept or set (cp -p, tar, image layers built with a
// fixed SOURCE_DATE_EPOCH): the stale copy was served. The kernel sets the
// status-change time on every write and rename, and no one can set it back;
// a file renamed into place is also a new inode.
std::map<std::string, std::string> SourceIdentity(const fs::path& source, std::string_view dtype) {
  std::error_code ec;
  const auto size = fs::file_size(source, ec);
  const auto mtime = fs::last_write_time(source, ec).time_since_epoch().count();
  struct stat st {};
  std::string ctime = "unknown";
  std::string inode = "unknown";
  if (::stat(source.c_str(), &st) == 0) {
    ctime = std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
    // Not st_dev: each container's overlay mount has its own, and replicas
    // in several containers would then keep rewriting a shared cache.
    inode = std::to_string(st.st_ino);
  }
  return {{"gantry_source", source.string()},
          {"gantry_source_size", std::to_string(size)},
          {"gantry_source_mtime", std::to_string(mtime)},
          {"gantry_source_ctime", ctime},
          {"gantry_source_inode", inode},
          {"gantry_dtype", std::string(dtype)}};
}

bool Reusable(const std::string& path, const SafetensorsFile& source,
              const std::map<std::string, std::string>& identity) {
  StatusOr<SafetensorsFile> cached = SafetensorsFile::Open(path);
  if (!cached.ok()) {
    return false;  // absent, or cut short by a crash: written again
  }
  for (const auto& [key, value] : identity) {
    auto it = cached->metadata().find(key);
    if (it == cached->metadata().end() || it->second != value) {
      return false;
    }
  }
  if (cached->entries().size() != source.entries().size()) {
    return false;
  }
  for (std::size_t i = 0; i < source.entries().size(); ++i) {
    if (cached->entries()[i].name != source.entries()[i].name ||
        cached->entries()[i].shape != source.entries()[i].shape) {
      return false;
    }
  }
  return true;
}

// `source` as a safetensors file with its floating tensors in `target`.
std::string ConvertedBytes(const SafetensorsFile& source, at::ScalarType target,
                           std::string_view dtype,
                           const std::map<std::string, std::string>& identity) {
  std::vector<SafetensorsEntry> entries;
  std::vector<std::string> data;
  for (const SafetensorsEntry& entry : source.entries()) {
    SafetensorsEntry out = entry;
    const char* bytes = source.Data(entry);
    StatusOr<at::ScalarType> type = FloatType(entry.dtype);
    if (!type.ok()) {
      data.emplace_back(bytes, entry.end - entry.begin);  // ints: as they are
    } else {
      at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(*type));
      if (tensor.nbytes() > 0) {
        std::memcpy(tensor.data_ptr(), bytes, tensor.nbytes());
      }
      tensor = tensor.to(target).contiguous();
      data.emplace_back(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
      out.dtype = std::string(dtype);
    }
    entries.push_back(std::move(out));
  }
  return WriteSafetensors(std::move(entries), data, identity);
}

}  // namespace

std::string DefaultWeightCacheDir() {
  if (const char* dir = std::getenv("GANTRY_CACHE_DIR"); dir != nullptr) {
    return dir;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return (fs::path(xdg) / "gantry").string();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "gantry").string();
  }
  return "";
}

StatusOr<std::string> ConvertedWeights(const SafetensorsFile& source, std::string_view dtype,
                                       const std::string& cache_dir) {
  GANTRY_ASSIGN_OR_RETURN(const at::ScalarType target, FloatType(dtype));
  if (cache_dir.empty()) {
    return InvalidArgumentError("no weight cache directory");
  }
  std::error_code ec;
  const fs::path source_path = fs::weakly_canonical(source.path(), ec);
  const std::map<std::string, std::string> identity =
      SourceIdentity(ec ? fs::path(source.path()) : source_path, dtype);
  // One name per source file and dtype; the identity inside the file tells
  // a stale copy from a current one.
  std::ostringstream name;
  name << source_path.parent_path().filename().string() << '-' << std::hex
       << std::hash<std::string>{}(identity.at("gantry_source")) << '-' << dtype << ".safetensors";
  const fs::path dir(cache_dir);
  const fs::path path = dir / name.str();
  if (Reusable(path.string(), source, identity)) {
    return path.string();
  }

  fs::create_directories(dir, ec);
  if (ec) {
    return UnavailableError("weight cache " + dir.string() + ": cannot create it (" + ec.message() +
                            ")");
  }
  // Written under a name of its own, then renamed: a reader never sees half
  // a file, and replicas converting at once each rename a whole one.
  const fs::path temporary =
      dir / (name.str() + ".tmp." + std::to_string(::getpid()) + "." +
             std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  {
    const std::string bytes = ConvertedBytes(source, target, dtype, identity);
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      const int error = errno;
      fs::remove(temporary, ec);
      return UnavailableError("weight cache " + dir.string() + ": cannot write " +
                              temporary.filename().string() + " (" + std::strerror(error) + ")");
    }
  }
  // The conversion's buffers (about twice the file) would otherwise stay in
  // this replica's heap for its whole life.
  ReleaseFreeHeapMemory();
  fs::rename(temporary, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(temporary, ec);
    return UnavailableError("weight cache " + dir.string() + ": cannot rename into " +
                            path.filename().string() + " (" + why + ")");
  }
  return path.string();
}

}  // namespace gantry::sentence_encoder
