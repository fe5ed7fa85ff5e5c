// Logging.
//
// The choice: a small logger of our own rather than glog. abseil 20220623 (Debian 12) has no
// absl/log; glog would add a second flag system and process-wide initialisation to a library
// that applications may embed. What the daemon needs is modest and written here:
//   - one line per message, emitted with a single write(2) so concurrent lines never interleave;
//   - severity, UTC timestamp with microseconds, thread id, file:line;
//   - a minimum severity set at start-up (regcached --log_level), and a sink that tests replace;
//   - RC_CHECK for broken internal invariants (logs and aborts); bad input and device errors
//     are Status values, never CHECKs.
// stderr is the destination: under systemd it lands in the journal with no extra code.
//
//   RC_LOG(INFO) << "pool refilled class=" << cls << " keys=" << n;
//   RC_CHECK(key.index() < table_size) << "index " << key.index();
//
// Thread safety: everything here may be called from any thread.
#ifndef REGCACHE_BASE_LOG_H_
#define REGCACHE_BASE_LOG_H_

#include <functional>
#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace regcache::base {

enum class LogSeverity : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

absl::string_view LogSeverityName(LogSeverity s);

// Messages below this severity are dropped (default kInfo). kFatal is never dropped.
void SetMinLogSeverity(LogSeverity s);
LogSeverity MinLogSeverity();

// Parses "debug", "info", "warning", "error" (case-insensitive). Returns false if unknown.
bool ParseLogSeverity(absl::string_view text, LogSeverity* out);

// Under systemd, stderr goes to the journal (JOURNAL_STREAM names that stream's device and
// inode): each line then starts with "<N>", N the syslog priority of its severity (debug 7,
// info 6, warning 4, error 3, fatal 2), which journald takes as the entry's priority and strips.
// `journal_stream` is JOURNAL_STREAM's value ("dev:ino"; null: unset); true when it names `fd`.
bool IsJournalStream(const char* journal_stream, int fd);
int SyslogPriority(LogSeverity s);

// Where formatted lines go (each without its trailing newline). nullptr restores stderr.
// Intended for tests; the sink must be thread-safe.
using LogSink = std::function<void(LogSeverity, absl::string_view line)>;
void SetLogSinkForTest(LogSink sink);

namespace internal {

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();  // emits; aborts the process for kFatal

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream expression when a message is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

bool LogEnabled(LogSeverity s);

}  // namespace internal
}  // namespace regcache::base
#define RC_LOG_SEVERITY_DEBUG ::regcache::base::LogSeverity::kDebug
#define RC_LOG_SEVERITY_INFO ::regcache::base::LogSeverity::kInfo
#define RC_LOG_SEVERITY_WARNING ::regcache::base::LogSeverity::kWarning
#define RC_LOG_SEVERITY_ERROR ::regcache::base::LogSeverity::kError
#define RC_LOG_SEVERITY_FATAL ::regcache::base::LogSeverity::kFatal

#define RC_LOG(severity)                                                                           \
  !::regcache::base::internal::LogEnabled(RC_LOG_SEVERITY_##severity)                              \
      ? (void)0                                                                                    \
      : ::regcache::base::internal::LogVoidify() &                                                 \
            ::regcache::base::internal::LogMessage(RC_LOG_SEVERITY_##severity, __FILE__, __LINE__) \
                .stream()

// Broken internal invariant: log and abort. Not for input validation.
#define RC_CHECK(cond)                                                                       \
  (cond) ? (void)0                                                                           \
         : ::regcache::base::internal::LogVoidify() &                                        \
               ::regcache::base::internal::LogMessage(::regcache::base::LogSeverity::kFatal, \
                                                      __FILE__, __LINE__)                    \
                       .stream()                                                             \
                   << "Check failed: " #cond " "

#ifdef NDEBUG
#define RC_DCHECK(cond) \
  while (false) RC_CHECK(cond)
#else
#define RC_DCHECK(cond) RC_CHECK(cond)
#endif

#endif  // REGCACHE_BASE_LOG_H_
