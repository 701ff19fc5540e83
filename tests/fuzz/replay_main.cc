// A main() for the fuzz targets outside libFuzzer: runs
// LLVMFuzzerTestOneInput once over every file in the directories (or files)
// named on the command line, so that the seed corpora and the inputs that
// once crashed stay regression tests in every build (ctest `fuzz_corpus.*`).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code error;
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg, error)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) {
          if (RunFile(entry.path()) != 0) {
            return 1;
          }
          ++files;
        }
      }
    } else {
      if (RunFile(arg) != 0) {
        return 1;
      }
      ++files;
    }
  }
  if (files == 0) {
    std::fprintf(stderr, "replay: no input files\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %d inputs ran without a crash\n", files);
  return 0;
}
