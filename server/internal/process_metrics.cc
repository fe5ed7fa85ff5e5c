#include "server/internal/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace regcache::server::internal {
namespace {

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The boot time (seconds since the epoch): /proc/stat's btime line.
absl::StatusOr<uint64_t> ReadBootTime() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    uint64_t v;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &v)) return v;
  }
  return absl::InternalError("/proc/stat has no btime");
}

// The boot time never changes: /proc/stat (a line per CPU and more) is read once, not per scrape.
absl::StatusOr<uint64_t> BootTime() {
  static const absl::StatusOr<uint64_t> boot = ReadBootTime();
  return boot;
}

absl::StatusOr<uint64_t> CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return absl::InternalError("cannot read /proc/self/fd");
  uint64_t n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n > 0 ? n - 1 : 0;  // not the directory's own descriptor
}

}  // namespace

absl::StatusOr<ProcessStats> ReadProcessStats() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  // The fields after the command name (which may hold spaces and parentheses): state is
  // field 3; utime 14, stime 15, starttime 22, vsize 23, rss 24 (proc(5)).
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return absl::InternalError("/proc/self/stat: no ')'");
  const std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(*stat).substr(paren + 2), ' ', absl::SkipEmpty());
  auto field = [&f](size_t n, uint64_t* v) {
    return n - 3 < f.size() && absl::SimpleAtoi(f[n - 3], v);
  };
  uint64_t utime, stime, starttime, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &starttime) || !field(23, &vsize) ||
      !field(24, &rss)) {
    return absl::InternalError("/proc/self/stat: unexpected fields");
  }
  absl::StatusOr<uint64_t> boot = BootTime();
  if (!boot.ok()) return boot.status();
  absl::StatusOr<uint64_t> fds = CountOpenFds();
  if (!fds.ok()) return fds.status();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessStats s;
  s.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  s.start_time_seconds = static_cast<double>(*boot) + static_cast<double>(starttime) / ticks;
  s.resident_bytes = rss * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  s.virtual_bytes = vsize;
  s.open_fds = *fds;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = lim.rlim_cur;
  return s;
}

void AddProcessMetrics(const ProcessStats& s, PrometheusText* text) {
  text->AddCounter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                   "", s.cpu_seconds);
  text->AddGauge("process_start_time_seconds",
                 "Start time of the process since unix epoch in seconds.", "",
                 s.start_time_seconds);
  text->AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.", "",
                 static_cast<double>(s.resident_bytes));
  text->AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", "",
                 static_cast<double>(s.virtual_bytes));
  text->AddGauge("process_open_fds", "Number of open file descriptors.", "",
                 static_cast<double>(s.open_fds));
  text->AddGauge("process_max_fds", "Maximum number of open file descriptors.", "",
                 static_cast<double>(s.max_fds));
}

}  // namespace regcache::server::internal
