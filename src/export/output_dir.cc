#include "export/output_dir.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

namespace gantry::exporting {

namespace fs = std::filesystem;

namespace {

// Lists what an export wrote into a folder, so that the next export may
// replace those files and nothing else.
constexpr std::string_view kMarkerFile = ".gantry-export";

// Makes `dir` ready for `files`: created if missing; if it exists, it may
// hold only what the last export listed in its marker, which is removed.
Status PrepareDir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return FailedPreconditionError(dir.string() + ": cannot create: " + ec.message());
    }
    return OkStatus();
  }
  if (!fs::is_directory(dir, ec)) {
    return FailedPreconditionError(dir.string() + ": exists and is not a directory");
  }
  std::set<std::string> ours;
  if (StatusOr<std::string> marker = ReadText((dir / kMarkerFile).string()); marker.ok()) {
    std::istringstream lines(*marker);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) {
        ours.insert(line);
      }
    }
  }
  std::vector<std::string> foreign;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name != kMarkerFile && !ours.contains(name)) {
      foreign.push_back(name);
    }
  }
  if (ec) {
    return FailedPreconditionError(dir.string() + ": cannot list: " + ec.message());
  }
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < 5; ++i) {
      names += (i == 0 ? "" : ", ") + foreign[i];
    }
    if (foreign.size() > 5) {
      names += ", ...";
    }
    return FailedPreconditionError(
        dir.string() + ": exists and holds files that gantry export did not write (" + names +
        "); nothing was written: give a new or empty directory, or remove them");
  }
  for (const std::string& name : ours) {
    fs::remove(dir / name, ec);
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError(path + ": cannot open");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return FailedPreconditionError(path.string() + ": cannot write");
  }
  return OkStatus();
}

StatusOr<std::vector<ExportedFile>> WriteDir(const fs::path& dir,
                                             const std::vector<OutFile>& files) {
  GANTRY_RETURN_IF_ERROR(PrepareDir(dir));
  std::string marker;
  std::vector<ExportedFile> written;
  for (const OutFile& f : files) {
    GANTRY_RETURN_IF_ERROR(WriteFile(dir / f.name, f.text));
    marker += f.name + "\n";
    written.push_back({(dir / f.name).string(), f.what});
  }
  GANTRY_RETURN_IF_ERROR(WriteFile(dir / kMarkerFile, marker));
  return written;
}

}  // namespace gantry::exporting
