#include "base/log.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "absl/strings/ascii.h"

namespace regcache::base {
namespace {

std::atomic<int> g_min_severity{static_cast<int>(LogSeverity::kInfo)};

std::mutex& SinkMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
LogSink& Sink() {
  static LogSink* sink = new LogSink;
  return *sink;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report a logging failure
    }
    off += static_cast<size_t>(n);
  }
}

// Whether stderr is the journal's stream, decided once.
bool StderrIsJournal() {
  static const bool journal = IsJournalStream(std::getenv("JOURNAL_STREAM"), STDERR_FILENO);
  return journal;
}

}  // namespace

bool IsJournalStream(const char* journal_stream, int fd) {
  unsigned long long dev = 0, ino = 0;
  if (journal_stream == nullptr || std::sscanf(journal_stream, "%llu:%llu", &dev, &ino) != 2) {
    return false;
  }
  struct stat st;
  return ::fstat(fd, &st) == 0 && static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

int SyslogPriority(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return 7;
    case LogSeverity::kInfo:
      return 6;
    case LogSeverity::kWarning:
      return 4;
    case LogSeverity::kError:
      return 3;
    case LogSeverity::kFatal:
      return 2;
  }
  return 6;
}

absl::string_view LogSeverityName(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return "DEBUG";
    case LogSeverity::kInfo:
      return "INFO";
    case LogSeverity::kWarning:
      return "WARNING";
    case LogSeverity::kError:
      return "ERROR";
    case LogSeverity::kFatal:
      return "FATAL";
  }
  return "UNKNOWN";
}

void SetMinLogSeverity(LogSeverity s) {
  g_min_severity.store(static_cast<int>(s), std::memory_order_relaxed);
}

LogSeverity MinLogSeverity() {
  return static_cast<LogSeverity>(g_min_severity.load(std::memory_order_relaxed));
}

bool ParseLogSeverity(absl::string_view text, LogSeverity* out) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (LogSeverity s :
       {LogSeverity::kDebug, LogSeverity::kInfo, LogSeverity::kWarning, LogSeverity::kError}) {
    if (lower == absl::AsciiStrToLower(LogSeverityName(s))) {
      *out = s;
      return true;
    }
  }
  return false;
}

void SetLogSinkForTest(LogSink sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  Sink() = std::move(sink);
}

namespace internal {

bool LogEnabled(LogSeverity s) {
  return s == LogSeverity::kFatal ||
         static_cast<int>(s) >= g_min_severity.load(std::memory_order_relaxed);
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::gmtime_r(&ts.tv_sec, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
  stream_ << LogSeverityName(severity)[0] << ' ' << stamp << ' '
          << static_cast<long>(::syscall(SYS_gettid)) << ' ' << Basename(file) << ':' << line
          << "] ";
}

LogMessage::~LogMessage() {
  std::string line = stream_.str();
  {
    std::lock_guard<std::mutex> lock(SinkMutex());
    if (Sink()) {
      Sink()(severity_, line);
    } else {
      line.push_back('\n');
      if (StderrIsJournal()) line.insert(0, "<" + std::to_string(SyslogPriority(severity_)) + ">");
      WriteAll(STDERR_FILENO, line);
    }
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace internal
}  // namespace regcache::base