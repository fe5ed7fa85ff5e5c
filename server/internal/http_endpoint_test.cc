// The HTTP endpoint against clients that misbehave: idle, slow to send, slow to read, gone
// mid-answer, malformed, too many. Every assertion is about order and outcome (a scrape
// completes while the others are still open), none about time.
#include "server/internal/http_endpoint.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "server/internal/http_client_testing.h"

using ::regcache::base::StatusIs;

namespace regcache::server::internal {
namespace {

using testing::BodyOf;
using testing::ConnectLoopback;
using testing::Exchange;
using testing::ReadToEof;
using testing::SendAll;
using testing::StillOpen;

constexpr char kScrape[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

std::unique_ptr<HttpEndpoint> StartEndpoint(const HttpEndpointOptions& options,
                                            const std::string& body) {
  auto e = HttpEndpoint::Start(0, options, [body] { return body; });
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

TEST(HttpEndpoint, IdleSlowSendingAndSlowReadingClientsDoNotStopAScrape) {
  // Large enough that a client that does not read keeps the server's send side full.
  const std::string body(8 << 20, 'm');
  HttpEndpointOptions options;
  options.deadline = absl::Minutes(5);  // nobody is closed for being slow during the test
  auto endpoint = StartEndpoint(options, body);
  ASSERT_NE(endpoint, nullptr);
  std::vector<int> idle, slow_senders, slow_readers;
  for (int i = 0; i < 16; ++i) idle.push_back(ConnectLoopback(endpoint->port()));
  for (int i = 0; i < 4; ++i) {
    slow_senders.push_back(ConnectLoopback(endpoint->port()));
    ASSERT_TRUE(SendAll(slow_senders.back(), "GET /metr"));
  }
  for (int i = 0; i < 4; ++i) {
    slow_readers.push_back(ConnectLoopback(endpoint->port(), /*rcvbuf=*/4096));
    ASSERT_TRUE(SendAll(slow_readers.back(), kScrape));
  }
  for (int fd : idle) ASSERT_GE(fd, 0);
  // Accepted in order, so all of them were taken before this one.
  std::string answer = Exchange(endpoint->port(), kScrape);
  ASSERT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
  EXPECT_EQ(BodyOf(answer).size(), body.size());
  EXPECT_EQ(BodyOf(answer), body);
  // ...while the others are all still there.
  for (int fd : idle) EXPECT_TRUE(StillOpen(fd));
  for (int fd : slow_senders) EXPECT_TRUE(StillOpen(fd));
  // The slow readers' answers have started (their buffers are full), not ended.
  for (int fd : slow_readers) {
    char c;
    EXPECT_EQ(recv(fd, &c, 1, MSG_PEEK), 1);
  }
  // Readers that go away mid-answer (unread data: a reset) cost the server nothing.
  CloseAll(slow_readers);
  answer = Exchange(endpoint->port(), kScrape);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
  EXPECT_EQ(BodyOf(answer).size(), body.size());
  // One that reads part of its answer and then leaves.
  int partial = ConnectLoopback(endpoint->port());
  ASSERT_TRUE(SendAll(partial, kScrape));
  char buf[1024];
  ASSERT_GT(recv(partial, buf, sizeof(buf), 0), 0);
  close(partial);
  answer = Exchange(endpoint->port(), kScrape);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
  // A slow sender that finally completes its request is answered.
  ASSERT_TRUE(SendAll(slow_senders[0], "ics HTTP/1.0\r\n\r\n"));
  answer = ReadToEof(slow_senders[0]);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer.substr(0, 200);
  EXPECT_EQ(BodyOf(answer).size(), body.size());
  CloseAll(idle);
  CloseAll(slow_senders);
}

TEST(HttpEndpoint, EachRequestGetsItsStatusAndTheConnectionCloses) {
  HttpEndpointOptions options;
  options.max_head_bytes = 1024;
  options.deadline = absl::Seconds(2);  // what never completes a head is closed unanswered
  auto endpoint = StartEndpoint(options, "the body\n");
  ASSERT_NE(endpoint, nullptr);
  static constexpr char kNulInHeader[] = "GET /metrics HTTP/1.1\r\nHost: h\0\r\n\r\n";
  struct Case {
    std::string request;
    const char* status_line;
  };
  const std::vector<Case> cases = {
      {kScrape, "HTTP/1.1 200 OK"},
      {"GET /metrics HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK"},
      {"GET /metrics?x=1 HTTP/1.1\nHost: h\n\n", "HTTP/1.1 200 OK"},
      {"\r\nGET http://127.0.0.1/metrics HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK"},
      {"POST /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
       "HTTP/1.1 405 Method Not Allowed"},
      {"HEAD /metrics HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"},
      {"GET /other HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 404 Not Found"},
      {"GET /metrics/ HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 404 Not Found"},
      {"GET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"},  // no Host
      {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "HTTP/1.1 400 Bad Request"},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx",
       "HTTP/1.1 400 Bad Request"},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       "HTTP/1.1 400 Bad Request"},
      {"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"},
      {"GET /metrics\r\n\r\n", "HTTP/1.1 400 Bad Request"},
      // libmicrohttpd skips the extra space; a control byte stays in the path, which is not ours.
      {"GET  /metrics HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK"},
      {"GET /met\x01rics HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 404 Not Found"},
      // libmicrohttpd ends the value at the NUL.
      {std::string(kNulInHeader, sizeof(kNulInHeader) - 1), "HTTP/1.1 200 OK"},
      {"GET /metrics HTTP/1.1\r\nHost : h\r\n\r\n", "HTTP/1.1 400 Bad Request"},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", "HTTP/1.1 400 Bad Request"},
      {"GET /metrics HTTP/1.1\rHost: h\r\n\r\n", "HTTP/1.1 400 Bad Request"},
      {"\x16\x03\x01\x02", ""},  // a TLS handshake: no head ever ends, closed at the deadline
      // Past twice the head bound (libmicrohttpd's per-connection memory).
      {absl::StrCat("GET /", std::string(4000, 'a'), " HTTP/1.1\r\nHost: h\r\n\r\n"),
       "HTTP/1.1 414 URI Too Long"},
      {absl::StrCat("GET /metrics HTTP/1.1\r\nHost: h\r\nX: ", std::string(4000, 'a'), "\r\n\r\n"),
       "HTTP/1.1 431 Request Header Fields Too Large"},
  };
  for (const Case& c : cases) {
    std::string answer = Exchange(endpoint->port(), c.request);
    if (c.status_line[0] == '\0') {
      EXPECT_EQ(answer, "") << absl::CEscape(c.request.substr(0, 60));
      continue;
    }
    EXPECT_TRUE(absl::StartsWith(answer, absl::StrCat(c.status_line, "\r\n")))
        << absl::CEscape(c.request.substr(0, 60)) << " -> " << absl::CEscape(answer);
    EXPECT_NE(answer.find("\r\nConnection: close\r\n"), std::string::npos) << answer;
    if (absl::StartsWith(c.status_line, "HTTP/1.1 405")) {
      EXPECT_NE(answer.find("\r\nAllow: GET\r\n"), std::string::npos) << answer;
    }
    if (absl::StartsWith(c.status_line, "HTTP/1.1 200")) {
      EXPECT_EQ(BodyOf(answer), "the body\n");
    }
  }
}

TEST(HttpEndpoint, ThePeerThatIdledLongestMakesRoomForANewOne) {
  HttpEndpointOptions options;
  options.max_connections = 4;
  options.deadline = absl::Minutes(5);
  auto endpoint = StartEndpoint(options, "b");
  ASSERT_NE(endpoint, nullptr);
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(ConnectLoopback(endpoint->port()));
  // The fifth is accepted after the four; to make room the first, idle longest, is closed.
  int fifth = ConnectLoopback(endpoint->port());
  ASSERT_TRUE(SendAll(fifth, kScrape));
  std::string answer = ReadToEof(fifth);
  close(fifth);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer;
  EXPECT_EQ(ReadToEof(fds[0]), "") << "closed without an answer";
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(StillOpen(fds[i])) << i;
  CloseAll(fds);
}

// What libmicrohttpd's own limit and inactivity timeout would let through: clients that fill
// every connection and keep each alive with a byte now and then. A scrape still gets in, and
// each trickler is closed at its deadline however busy it keeps its socket.
TEST(HttpEndpoint, TricklingClientsAtTheLimitDoNotStopAScrapeAndMeetTheirDeadline) {
  HttpEndpointOptions options;
  options.max_connections = 4;
  options.deadline = absl::Milliseconds(500);
  auto endpoint = StartEndpoint(options, "b");
  ASSERT_NE(endpoint, nullptr);
  std::vector<int> tricklers;
  for (int i = 0; i < 4; ++i) {
    tricklers.push_back(ConnectLoopback(endpoint->port()));
    ASSERT_TRUE(SendAll(tricklers.back(), "GET /metrics HTTP/1.1\r\nHost: h\r\n"));
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const absl::Time end = absl::Now() + absl::Seconds(20);  // bounded, whatever happens
    while (!stop.load() && absl::Now() < end) {
      for (int fd : tricklers) (void)send(fd, "X: y\r\n", 6, MSG_NOSIGNAL);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  absl::SleepFor(absl::Milliseconds(50));
  std::string answer = Exchange(endpoint->port(), kScrape);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n")) << answer;
  // Every trickler ends unanswered: one made room for the scrape, the rest met their deadline.
  for (int fd : tricklers) EXPECT_EQ(ReadToEof(fd), "");
  stop.store(true);
  trickle.join();
  CloseAll(tricklers);
}

TEST(HttpEndpoint, AConnectionPastItsDeadlineIsClosed) {
  HttpEndpointOptions options;
  options.deadline = absl::Milliseconds(50);
  auto endpoint = StartEndpoint(options, "b");
  ASSERT_NE(endpoint, nullptr);
  int fd = ConnectLoopback(endpoint->port());
  ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\n"));
  EXPECT_EQ(ReadToEof(fd), "") << "closed (within the client's bounded wait), unanswered";
  close(fd);
  // Stopping with connections open closes them.
  int open_fd = ConnectLoopback(endpoint->port());
  endpoint.reset();
  EXPECT_EQ(ReadToEof(open_fd), "");
  close(open_fd);
}

TEST(HttpEndpoint, StartRefusesABusyPortAndBadOptions) {
  auto first = StartEndpoint(HttpEndpointOptions(), "b");
  ASSERT_NE(first, nullptr);
  auto second = HttpEndpoint::Start(first->port(), HttpEndpointOptions(), [] { return ""; });
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  HttpEndpointOptions bad;
  bad.max_connections = 0;
  EXPECT_EQ(HttpEndpoint::Start(0, bad, [] { return ""; }).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace regcache::server::internal
