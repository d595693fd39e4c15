#include "dataplane/rc/sgl.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace rdmaplane::rc {
namespace {

TEST(SglTest, CopiesAcrossEntriesFromAnyOffset) {
  std::vector<uint8_t> a(5), b(0), c(7), d(3);
  WorkRequest wr;
  wr.num_sge = 4;
  wr.sge[0] = {a.data(), 5};
  wr.sge[1] = {b.data(), 0};
  wr.sge[2] = {c.data(), 7};
  wr.sge[3] = {d.data(), 3};
  EXPECT_EQ(SglLength(wr), 15u);
  std::vector<uint8_t> src(15);
  std::iota(src.begin(), src.end(), 1);
  for (uint32_t off = 0; off <= 15; ++off) {
    for (uint32_t len = 0; off + len <= 15; ++len) {
      std::fill(a.begin(), a.end(), 0);
      std::fill(c.begin(), c.end(), 0);
      std::fill(d.begin(), d.end(), 0);
      CopyToSgl(wr, off, src.data() + off, len);
      std::vector<uint8_t> back(15, 0);
      CopyFromSgl(wr, 0, back.data(), 15);
      for (uint32_t i = 0; i < 15; ++i) {
        const bool inside = i >= off && i < off + len;
        ASSERT_EQ(back[i], inside ? src[i] : 0) << off << " " << len << " " << i;
      }
      std::vector<uint8_t> part(len);
      CopyFromSgl(wr, off, part.data(), len);
      ASSERT_TRUE(std::equal(part.begin(), part.end(), src.begin() + off));
    }
  }
}

}  // namespace
}  // namespace rdmaplane::rc
