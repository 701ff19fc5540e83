#include <gantry/export.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "export/compose.h"
#include "export/kubernetes.h"
#include "export/output_dir.h"
#include "export/topology.h"

namespace gantry {

namespace fs = std::filesystem;
using exporting::LoadTopology;
using exporting::OutFile;
using exporting::ReadText;
using exporting::RenderCompose;
using exporting::RenderKubernetes;
using exporting::Topology;
using exporting::WriteDir;
using exporting::WriteFile;

StatusOr<std::vector<ExportedFile>> ExportKubernetes(const std::string& config_path,
                                                     const std::string& out_dir,
                                                     const ExportOptions& options) {
  GANTRY_ASSIGN_OR_RETURN(Topology topology, LoadTopology(config_path));
  GANTRY_ASSIGN_OR_RETURN(std::vector<OutFile> files, RenderKubernetes(topology, options));
  return WriteDir(out_dir, files);
}

namespace {

StatusOr<std::vector<ExportedFile>> ExportComposeFile(const std::string& config_path,
                                                      const std::string& out_file,
                                                      const ExportOptions& options,
                                                      exporting::ComposeTarget target) {
  GANTRY_ASSIGN_OR_RETURN(Topology topology, LoadTopology(config_path));
  const fs::path out(out_file);
  if (out.filename().empty()) {
    return InvalidArgumentError(out_file + ": expected a file name such as compose.yml");
  }
  const std::string config_dir_name = out.stem().string() + ".gantry";
  std::vector<OutFile> configs;
  GANTRY_ASSIGN_OR_RETURN(std::vector<OutFile> compose,
                          RenderCompose(topology, options, config_dir_name, &configs, target));
  std::error_code ec;
  if (fs::exists(out, ec)) {
    StatusOr<std::string> existing = ReadText(out.string());
    if (!existing.ok() || !existing->starts_with("# Written by `gantry export`")) {
      return FailedPreconditionError(
          out_file +
          ": exists and was not written by gantry export; nothing was written: give "
          "a new file name, or remove it");
    }
  }
  fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return FailedPreconditionError(parent.string() + ": no such directory");
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ExportedFile> written,
                          WriteDir(parent / config_dir_name, configs));
  GANTRY_RETURN_IF_ERROR(WriteFile(out, compose.front().text));
  written.insert(written.begin(), ExportedFile{out.string(), compose.front().what});
  return written;
}

}  // namespace

StatusOr<std::vector<ExportedFile>> ExportDockerCompose(const std::string& config_path,
                                                        const std::string& out_file,
                                                        const ExportOptions& options) {
  return ExportComposeFile(config_path, out_file, options,
                           exporting::ComposeTarget::kDockerCompose);
}

StatusOr<std::vector<ExportedFile>> ExportDockerSwarm(const std::string& config_path,
                                                      const std::string& out_file,
                                                      const ExportOptions& options) {
  return ExportComposeFile(config_path, out_file, options, exporting::ComposeTarget::kSwarm);
}

}  // namespace gantry
