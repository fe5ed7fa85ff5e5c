// Replays fuzz inputs through a fuzz target's LLVMFuzzerTestOneInput outside libFuzzer: every
// file named on the command line, and every file in every directory named (not recursive).
// Exits 0 when all ran (a crash is a crash); a missing argument is fine (no regressions yet).
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (::stat(argv[i], &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      DIR* d = ::opendir(argv[i]);
      if (d == nullptr) continue;
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == ".." || name == "README") continue;
        errors += RunFile(std::string(argv[i]) + "/" + name);
        ++inputs;
      }
      ::closedir(d);
    } else {
      errors += RunFile(argv[i]);
      ++inputs;
    }
  }
  std::printf("replay: %d inputs, %d unreadable\n", inputs, errors);
  return errors == 0 ? 0 : 1;
}
