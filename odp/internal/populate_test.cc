// MakeResident: both methods make pages resident without changing them, and memory that cannot
// be made resident (a truncated memfd, a hole) is an error, never a signal that kills us.
#include "odp/internal/populate.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace regcache::odp::internal {
namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

bool Resident(void* p) {
  unsigned char v = 0;
  EXPECT_EQ(mincore(p, kPage, &v), 0);
  return (v & 1) != 0;
}

class PopulateTest : public ::testing::TestWithParam<bool> {
 protected:
  bool use_madvise() const { return GetParam(); }
};

TEST_P(PopulateTest, MakesPagesResidentWithoutChangingThem) {
  const size_t len = 8 * kPage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* p = static_cast<uint8_t*>(m);
  EXPECT_FALSE(Resident(p + 5 * kPage));
  // Unaligned start and length: widened to whole pages.
  ASSERT_TRUE(MakeResident(reinterpret_cast<uint64_t>(p) + 5 * kPage + 17, 2 * kPage,
                           /*write=*/true, use_madvise())
                  .ok());
  EXPECT_TRUE(Resident(p + 5 * kPage));
  EXPECT_TRUE(Resident(p + 7 * kPage));
  EXPECT_FALSE(Resident(p + 4 * kPage));
  // Content stays as it was.
  std::memset(p, 0xa5, len);
  ASSERT_TRUE(MakeResident(reinterpret_cast<uint64_t>(p), len, true, use_madvise()).ok());
  ASSERT_TRUE(MakeResident(reinterpret_cast<uint64_t>(p), len, false, use_madvise()).ok());
  for (size_t i = 0; i < len; i += 511) ASSERT_EQ(p[i], 0xa5) << i;
  EXPECT_TRUE(MakeResident(0, 0, true, use_madvise()).ok());
  EXPECT_EQ(MakeResident(~uint64_t{0} - 10, 100, true, use_madvise()).code(),
            absl::StatusCode::kInvalidArgument);
  munmap(m, len);
}

TEST_P(PopulateTest, TruncatedMemfdIsAnErrorNotASigbus) {
  const int fd = memfd_create("odp-populate-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 2 * kPage), 0);
  void* m = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  const uint64_t base = reinterpret_cast<uint64_t>(m);
  EXPECT_TRUE(MakeResident(base, 2 * kPage, true, use_madvise()).ok());
  for (bool write : {false, true}) {
    absl::Status s = MakeResident(base + 3 * kPage, 8, write, use_madvise());
    EXPECT_FALSE(s.ok()) << "write=" << write;
    // A range that starts fine and runs past the end fails as a whole.
    EXPECT_FALSE(MakeResident(base + kPage, 2 * kPage, write, use_madvise()).ok());
  }
  // Still alive, and the good pages still work.
  static_cast<uint8_t*>(m)[10] = 1;
  munmap(m, 4 * kPage);
  close(fd);
}

TEST_P(PopulateTest, UnmappedHoleIsAnError) {
  void* m = mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<uint8_t*>(m) + kPage, kPage), 0);
  const uint64_t hole = reinterpret_cast<uint64_t>(m) + kPage;
  EXPECT_FALSE(MakeResident(hole, 8, false, use_madvise()).ok());
  EXPECT_FALSE(MakeResident(hole, 8, true, use_madvise()).ok());
  munmap(m, 3 * kPage);
}

TEST_P(PopulateTest, WriteIntentOnReadOnlyMemoryIsAnError) {
  void* m = mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_TRUE(MakeResident(reinterpret_cast<uint64_t>(m), kPage, false, use_madvise()).ok());
  EXPECT_FALSE(MakeResident(reinterpret_cast<uint64_t>(m), kPage, true, use_madvise()).ok());
  munmap(m, kPage);
}

INSTANTIATE_TEST_SUITE_P(Methods, PopulateTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Madvise" : "Touch";
                         });

TEST(PopulateGuardTest, FaultsOutsideAGuardStillReachThePreviousHandler) {
  // Install the guard (a touch), then fault outside it: the process must die of the signal as
  // it would have without odp/.
  void* m = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(
      MakeResident(reinterpret_cast<uint64_t>(m), kPage, false, /*use_madvise=*/false).ok());
  munmap(m, kPage);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        (void)MakeResident(reinterpret_cast<uint64_t>(m), 1, false, false);  // guarded: error
        *static_cast<volatile uint8_t*>(m) = 1;                              // not guarded
      },
      "");
}

}  // namespace
}  // namespace regcache::odp::internal