// Where `gantry export` writes: a folder it may fill only when it is new,
// empty, or holds just what an earlier export listed in its marker file,
// so that an export never overwrites a user's files.
//
// Thread safety: one export per folder at a time.
#ifndef GANTRY_EXPORT_OUTPUT_DIR_H_
#define GANTRY_EXPORT_OUTPUT_DIR_H_

#include <gantry/export.h>
#include <gantry/status.h>

#include <filesystem>
#include <string>
#include <vector>

namespace gantry::exporting {

struct OutFile {
  std::string name;  // inside its folder
  std::string text;
  std::string what;
};

StatusOr<std::string> ReadText(const std::string& path);

Status WriteFile(const std::filesystem::path& path, const std::string& text);

StatusOr<std::vector<ExportedFile>> WriteDir(const std::filesystem::path& dir,
                                             const std::vector<OutFile>& files);

}  // namespace gantry::exporting

#endif  // GANTRY_EXPORT_OUTPUT_DIR_H_
