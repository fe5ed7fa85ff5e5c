// The request-head parser of the metrics endpoint: what it accepts, what it refuses and with
// which status, and that feeding the bytes one at a time changes nothing.
#include "server/http_request.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace regcache::server {
namespace {

using State = HttpRequestParser::State;

struct Outcome {
  State state;
  int status;  // kBad: the error status
  std::string method, path;
  bool operator==(const Outcome&) const = default;
};

Outcome Parse(const std::string& bytes, size_t max = 1024, bool bytewise = false) {
  HttpRequestParser p(max);
  if (bytewise) {
    for (char c : bytes) p.Feed(absl::string_view(&c, 1));
  } else {
    p.Feed(bytes);
  }
  return {p.state(), p.error_status(), p.method(), p.path()};
}

TEST(HttpRequestParser, AcceptsWhatAMetricsScraperSends) {
  const std::vector<std::string> good = {
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9100\r\nUser-Agent: Prometheus/2.45.0\r\n"
      "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n"
      "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
      "GET /metrics HTTP/1.0\r\n\r\n",
      "GET /metrics HTTP/1.1\nhost:h\n\n",
      "\r\n\nGET /metrics?a=b HTTP/1.1\r\nHost:   h  \r\nX-Empty:\r\n\r\n",
      "GET http://localhost:9100/metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: h\r\nX-Obs: caf\xc3\xa9\r\nContent-Length: 00\r\n\r\n",
  };
  for (const std::string& g : good) {
    for (bool bytewise : {false, true}) {
      Outcome o = Parse(g, 1024, bytewise);
      EXPECT_EQ(o.state, State::kDone) << absl::CEscape(g) << " status " << o.status;
      EXPECT_EQ(o.method, "GET");
      EXPECT_EQ(o.path, "/metrics") << absl::CEscape(g);
    }
  }
  HttpRequestParser p(1024);
  ASSERT_EQ(p.Feed("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"), State::kDone);
  EXPECT_EQ(p.method(), "POST");
  EXPECT_EQ(p.path(), "/x");
  EXPECT_EQ(p.minor_version(), 1);
  EXPECT_TRUE(p.has_body());
  EXPECT_EQ(p.Feed("more"), State::kDone) << "nothing after the head is looked at";
}

TEST(HttpRequestParser, RefusesAtTheFirstBadByte) {
  struct Case {
    std::string bytes;
    int status;
  };
  const std::vector<Case> bad = {
      {" GET /metrics HTTP/1.1\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\r", 400},
      {"GET\t/metrics HTTP/1.1\r\n", 400},
      {"G(T /metrics HTTP/1.1\r\n", 400},
      {"GET /me trics HTTP/1.1\r\n", 400},
      {"GET metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /\x7f HTTP/1.1\r\n", 400},
      {"GET /\x80 HTTP/1.1\r\n", 400},
      {"GET /metrics http/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1 \r\n\r\n", 400},
      {"GET /metrics HTTP/1.10\r\n\r\n", 400},
      {"GET /metrics HTTP/11\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\r\n", 400},
      {"GET /metrics HTTP/0.9\r\n\r\n", 505},
      {"GET /metrics HTTP/3.0\r\n\r\n", 505},
      {"GET /metrics HTTP/1.1\r\nHost h\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n: h\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHo st: h\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\n\tx\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\x7f\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", 400},
      {std::string(33, 'G'), 400},
  };
  for (const Case& c : bad) {
    for (bool bytewise : {false, true}) {
      Outcome o = Parse(c.bytes, 1024, bytewise);
      EXPECT_EQ(o.state, State::kBad) << absl::CEscape(c.bytes);
      EXPECT_EQ(o.status, c.status) << absl::CEscape(c.bytes);
    }
  }
  HttpRequestParser p(1024);
  ASSERT_EQ(p.Feed(std::string("GET /a\0b HTTP/1.1", 17)), State::kBad);
  EXPECT_EQ(p.error(), "request target: unexpected byte 0x00 at offset 6");
}

TEST(HttpRequestParser, TheHeadIsBounded) {
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n";
  EXPECT_EQ(Parse(request, request.size()).state, State::kDone) << "exactly the limit fits";
  for (bool bytewise : {false, true}) {
    Outcome o = Parse(request, request.size() - 1, bytewise);
    EXPECT_EQ(o.state, State::kBad);
    EXPECT_EQ(o.status, 431);
  }
  HttpRequestParser p(100);
  EXPECT_EQ(p.Feed(std::string(50, '\n')), State::kMore) << "empty lines count too";
  EXPECT_EQ(p.Feed(std::string(51, '\n')), State::kBad);
  EXPECT_EQ(p.error(), "request head larger than 100 bytes");
}

TEST(HttpResponse, ClosesAndSaysWhatIsAllowed) {
  EXPECT_EQ(HttpResponse(200, "text/plain", "ab"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\nab");
  EXPECT_EQ(HttpResponse(405, "text/plain", ""),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n"
            "Connection: close\r\nAllow: GET\r\n\r\n");
  EXPECT_EQ(HttpReasonPhrase(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace regcache::server
