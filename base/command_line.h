// Exit statuses of a command line as users of a Unix program expect them: `--help` prints the
// usage and exits 0, a usage error (an unknown flag, a value that does not parse, a missing
// value) says what is wrong and exits 2. absl::ParseCommandLine exits 1 for both, so the
// programs check argv with CheckCommandLine first and call ParseCommandLine only for kRun.
//
// Header only: the programs that use it link absl::flags_reflection (through absl::flags_parse).
#ifndef REGCACHE_BASE_COMMAND_LINE_H_
#define REGCACHE_BASE_COMMAND_LINE_H_

#include <cstdio>
#include <map>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace regcache::base {

// kHelp: --help or --helpshort (the program's own flags); kHelpFull: --helpfull (every flag,
// the libraries' too).
enum class CommandLine { kRun, kHelp, kHelpFull, kUsageError };

// Looks at every flag of argv as absl::ParseCommandLine will (--name=value, --name value,
// --name and --noname for booleans; single dashes too; "--" ends the flags; other words are
// positional): kHelp or kHelpFull for a help flag; kUsageError, with the reason in
// `*error`, for a flag nobody defined or a value the flag does not accept. The flags absl
// handles itself (--version, --flagfile, --fromenv, --tryfromenv, --undefok) are left to it.
inline CommandLine CheckCommandLine(int argc, char** argv, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    if (name == "help" || name == "helpshort") return CommandLine::kHelp;
    if (name == "helpfull") return CommandLine::kHelpFull;
    if (name == "version" || name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
        name == "undefok") {
      if (eq == absl::string_view::npos && name != "version") ++i;  // its value follows
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string value;
    if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag == nullptr || !flag->IsOfType<bool>()) flag = nullptr;
      value = "false";
    } else if (flag != nullptr && eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag != nullptr && flag->IsOfType<bool>()) {
      value = "true";
    } else if (flag != nullptr) {
      if (i + 1 >= argc) {
        *error = "--" + std::string(name) + " needs a value";
        return CommandLine::kUsageError;
      }
      value = argv[++i];
    }
    if (flag == nullptr) {
      *error = "unknown flag --" + std::string(name) + " (--help lists them)";
      return CommandLine::kUsageError;
    }
    std::string why;
    if (!flag->ParseFrom(value, &why)) {
      *error = "--" + std::string(flag->Name()) + "=" + value + ": " + why;
      return CommandLine::kUsageError;
    }
  }
  return CommandLine::kRun;
}

// `usage`, then every flag defined in a source file whose path contains `defined_in` (the
// program's own, not the libraries'; "": every flag), by name, with its default and its help.
inline void PrintFlagsHelp(std::FILE* out, absl::string_view usage, absl::string_view defined_in) {
  std::fprintf(out, "%.*s\n\nflags:\n", static_cast<int>(usage.size()), usage.data());
  std::map<std::string, const absl::CommandLineFlag*> mine;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), defined_in)) mine[std::string(name)] = flag;
  }
  for (const auto& [name, flag] : mine) {
    std::fprintf(out, "  --%s (default: %s)\n      %s\n", name.c_str(),
                 flag->DefaultValue().c_str(), flag->Help().c_str());
  }
  if (!defined_in.empty()) {
    std::fprintf(out,
                 "  --version\n      this binary's version and build type\n"
                 "(--helpfull also lists the libraries' flags: --flagfile, --fromenv, ...)\n");
  }
}

}  // namespace regcache::base
#endif  // REGCACHE_BASE_COMMAND_LINE_H_
