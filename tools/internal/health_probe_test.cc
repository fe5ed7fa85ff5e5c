// The health probe's reading of grpc.health.v1.HealthCheckResponse from its wire bytes.
#include "tools/internal/health_probe.h"

#include "gtest/gtest.h"

namespace regcache::tools::internal {
namespace {

TEST(HealthResponse, StatusFieldFromTheWire) {
  EXPECT_EQ(ParseHealthResponse("").value(), 0u);          // UNKNOWN by default
  EXPECT_EQ(ParseHealthResponse("\x08\x01").value(), 1u);  // SERVING
  EXPECT_EQ(ParseHealthResponse("\x12\x01z\x08\x02").value(), 2u)
      << "an unknown field before it is skipped";
  EXPECT_FALSE(ParseHealthResponse("\x08").ok());
}

}  // namespace
}  // namespace regcache::tools::internal
